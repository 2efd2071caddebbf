"""The decisive adaptation study: does meta-training make adaptation fast?

    python experiments/adaptation/study.py --preset quick --workdir runs/study_quick   # CPU
    python experiments/adaptation/study.py --preset gpu --workdir runs/study_gpu       # H100

Resumable: every stage writes `<workdir>/<stage>/done.json` and is skipped when it exists; a
re-run continues where the last one stopped (`--budget-minutes` stops cleanly between stages).

Arms, all pretrained for the same self-play frames (iterations x n tasks x G games x plies) and
the same sequential gradient steps (k per iteration):

  joat        Reptile over the rule space (configs/joat.py): per task k steps of the inner
              procedure from phi with a fresh Adam (b1 = 0), phi += eps (mean theta - phi),
              eps annealed linearly from 1 to 0.1
  joint       the same tasks and data, k = 1: one joint step on the mean task gradient, k times
              per iteration, a persistent Adam (multi-task training)
  joat+desc, joint+desc   the same with the rules descriptor as input (rule_planes=descriptor)
  strict      joat without any fog=on task: dark and `dark,capture=atomic` are unseen components
  gardner     AlphaZero on gardner only, n x G games per iteration, k steps of the same size
  scratch     no pretraining

Evaluation on the held-out variants of configs/joat.py (dark, atomic, rifle, extinction and
four composed points, never drawn as training tasks):

  few-shot    the primary diagnostic: a fixed labelled dataset per variant (self-play of a
              reference AlphaZero model trained on that variant from scratch: the search's
              improved policies, game results or bootstrapped values), split into adaptation
              draws and a held-out evaluation set; the policy and value loss on the evaluation
              set after 0, 1, 2, 5 inner procedures (each on a new draw): exactly what Reptile
              optimises, seconds to compute, no game noise.
  games       `mmc_jax.adapt` (the same inner procedure per iteration, on its own self-play)
              after 0 and 1 adaptation iterations against greedy, colour-balanced, the training
              ply cap, fair play under fog (observation-only PIMC).

Outputs: `<workdir>/results.json` (everything, with settings and frames), `results.md` (the
tables) and `fewshot.png`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `from configs import joat`
    sys.path.insert(0, str(ROOT))


@dataclasses.dataclass(frozen=True)
class Preset:
    joat_preset: str  # network size, tasks, games, plies, k
    iterations: int  # pretraining outer iterations (every arm)
    reference_iterations: int  # AlphaZero iterations of each held-out variant's reference
    dataset_draws: int  # self-play draws of the reference per variant (5 adapt + the rest eval)
    games: int  # games per match
    simulations: int  # evaluation search
    arms: tuple[str, ...]
    game_arms: tuple[str, ...]
    variants: int  # how many of the held-out variants (in configs/joat.py order)
    seeds: tuple[int, ...] = (0,)  # pretraining seeds
    adapt_seeds: tuple[int, ...] = (0,)
    adapt_points: tuple[int, ...] = (0, 1)  # games after these adaptation iterations
    # Opponents besides greedy (non-fog variants): the variant's reference with search and as
    # its raw policy (two strengths), Fairy-Stockfish at these nodes where it plays the variant.
    references: bool = False
    engine_nodes: tuple[int, ...] = ()


ALL_ARMS = ("scratch", "gardner", "joint", "joat", "joint+desc", "joat+desc", "strict")
GAME_ARMS = ("scratch", "gardner", "joint", "joat")
PRESETS = {
    "smoke": Preset(
        "smoke", 2, 1, 7, 4, 2, ALL_ARMS, ("scratch", "joat"), 2, adapt_points=(0, 1, 2)
    ),
    "quick": Preset(
        "quick",
        20,
        6,
        8,
        64,
        8,
        ALL_ARMS,
        ("scratch", "joint", "joat"),
        8,
        adapt_points=(0, 1, 2, 5),
    ),
    # The protocol on a CPU in about 4 hours (an estimate from the quick preset's
    # stage times, not a measured run): 3 pretraining seeds x 2 adaptation seeds, 128 games.
    "cpu": Preset(
        "quick",
        20,
        6,
        8,
        128,
        8,
        ("gardner", "joint", "joat"),
        ("scratch", "joint", "joat"),
        8,
        seeds=(0, 1, 2),
        adapt_seeds=(0, 1),
        adapt_points=(0, 1, 2, 5),
    ),
    "gpu": Preset(
        "cpu",
        30,
        10,
        8,
        256,
        16,
        ALL_ARMS,
        GAME_ARMS,
        8,
        seeds=(0, 1, 2),
        adapt_seeds=(0, 1),
        adapt_points=(0, 1, 2, 5),
        references=True,
        engine_nodes=(100,),
    ),
}


class Log:
    def __init__(self, workdir: Path):
        self.path = workdir / "study.log"
        self.started = time.time()

    def __call__(self, line: str) -> None:
        stamp = f"[{(time.time() - self.started) / 60:6.1f} min] "
        print(stamp + line, flush=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(stamp + line + "\n")

    def write(self, text: str) -> None:  # a stream for the run loop's progress lines
        if text.strip():
            self(text.rstrip())

    def flush(self) -> None:
        pass


def _done(stage: Path):
    marker = stage / "done.json"
    return json.loads(marker.read_text()) if marker.exists() else None


def _finish(stage: Path, info: dict) -> dict:
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "done.json").write_text(json.dumps(info, indent=1))
    return info


def joat_config(preset: Preset, seed: int):
    from configs import joat

    config = joat.get_config(preset.joat_preset)
    config.num_iterations = preset.iterations
    config.seed = seed
    config.eval.every = 0
    config.checkpoint.save_replay = False
    config.checkpoint.max_to_keep = 1
    config.checkpoint.every = max(1, preset.iterations // 4)
    return config


def arm_config(preset: Preset, arm: str, seed: int):
    """The pretraining config of `arm` (equal frames and sequential steps)."""
    config = joat_config(preset, seed)
    k = int(config.meta.inner_steps)
    if arm.endswith("+desc"):
        config.network.rule_planes = "descriptor"
    if arm.startswith("joat") or arm == "strict":
        config.meta.outer_lr = 1.0
        config.meta.outer_lr_schedule = "linear"
        config.meta.outer_lr_end = 0.1
    if arm == "strict":
        config.task_space.goal_fogs = tuple(
            g for g in config.task_space.goal_fogs if "/on" not in g
        )
    if arm.startswith("joint"):
        config.meta.inner_steps = 1
        config.meta.fresh_inner_state = False
        config.meta.updates_per_iteration = k
        config.learner.batch_size = int(config.inner.batch_size)
    if arm == "gardner":
        from configs import gardner

        single = gardner.get_config("smoke" if preset.joat_preset == "smoke" else "cpu")
        single.network = config.network.copy_and_resolve_references()
        single.seed = seed
        single.num_iterations = preset.iterations
        single.unlock()
        single.selfplay = config.selfplay.copy_and_resolve_references()
        single.selfplay.unlock()
        single.selfplay.mirror_augment = False
        single.selfplay.batch_size = int(config.meta.num_tasks) * int(config.meta.games_per_task)
        single.learner = config.learner.copy_and_resolve_references()
        single.learner.unlock()
        single.learner.batch_size = int(config.inner.batch_size)
        single.learner.steps_per_iteration = k
        single.replay.iterations = 1
        single.eval.every = 0
        single.checkpoint = config.checkpoint.copy_and_resolve_references()
        return single
    return config


def pretrain(workdir: Path, preset: Preset, arm: str, seed: int, log) -> dict:
    from mmc_jax import train

    stage = workdir / "pretrain" / f"{arm}_s{seed}"
    info = _done(stage)
    if info:
        return info
    config = arm_config(preset, arm, seed)
    log(f"pretrain {arm} seed {seed}: {preset.iterations} iterations")
    started = time.time()
    result = train.train(config, stage, stream=log)
    return _finish(
        stage,
        {
            "path": str(stage),
            "frames": int(result["frames"]),
            "iterations": int(result["iteration"]),
            "seconds": time.time() - started,
        },
    )


def held_out(preset: Preset, only=None) -> tuple[str, ...]:
    """The preset's held-out variants (canonical), or those of them in `only`."""
    from configs import joat
    from mmc_jax import rules as R

    chosen = tuple(R.canonical(v) for v in joat.HELD_OUT[: preset.variants])
    return tuple(v for v in chosen if only is None or v in only)


