"""The adaptation experiment: which starting point adapts fastest to a held-out variant?

    python experiments/adaptation/run.py --preset quick --workdir runs/adaptation_quick
    python experiments/adaptation/run.py --preset full --workdir runs/adaptation_full \\
        [--gardner_from runs/gardner_cpu] [--variants dark,atomic]

For every held-out variant (default dark, atomic, rifle, extinction) four starting points are
adapted with the same AlphaZero settings (the `adapt` section of configs/joat.py:<preset>),
for the same number of iterations, and evaluated after 0, 1, 2 and 5 of them:

  scratch   a freshly initialised network
  gardner   AlphaZero on Gardner only (trained here at the meta runs' self-play budget, or a
            checkpoint given with --gardner_from)
  joint     meta-training with k = 1 (joint multi-task training; `updates_per_iteration` = k
            so it takes as many gradient steps as JOAT)
  joat      meta-training with k inner steps and eps = 1 (JOAT averaging)

The joint and JOAT runs are meta-trained ONCE with all held-out variants left out together
(`holdout_mode=all`, cheaper: two meta-training runs instead of 2 x 4); they see gardner,
baby, mallet and bichromatic only. `--holdout_mode each` trains one pair per held-out variant
(leave-one-out, 6 training variants each). All pretraining runs (gardner, joint, JOAT) play the
same number of self-play frames. With a reference budget (full preset) a frozen reference
model is trained from scratch on each held-out variant and every adapted model also plays it.

Stages are resumable: every stage keeps its own workdir under --workdir (pretrain/*,
reference/*, adapt/<variant>/<start>/seed<k>), finished ones are skipped, unfinished training
resumes from its checkpoints, and compiled programs are kept in a persistent JAX compilation
cache (<workdir>/jax_cache). The summary (`results.json`, `results.md`, `plots/*.png`) is
rewritten after every adaptation run, so a partial run already has a partial table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JOAT_CONFIG = ROOT / "configs" / "joat.py"
if str(ROOT) not in sys.path:  # `from configs import joat`, `experiments.lab`
    sys.path.insert(0, str(ROOT))
from experiments.lab import stats  # noqa: E402

HELD_OUT = ("dark", "atomic", "rifle", "extinction")
STARTS = ("scratch", "gardner", "joint", "joat")


@dataclasses.dataclass(frozen=True)
class Preset:
    """What a preset runs (see the README for the measured cost)."""

    joat_preset: str  # configs/joat.py preset: network, self-play, learner, adapt settings
    meta_iterations: int  # outer iterations of the joint and JOAT runs
    adapt_iterations: int
    eval_at: tuple[int, ...]
    seeds: tuple[int, ...]  # adaptation seeds (pretraining: seed 0)
    num_games: int  # per match, colour-balanced
    num_simulations: int  # evaluation search
    max_plies: int  # evaluation ply cap (0: the rules' 256)
    opponents: tuple[str, ...]
    reference_iterations: int  # 0: no frozen reference
    thresholds: tuple[float, ...] = (0.5, 0.8)
    opening_plies: int = 4  # random plies opening the games against the reference


PRESETS = {
    "quick": Preset(
        joat_preset="quick",
        meta_iterations=40,
        adapt_iterations=5,
        eval_at=(0, 1, 2, 5),
        seeds=(0, 1),
        num_games=128,
        num_simulations=8,
        max_plies=100,
        opponents=("greedy",),  # the measured run also played random (see the README)
        reference_iterations=20,
    ),
    "full": Preset(
        joat_preset="cpu",
        meta_iterations=150,
        adapt_iterations=5,
        eval_at=(0, 1, 2, 5),
        seeds=(0, 1, 2),
        num_games=256,
        num_simulations=16,
        max_plies=0,
        opponents=("greedy", "random"),
        reference_iterations=50,
    ),
    "smoke": Preset(
        joat_preset="smoke",
        meta_iterations=2,
        adapt_iterations=1,
        eval_at=(0, 1),
        seeds=(0,),
        num_games=4,
        num_simulations=0,
        max_plies=16,
        opponents=("greedy",),
        reference_iterations=1,
    ),
}


def load_joat_config(preset: str):
    from configs import joat

    return joat.get_config(preset)


class Log:
    """Prints to stdout and appends to <workdir>/run.log, with wall-clock stamps."""

    def __init__(self, workdir: Path):
        self.path = workdir / "run.log"
        self.start = time.time()

    def __call__(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} +{(time.time() - self.start) / 60:.1f} min] {text}"
        print(line, flush=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def write(self, text: str) -> None:  # a stream for the training loops' progress lines
        if not text.strip():
            return  # print() sends the line and its newline separately
        text = text if text.endswith("\n") else text + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
        sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _done(stage_dir: Path) -> dict | None:
    path = stage_dir / "stage.json"
    if path.exists():
        return json.loads(path.read_text())
    return None


def _mark_done(stage_dir: Path, info: dict) -> None:
    stage_dir.mkdir(parents=True, exist_ok=True)
    tmp = stage_dir / "stage.json.tmp"
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, stage_dir / "stage.json")


# ---------------------------------------------------------------------------------------------
# Stages


def meta_config(preset: Preset, holdout: tuple[str, ...], joint: bool):
    """The joint (k = 1) or JOAT meta-training config of the preset."""
    config = load_joat_config(preset.joat_preset)
    config.holdout = ",".join(holdout)
    config.num_iterations = preset.meta_iterations
    config.eval.every = 0
    inner_steps = int(config.meta.inner_steps)
    if joint:  # as many gradient steps per self-play batch as JOAT, as joint steps
        config.meta.inner_steps = 1
        config.meta.updates_per_iteration = inner_steps * int(config.meta.updates_per_iteration)
    return config


def meta_frames(config) -> int:
    return (
        int(config.num_iterations)
        * int(config.meta.num_tasks)
        * int(config.meta.games_per_task)
        * int(config.selfplay.num_plies)
    )


def run_meta(workdir: Path, preset: Preset, holdout, joint: bool, log) -> dict:
    from mmc_jax import train
    from mmc_jax.algorithms import meta

    name = "joint" if joint else "joat"
    tag = "all" if len(holdout) > 1 else holdout[0]
    stage = workdir / "pretrain" / f"{name}_{tag}"
    info = _done(stage)
    if info:
        return info
    config = meta_config(preset, holdout, joint)
    log(f"stage pretrain/{stage.name}: {name} meta-training, held out {','.join(holdout)}")
    started = time.time()
    result = train.train_to_end(config, stage, stream=log)
    info = {
        "path": str(stage),
        "frames": int(result["frames"]),
        "seconds": time.time() - started,
        "iterations": int(result["iteration"]),
        "inner_steps": int(config.meta.inner_steps),
        "updates_per_iteration": int(config.meta.updates_per_iteration),
        "training_variants": list(meta.prepare_meta_config(config).variants),
    }
    _mark_done(stage, info)
    log(f"stage pretrain/{stage.name} done: {info['frames']} frames, {info['seconds']:.0f} s")
    return info


def single_variant_config(preset: Preset, variant: str, frames: int, seed: int = 0):
    """AlphaZero on one variant with the preset's adaptation settings, for about `frames`."""
    from mmc_jax import adapt
    from mmc_jax.algorithms import alphazero

    joat = load_joat_config(preset.joat_preset)
    per_iteration = int(joat.adapt.selfplay.batch_size) * int(joat.adapt.selfplay.num_plies)
    iterations = max(1, math.ceil(frames / per_iteration))
    config = adapt.adaptation_config(
        variant, iterations, joat.network, config=joat, init_label="scratch", seed=seed
    )
    return alphazero.prepare_config(config)


