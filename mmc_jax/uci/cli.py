"""`python -m mmc_jax.uci`: which variants a UCI engine plays, building the engine, or serving a
model as one: the commands over the engine build and the UCI client of `mmc_jax.uci`."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mmc_jax.rules.variants import VARIANTS, check_variant
from mmc_jax.uci import (
    EngineBuildError,
    EngineNotFound,
    EngineNotUci,
    build_engine,
    cache_root,
    check_engine,
    default_engine,
    pyffish_version,
)


def build_main(argv: list[str]) -> int:
    """`python -m mmc_jax.uci build`: build the engine, print its path."""
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.uci build",
        description="Build Fairy-Stockfish from the source distribution of pyffish (the "
        "installed version by default) with g++ into the cache "
        f"({cache_root()}), where it becomes the default engine; print the binary's path. "
        "A second call reuses the build.",
    )
    parser.add_argument("--version", help=f"pyffish version (default {pyffish_version()})")
    parser.add_argument("--sdist", help="a local pyffish-<version>.tar.gz (no download)")
    parser.add_argument(
        "--jobs", type=int, default=None, help="parallel compilers (default: CPU count)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be a positive integer, got {args.jobs}")
    try:
        path = build_engine(args.version, sdist=args.sdist, jobs=args.jobs, force=args.force)
    except EngineBuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m mmc_jax.uci [check] ...`: which variants can the engine play?
    `python -m mmc_jax.uci build`: build Fairy-Stockfish into the cache.
    `python -m mmc_jax.uci serve --model NAME`: a model as a UCI engine (`mmc_jax.engine`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["build"]:
        return build_main(argv[1:])
    if argv[:1] == ["serve"]:
        # The model engine is a command of its own (it sits above the search and the
        # checkpoints, which this module does not import): run it in this process's place.
        command = [sys.executable, "-m", "mmc_jax.engine", *argv[1:]]
        sys.stdout.flush()
        os.execv(sys.executable, command)
    if argv[:1] == ["check"]:
        argv = argv[1:]
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.uci [check]",
        description="Check which of the project's variants a UCI engine (Fairy-Stockfish) can "
        "play: it must list the variant after loading the shipped variants file and generate "
        "exactly the rules' legal moves in a few probe positions. "
        "`python -m mmc_jax.uci build --help`: build the engine from pyffish's sources. "
        "`python -m mmc_jax.uci serve --model NAME`: a trained model as a UCI engine.",
    )
    parser.add_argument(
        "--engine", default=None, help=f"engine binary (default: {default_engine()})"
    )
    parser.add_argument(
        "--variants", nargs="+", default=list(VARIANTS), help=f"of: {', '.join(VARIANTS)}"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    for variant in args.variants:
        try:
            check_variant(variant)
        except ValueError as error:
            parser.error(str(error))
    try:
        report = check_engine(args.engine, args.variants)
    except (EngineNotFound, EngineNotUci) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report))
    else:
        for variant, entry in report.items():
            verdict = "yes" if entry["playable"] else "NO "
            print(f"{variant:<14} {verdict}  {entry['reason']}")
    return 0