def _slug(variant: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in variant)


def adapt_config(preset: Preset, variant: str, iterations: int, network, seed: int = 0):
    from mmc_jax import adapt

    joat = joat_config(preset, 0)
    return adapt.adaptation_config(variant, iterations, network, config=joat, seed=seed)


def reference(workdir: Path, preset: Preset, variant: str, log) -> dict:
    """AlphaZero on `variant` from scratch with the adaptation's settings but the ordinary
    learner (persistent Adam over a replay of 4 iterations): the source of the dataset."""
    from mmc_jax import train

    stage = workdir / "reference" / _slug(variant)
    info = _done(stage)
    if info:
        return info
    joat = joat_config(preset, 0)
    config = adapt_config(preset, variant, preset.reference_iterations, joat.network)
    config.learner = joat.learner.copy_and_resolve_references()
    config.learner.unlock()
    config.learner.batch_size = int(joat.inner.batch_size)
    config.learner.steps_per_iteration = 4 * int(joat.inner.steps)
    config.replay.iterations = 4
    config.checkpoint.save_replay = False
    log(f"reference {variant}: {preset.reference_iterations} iterations from scratch")
    result = train.train(config, stage, stream=log)
    return _finish(stage, {"path": str(stage), "frames": int(result["frames"])})


@functools.lru_cache(maxsize=8)
def _draw_fn(network, config, fog: bool):
    """One jitted self-play draw + targets per network and config (variants are data)."""
    import jax

    from mmc_jax import alphazero, selfplay

    def draw(params, rules_b, games, key):
        games, trajectory = alphazero.play_games(network, params, rules_b, games, key, config, fog)
        return games, selfplay.compute_targets(trajectory, bootstrap=True)

    return jax.jit(draw)


