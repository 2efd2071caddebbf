"""`python -m mmc_jax.labels build DIR ...` and `status DIR`: Fairy-Stockfish's action values for
every legal move, in resumable shards (the library: `mmc_jax.uci.labels`, whose docstring says
what a row holds and how the build resumes)."""

from __future__ import annotations

import argparse
import sys

from mmc_jax.uci import workers
from mmc_jax.uci.labels import build, status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.labels",
        description="Fairy-Stockfish action-value labels for every legal move (resumable).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="make (or finish) the shards in DIR")
    b.add_argument("dir")
    b.add_argument("--positions", type=int, default=10_000, help="rows to reach (mirrors count)")
    b.add_argument("--variant", default="gardner")
    b.add_argument("--nodes", type=int, default=1000, help="nodes per move's search")
    b.add_argument("--games", type=int, default=8, help="games per shard")
    b.add_argument("--max-plies", type=int, default=80)
    b.add_argument("--temperature", type=float, default=50.0, help="centipawns of the softmax")
    b.add_argument("--perturb", type=float, default=0.1, help="chance of a random move a ply")
    b.add_argument("--holdout", type=float, default=0.05, help="share of games held out")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--processes", type=int, default=1)
    b.add_argument("--engine", default=None, help="the UCI engine (default: the built one)")
    s = sub.add_parser("status", help="what DIR holds and what a row cost")
    s.add_argument("dir")
    args = parser.parse_args(argv)
    if args.command == "status":
        try:
            print(status(args.dir))
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    from mmc_jax import rules as R

    for name in ("positions", "nodes", "games", "max_plies", "processes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.perturb <= 1 or not 0 <= args.holdout < 1:
        parser.error("--perturb must be in [0, 1] and --holdout in [0, 1)")
    try:
        variant = R.canonical(args.variant)
    except ValueError as error:
        parser.error(f"--variant: {error}")
    settings = {
        "variant": variant,
        "seed": args.seed,
        "nodes": args.nodes,
        "games": args.games,
        "max_plies": args.max_plies,
        "temperature_cp": args.temperature,
        "perturb": args.perturb,
        "holdout": args.holdout,
    }
    from mmc_jax import uci

    try:
        build(args.dir, settings, args.positions, args.processes, args.engine)
    except (ValueError, uci.EngineError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print("interrupted: finished shards are kept; rerun the same command", file=sys.stderr)
        return 143 if isinstance(stop, workers.Terminated) else 130  # SIGTERM, Ctrl-C
    print(status(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
