"""bfloat16 against float32 compute, trained the same way on the CPU (issue 50 item 1).

The accelerator presets (`full`) compute in bfloat16 with float32 parameters and optimizer state
(`configs/common.py`, `mmc_jax.model.network.compute_dtype`); the CPU presets compute in float32.
This checks, at the `cpu` size on Gardner, that the mixed precision trains like float32: the same
config and seed in both dtypes, and a second float32 seed as the yardstick of what "within noise"
means. The protocol is registered in experiments/precision/README.md before any result.

    python experiments/precision/compare.py train f32_s0     # one arm, resumable
    python experiments/precision/compare.py match bf16_vs_f32  # one match, kept once played
    python experiments/precision/compare.py all              # every arm and match not yet done
    python experiments/precision/compare.py report           # the table, the plot, the verdict
    python experiments/precision/compare.py status

Every arm is `python -m mmc_jax.train --config configs/gardner.py:cpu` for `ITERATIONS`
iterations with no periodic evaluation (a killed `train` resumes from its checkpoint); every
match is `python -m mmc_jax.evaluate` between two arms' final checkpoints, written to
`<root>/matches/NAME.json` once it has finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = ROOT / "experiments" / "precision" / "runs"

# The registered arms: name -> (compute dtype, seed). f32_s1 is the noise yardstick: the same
# recipe under another seed.
ARMS = {"f32_s0": ("float32", 0), "bf16_s0": ("bfloat16", 0), "f32_s1": ("float32", 1)}
ITERATIONS = 30
# name -> (model, opponent): 400 colour-balanced games, 32 simulations, the evaluate default of
# 4 paired random opening plies between two networks.
MATCHES = {"bf16_vs_f32": ("bf16_s0", "f32_s0"), "seed1_vs_seed0": ("f32_s1", "f32_s0")}
# A diagnostic added after the registered result was seen (README, "Diagnostic"): the bf16 arm's
# parameters played with float32 compute, to tell weaker parameters from weaker bf16 play.
# An arm name with "@float32" is that arm's final checkpoint exported with its network
# computing in float32 (`as_float32`).
DIAGNOSTICS = {"bf16_params_f32_play_vs_f32": ("bf16_s0@float32", "f32_s0")}
# Round 2 (registered in the README after round 1's results): two more seeds, paired by seed.
ROUND2_ARMS = {"bf16_s1": ("bfloat16", 1), "bf16_s2": ("bfloat16", 2), "f32_s2": ("float32", 2)}
ROUND2_MATCHES = {
    "bf16_vs_f32_s1": ("bf16_s1", "f32_s1"),
    "bf16_vs_f32_s2": ("bf16_s2", "f32_s2"),
    "seed2_vs_seed1": ("f32_s2", "f32_s1"),
}
# Round 3 (registered in the README after round 2 read "undecided"): two more seed pairs, so
# that five pairs can resolve the registered half-width of 0.1.
ROUND3_ARMS = {
    "bf16_s3": ("bfloat16", 3),
    "f32_s3": ("float32", 3),
    "bf16_s4": ("bfloat16", 4),
    "f32_s4": ("float32", 4),
}
ROUND3_MATCHES = {"bf16_vs_f32_s3": ("bf16_s3", "f32_s3"), "bf16_vs_f32_s4": ("bf16_s4", "f32_s4")}
ALL_ARMS = {**ARMS, **ROUND2_ARMS, **ROUND3_ARMS}
ALL_MATCHES = {**MATCHES, **DIAGNOSTICS, **ROUND2_MATCHES, **ROUND3_MATCHES}
# The paired bf16 matches (one per seed) and the float32 seed pairs rounds 2 and 3 read.
PAIRED = ("bf16_vs_f32", "bf16_vs_f32_s1", "bf16_vs_f32_s2")
PAIRED_ROUND3 = (*PAIRED, *ROUND3_MATCHES)
SEED_PAIRS = ("seed1_vs_seed0", "seed2_vs_seed1")
# Student's t, 97.5% quantile, by degrees of freedom (pairs - 1).
T_975 = {2: 4.302653, 4: 2.776445}
EQUAL_HALF_WIDTH = 0.1
GAMES = 400
SIMULATIONS = 32
LOSSES = ("train/policy_loss", "train/value_loss")


def train_command(arm: str, root: Path) -> list[str]:
    dtype, seed = ALL_ARMS[arm]
    return [
        sys.executable,
        "-m",
        "mmc_jax.train",
        "--config",
        "configs/gardner.py:cpu",
        f"--config.network.dtype={dtype}",
        f"--config.seed={seed}",
        f"--config.num_iterations={ITERATIONS}",
        "--config.eval.every=0",
        "--workdir",
        str(root / arm),
    ]


def player_path(root: Path, arm: str) -> Path:
    """An arm's workdir, or for "ARM@float32" its float32-compute export (`as_float32`)."""
    name, _, dtype = arm.partition("@")
    return root / (f"{name}_{dtype}" if dtype else name)


