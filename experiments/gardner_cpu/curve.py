"""Curve of a `run.sh` workdir: score against random and greedy vs minutes and vs frames.

    python experiments/gardner_cpu/curve.py runs/gardner_cpu

Reads WORKDIR/metrics.jsonl (the trainer's records; evaluation rows carry
`eval/score_vs_<opponent>` with a 95% interval), WORKDIR/started_at (the wall-clock start
written by run.sh) and the final 400-game evaluations WORKDIR/final_vs_<opponent>.json. Writes
WORKDIR/curve.png and prints a markdown table of every evaluation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OPPONENTS = ("random", "greedy")


def load(workdir: Path):
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    started = float((workdir / "started_at").read_text())
    rows = []
    for r in records:
        minutes = (r["time"] - started) / 60
        for opponent in OPPONENTS:
            key = f"eval/score_vs_{opponent}"
            if key in r:
                games = sum(
                    r.get(f"eval/{k}_vs_{opponent}", 0) for k in ("wins", "draws", "losses")
                )
                rows.append(
                    dict(
                        opponent=opponent,
                        iteration=r["step"],
                        minutes=minutes,
                        frames=r["frames"],
                        games=int(games),
                        score=r[key],
                        low=r.get(f"eval/score_low_vs_{opponent}", r[key]),
                        high=r.get(f"eval/score_high_vs_{opponent}", r[key]),
                        final=False,
                    )
                )
    last = records[-1]
    for opponent in OPPONENTS:
        path = workdir / f"final_vs_{opponent}.json"
        if path.exists():
            result = json.loads(path.read_text())
            low, high = result["score_ci95"]
            rows.append(
                dict(
                    opponent=opponent,
                    iteration=last["step"],
                    minutes=(last["time"] - started) / 60,
                    frames=last["frames"],
                    games=result["num_games"],
                    score=result["score"],
                    low=low,
                    high=high,
                    final=True,
                    wdl=(result.get("wins"), result.get("draws"), result.get("losses")),
                )
            )
    return records, rows


def plot(rows, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x in zip(axes, ("minutes", "frames"), strict=True):
        for opponent, colour in zip(OPPONENTS, ("tab:blue", "tab:red"), strict=True):
            for final, marker in ((False, "o-"), (True, "s")):
                pts = [r for r in rows if r["opponent"] == opponent and r["final"] == final]
                if not pts:
                    continue
                xs = [r[x] for r in pts]
                ys = [r["score"] for r in pts]
                # A perfect score's interval ends at 1 - 1e-16: clip the rounding to 0.
                err = [
                    [max(0.0, r["score"] - r["low"]) for r in pts],
                    [max(0.0, r["high"] - r["score"]) for r in pts],
                ]
                label = f"vs {opponent}" + (f" ({pts[0]['games']} games, final)" if final else "")
                ax.errorbar(
                    xs,
                    ys,
                    yerr=err,
                    fmt=marker,
                    color=colour,
                    capsize=3,
                    label=label,
                    alpha=1.0 if final else 0.7,
                )
        for level, style in ((0.95, ":"), (0.80, "--")):
            ax.axhline(level, color="grey", linestyle=style, linewidth=0.8)
        ax.set_xlabel("wall-clock minutes since start" if x == "minutes" else "self-play frames")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("score (W + D/2), 95% CI")
    axes[0].set_ylim(0, 1.02)
    axes[1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Gardner, configs/gardner.py:cpu, 2-core CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    workdir = Path(argv[1])
    records, rows = load(workdir)
    plot(rows, workdir / "curve.png")
    print("| iteration | minutes | frames | opponent | games | score | 95% CI |")
    print("|---:|---:|---:|---|---:|---:|---|")
    for r in sorted(rows, key=lambda r: (r["final"], r["iteration"], r["opponent"])):
        tag = " (final)" if r["final"] else ""
        print(
            f"| {r['iteration']}{tag} | {r['minutes']:.1f} | {r['frames']:,} | {r['opponent']} | "
            f"{r['games']} | {r['score']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] |"
        )
    print(f"\n{len(records)} iterations logged; plot: {workdir / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
