"""CPU seconds per engine game of the supervised dataset (the learner's scarce input).

    PYTHONPATH=. python experiments/learners/data_cost.py --games 25 --nodes 100 --multipv 8

Plays one shard of `--games` Fairy-Stockfish games with `supervised.play_shard` (the settings
of the learners' comparison by default) after a one-game warm-up (the rules' programs compile
there), and prints the CPU time of this process and its engine, per game and per position, as
JSON. To compare two versions of the code, run it in a checkout of each: the games are the
same (shard 1 of seed 0), so the positions count must agree.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (the engines that have exited)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python experiments/learners/data_cost.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--variant", default="gardner")
    parser.add_argument("--games", type=int, default=25, help="games timed (default 25)")
    parser.add_argument("--nodes", type=int, default=100, help="engine nodes (default 100)")
    parser.add_argument("--multipv", type=int, default=8, help="moves ranked (default 8)")
    args = parser.parse_args(argv)
    if min(args.games, args.nodes, args.multipv) < 1:
        parser.error("--games, --nodes and --multipv must be positive")

    from mmc_jax.algorithms import supervised

    settings = {
        "variant": args.variant,
        "seed": 0,
        "shard_games": args.games,
        "nodes": args.nodes,
        "multipv": args.multipv,
        "temperature_cp": 60.0,
        "random_plies": 4,
        "max_plies": 120,
        "value_mix": 0.5,
        "cp_scale": 300.0,
    }
    supervised.play_shard(dict(settings, shard_games=1), 1000)  # warm-up: compiles
    start = cpu_seconds()
    shard = supervised.play_shard(settings, 1)  # the engine exits inside: its time counts
    spent = cpu_seconds() - start
    positions = len(shard["value"])
    print(
        json.dumps(
            {
                "games": args.games,
                "positions": positions,
                "cpu_seconds": round(spent, 1),
                "cpu_seconds_per_game": round(spent / args.games, 2),
                "cpu_ms_per_position": round(1000 * spent / max(positions, 1), 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
