"""Fair play in dark: PIMC (K = 1, 4, 16) vs the observation-only policy vs greedy vs the
omniscient upper bound, each in colour-balanced games against greedy. Resumable.

    PYTHONPATH=. python experiments/dark/run.py                 # full protocol (400 games)
    PYTHONPATH=. python experiments/dark/run.py --preset reduced  # what ran on the 2-core CPU

Every finished match is appended to `runs/results_<preset>.json` at once; a rerun skips the
players already there. Without `--checkpoint` the network is a fresh, untrained
`PolicyValueNet` (seed 0): the search then rests on the game's terminal rewards (king
captures) and the random-init priors. Cost per move is the arena's wall time (compile
excluded, AOT-compiled first) divided by player A's moves, batched over N/2 games, the
greedy opponent's moves and the arena included; network evaluations per move are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp

from mmc_jax import rules as R
from mmc_jax.evaluation import pimc
from mmc_jax.infra import startup
from mmc_jax.model import network as network_lib

PRESETS = {
    # sims: per world at equal simulations; budget: total evaluations at equal cost.
    "full": dict(games=400, sims=32, budget=32, candidates=32),
    "reduced": dict(games=32, sims=8, budget=16, candidates=32),
}


def players(sims: int, budget: int, candidates: int) -> list[tuple[str, pimc.FogPlayer]]:
    """Every player of the table, cheapest and most telling first (so a run cut short still
    has the fair search, the baselines and the upper bound; K = 16 at equal simulations per
    world, 16x the others' cost, comes last)."""
    equal_sims = {k: pimc.FogPlayer("pimc", sims, k, candidates) for k in (1, 4, 16)}
    out = [(f"equal sims/world: {equal_sims[k].name}", equal_sims[k]) for k in (1, 4)]
    out += [
        ("observation-only (raw network)", pimc.FogPlayer("raw")),
        ("greedy", pimc.FogPlayer("greedy")),
        ("random", pimc.FogPlayer("random")),
        ("UPPER BOUND omniscient", pimc.FogPlayer("omniscient", sims)),
    ]
    for k in (1, 4, 16):
        per_world = max(1, budget // k)
        p = pimc.FogPlayer("pimc", per_world, k, candidates)
        out.append((f"equal evaluations ~{budget}: {p.name}", p))
    out.append((f"equal sims/world: {equal_sims[16].name}", equal_sims[16]))
    seen, unique = set(), []
    for label, p in out:
        if p not in seen:
            seen.add(p)
            unique.append((label, p))
    return unique


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--games", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="substring of the player labels to run")
    args = parser.parse_args()
    startup.start()
    preset = dict(PRESETS[args.preset])
    if args.games:
        preset["games"] = args.games
    runs_dir = os.path.join(os.path.dirname(__file__), "runs")
    os.makedirs(runs_dir, exist_ok=True)
    out_path = os.path.join(runs_dir, f"results_{args.preset}.json")
    results = json.load(open(out_path)) if os.path.exists(out_path) else {}

    if args.checkpoint:
        from mmc_jax.infra import checkpoint

        network, params, _ = checkpoint.load_model(args.checkpoint)
        source = args.checkpoint
    else:
        network = network_lib.PolicyValueNet(num_blocks=2, channels=32, value_hidden=32)
        params = network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)
        source = "untrained PolicyValueNet(num_blocks=2, channels=32), seed 0"
    greedy = pimc.FogPlayer("greedy")
    num_games = preset["games"]
    rules = R.batch(R.get("dark"), num_games)
    key = jax.random.key(args.seed)
    for label, player in players(preset["sims"], preset["budget"], preset["candidates"]):
        if label in results or (args.only and args.only not in label):
            continue
        started = time.time()
        compiled = pimc._fog_arena.lower(
            params, rules, key, jnp.int32(2), network=network, player_a=player, player_b=greedy
        ).compile()
        compile_s = time.time() - started
        started = time.time()
        out = jax.device_get(compiled(params, rules, key, jnp.int32(2)))
        play_s = time.time() - started
        from mmc_jax.evaluation import elo

        stats = elo.match_statistics(out.a_reward, out.plies)
        a_moves = int(((out.plies - 2 + 1) // 2).sum())  # A's moves after the 2 opening plies
        stats.update(
            label=label,
            player=player.name,
            opponent="greedy",
            network=source,
            network_evaluations_per_move=player.network_evaluations,
            searches=int(out.a_searches.sum()),
            sampling_failures=int(out.a_failures.sum()),
            compile_s=round(compile_s, 1),
            play_s=round(play_s, 1),
            ms_per_move=round(1000 * play_s / max(a_moves, 1), 2),
            unfinished=int((~out.finished).sum()),
            preset=args.preset,
            **preset,
        )
        results[label] = stats
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)
        w = stats["score_ci95_wilson"]
        print(
            f"{label:55s} score {stats['score']:.3f} [{w[0]:.3f}, {w[1]:.3f}] "
            f"W/D/L {stats['wins']}/{stats['draws']}/{stats['losses']} "
            f"fail {stats['sampling_failures']}/{stats['searches']} "
            f"{stats['ms_per_move']} ms/move, compile {compile_s:.0f}s",
            flush=True,
        )


if __name__ == "__main__":
    main()