@functools.lru_cache(maxsize=8)
def _loss_fn(network, inner):
    """Held-out policy and value loss, jitted once per network and inner config."""
    import jax

    from mmc_jax import learner

    def losses(params, batch):
        _, metrics = learner.loss_fn(params, network, batch, inner)
        return metrics["policy_loss"], metrics["value_loss"]

    return jax.jit(losses)


def dataset(workdir: Path, preset: Preset, variant: str, log) -> Path:
    """`dataset_draws` self-play draws of the reference (its search's targets), saved as npz."""
    import jax
    import ml_collections
    import numpy as np

    from mmc_jax import alphazero, checkpoint
    from mmc_jax import rules as R

    path = workdir / "dataset" / f"{_slug(variant)}.npz"
    if path.exists():
        return path
    reference(workdir, preset, variant, log)
    network, params, saved = checkpoint.load_model(workdir / "reference" / _slug(variant))
    config = ml_collections.FrozenConfigDict(saved)
    fog = alphazero.fair_fog(saved)
    rules_b = R.batch(variant, int(config.selfplay.batch_size))
    games = alphazero.init_games(rules_b, fog)
    draw = _draw_fn(network, config, fog)
    batches = []
    for index in range(preset.dataset_draws):
        games, batch = draw(params, rules_b, games, jax.random.key(10_000 + index))
        batches.append(jax.device_get(batch))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path, **{f: np.stack([getattr(b, f) for b in batches]) for f in batches[0]._fields}
    )
    log(f"dataset {variant}: {preset.dataset_draws} draws of {batches[0].obs.shape[0]} positions")
    return path


@functools.lru_cache(maxsize=1)
def _procedure():
    import jax

    from mmc_jax import learner

    return jax.jit(learner.inner_procedure, static_argnums=(3, 4))