def run_gardner(workdir: Path, preset: Preset, frames: int, gardner_from: str | None, log):
    from mmc_jax import train
    from mmc_jax.infra import checkpoint

    if gardner_from:
        meta = checkpoint.load_metadata(gardner_from)
        return {
            "path": os.path.abspath(gardner_from),
            "frames": int((meta.get("extra") or {}).get("frames", -1)),
            "given": True,
        }
    stage = workdir / "pretrain" / "gardner"
    info = _done(stage)
    if info:
        return info
    config = single_variant_config(preset, "gardner", frames)
    log(f"stage pretrain/gardner: {config.num_iterations} AlphaZero iterations on gardner")
    started = time.time()
    result = train.train_to_end(config, stage, stream=log)
    info = {"path": str(stage), "frames": int(result["frames"]), "seconds": time.time() - started}
    _mark_done(stage, info)
    log(f"stage pretrain/gardner done: {info['frames']} frames, {info['seconds']:.0f} s")
    return info


def run_reference(workdir: Path, preset: Preset, variant: str, log) -> dict | None:
    from mmc_jax import train

    if not preset.reference_iterations:
        return None
    stage = workdir / "reference" / variant
    info = _done(stage)
    if info:
        return info
    joat = load_joat_config(preset.joat_preset)
    per_iteration = int(joat.adapt.selfplay.batch_size) * int(joat.adapt.selfplay.num_plies)
    config = single_variant_config(
        preset, variant, preset.reference_iterations * per_iteration, seed=1000
    )
    log(f"stage reference/{variant}: {config.num_iterations} iterations from scratch")
    started = time.time()
    result = train.train_to_end(config, stage, stream=log)
    info = {"path": str(stage), "frames": int(result["frames"]), "seconds": time.time() - started}
    _mark_done(stage, info)
    return info


