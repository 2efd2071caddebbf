"""The data curve (issue 72 item 2): supervised learning from Fairy-Stockfish's action values at
10^4, 10^5 and 10^6 labelled positions and two network sizes, each rated against the engine at
100, 1,000 and 10,000 nodes and head to head against `gardner-h200`. The protocol is registered
in experiments/strength/README.md before any result.

    python experiments/strength/curve.py train 2x32-1e4       # one row, resumable
    python experiments/strength/curve.py evaluate 2x32-1e4    # its matches, each kept as done
    python experiments/strength/curve.py report               # the table and curve.png
    python experiments/strength/curve.py status

`train` runs `python -m mmc_jax.train --config configs/supervised.py:cpu` on the label folder
(`--labels`, default experiments/strength/labels: `python -m mmc_jax.labels build` makes it)
with the row's positions and network, for the registered steps, then exports the final
parameters into the row's folder (`ROW/model`, committed with `ROW/train.json`). Its workdir
(`runs/strength/ROW`) is heavy and not committed; a re-run resumes it. `evaluate` plays the
registered matches with `python -m mmc_jax.evaluate --json` and writes each into
`ROW/matches/NAME.json` as it finishes, so a stopped evaluation goes on where it was.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "experiments" / "strength"
ROWS_DIR = HERE / "curve"
LABELS = HERE / "labels"

# The registered rows: name -> (training positions, (blocks, channels), seed).
NETWORKS = {"2x32": (2, 32), "6x64": (6, 64)}
ROWS = {f"{net}-1e{e}": (10**e, NETWORKS[net], 0) for net in ("2x32", "6x64") for e in (4, 5, 6)}
# The second seed of the best row (registered: the row with the best mean score against the
# engine over the three rungs at 32 simulations, trained again with seed 1).
SECOND_SEED = "best-seed1"
# Every row: the same optimizer and steps (configs/supervised.py:cpu's learner: Adam 1e-3,
# decoupled weight decay 1e-4, clip 1.0, batch 256), 400 iterations of 32 steps.
ITERATIONS = 400
GAMES = 400
NODES = (100, 1000, 10000)
SIMULATIONS = (32, 0)  # 0: the raw policy
H2H = "gardner-h200"


def matches() -> dict[str, list[str]]:
    """The registered matches of a row: {name: extra `evaluate` arguments}."""
    engine = _engine()
    out = {}
    for sims in SIMULATIONS:
        for nodes in NODES:
            out[f"fsf{nodes}-sims{sims}"] = [
                f"--opponent=uci:{engine}",
                f"--opponent-simulations={nodes}",
                f"--simulations={sims}",
            ]
    out[f"{H2H}-sims32"] = [f"--opponent={H2H}", "--simulations=32"]
    return out


def _engine() -> str:
    from mmc_jax import uci

    return uci.ensure_engine()


def row_spec(name: str, rows: dict | None = None) -> tuple[int, tuple[int, int], int]:
    rows = rows or _rows()
    if name not in rows:
        raise ValueError(f"unknown row {name!r}; the rows: {', '.join(rows)}")
    return rows[name]


def _rows() -> dict:
    """The registered rows, with the second seed once the best row is known."""
    rows = dict(ROWS)
    best = best_row()
    if best is not None:
        positions, net, _ = ROWS[best]
        rows[SECOND_SEED] = (positions, net, 1)
    return rows


def best_row() -> str | None:
    """The row with the best mean score against the engine at 32 simulations, once every
    registered row has all three rungs (None before: the second seed waits for the curve)."""
    means = {}
    for name in ROWS:
        scores = [_score(name, f"fsf{n}-sims32") for n in NODES]
        if any(s is None for s in scores):
            return None
        means[name] = sum(scores) / len(scores)
    return max(means, key=means.get)


def _score(row: str, match: str) -> float | None:
    path = ROWS_DIR / row / "matches" / f"{match}.json"
    return json.loads(path.read_text())["score"] if path.exists() else None


def train(name: str, labels: Path, log=print) -> dict:
    positions, (blocks, channels), seed = row_spec(name)
    folder = ROWS_DIR / name
    workdir = ROOT / "runs" / "strength" / name
    command = [
        sys.executable, "-m", "mmc_jax.train", "--config", "configs/supervised.py:cpu",
        f"--workdir={workdir}", f"--config.data.labels={labels}",
        f"--config.data.positions={positions}", f"--config.num_iterations={ITERATIONS}",
        f"--config.network.num_blocks={blocks}", f"--config.network.channels={channels}",
        f"--config.seed={seed}", "--config.eval.every=0",
    ]  # fmt: skip
    log(f"{name}: " + " ".join(command[1:]))
    started = time.time()
    subprocess.run(command, cwd=ROOT, check=True)
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    subprocess.run(
        [sys.executable, "-m", "mmc_jax.export", f"--checkpoint={workdir}",
         f"--out={folder / 'model'}", f"--command=python {Path(__file__).name} train {name}"],
        cwd=ROOT, check=True,
    )  # fmt: skip
    result = {
        "row": name,
        "positions": positions,
        "network": f"{blocks}x{channels}",
        "seed": seed,
        "iterations": ITERATIONS,
        "steps": ITERATIONS * 32,
        "labels": os.path.relpath(labels, ROOT),
        "seconds_this_sitting": round(time.time() - started, 1),
        "final": {
            k: last[k]
            for k in (
                "train/policy_loss",
                "train/value_loss",
                "valid/policy_loss",
                "valid/value_loss",
            )
            if k in last
        },  # fmt: skip
    }
    (folder / "train.json").write_text(json.dumps(result, indent=1))
    return result


def evaluate(name: str, log=print) -> dict:
    folder = ROWS_DIR / name
    model = folder / "model"
    if not (folder / "train.json").exists():
        raise ValueError(f"{name} is not trained yet: python {Path(__file__).name} train {name}")
    out = folder / "matches"
    out.mkdir(exist_ok=True)
    for match, extra in matches().items():
        path = out / f"{match}.json"
        if path.exists():
            continue
        log(f"{name}: {match} ({GAMES} games)")
        result = subprocess.run(
            [sys.executable, "-m", "mmc_jax.evaluate", f"--checkpoint={model}",
             "--variant=gardner", f"--games={GAMES}", "--json", *extra],
            cwd=ROOT, check=True, capture_output=True, text=True,
        )  # fmt: skip
        data = json.loads(result.stdout.strip().splitlines()[-1])
        path.write_text(json.dumps(data, indent=1))
        log(f"{name}: {match}: {data['score']:.3f} {_interval(data)}")
    return {m: json.loads((out / f"{m}.json").read_text()) for m in matches()}


def _wilson(data: dict) -> tuple[float, float]:
    """The registered interval: Wilson 95% (`evaluate`'s `score_ci95_wilson`; its
    `score_ci95` is a normal interval over per-game scores)."""
    low, high = data.get("score_ci95_wilson") or data["score_ci95"]
    return low, high


def _interval(data: dict) -> str:
    low, high = _wilson(data)
    return f"[{low:.3f}, {high:.3f}]"


def difference(a: dict, b: dict) -> tuple[float, float, float]:
    """a's score minus b's, with a normal 95% interval (independent matches)."""
    pa, pb = a["score"], b["score"]
    se = math.sqrt(_variance(a) / a["num_games"] + _variance(b) / b["num_games"])
    return pa - pb, pa - pb - 1.96 * se, pa - pb + 1.96 * se


def _variance(data: dict) -> float:
    """Per-game variance of the score (win 1, draw 0.5, loss 0)."""
    n = data["num_games"]
    mean = data["score"]
    second = (data["wins"] + 0.25 * data["draws"]) / n
    return max(second - mean**2, 1e-12)


def report() -> str:
    rows = _rows()
    names = list(matches())
    lines = [
        "| row | positions | net | seed | held-out policy loss | " + " | ".join(names) + " |",
        "|---|---|---|---|---|" + "---|" * len(names),
    ]
    for name, (positions, (blocks, channels), seed) in rows.items():
        folder = ROWS_DIR / name
        if not (folder / "train.json").exists():
            continue
        trained = json.loads((folder / "train.json").read_text())
        cells = []
        for match in names:
            path = folder / "matches" / f"{match}.json"
            if path.exists():
                data = json.loads(path.read_text())
                cells.append(f"{data['score']:.3f} {_interval(data)}")
            else:
                cells.append("-")
        loss = trained["final"].get("valid/policy_loss")
        lines.append(
            f"| {name} | {positions:,} | {blocks}x{channels} | {seed} | "
            + (f"{loss:.3f}" if loss is not None else "-")
            + " | "
            + " | ".join(cells)
            + " |"
        )
    for net in NETWORKS:
        a, b = ROWS_DIR / f"{net}-1e5", ROWS_DIR / f"{net}-1e4"
        pa, pb = a / "matches" / "fsf1000-sims32.json", b / "matches" / "fsf1000-sims32.json"
        if pa.exists() and pb.exists():
            d, low, high = difference(json.loads(pa.read_text()), json.loads(pb.read_text()))
            lines.append(
                f"\n{net}: 10^5 - 10^4 positions against FSF at 1,000 nodes (32 simulations): "
                f"{d:+.3f} [{low:+.3f}, {high:+.3f}]"
            )
    text = "\n".join(lines)
    plot(rows)
    return text


def plot(rows: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(NODES), figsize=(4 * len(NODES), 3.4), sharey=True)
    drawn = False
    for ax, nodes in zip(axes, NODES, strict=True):
        for net in NETWORKS:
            for sims, style in zip(SIMULATIONS, ("-o", "--s"), strict=True):
                xs, ys, errs = [], [], []
                for name, (positions, _, seed) in rows.items():
                    if not name.startswith(net) or seed != 0:
                        continue
                    path = ROWS_DIR / name / "matches" / f"fsf{nodes}-sims{sims}.json"
                    if path.exists():
                        data = json.loads(path.read_text())
                        low, high = _wilson(data)
                        xs.append(positions)
                        ys.append(data["score"])
                        errs.append((data["score"] - low, high - data["score"]))
                if xs:
                    drawn = True
                    ax.errorbar(
                        xs, ys, yerr=list(zip(*errs, strict=True)), fmt=style, capsize=3,
                        label=f"{net}, " + (f"{sims} simulations" if sims else "raw policy"),
                    )  # fmt: skip
        ax.set_xscale("log")
        ax.set_title(f"against Fairy-Stockfish, {nodes:,} nodes")
        ax.set_xlabel("labelled training positions")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("score (400 games, 95% Wilson)")
    if drawn:
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "curve.png", dpi=120)
    plt.close(fig)


def status() -> str:
    from mmc_jax.uci import labels as labels_lib

    out = [labels_lib.status(str(LABELS))]
    for name in _rows():
        folder = ROWS_DIR / name
        done = (
            len(list((folder / "matches").glob("*.json"))) if (folder / "matches").is_dir() else 0
        )
        trained = (folder / "train.json").exists()
        out.append(
            f"{name}: {'trained' if trained else 'not trained'}, {done}/{len(matches())} matches"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python experiments/strength/curve.py",
        description="The data curve of action-value imitation (registered in "
        "experiments/strength/README.md).",
    )
    parser.add_argument("command", choices=("train", "evaluate", "report", "status"))
    parser.add_argument("row", nargs="?", help="a row: " + ", ".join([*ROWS, SECOND_SEED]))
    parser.add_argument("--labels", type=Path, default=LABELS, help="the label folder")
    args = parser.parse_args(argv)
    try:
        if args.command in ("train", "evaluate"):
            if not args.row:
                parser.error(f"{args.command} needs a row: " + ", ".join(_rows()))
            row_spec(args.row)
            if args.command == "train":
                train(args.row, args.labels)
            else:
                evaluate(args.row)
        elif args.command == "report":
            print(report())
        else:
            print(status())
    except (ValueError, subprocess.CalledProcessError) as error:
        print(f"curve.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