def fewshot(workdir: Path, preset: Preset, arm: str, seed: int, variant: str) -> dict:
    """Held-out loss after 0, 1, 2, 5 inner procedures from the arm's parameters."""
    import jax
    import jax.numpy as jnp
    import ml_collections
    import numpy as np

    from mmc_jax import checkpoint, learner
    from mmc_jax import network as network_lib
    from mmc_jax import rules as R

    data = np.load(dataset(workdir, preset, variant, print))
    draws = [
        learner.Batch(*(jnp.asarray(data[f][i]) for f in learner.Batch._fields))
        for i in range(len(data["obs"]))
    ]
    adapt_draws, eval_draws = draws[:5], draws[5:]
    evaluation = jax.tree.map(lambda *x: jnp.concatenate(x), *eval_draws)
    joat = joat_config(preset, 0)
    inner = ml_collections.FrozenConfigDict(joat.inner)
    if arm == "scratch":
        net_config = ml_collections.FrozenConfigDict(joat.network)
        network = network_lib.make_network(net_config)
        params = network_lib.init_params(network, jax.random.key(seed + 7), R.OBS_SHAPE)
    else:
        network, params, saved = checkpoint.load_model(workdir / "pretrain" / f"{arm}_s{seed}")
        net_config = ml_collections.FrozenConfigDict(saved.network)
    procedure = _procedure()
    losses = _loss_fn(network, inner)
    out = {}
    for steps in range(6):
        if steps in (0, 1, 2, 5):
            policy, value = (float(x) for x in losses(params, evaluation))
            out[str(steps)] = {"policy_loss": policy, "value_loss": value}
        if steps < 5:
            params, _ = procedure(
                params, adapt_draws[steps], jax.random.key(steps), net_config, inner
            )
    return out


def games(workdir: Path, preset: Preset, arm: str, seed: int, variant: str, log) -> dict:
    """{adaptation seed: [{iteration, frames, matches: {opponent: summary}}]} of `arm`'s
    pretraining seed `seed` adapted to `variant` (`mmc_jax.adapt`, resumable per stage)."""
    from mmc_jax import adapt
    from mmc_jax import rules as R

    init = "scratch" if arm == "scratch" else str(workdir / "pretrain" / f"{arm}_s{seed}")
    out = {}
    for adapt_seed in preset.adapt_seeds:
        stage = workdir / "games" / f"{arm}_s{seed}_a{adapt_seed}_{_slug(variant)}"
        joat = joat_config(preset, seed)
        joat.adapt.eval.opponents = ("greedy",)
        joat.adapt.eval.max_plies = 0  # the training ply cap
        references = preset.references and not R.parse(variant).fog == "on"
        results = adapt.run_adaptation(
            variant,
            init,
            stage,
            iterations=max(preset.adapt_points),
            eval_at=list(preset.adapt_points),
            config=joat,
            num_games=preset.games,
            num_simulations=preset.simulations,
            reference=str(workdir / "reference" / _slug(variant)) if references else None,
            reference_raw=references,
            engine_nodes=preset.engine_nodes,
            head_to_head=False,
            seed=adapt_seed,
            init_seed=seed,  # scratch: one initialisation per "pretraining" seed
            stream=None,
        )
        out[str(adapt_seed)] = [
            {"iteration": p["iteration"], "frames": p["frames"], "matches": p["matches"]}
            for p in results["points"]
        ]
        log(
            f"games {arm} s{seed} a{adapt_seed} {variant}: "
            + ", ".join(
                f"{p['iteration']}: {p['matches']['greedy']['score']:.2f}"
                for p in out[str(adapt_seed)]
            )
        )
    return out


def game_rows(results: dict) -> list[dict]:
    """One row per (variant, arm, seed, adaptation seed, iteration, opponent) of the games."""
    rows = []
    for variant, arms in results.get("games", {}).items():
        for arm, by_seed in arms.items():
            for seed, by_adapt in by_seed.items():
                for adapt_seed, points in by_adapt.items():
                    for p in points:
                        # The first quick run stored the greedy match's fields in the point.
                        for opponent, m in p.get("matches", {"greedy": p}).items():
                            rows.append(
                                dict(
                                    variant=variant,
                                    arm=arm,
                                    cell=(variant, seed, adapt_seed),
                                    iteration=p["iteration"],
                                    frames=p["frames"],
                                    opponent=opponent,
                                    score=m["score"],
                                    games=m["num_games"],
                                )
                            )
    return rows


def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of Student's t 95% interval over independent cells (0: one)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, float(stats.t.ppf(0.975, n - 1)) * math.sqrt(var / n)


