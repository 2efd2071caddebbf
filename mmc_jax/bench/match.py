"""`python -m mmc_jax.bench match`: seconds of one engine match, a model's search against
Fairy-Stockfish in the stepwise arena, with the model's buffer shrinking to each `--bucket-mins`
side by side (issue 72 item 5: a match's cost should follow the games still running).

Each arm plays the same colour-balanced match (`--games` games of `--model` at `--simulations`
against the engine at `--nodes`, from the same seeded suite of `--opening-plies` random
openings) through `arena.play_games`, whose model buffers shrink by factors of 4 down to the
arm's `bucket_min` (64: the arena before this benchmark, a buffer of every game the model plays
in a colour until the match ends; 4: today's default). A warm-up (the match cut to 2 plies)
first compiles the largest buffer's search, so each arm times its play and the compiles of its
smaller buffers (none with a warm cache). Per arm: wall seconds, plies, seconds in the tail (the
plies with at most a quarter of the games running), the model's score, and its ratio of seconds
to the first arm's. The engine's moves are deterministic at a node limit, and a model's search
at `gumbel_scale` 0 is too, so the arms play the same games up to the last bits of batched
floating point (`same_games` says).
"""

from __future__ import annotations

import time

import numpy as np

from mmc_jax import uci
from mmc_jax.bench import common
from mmc_jax.evaluation import arena
from mmc_jax.infra import checkpoint

NAME = "match"
HELP = "seconds of one engine match, its model buffers shrinking to each --bucket-mins"
ROWS = None


def add_flags(p) -> None:
    """The `match` subcommand's flags."""
    p.add_argument(
        "--model", default="gardner-cpu", help="a shipped name, exported model or run (default "
        "gardner-cpu)",
    )  # fmt: skip
    p.add_argument("--variant", default="gardner", help="the variant played (default gardner)")
    p.add_argument(
        "--games", type=common.POSITIVE, default=64, help="games, colour-balanced (default 64)"
    )
    p.add_argument(
        "--simulations", type=common.POSITIVE, default=32, help="the model's (default 32)"
    )
    p.add_argument(
        "--nodes", type=common.POSITIVE, default=100, help="the engine's node limit (default 100)"
    )
    common.add_list(
        p,
        "--bucket-mins",
        [64, 4],
        "the arms: the smallest model buffer; ratios are to the first (default 64 4: before "
        "and after)",
        type=common.POSITIVE,
    )
    p.add_argument("--engine", default=None, help="a UCI engine binary (default: the built one)")
    p.add_argument(
        "--opening-plies",
        type=int,
        default=4,
        help="random plies of the seeded opening suite (default 4, as the ladder; with 0 every "
        "game of a colour is the same game)",
    )
    p.add_argument("--seed", type=int, default=0, help="the openings' and players' seed")


def check(parser, args) -> None:
    """An even number of games (colour-balanced pairs)."""
    if args.games % 2:
        parser.error(f"--games {args.games}: must be even (each opening from both sides)")


def play(args, network, params, games: int, bucket_min: int, max_plies=None) -> dict:
    """One match; its seconds, plies, tail seconds and score."""
    players = [
        arena.model_player("model", network, params, args.simulations),
        arena.engine_player(uci.Limits(nodes=args.nodes)),
    ]
    times = []

    def on_ply(ply: int, running: int) -> None:
        times.append((time.perf_counter(), running))

    pool = uci.EnginePool(args.variant, args.engine, processes=2)
    try:
        started = time.perf_counter()
        records = arena.play_games(
            players,
            arena.colour_balanced(0, 1, games, args.variant),
            seed=args.seed,
            opening_plies=args.opening_plies,
            engine_pool=pool,
            bucket_min=bucket_min,
            max_plies=max_plies,
            on_ply=on_ply,
        )
        seconds = time.perf_counter() - started
    finally:
        pool.close()
    ends = np.array([started] + [t for t, _ in times])
    running = np.array([r for _, r in times])
    tail = running <= games / 4
    points = {"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}
    scores = [
        points[r.result] if r.white == "model" else 1.0 - points[r.result]
        for r in records
        if r.scored
    ]
    return {
        "bucket_min": bucket_min,
        "seconds": seconds,
        "plies": len(times),
        "tail_plies": int(tail.sum()),
        "tail_seconds": float(np.diff(ends)[tail].sum()),
        "score": float(np.mean(scores)) if scores else None,
        "results": [r.result for r in records],
    }


def run(args) -> dict:
    """The match once per `--bucket-mins` arm, after a warm-up of 2 plies."""
    try:
        model = checkpoint.open_model(args.model, None)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"error: --model {args.model}: {error}") from None
    result = {
        "benchmark": "match",
        **common.machine(),
        "model": args.model,
        "variant": args.variant,
        "games": args.games,
        "simulations": args.simulations,
        "nodes": args.nodes,
        "arms": [],
    }
    rows = common.Rows(args, result)
    try:
        # Compiles the largest buffer's search (the same for every arm): the match cut to 2 plies.
        play(args, model.network, model.params, args.games, max(args.bucket_mins), max_plies=2)
        for bucket_min in args.bucket_mins:
            arm = play(args, model.network, model.params, args.games, bucket_min)
            arm["ratio"] = arm["seconds"] / (
                result["arms"][0]["seconds"] if result["arms"] else arm["seconds"]
            )
            result["arms"].append(arm)
            common.say(
                args,
                f"bucket_min {bucket_min}: {arm['seconds']:.1f} s ({arm['ratio']:.2f}x), "
                f"{arm['plies']} plies, the tail ({arm['tail_plies']} plies with <= 1/4 of the "
                f"games running) {arm['tail_seconds']:.1f} s, score {arm['score']:.3f}",
            )
    except uci.EngineError as error:
        raise SystemExit(f"error: {error}") from None
    same = len({tuple(a["results"]) for a in result["arms"]}) == 1
    result["same_games"] = same
    common.say(args, "the arms played the same games" if same else "the arms' games differ")
    rows.record()
    return rows.finish()
