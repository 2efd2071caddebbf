"""How much do the variants' state spaces overlap? Positions reached by play, per variant.

    python -m mmc_jax.explore --variants gardner baby mallet rifle atomic dark \\
        [--checkpoint runs/gardner] --games 200 --out runs/explore

Plays `--games` games per variant with uniformly random moves and, given a checkpoint, as
many with the model playing both sides (its self-play search, `gumbel_scale=1`, so the games
differ). All variants run in one mixed batch (`mmc_jax.evaluation.arena`). Every position reached
(start and final included) is recorded by its key: the FEN's board and side-to-move fields, without
clocks. Per policy it writes

  - the pairwise overlap of the variants' position sets, intersection over union (IoU), as
    JSON and a heatmap PNG (`explore.json`, `explore.png`);
  - per variant: games, mean and median game length (plies), decisive rate, White's score
    (W + D/2 from White's side), distinct positions, positions per game;
  - with a checkpoint, per variant the IoU of the random and the model position sets.

Variants that share a start position (gardner, rifle, atomic, dark, ...) overlap in their
openings; the IoU says how fast their games leave the common ground.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mmc_jax import rules as R
from mmc_jax.evaluation import arena
from mmc_jax.infra import cli, startup

DEFAULT_VARIANTS = ("gardner", "baby", "mallet", "rifle", "atomic", "dark")


def iou_matrix(sets: Sequence[set]) -> np.ndarray:
    """[V, V] intersection over union of position sets (1 on the diagonal; 0 for two empty)."""
    size = len(sets)
    out = np.eye(size)
    for i in range(size):
        for j in range(i + 1, size):
            union = len(sets[i] | sets[j])
            out[i, j] = out[j, i] = len(sets[i] & sets[j]) / union if union else 0.0
    return out


def variant_statistics(records: Sequence[arena.GameRecord]) -> dict[str, Any]:
    """Game length, decisive rate and White's score over one variant's games."""
    scored = [r for r in records if r.scored]
    lengths = np.array([len(r.moves) for r in scored])
    white = np.array([{"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}[r.result] for r in scored])
    positions = set()
    for r in records:
        positions.update(r.positions or ())
    return {
        "games": len(scored),
        "mean_plies": float(lengths.mean()) if len(scored) else None,
        "median_plies": float(np.median(lengths)) if len(scored) else None,
        "decisive_rate": float(np.mean(white != 0.5)) if len(scored) else None,
        "white_score": float(white.mean()) if len(scored) else None,
        "white_wins": int((white == 1.0).sum()),
        "draws": int((white == 0.5).sum()),
        "black_wins": int((white == 0.0).sum()),
        "distinct_positions": len(positions),
        "positions_per_game": len(positions) / len(scored) if scored else None,
    }


def explore(
    variants: Sequence[str],
    games: int,
    *,
    model: arena.Player | None = None,
    seed: int = 0,
    max_plies: int | None = None,
    progress=None,
) -> dict[str, Any]:
    """Plays and measures (see the module docstring); returns the JSON-able report."""
    for v in variants:
        R.check_variant(v)
    if len(set(variants)) != len(variants):
        raise ValueError(f"variants repeat: {list(variants)}")
    if games < 1:
        raise ValueError(f"games must be positive, got {games}")
    policies = {"random": arena.random_player()}
    if model is not None:
        policies["model"] = model
    report: dict[str, Any] = {
        "variants": list(variants),
        "games_per_variant": games,
        "position_key": "FEN board and side to move (no clocks)",
        "policies": {},
    }
    sets_by_policy = {}
    for label, player in policies.items():
        started = time.monotonic()
        specs = [arena.GameSpec(0, 0, v) for v in variants for _ in range(games)]
        records = arena.play_games(
            [player],
            specs,
            seed=seed,
            max_plies=max_plies,
            record_positions=True,
            progress=progress,
        )
        by_variant = {v: [r for r in records if r.variant == v] for v in variants}
        sets = [set().union(*(r.positions for r in by_variant[v])) for v in variants]
        sets_by_policy[label] = sets
        report["policies"][label] = {
            "player": player.name,
            "seconds": time.monotonic() - started,
            "per_variant": {v: variant_statistics(by_variant[v]) for v in variants},
            "iou": iou_matrix(sets).tolist(),
        }
    if model is not None:
        report["random_vs_model_iou"] = {
            v: float(iou_matrix([sets_by_policy["random"][i], sets_by_policy["model"][i]])[0, 1])
            for i, v in enumerate(variants)
        }
    return report


def plot(report: dict[str, Any], path: str) -> None:
    """Heatmaps of the pairwise IoU, one per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = report["variants"]
    labels = list(report["policies"])
    fig, axes = plt.subplots(
        1,
        len(labels),
        figsize=(1.0 + 0.9 * len(variants) * len(labels) + 1, 0.9 * len(variants) + 1.5),
    )
    axes = np.atleast_1d(axes)
    for ax, label in zip(axes, labels, strict=True):
        matrix = np.array(report["policies"][label]["iou"])
        # The diagonal is 1 by definition and the overlaps are small: colour the off-diagonal
        # entries on their own scale, the diagonal grey.
        shown = matrix.copy()
        np.fill_diagonal(shown, np.nan)
        top = max(float(np.nanmax(shown)) if len(variants) > 1 else 1.0, 1e-6)
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
        image = ax.imshow(shown, vmin=0, vmax=top, cmap=cmap)
        ax.set_xticks(range(len(variants)), variants, rotation=45, ha="right")
        ax.set_yticks(range(len(variants)), variants)
        for i in range(len(variants)):
            for j in range(len(variants)):
                ax.text(
                    j,
                    i,
                    f"{matrix[i, j]:.3f}",
                    ha="center",
                    va="center",
                    color="black" if i == j or matrix[i, j] > 0.6 * top else "white",
                    fontsize=8,
                )
        ax.set_title(f"{label}: positions IoU ({report['games_per_variant']} games per variant)")
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_report(report: dict[str, Any]) -> str:
    lines = []
    for label, part in report["policies"].items():
        lines.append(
            f"{label} ({part['player']}), {report['games_per_variant']} games per variant:"
        )
        lines.append(
            f"{'variant':<14} {'plies':>7} {'median':>7} {'decisive':>9} {'White':>7} "
            f"{'positions':>10}"
        )
        for v, s in part["per_variant"].items():
            lines.append(
                f"{v:<14} {s['mean_plies']:>7.1f} {s['median_plies']:>7.0f} "
                f"{s['decisive_rate']:>9.3f} {s['white_score']:>7.3f} "
                f"{s['distinct_positions']:>10}"
            )
        lines.append("IoU of the position sets:")
        names = report["variants"]
        lines.append(" " * 14 + "".join(f"{v[:7]:>8}" for v in names))
        for v, row in zip(names, part["iou"], strict=True):
            lines.append(f"{v:<14}" + "".join(f"{x:>8.3f}" for x in row))
        lines.append("")
    if "random_vs_model_iou" in report:
        lines.append(
            "random vs model positions, IoU per variant: "
            + ", ".join(f"{v} {x:.3f}" for v, x in report["random_vs_model_iou"].items())
        )
    return "\n".join(lines).rstrip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.explore",
        description="Play games per variant (random, and a model when given), record the "
        "positions reached, and measure how much the variants' position sets overlap "
        "(pairwise IoU, JSON + heatmap PNG) plus game length, decisive rate and White's score.",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        type=cli.variant_arg,
        default=list(DEFAULT_VARIANTS),
        help=f"of: {', '.join(R.VARIANTS)} (default: {' '.join(DEFAULT_VARIANTS)})",
    )
    parser.add_argument("--checkpoint", default=None, help="also play the model (self-play search)")
    cli.add_integer(parser, "--step", 0, default=None)
    cli.add_integer(parser, "--games", 1, default=200, help="per variant (200)")
    cli.add_integer(
        parser, "--simulations", 0, default=16, help="the model's search simulations (default 16)"
    )
    cli.add_integer(parser, "--max-plies", 1, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="folder for explore.json and explore.png")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    startup.start()
    cli.check_output_folder(parser, "--out", args.out)
    if len(set(args.variants)) != len(args.variants):
        parser.error(f"--variants repeat: {' '.join(args.variants)}")
    model = None
    if args.checkpoint is not None:
        network, params, _ = cli.load_or_fail(parser, args.checkpoint, args.step, "--checkpoint")
        model = arena.model_player(
            f"model {args.checkpoint}", network, params, args.simulations, gumbel_scale=1.0
        )
    report = explore(
        args.variants,
        args.games,
        model=model,
        seed=args.seed,
        max_plies=args.max_plies,
        progress=arena.print_progress,
    )
    report["checkpoint"] = args.checkpoint
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "explore.json")
    png_path = os.path.join(args.out, "explore.png")
    with open(json_path, "w") as handle:
        json.dump(report, handle, indent=1)
    plot(report, png_path)
    if args.json:
        print(json.dumps(report))
    else:
        print(format_report(report))
        print(f"\nwrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