def paired_differences(rows: list[dict], a: str, b: str, opponent: str = "greedy") -> dict:
    """{iteration: (mean of a - b, 95% half-width, cells)} over the (variant, seed, adaptation
    seed) cells both arms played (the same evaluation keys: paired games)."""
    scores: dict = {}
    for r in rows:
        if r["opponent"] == opponent and r["arm"] in (a, b):
            scores.setdefault((r["iteration"], r["cell"]), {})[r["arm"]] = r["score"]
    by_iteration: dict = {}
    for (iteration, _), pair in scores.items():
        if len(pair) == 2:
            by_iteration.setdefault(iteration, []).append(pair[a] - pair[b])
    return {i: (*_mean_ci(d), len(d)) for i, d in sorted(by_iteration.items())}


def frames_to(rows: list[dict], target: float = 0.8) -> dict:
    """{(variant, arm): adaptation frames of the first evaluated iteration whose score against
    greedy (mean over seeds) reaches `target`, or None}."""
    means: dict = {}
    for r in rows:
        if r["opponent"] == "greedy":
            key = (r["variant"], r["arm"], r["iteration"])
            means.setdefault(key, ([], r["frames"]))[0].append(r["score"])
    out: dict = {}
    for (variant, arm, _iteration), (scores, frames) in sorted(means.items()):
        reached = sum(scores) / len(scores) >= target
        if (variant, arm) not in out:
            out[(variant, arm)] = None
        if reached and out[(variant, arm)] is None:
            out[(variant, arm)] = frames
    return out


