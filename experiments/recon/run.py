"""Recon agents against each other, and how much of the board their beliefs hold.

    PYTHONPATH=. python experiments/recon/run.py                   # the README's numbers
    PYTHONPATH=. python experiments/recon/run.py --games 8 --max-plies 30 --out /tmp/recon
    PYTHONPATH=. python experiments/recon/run.py --agents learned,random,random-pimc,entropy-pimc \
        --first-only --checkpoint runs/recon --out experiments/recon/learned

Plays every pair of `--agents` (default random, random-pimc, entropy-pimc: players of the
table, `mmc_jax.evaluation.players`, that play sensing variants) in `--games` colour-balanced
games of `--variant` (the first agent White in half), all pairs in one batch of the compiled
recon arena (`mmc_jax.evaluation.sensing_match.play_schedule`, what `python -m mmc_jax.evaluate
--variant recon` plays one pair with; with `--first-only`, only the first agent's pairs). The
agent `learned` is the trained agent of `--checkpoint` (the table's `learned:MODEL`: a training
workdir of `python -m mmc_jax.train --config configs/recon.py`, or its export such as
experiments/recon/learned/model, opened by `mmc_jax.algorithms.open_model`); it searches with the
same number of belief samples per decision as PIMC (`--worlds`). One pair's match is also

    python -m mmc_jax.evaluate --variant recon --checkpoint experiments/recon/learned/model \
        --opponent entropy-pimc --games 100 --max-plies 100

Writes to `--out`:
results.json (W/D/L per pair with Wilson 95% intervals, Elo with bootstrap intervals anchored
at random, and per ply the belief sizes and knowledge per agent) and belief.png.

Knowledge of a player at its decision (after its sense), averaged over live games per ply:
  certain    the share of the 25 squares whose content every candidate board has right
             (own pieces count: they are known);
  agreement  the mean share of candidates that have a square right.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from mmc_jax import algorithms
from mmc_jax import rules as R
from mmc_jax.evaluation import elo, players, sensing_match
from mmc_jax.infra import cli
from mmc_jax.search import recon_belief as RB


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="recon")
    parser.add_argument("--agents", default="random,random-pimc,entropy-pimc")
    parser.add_argument("--games", type=int, default=64, help="games per pair (even)")
    parser.add_argument("--max-plies", type=int, default=100)
    parser.add_argument("--size", type=int, default=256, help="belief pad size")
    parser.add_argument("--moves-per-board", type=int, default=64)
    parser.add_argument("--worlds", type=int, default=8, help="PIMC worlds per decision")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="experiments/recon")
    parser.add_argument("--replot", action="store_true", help="redraw --out's plot, play nothing")
    parser.add_argument(
        "--checkpoint",
        help="the agent 'learned': a workdir of configs/recon.py or its export (a folder, "
        "e.g. experiments/recon/learned/model)",
    )
    parser.add_argument(
        "--learned-candidates",
        type=int,
        default=None,
        help="requests the learned agent evaluates per search (default: its training's)",
    )
    parser.add_argument(
        "--first-only", action="store_true", help="play only the first agent's pairs"
    )
    args = parser.parse_args(argv)
    names = args.agents.split(",")
    for name in names:
        try:
            players.recon_kinds(name)
        except ValueError as error:
            parser.error(str(error))
    if len(set(names)) != len(names) or len(names) < 2:
        parser.error(f"--agents needs two or more distinct agents, got {args.agents!r}")
    if args.games < 2 or args.games % 2:
        parser.error(f"--games must be a positive even number, got {args.games}")
    try:
        R.check_variant(args.variant, sensing=True)
    except ValueError as error:
        parser.error(f"--variant {error}")
    if not R.is_sense(args.variant):
        parser.error(f"{R.canonical(args.variant)} is not a sensing variant (fog=sense:W)")
    args.players, args.learned = {}, None
    if not args.replot:
        if players.LEARNED in names and args.checkpoint is None:
            parser.error("the agent 'learned' needs --checkpoint")
        args.players = {name: build_player(parser, args, name) for name in names}
        if players.LEARNED in names:
            args.learned = args.players[players.LEARNED].search
    return args, names


def build_player(parser, args, name):
    """The table's player `name` for `--variant`; `learned` is `learned:<--checkpoint>` (its
    search with `--learned-candidates`). A usage error in one line when it cannot be built."""
    context = players.Context(
        variant=args.variant,
        name=name,
        open_model=lambda path, step: cli.open_or_fail(
            parser, path, step, "--checkpoint", opener=algorithms.open_model
        ),
    )
    learned = name == players.LEARNED
    try:
        player = players.build(
            players.LEARNED_PREFIX + args.checkpoint if learned else name, context
        )
    except ValueError as error:
        parser.error(f"--checkpoint {error}" if learned else str(error))
    if learned and args.learned_candidates is not None:
        if not 1 <= args.learned_candidates <= RB.NUM_REQUESTS:
            parser.error(
                f"--learned-candidates must be in [1, {RB.NUM_REQUESTS}], "
                f"got {args.learned_candidates}"
            )
        search = player.search._replace(candidates=args.learned_candidates)
        player = dataclasses.replace(player, search=search)
    return player


def schedule(names, games, first_only=False):
    """(pairs, white agent names [B], black agent names [B])."""
    pairs = list(itertools.combinations(names, 2))
    if first_only:
        pairs = [pair for pair in pairs if pair[0] == names[0]]
    white, black = [], []
    for a, b in pairs:
        pair_white, pair_black = sensing_match.colour_balanced(a, b, games)
        white += pair_white
        black += pair_black
    return pairs, white, black


def tally(pairs, rewards, plies, games):
    """(`elo.PairResult` per pair, the table's rows): each pair's games are a colour-balanced
    match of its first agent, scored as `python -m mmc_jax.evaluate` scores one
    (`elo.match_statistics`; the interval here is its Wilson interval)."""
    results, table = [], []
    for p, (a, b) in enumerate(pairs):
        games_of_pair = slice(p * games, (p + 1) * games)
        match = elo.match_statistics(
            sensing_match.first_rewards(rewards[games_of_pair]), plies[games_of_pair]
        )
        pair = elo.PairResult(a, b, match["wins"], match["draws"], match["losses"])
        results.append(pair)
        low, high = match["score_ci95_wilson"]
        table.append(
            {"a": a, "b": b, "wins": pair.wins, "draws": pair.draws, "losses": pair.losses,
             "score": round(pair.score, 3), "ci95": [round(low, 3), round(high, 3)],
             "score_as_white": round(match["white"]["score"], 3),
             "score_as_black": round(match["black"]["score"], 3)}
        )  # fmt: skip
    return results, table


def per_ply(stats, white, black, names):
    """Per agent and ply: mean belief size before / after the sense, certain, agreement."""
    agent = np.where(stats.mover == 0, np.asarray(white)[None], np.asarray(black)[None])
    out = {}
    for name in names:
        rows = []
        for ply in range(int(stats.ply.max()) + 1):
            sel = stats.live & (agent == name) & (stats.ply == ply)
            if sel.sum() < 4:
                continue
            rows.append(
                {"ply": ply, "games": int(sel.sum()),
                 "size_before_sense": float(stats.before_sense[sel].mean()),
                 "size_after_sense": float(stats.after_sense[sel].mean()),
                 "exact": float(stats.exact[sel].mean()),
                 "contains_true": float(stats.contains_true[sel].mean()),
                 "certain": float(stats.certain[sel].mean()),
                 "agreement": float(stats.agreement[sel].mean())}
            )  # fmt: skip
        out[name] = rows
    return out


MIN_GAMES_PLOTTED = 10  # plies reached by fewer live games are left out of the plot


def plot(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (name, rows) in enumerate(curves.items()):
        rows = [r for r in rows if r["games"] >= MIN_GAMES_PLOTTED]
        plies, c = [r["ply"] for r in rows], f"C{i}"
        axes[0].plot(plies, [r["size_before_sense"] for r in rows], c, label=f"{name} before sense")
        axes[0].plot(plies, [r["size_after_sense"] for r in rows], c + "--", label=f"{name} after")
        axes[1].plot(plies, [r["certain"] for r in rows], c, label=f"{name} certain")
        axes[1].plot(plies, [r["agreement"] for r in rows], c + "--", label=f"{name} agreement")
    axes[0].set(yscale="log", xlabel="ply", ylabel="candidate boards (mean)", title="belief size")
    axes[1].set(xlabel="ply", ylabel="share of the 25 squares", title="board known at decision")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    args, names = parse_args(argv)
    if args.replot:
        curves = json.loads((Path(args.out) / "results.json").read_text())["per_ply"]
        plot(curves, Path(args.out) / "belief.png")
        return
    pairs, white, black = schedule(names, args.games, args.first_only)
    start = time.time()
    rewards, plies, stats = sensing_match.play_schedule(
        args.variant, [args.players[name] for name in white],
        [args.players[name] for name in black], jax.random.key(args.seed),
        max_plies=args.max_plies, size=args.size, moves_per_board=args.moves_per_board,
        worlds=args.worlds,
    )  # fmt: skip
    seconds = time.time() - start
    results, table = tally(pairs, rewards, plies, args.games)
    anchor = "random" if "random" in names else names[0]
    ratings = elo.fit_elo(results, anchor=anchor, bootstrap=1000, seed=args.seed)
    curves = per_ply(stats, white, black, names)
    live = stats.live
    summary = {
        "command": "PYTHONPATH=. python experiments/recon/run.py " + " ".join(argv or sys.argv[1:]),
        "variant": R.canonical(args.variant),
        "games_per_pair": args.games,
        "max_plies": args.max_plies,
        "belief_size": args.size,
        "moves_per_board": args.moves_per_board,
        "worlds": args.worlds,
        "learned": None if args.learned is None else {
            "checkpoint": args.checkpoint,
            "search": args.learned._replace(worlds=args.worlds)._asdict(),
        },
        "seconds": round(seconds, 1),
        "mean_plies": float(plies.mean()),
        "pairs": table,
        "elo": {k: {"elo": round(v["elo"]), "ci95": [round(x) for x in v["ci95"]]}
                for k, v in ratings["ratings"].items()},
        "turns_exact": float(stats.exact[live].mean()),
        "exact_turns_containing_true": float(stats.contains_true[live & stats.exact].mean()),
        "turns_containing_true": float(stats.contains_true[live].mean()),
        "per_ply": curves,
    }  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    plot(curves, out / "belief.png")
    for row in table:
        print(row)
    print(json.dumps(summary["elo"]), f"{seconds:.0f}s", f"mean plies {plies.mean():.1f}")
    print(
        "exact turns",
        summary["turns_exact"],
        "true board in belief",
        summary["turns_containing_true"],
    )


if __name__ == "__main__":
    main()