def as_float32(root: Path, arm: str) -> Path:
    """Exports `arm`'s final checkpoint with `network.dtype` float32 in its model.json (the
    parameters are float32 in every arm; only the compute changes); kept once written."""
    out = player_path(root, f"{arm}@float32")
    if not (out / "model.json").exists():
        run_child([sys.executable, "-m", "mmc_jax.export", "--checkpoint", str(root / arm),
                   "--out", str(out)])  # fmt: skip
        record = json.loads((out / "model.json").read_text())
        record["config"]["network"]["dtype"] = "float32"
        record["description"] = f"{arm}'s parameters computing in float32 (a diagnostic)"
        (out / "model.json").write_text(json.dumps(record, indent=1) + "\n")
    return out


def match_command(name: str, root: Path) -> list[str]:
    model, opponent = ALL_MATCHES[name]
    return [
        sys.executable,
        "-m",
        "mmc_jax.evaluate",
        "--checkpoint",
        str(player_path(root, model)),
        "--opponent",
        str(player_path(root, opponent)),
        "--variant",
        "gardner",
        "--games",
        str(GAMES),
        "--simulations",
        str(SIMULATIONS),
        "--json",
    ]


def records(root: Path, arm: str) -> list[dict]:
    from mmc_jax.infra import metrics

    return [r for r in metrics.read_metrics(root / arm) if "train/policy_loss" in r]


def trained(root: Path, arm: str) -> bool:
    rows = records(root, arm)
    return bool(rows) and int(rows[-1]["iteration"]) >= ITERATIONS


def match_path(root: Path, name: str) -> Path:
    return root / "matches" / f"{name}.json"


def run_child(command: list[str], stdout=None) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=stdout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command[1:4])} ... exited {done.returncode}")


def train(root: Path, arm: str) -> None:
    if trained(root, arm):
        print(f"{arm}: trained ({ITERATIONS} iterations)", flush=True)
        return
    print(f"{arm}: training ({' '.join(train_command(arm, root)[1:])})", flush=True)
    run_child(train_command(arm, root))