def _current(info: dict | None, preset: Preset) -> dict | None:
    """An adaptation stage's record if it was run with this preset's evaluation settings (and
    at least its opponents)."""
    if not info:
        return None
    settings = info["results"]["settings"]
    keys = ("num_games", "num_simulations", "max_plies", "opening_plies")
    same = all(settings.get(k) == getattr(preset, k) for k in keys)
    same = same and set(preset.opponents) <= set(settings["opponents"])
    return info if same and info.get("eval_at") == list(preset.eval_at) else None


def run_adapt(
    workdir: Path, preset: Preset, variant: str, start: str, init: str, seed: int, reference, log
) -> dict:
    from mmc_jax import adapt

    stage = workdir / "adapt" / variant / start / f"seed{seed}"
    info = _current(_done(stage), preset)
    if info:
        return info
    if stage.exists():  # another preset's settings: keep the old run aside, start afresh
        stale = stage.with_name(f"{stage.name}.stale-{int(time.time())}")
        os.replace(stage, stale)
        log(f"adapt/{variant}/{start}/{stage.name}: settings changed, old run moved to {stale}")
    joat = load_joat_config(preset.joat_preset)
    log(f"stage adapt/{variant}/{start}/seed{seed}: from {init}")
    started = time.time()
    joat.adapt.eval.opponents = tuple(preset.opponents)
    joat.adapt.eval.opening_plies = preset.opening_plies
    results = adapt.run_adaptation(
        variant,
        init,
        stage,
        iterations=preset.adapt_iterations,
        config=joat,
        eval_at=list(preset.eval_at),
        num_games=preset.num_games,
        num_simulations=preset.num_simulations,
        max_plies=preset.max_plies,
        reference=reference,
        head_to_head=False,
        seed=seed,
        stream=log,
    )
    info = {
        "path": str(stage),
        "seconds": time.time() - started,
        "eval_at": list(preset.eval_at),
        "results": results,
    }
    _mark_done(stage, info)
    log(f"stage adapt/{variant}/{start}/seed{seed} done in {info['seconds']:.0f} s")
    return info


# ---------------------------------------------------------------------------------------------
# Summary


def pooled(matches: list[dict]) -> dict | None:
    """Score and 95% CI of several matches pooled game by game (the normal interval on the
    per-game scores 1 / 0.5 / 0; the Wilson interval when every game had the same result: the
    rule of `evaluate`'s `score_ci95`)."""
    if not matches:
        return None
    wins = sum(m["wins"] for m in matches)
    draws = sum(m["draws"] for m in matches)
    losses = sum(m["losses"] for m in matches)
    n = wins + draws + losses
    score = (wins + 0.5 * draws) / n
    if n < 2 or sum(1 for count in (wins, draws, losses) if count) == 1:
        low, high = stats.wilson_interval(score, n)
    else:
        low, high = stats.normal_interval([1.0] * wins + [0.5] * draws + [0.0] * losses)
    return {
        "score": score,
        "ci95": [low, high],
        "games": n,
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "seeds": len(matches),
    }


