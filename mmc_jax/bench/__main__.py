"""`python -m mmc_jax.bench NAME [flags]`: the benchmarks, one subcommand each (`mmc_jax.bench`).

Every benchmark runs with the project's XLA flags, as the commands do. Timings are wall-clock
on whatever JAX sees (`jax.devices()`); run nothing else meanwhile. Each benchmark prints and
writes its rows as it measures them (`common.Rows`: `--json`, `--json-out PATH`, and
`--time-limit SECONDS` where it measures several rows).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mmc_jax.bench import (
    common,
    env,
    iteration,
    learner,
    match,
    memory,
    move,
    processes,
    selfplay,
    xla_flags,
)
from mmc_jax.bench import compile as compile_programs
from mmc_jax.infra import startup

# The subcommands, in the order of `--help`: each module has NAME, HELP, ROWS (what one row of
# its output is: --time-limit skips rows past the limit; None: one row, no --time-limit),
# `add_flags(parser)`, `run(args) -> result`, and optionally `check(parser, args)`.
BENCHMARKS = (
    env,
    selfplay,
    learner,
    iteration,
    memory,
    processes,
    xla_flags,
    move,
    match,
    compile_programs,
)


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per benchmark."""
    top = argparse.ArgumentParser(
        prog="python -m mmc_jax.bench",
        description="Speed and memory benchmarks of mmc_jax (see each module's docstring: "
        "mmc_jax/bench/NAME.py).",
    )
    sub = top.add_subparsers(dest="benchmark", required=True)
    for module in BENCHMARKS:
        subparser = sub.add_parser(
            module.NAME, help=module.HELP, description=module.__doc__.split("\n\n")[0]
        )
        module.add_flags(subparser)
        common.add_output_flags(subparser, module.ROWS)
    return top


def check_args(parser_, args, module) -> None:
    """Refuses (one usage line) what cannot run, before any work; drops --vs-pgx without pgx."""
    if hasattr(module, "check"):
        module.check(parser_, args)
    common.check_json_out(parser_, args.json_out)
    if getattr(args, "vs_pgx", False) and not common.has_pgx():
        # pgx is a test/benchmark extra: without it, measure our arms and say so.
        print(
            "note: pgx is not installed (pip install 'mmc_jax[test]'); --vs-pgx ignored",
            file=sys.stderr,
        )
        args.vs_pgx = False


def main(argv=None) -> dict:
    """Runs the benchmark named on the command line; returns its result (each benchmark
    prints and writes its own rows as it measures them)."""
    started = time.monotonic()  # what --time-limit counts from
    parser_ = parser()
    args = parser_.parse_args(argv)
    args.started = started
    module = next(m for m in BENCHMARKS if m.NAME == args.benchmark)
    check_args(parser_, args, module)
    args.environ = dict(os.environ)  # before the flags: xla-flags compares with and without
    startup.apply_xla_flags()  # every benchmark runs with the flags the commands use
    return module.run(args)


if __name__ == "__main__":
    main()