def games_report(results: dict) -> list[str]:
    rows = game_rows(results)
    if not rows:
        return []
    iterations = sorted({r["iteration"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    pairs_per_cell = {}
    for r in rows:
        pairs_per_cell.setdefault((r["variant"], r["arm"]), set()).add(r["cell"])
    counts = sorted({len(c) for c in pairs_per_cell.values()})
    n_seeds = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    head = "| " + " | ".join(f"it {i}" for i in iterations) + " |"
    rule = "|" + "---:|" * len(iterations)
    lines = [
        "",
        f"## Score against greedy after adaptation iterations ({n_seeds} (pretraining, "
        "adaptation) seed pair(s) per cell; mean, and +- the t 95% half-width over them)",
        "",
        "| variant | arm " + head,
        "|---|---" + rule,
    ]

    def cell_text(values):
        mean, half = _mean_ci(values)
        return f"{mean:.2f}" + (f" +- {half:.2f}" if half else "")

    for variant in variants:
        for arm in arms:
            texts = []
            for i in iterations:
                values = [
                    r["score"]
                    for r in rows
                    if r["opponent"] == "greedy"
                    and r["variant"] == variant
                    and r["arm"] == arm
                    and r["iteration"] == i
                ]
                texts.append(cell_text(values) if values else "-")
            lines.append(f"| `{variant}` | {arm} | " + " | ".join(texts) + " |")
    opponents = list(dict.fromkeys(r["opponent"] for r in rows))
    for opponent in opponents:
        lines += [
            "",
            f"### Mean over the variants against {opponent} (+- 95% over variant x seed cells)",
            "",
            "| arm " + head,
            "|---" + rule,
        ]
        for arm in arms:
            texts = []
            for i in iterations:
                values = [
                    r["score"]
                    for r in rows
                    if r["opponent"] == opponent and r["arm"] == arm and r["iteration"] == i
                ]
                texts.append(cell_text(values) + f" ({len(values)})" if values else "-")
            lines.append(f"| {arm} | " + " | ".join(texts) + " |")
    pairs = [
        (a, b)
        for a, b in (
            ("joat", "joint"),
            ("joat", "scratch"),
            ("joint", "scratch"),
            ("joat", "gardner"),
            ("joat+desc", "joint+desc"),
        )
        if a in arms and b in arms
    ]
    if pairs:
        lines += [
            "",
            "### Paired differences against greedy (a - b over the same variant x seed cells, "
            "mean +- 95%, cells)",
            "",
            "| a - b " + head,
            "|---" + rule,
        ]
        for a, b in pairs:
            diffs = paired_differences(rows, a, b)
            texts = [
                f"{diffs[i][0]:+.3f} +- {diffs[i][1]:.3f} ({diffs[i][2]})" if i in diffs else "-"
                for i in iterations
            ]
            lines.append(f"| {a} - {b} | " + " | ".join(texts) + " |")
    reached = frames_to(rows)
    lines += [
        "",
        "### Adaptation frames to reach 0.8 against greedy (mean over seeds; - : not within "
        f"{max(iterations)} iterations)",
        "",
        "| variant | " + " | ".join(arms) + " |",
        "|---|" + "---:|" * len(arms),
    ]
    for variant in variants:
        texts = []
        for arm in arms:
            frames = reached.get((variant, arm))
            texts.append("-" if frames is None else str(frames))
        lines.append(f"| `{variant}` | " + " | ".join(texts) + " |")
    return lines


def report(workdir: Path, results: dict) -> str:
    lines = [f"# Adaptation study ({results['preset']})", ""]
    lines.append("## Few-shot loss on held-out data (policy / value), after j inner procedures")
    lines.append("")
    lines.append("| variant | arm | j=0 | j=1 | j=2 | j=5 |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for variant, arms in results["fewshot"].items():
        for arm, by_seed in arms.items():
            cells = []
            for j in ("0", "1", "2", "5"):
                pol = [s[j]["policy_loss"] for s in by_seed.values()]
                val = [s[j]["value_loss"] for s in by_seed.values()]
                cells.append(f"{sum(pol) / len(pol):.3f} / {sum(val) / len(val):.3f}")
            lines.append(f"| `{variant}` | {arm} | " + " | ".join(cells) + " |")
    lines += games_report(results)
    text = "\n".join(lines) + "\n"
    (workdir / "results.md").write_text(text)
    return text


def _panels(path: Path, variants: list[str], draw, xlabel: str, ylabel: str) -> None:
    """One panel per variant (4 to a row), `draw(axes, variant)` its lines, saved at `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not variants:
        return
    columns = min(4, len(variants))
    rows = math.ceil(len(variants) / columns)
    figure = Figure(figsize=(4 * columns, 3.2 * rows), dpi=90)
    FigureCanvasAgg(figure)
    for index, variant in enumerate(variants):
        axes = figure.add_subplot(rows, columns, index + 1)
        draw(axes, variant)
        axes.set_title(variant, fontsize=8)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        if index == 0:
            axes.legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(path)


def plot(workdir: Path, results: dict) -> None:
    """`fewshot.png` (held-out loss over inner procedures) and `games.png`."""

    def fewshot_lines(axes, variant):
        for arm, by_seed in results["fewshot"][variant].items():
            xs = [0, 1, 2, 5]
            ys = [
                sum(s[str(j)]["policy_loss"] + s[str(j)]["value_loss"] for s in by_seed.values())
                / len(by_seed)
                for j in xs
            ]
            axes.plot(xs, ys, marker="o", label=arm)

    _panels(
        workdir / "fewshot.png",
        list(results["fewshot"]),
        fewshot_lines,
        "inner procedures",
        "held-out loss (policy + value)",
    )
    plot_games(workdir, results)


def plot_games(workdir: Path, results: dict) -> None:
    """`games.png`: score against greedy over adaptation frames, one panel per variant, a line
    per arm (mean over seed pairs)."""
    rows = [r for r in game_rows(results) if r["opponent"] == "greedy"]

    def score_lines(axes, variant):
        for arm in dict.fromkeys(r["arm"] for r in rows):
            points: dict = {}
            for r in rows:
                if r["variant"] == variant and r["arm"] == arm:
                    points.setdefault(r["frames"], []).append(r["score"])
            xs = sorted(points)
            axes.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], marker="o", label=arm)
        axes.axhline(0.8, color="grey", linewidth=0.6, linestyle="--")
        axes.set_ylim(-0.02, 1.02)

    variants = list(dict.fromkeys(r["variant"] for r in rows))
    _panels(workdir / "games.png", variants, score_lines, "adaptation frames", "score vs greedy")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--budget-minutes", type=float, default=0.0, help="stop between stages")
    parser.add_argument(
        "--variants", nargs="*", default=None, help="a subset of the held-out variants (specs)"
    )
    parser.add_argument(
        "--only",
        choices=("all", "pretrain", "fewshot", "games"),
        default="all",
        help="run only these stages (the others are read from the workdir when done)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="pretraining seeds (the preset's)")
    parser.add_argument("--adapt-seeds", type=int, nargs="+", help="adaptation seeds")
    parser.add_argument(
        "--references",
        action="store_true",
        help="also play each variant's reference, with search and as its raw policy",
    )
    parser.add_argument(
        "--engine-nodes", type=int, nargs="+", help="also play Fairy-Stockfish at these nodes"
    )
    args = parser.parse_args(argv)
    from mmc_jax import startup

    startup.start()  # a resumed study loads what it compiled before
    preset = PRESETS[args.preset]
    overrides = {
        "seeds": tuple(args.seeds) if args.seeds else None,
        "adapt_seeds": tuple(args.adapt_seeds) if args.adapt_seeds else None,
        "references": True if args.references else None,
        "engine_nodes": tuple(args.engine_nodes) if args.engine_nodes else None,
    }
    if any(n <= 0 for n in args.engine_nodes or ()):
        parser.error("--engine-nodes must be positive")
    preset = dataclasses.replace(preset, **{k: v for k, v in overrides.items() if v is not None})
    only_variants = None
    if args.variants:
        from mmc_jax import rules as R

        try:
            only_variants = {R.canonical(v) for v in args.variants}
        except ValueError as error:
            parser.error(f"--variants: {error}")
        unknown = only_variants - set(held_out(preset))
        if unknown:
            parser.error(f"--variants {sorted(unknown)} not among the held-out {held_out(preset)}")
    workdir = Path(args.workdir or f"runs/study_{args.preset}")
    workdir.mkdir(parents=True, exist_ok=True)
    log = Log(workdir)
    started = time.time()

    def out_of_time() -> bool:
        return bool(args.budget_minutes) and time.time() - started > 60 * args.budget_minutes

    results_path = workdir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    results.update(preset=args.preset, settings=dataclasses.asdict(preset))
    results.setdefault("pretrain", {})
    results.setdefault("fewshot", {})
    results.setdefault("games", {})

    def save():
        results_path.write_text(json.dumps(results, indent=1))
        report(workdir, results)
        plot(workdir, results)

    stages = {"pretrain", "fewshot", "games"} if args.only == "all" else {args.only}
    for seed in preset.seeds:
        for arm in preset.arms:
            if (
                arm != "scratch"
                and not out_of_time()
                and ("pretrain" in stages or _done(workdir / "pretrain" / f"{arm}_s{seed}"))
            ):
                results["pretrain"][f"{arm}_s{seed}"] = pretrain(workdir, preset, arm, seed, log)
                save()
    for variant in held_out(preset, only_variants):
        if out_of_time() or "fewshot" not in stages:
            break
        dataset(workdir, preset, variant, log)
        for arm in preset.arms:
            for seed in preset.seeds:
                if arm != "scratch" and f"{arm}_s{seed}" not in results["pretrain"]:
                    continue
                cell = results["fewshot"].setdefault(variant, {}).setdefault(arm, {})
                if str(seed) not in cell:
                    cell[str(seed)] = fewshot(workdir, preset, arm, seed, variant)
        save()
    for variant in held_out(preset, only_variants):
        for arm in preset.game_arms:
            for seed in preset.seeds:
                if out_of_time() or "games" not in stages:
                    break
                if arm != "scratch" and f"{arm}_s{seed}" not in results["pretrain"]:
                    continue
                cell = results["games"].setdefault(variant, {}).setdefault(arm, {})
                # Adaptation seeds run before (e.g. with --adapt-seeds 0 first) are kept; the
                # missing ones are added (a finished adaptation only reloads its results).
                if not {str(a) for a in preset.adapt_seeds} <= set(cell.get(str(seed), {})):
                    cell[str(seed)] = {
                        **cell.get(str(seed), {}),
                        **games(workdir, preset, arm, seed, variant, log),
                    }
                    save()
    save()
    print(report(workdir, results))
    log(
        f"done in {(time.time() - started) / 60:.1f} min"
        + (" (budget reached)" if out_of_time() else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