def summarise(workdir: Path, preset: Preset, variants, starts, pretrain: dict) -> dict:
    """Collects every finished adaptation into `results.json`, `results.md` and plots."""
    rows = []
    for variant in variants:
        for start in starts:
            runs = []
            for seed in preset.seeds:
                stage = workdir / "adapt" / variant / start / f"seed{seed}"
                info = _current(_done(stage), preset)
                if info:
                    runs.append(info["results"])
            if not runs:
                continue
            points = {}
            for iteration in preset.eval_at:
                per_opponent = {}
                frames = None
                for results in runs:
                    for point in results["points"]:
                        if point["iteration"] != iteration:
                            continue
                        frames = point["frames"]
                        for opponent, match in point["matches"].items():
                            per_opponent.setdefault(opponent, []).append(match)
                points[iteration] = {
                    "frames": frames,
                    **{o: pooled(ms) for o, ms in per_opponent.items()},
                }
            to_threshold = {}
            for threshold in preset.thresholds:
                reached = [
                    points[i]["frames"]
                    for i in preset.eval_at
                    if points[i].get("greedy") and points[i]["greedy"]["score"] >= threshold
                ]
                to_threshold[str(threshold)] = reached[0] if reached else None
            rows.append(
                {
                    "variant": variant,
                    "start": start,
                    "seeds": len(runs),
                    "points": points,
                    "frames_to_threshold": to_threshold,
                }
            )
    summary = {
        "preset": dataclasses.asdict(preset),
        "pretrain": pretrain,
        "rows": rows,
        "max_adaptation_frames": max(
            (p["frames"] or 0 for r in rows for p in r["points"].values()), default=0
        ),
    }
    (workdir / "results.json").write_text(json.dumps(summary, indent=1))
    (workdir / "results.md").write_text(markdown(summary))
    try:
        plot(summary, workdir / "plots")
    except Exception as error:  # a plot must never stop the experiment
        print(f"plotting failed: {error!r}", file=sys.stderr)
    return summary


def _cell(entry: dict | None) -> str:
    if not entry:
        return "-"
    low, high = entry["ci95"]
    return f"{entry['score']:.2f} [{low:.2f}, {high:.2f}]"


def markdown(summary: dict) -> str:
    preset = summary["preset"]
    eval_at = preset["eval_at"]
    lines = [
        f"Score (W + D/2) against greedy after 0, ... adaptation iterations, 95% CI; "
        f"{preset['num_games']} colour-balanced games per match and seed, "
        f"{preset['num_simulations']} evaluation simulations, ply cap "
        f"{preset['max_plies'] or 256}, seeds {list(preset['seeds'])}; games against the "
        f"reference open with {preset['opening_plies']} random plies (paired across colours).",
        "",
        "| variant | start | "
        + " | ".join(f"it {i}" for i in eval_at)
        + " | "
        + " | ".join(f"frames to {t}" for t in preset["thresholds"])
        + " |",
        "|---|---|" + "---:|" * (len(eval_at) + len(preset["thresholds"])),
    ]
    max_frames = summary["max_adaptation_frames"]
    for row in summary["rows"]:
        cells = [_cell(row["points"][i].get("greedy")) for i in eval_at]
        for threshold in preset["thresholds"]:
            frames = row["frames_to_threshold"][str(threshold)]
            cells.append(str(frames) if frames is not None else f"> {max_frames}")
        lines.append(f"| {row['variant']} | {row['start']} | " + " | ".join(cells) + " |")
    others = sorted(
        {o for r in summary["rows"] for p in r["points"].values() for o in p} - {"frames", "greedy"}
    )
    for opponent in others:
        lines += [
            "",
            f"Score against {opponent}:",
            "",
            "| variant | start | " + " | ".join(f"it {i}" for i in eval_at) + " |",
            "|---|---|" + "---:|" * len(eval_at),
        ]
        for row in summary["rows"]:
            cells = [_cell(row["points"][i].get(opponent)) for i in eval_at]
            lines.append(f"| {row['variant']} | {row['start']} | " + " | ".join(cells) + " |")
    lines += ["", "Pretraining:", ""]
    for name, info in summary["pretrain"].items():
        if info:
            seconds = info.get("seconds")
            took = f", {seconds / 60:.1f} min" if seconds else ""
            lines.append(f"- {name}: {info.get('frames')} self-play frames{took} ({info['path']})")
    return "\n".join(lines) + "\n"