def match(root: Path, name: str) -> dict:
    path = match_path(root, name)
    if path.exists():
        return json.loads(path.read_text())
    for arm in ALL_MATCHES[name]:
        base = arm.partition("@")[0]
        if not trained(root, base):
            raise SystemExit(f"error: match {name} needs arm {base} trained first (train {base})")
        if not (root / base / "checkpoints").is_dir():
            raise SystemExit(
                f"error: match {name} needs arm {base}'s checkpoints, and {root / base} has "
                "none (the committed runs folder keeps metrics only): train it under another "
                "--root (training is deterministic for a seed)"
            )
        if "@" in arm:
            as_float32(root, base)
    print(f"{name}: playing {GAMES} games at {SIMULATIONS} simulations", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with open(partial, "w") as handle:
        run_child(match_command(name, root), stdout=handle)
    lines = [line for line in partial.read_text().splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"error: match {name} printed no result (see {partial})")
    result = json.loads(lines[-1])
    path.write_text(json.dumps(result, indent=1) + "\n")
    partial.unlink()
    return result


def curve_gaps(root: Path) -> dict:
    """Per loss: the mean over iterations of |bf16_s0 - f32_s0| and of |f32_s1 - f32_s0| (the
    yardstick), their ratio, and each arm's mean over the last 10 iterations."""
    rows = {arm: records(root, arm) for arm in ARMS}
    n = min(len(r) for r in rows.values())
    out = {"iterations": n}
    for key in LOSSES:
        series = {arm: [float(r[key]) for r in rows[arm][:n]] for arm in ARMS}
        base = series["f32_s0"]
        gap = sum(abs(a - b) for a, b in zip(series["bf16_s0"], base, strict=True)) / n
        noise = sum(abs(a - b) for a, b in zip(series["f32_s1"], base, strict=True)) / n
        out[key] = {
            "bf16_gap": gap,
            "seed_gap": noise,
            "ratio": gap / noise if noise > 0 else math.inf,
            "last10": {arm: sum(s[-10:]) / len(s[-10:]) for arm, s in series.items()},
        }
    out["iteration_seconds"] = {
        arm: sorted(float(r["perf/iteration_seconds"]) for r in rows[arm][1:n])[(n - 1) // 2]
        for arm in ARMS
        if n > 1
    }
    return out


def plot(root: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    styles = {"f32_s0": "-", "bf16_s0": "--", "f32_s1": ":"}
    for axis, key in zip(axes, LOSSES, strict=True):
        for arm in ARMS:
            rows = records(root, arm)
            axis.plot(
                [r["iteration"] for r in rows], [r[key] for r in rows], styles[arm], label=arm
            )
        axis.set_xlabel("iteration")
        axis.set_title(key)
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle("gardner:cpu, float32 and bfloat16 compute (f32_s1: another seed)")
    figure.tight_layout()
    path = root / "losses.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def match_row(root: Path, name: str) -> str:
    """The report's table row of a played match (diagnostics marked so)."""
    model, opponent = ALL_MATCHES[name]
    m = json.loads(match_path(root, name).read_text())
    low, high = m["score_ci95"]
    label = f"{model} vs {opponent}" + (" (diagnostic)" if name in DIAGNOSTICS else "")
    return (
        f"| {label} | {m['score']:.3f} | [{low:.3f}, {high:.3f}] | "
        f"{m['wins']}-{m['draws']}-{m['losses']} |"
    )


def report(root: Path) -> str:
    missing = [arm for arm in ARMS if not trained(root, arm)]
    missing += [name for name in MATCHES if not match_path(root, name).exists()]
    if missing:
        raise SystemExit(f"error: not done yet: {', '.join(missing)} (run `all`)")
    gaps = curve_gaps(root)
    plot(root)
    lines = [
        f"| loss (iterations 1-{gaps['iterations']}) | mean abs gap bf16 - f32 (seed 0) | "
        "mean abs gap seed 1 - seed 0 (f32) | ratio | last 10: f32_s0 / bf16_s0 / f32_s1 |",
        "|---|---|---|---|---|",
    ]
    for key in LOSSES:
        g = gaps[key]
        last = g["last10"]
        lines.append(
            f"| {key} | {g['bf16_gap']:.4f} | {g['seed_gap']:.4f} | {g['ratio']:.2f} | "
            f"{last['f32_s0']:.3f} / {last['bf16_s0']:.3f} / {last['f32_s1']:.3f} |"
        )
    lines += ["", "| match | score | 95% interval | W-D-L |", "|---|---|---|---|"]
    lines += [match_row(root, name) for name in MATCHES]
    lines += [match_row(root, name) for name in DIAGNOSTICS if match_path(root, name).exists()]
    seconds = gaps["iteration_seconds"]
    lines += [
        "",
        "Median seconds per iteration on this CPU: "
        + ", ".join(f"{arm} {s:.1f}" for arm, s in seconds.items()),
    ]
    summary = {
        "gaps": gaps,
        "matches": {
            n: json.loads(match_path(root, n).read_text())
            for n in ALL_MATCHES
            if match_path(root, n).exists()
        },
    }
    (root / "report.json").write_text(json.dumps(summary, indent=1) + "\n")
    return "\n".join(lines)


def paired_verdict(bf16_scores: list[float]) -> dict:
    """Rounds 2 and 3's reading: the mean of the paired bf16 scores, its t interval over the
    pairs, and "equal" (the interval holds 0.5, half-width <= EQUAL_HALF_WIDTH), "worse"
    (below 0.5) or "undecided"."""
    n = len(bf16_scores)
    mean = sum(bf16_scores) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in bf16_scores) / (n - 1))
    half = T_975[n - 1] * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if high < 0.5:
        verdict = "worse"
    elif low <= 0.5 <= high and half <= EQUAL_HALF_WIDTH:
        verdict = "equal"
    else:
        verdict = "undecided"
    return {"mean": mean, "ci95": [low, high], "half_width": half, "verdict": verdict}


def report_round2(root: Path, round_: int = 2) -> str:
    """Round 2's table and verdict over three seed pairs; `round_` 3: over five."""
    paired = PAIRED if round_ == 2 else PAIRED_ROUND3
    names = [*paired, *SEED_PAIRS]
    missing = [name for name in names if not match_path(root, name).exists()]
    if missing:
        raise SystemExit(f"error: not done yet: {', '.join(missing)} (run `all --round {round_}`)")
    scores = {name: json.loads(match_path(root, name).read_text()) for name in names}
    lines = ["| match | score | 95% interval over games |", "|---|---|---|"]
    for name in names:
        model, opponent = ALL_MATCHES[name]
        low, high = scores[name]["score_ci95"]
        score = scores[name]["score"]
        lines.append(f"| {model} vs {opponent} | {score:.3f} | [{low:.3f}, {high:.3f}] |")
    verdict = paired_verdict([scores[name]["score"] for name in paired])
    low, high = verdict["ci95"]
    lines += [
        "",
        f"bf16 against float32, paired by seed (n = {len(paired)}): mean {verdict['mean']:.3f}, "
        f"95% interval over the pairs [{low:.3f}, {high:.3f}]: **{verdict['verdict']}**",
    ]
    (root / f"report_round{round_}.json").write_text(
        json.dumps({"matches": scores, "paired": verdict}, indent=1) + "\n"
    )
    return "\n".join(lines)


def status(root: Path) -> str:
    lines = []
    for arm in ALL_ARMS:
        rows = records(root, arm)
        done = int(rows[-1]["iteration"]) if rows else 0
        lines.append(f"{arm}: {done} of {ITERATIONS} iterations")
    for name in ALL_MATCHES:
        lines.append(f"{name}: {'played' if match_path(root, name).exists() else 'not played'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python experiments/precision/compare.py",
        description="bfloat16 against float32 compute at gardner:cpu, trained the same way, "
        "with a second float32 seed as the noise yardstick (issue 50 item 1).",
    )
    parser.add_argument("action", choices=("train", "match", "all", "report", "status"))
    parser.add_argument("name", nargs="?", help=f"train: one of {', '.join(ALL_ARMS)}; "
                        f"match: one of {', '.join(ALL_MATCHES)}")  # fmt: skip
    parser.add_argument("--round", type=int, choices=(1, 2, 3), default=1,
                        help="all, report: round 1, 2 or 3 (more seeds)")  # fmt: skip
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the runs' folder")
    args = parser.parse_args(argv)
    choices = {"train": ALL_ARMS, "match": ALL_MATCHES}.get(args.action)
    if choices is not None and args.name not in choices:
        parser.error(f"{args.action} takes one of {', '.join(choices)}, got {args.name!r}")
    if choices is None and args.name is not None:
        parser.error(f"{args.action} takes no name, got {args.name!r}")
    sys.path.insert(0, str(ROOT))
    args.root.mkdir(parents=True, exist_ok=True)
    if args.action == "train":
        train(args.root, args.name)
    elif args.action == "match":
        print(json.dumps(match(args.root, args.name)))
    elif args.action == "all":
        arms, matches = {
            1: (ARMS, MATCHES),
            2: ({**ARMS, **ROUND2_ARMS}, ROUND2_MATCHES),
            3: (ALL_ARMS, {**ROUND2_MATCHES, **ROUND3_MATCHES}),
        }[args.round]
        for arm in arms:
            train(args.root, arm)
        for name in matches:
            match(args.root, name)
        print(report(args.root) if args.round == 1 else report_round2(args.root, args.round))
    elif args.action == "report":
        print(report(args.root) if args.round == 1 else report_round2(args.root, args.round))
    else:
        print(status(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
