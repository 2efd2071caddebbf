"""`python -m mmc_jax.bench move`: seconds per engine move, what `engine`, `serve` and `play`
wait for.

One engine move (`ModelEngine.search`, one game, B = 1) of each `--models` (shipped names,
exported models, runs) at each `--simulations` (default 256, the engine's default), on the same
positions (the start and the first model's own moves at 8 simulations), round-robin over the
models for `--repeats` rounds; it reports the median seconds per move, the first search's time
(the compile) and each model's ratio to the first: e.g. `--models gardner-cpu
PATH/gardner-h200` says how much slower a 6x128 network moves than the shipped 2x32 one on this
machine. A row per simulation count.
"""

from __future__ import annotations

import time

import numpy as np

from mmc_jax.bench import common
from mmc_jax.evaluation import model_engine

NAME = "move"
HELP = "seconds per engine move (one game, B = 1) of models side by side"
ROWS = "simulation count"


def add_flags(p) -> None:
    """The `move` subcommand's flags."""
    common.add_list(
        p,
        "--models",
        ["gardner-cpu"],
        "shipped names, exported models or runs; ratios are to the first (default gardner-cpu)",
    )
    p.add_argument("--variant", default="gardner", help="the variant played (default gardner)")
    common.add_list(
        p,
        "--simulations",
        [256],
        "simulations per move, one row each (default 256: the engine's default)",
        type=common.POSITIVE,
    )
    p.add_argument(
        "--positions", type=common.POSITIVE, default=8, help="positions timed (default 8)"
    )
    common.add_rounds(p, 3, "rounds")


def engine_positions(engine, variant: str, plies: int) -> list:
    """The start and the positions after the engine's own moves (8 simulations each), up to
    `plies` of them: the positions every model is timed on."""
    position = engine.position(variant)
    positions = [position]
    while len(positions) < plies and not position.over:
        move = engine.search(position, 8).move
        position = engine.position(variant, moves=[*position.moves, move])
        if not position.over:
            positions.append(position)
    return positions


def run(args) -> dict:
    """Seconds per engine move of each `--models` at each `--simulations`, on the same
    positions, round-robin over the models; `ratio` is a model's median over the first
    model's."""
    engines = []
    for model in args.models:
        try:
            engines.append(model_engine.load_engine(model))
        except (ValueError, OSError) as error:
            raise SystemExit(f"error: --models {model}: {error}") from None
    compile_seconds = []
    for engine in engines:  # the first search compiles the engine's program (shared by sizes)
        started = time.perf_counter()
        engine.search(engine.position(args.variant), args.simulations[0])
        compile_seconds.append(time.perf_counter() - started)
    positions = engine_positions(engines[0], args.variant, args.positions)
    result = {
        "benchmark": "move",
        **common.machine(),
        "variant": args.variant,
        "models": list(args.models),
        "positions": len(positions),
        "first_search_seconds": dict(zip(args.models, compile_seconds, strict=True)),
        "rows": [],
    }
    rows = common.Rows(args, result)
    firsts = ", ".join(f"{m} {t:.1f} s" for m, t in result["first_search_seconds"].items())
    common.say(args, f"first search (compiling): {firsts}; {len(positions)} positions")
    for simulations in args.simulations:
        if not rows.may_start(f"{simulations} simulations"):
            continue
        row = time_models(args, engines, positions, simulations)
        result["rows"].append(row)
        cells = [
            f"{m['model']} {m['seconds_per_move']:.3f} s/move ({m['ratio']:.2f}x)"
            for m in row["models"]
        ]
        common.say(args, f"{simulations} simulations: " + ", ".join(cells))
        rows.record()
    return rows.finish()


def time_models(args, engines: list, positions: list, simulations: int) -> dict:
    """A row: every engine's median seconds per move at `simulations`, round-robin."""
    times = [[] for _ in engines]
    for engine in engines:  # a size past the shared program's capacity compiles its own
        engine.search(positions[0], simulations)
    for _ in range(args.repeats):
        for i, engine in enumerate(engines):
            for position in positions:
                started = time.perf_counter()
                engine.search(position, simulations)
                times[i].append(time.perf_counter() - started)
    medians = [float(np.median(t)) for t in times]
    return {
        "simulations": simulations,
        "models": [
            {
                "model": model,
                "seconds_per_move": median,
                "moves_per_second": 1.0 / median,
                "ratio": median / medians[0],
            }
            for model, median in zip(args.models, medians, strict=True)
        ],
    }