def plot(summary: dict, plots_dir: Path) -> None:
    """One panel per variant: score vs greedy over adaptation frames, one line per start."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    variants = list(dict.fromkeys(r["variant"] for r in summary["rows"]))
    if not variants:
        return
    plots_dir.mkdir(parents=True, exist_ok=True)
    for x_key in ("iterations", "frames"):
        figure = Figure(figsize=(4.2 * len(variants), 4.0), dpi=100)
        FigureCanvasAgg(figure)
        axes_list = figure.subplots(1, len(variants), squeeze=False)[0]
        starts = list(dict.fromkeys(r["start"] for r in summary["rows"]))
        for axes, variant in zip(axes_list, variants, strict=True):
            for row in summary["rows"]:
                if row["variant"] != variant:
                    continue
                # A small horizontal offset per start keeps overlapping error bars apart.
                offset = (starts.index(row["start"]) - (len(starts) - 1) / 2) * 0.06
                xs, ys, low, high = [], [], [], []
                for iteration, point in row["points"].items():
                    entry = point.get("greedy")
                    if not entry:
                        continue
                    if x_key == "iterations":
                        xs.append(int(iteration) + offset)
                    else:
                        xs.append(point["frames"] * (1 + offset / 5))
                    ys.append(entry["score"])
                    low.append(entry["score"] - entry["ci95"][0])
                    high.append(entry["ci95"][1] - entry["score"])
                axes.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=row["start"])
            for threshold in summary["preset"]["thresholds"]:
                axes.axhline(threshold, color="grey", linewidth=0.5, linestyle="--")
            axes.set_ylim(-0.02, 1.02)
            axes.set_title(variant)
            axes.set_xlabel(f"adaptation {x_key}")
            axes.grid(alpha=0.3)
        axes_list[0].set_ylabel("score vs greedy")
        axes_list[0].legend(fontsize="small")
        figure.tight_layout()
        figure.savefig(plots_dir / f"adaptation_vs_greedy_by_{x_key}.png")


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python experiments/adaptation/run.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--variants", default=",".join(HELD_OUT), help="held-out variants")
    parser.add_argument("--starts", default=",".join(STARTS), help="start points to compare")
    parser.add_argument("--holdout_mode", choices=("all", "each"), default="all")
    parser.add_argument(
        "--gardner_from",
        default=None,
        help="use this Gardner checkpoint (a run workdir) instead of training one here",
    )
    parser.add_argument("--no_compilation_cache", action="store_true")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from mmc_jax import train

    try:
        return _main(argv)
    except train.Stopped as error:
        # A signal stopped a stage: it is not marked done, and no later stage starts.
        print(f"stopped ({error}): finished stages are kept; rerun the same command", flush=True)
        return 143


def _main(argv=None) -> int:
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log = Log(workdir)

    import jax

    if not args.no_compilation_cache:
        jax.config.update("jax_compilation_cache_dir", str(workdir / "jax_cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    from mmc_jax import rules as R

    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    for variant in variants:
        R.check_variant(variant)
    starts = tuple(s.strip() for s in args.starts.split(",") if s.strip())
    unknown = [s for s in starts if s not in STARTS]
    if unknown:
        raise SystemExit(f"unknown --starts {unknown}; choose from {STARTS}")
    log(
        f"adaptation experiment, preset {args.preset}: variants {variants}, starts {starts}, "
        f"holdout mode {args.holdout_mode}, workdir {workdir}"
    )
    command = " ".join([sys.executable.split("/")[-1], *sys.argv])
    (workdir / "command.txt").write_text(command + "\n")

    holdouts = [variants] if args.holdout_mode == "all" else [(v,) for v in variants]
    pretrain: dict[str, Any] = {}
    meta_runs: dict[tuple[str, str], dict] = {}
    for holdout in holdouts:
        for joint in (True, False):
            name = "joint" if joint else "joat"
            if name not in starts:
                continue
            info = run_meta(workdir, preset, holdout, joint, log)
            tag = "all" if len(holdout) > 1 else holdout[0]
            pretrain[f"{name}_{tag}"] = info
            for variant in holdout:
                meta_runs[(name, variant)] = info
    budget = meta_frames(meta_config(preset, holdouts[0], joint=False))
    if "gardner" in starts:
        pretrain["gardner"] = run_gardner(workdir, preset, budget, args.gardner_from, log)

    for variant in variants:
        reference = run_reference(workdir, preset, variant, log)
        if reference:
            pretrain[f"reference_{variant}"] = reference
        for start in starts:
            if start == "scratch":
                init = "scratch"
            elif start == "gardner":
                init = pretrain["gardner"]["path"]
            else:
                init = meta_runs[(start, variant)]["path"]
            for seed in preset.seeds:
                run_adapt(
                    workdir,
                    preset,
                    variant,
                    start,
                    init,
                    seed,
                    reference["path"] if reference else None,
                    log,
                )
                summarise(workdir, preset, variants, starts, pretrain)
    summary = summarise(workdir, preset, variants, starts, pretrain)
    log("all stages done\n" + markdown(summary))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
