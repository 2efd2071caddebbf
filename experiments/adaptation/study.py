"""The decisive adaptation study: does pretraining over the rule space make a never-played
variant fast to learn, and does Reptile (JOAT) add to joint training?

    python experiments/adaptation/study.py --preset cpu --budget-minutes 120    # one sitting
    python experiments/adaptation/study.py --preset cpu --status                # what is left
    python experiments/adaptation/study.py --preset gpu --only pretrain --pack out/pretrain.tgz
    python experiments/adaptation/study.py --preset cpu --unpack out/pretrain.tgz
    python experiments/adaptation/study.py --preset smoke --workdir /tmp/study_smoke   # plumbing

The same command every sitting: every unit of work (a reference run, a pretraining run, a
calibration, an adaptation cell) writes its small result into the artefact folder
(`experiments/adaptation/decisive_<preset>/`, committed as units finish: exported parameters of
2x32 networks, about 250 KB each, and one JSON per unit), and a unit whose result is there is
skipped. Heavy state (checkpoints with replay rings) stays in `--workdir` (runs/study_<preset>)
and makes an interrupted training run resume bit-exactly on the same machine; on a fresh
machine an unfinished unit starts again, a finished one is read from the artefacts.

The protocol (pre-registered in experiments/adaptation/README.md):

  yardstick   per held-out variant, AlphaZero from scratch with the best single-variant recipe
              (configs/gardner.py:cpu, the preset's `reference_preset`), a checkpoint after
              each of `reference_iterations` (4k, 8k, 16k, 33k, 66k frames on the CPU
              preset): the scratch curve. The mid-strength reference is the weakest of them
              against which a random network scores <= 0.25; every curve point is scored
              against it. Matches are the yardstick's (Amendment 2, 2026-11-26): `games`
              games of raw policies (`simulations` 0) that sample every move from their own
              softmax after a paired `opening_plies`-ply policy opening, so the score sees
              the network, not the search. Scratch-equivalent frames (SEF) of a score:
              the frames at which the curve (its running maximum, linear between points)
              first reaches it; speed-up = SEF / adaptation frames.
  arms        {rules hidden, rules descriptor} x {joint (k = 1), JOAT (Reptile)}, pretrained
              over the rule-space tasks of configs/joat.py (the held-out variants never drawn)
              with equal self-play frames and sequential gradient steps; plus scratch (a
              random network adapted by the same procedure).
                joint   k joint steps per iteration on the mean task gradient, persistent Adam
                        (b1 0.9, lr 1e-3, weight decay 1e-4)
                joat    per task k steps of the inner procedure from phi, phi += eps (mean theta
                        - phi), eps constant 1 (neither arm anneals)
  procedure   the inner procedure (JOAT's inner loop and every arm's adaptation, one
              function: `learner.inner_procedure`) is chosen by the sensitivity stage before
              JOAT is pretrained: plain SGD at each of `step_sizes` against the old fresh Adam
              (b1 = 0), from the seed-0 joint starts, by held-out loss on each variant's
              reference self-play after one and two procedures.
  games       per (arm, seed, variant): `mmc_jax.adapt` for max(adapt_points) iterations of
              `adapt_games` games each; at each point `games` colour-balanced games against
              the mid reference (primary, the yardstick's matches) and greedy (secondary);
              at iteration 0 also against the final reference (zero-shot).
  long        the better rules-descriptor arm (zero-shot) pretrained to `long_iterations`,
              a checkpoint every `long_every`, each played zero-shot: transfer against
              pretraining frames.

Amendment 3 (README, registered 2026-11-27): the `power` preset, ten pretraining seeds of
joint, JOAT and gardner (rules hidden) on the primary variants, the cpu preset's committed
runs and curves reused where their config is the same, the inner procedure chosen on training
tasks (`procedure_on_training_tasks`), a second yardstick (`whole_network_point`: matches at
16 simulations, held-out policy and value loss) and every endpoint at the pretraining-seed
level (`seed_level`).

Outputs in the artefact folder: `results.json`, `results.md` (current-result block first, the
pre-registered endpoints with paired t intervals and minimum detectable effects), `games.png`
(score against adaptation frames per variant beside the scratch curve) and `transfer.png`.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `from configs import joat`
    sys.path.insert(0, str(ROOT))

ARMS = ("joint", "joat", "joint+desc", "joat+desc")  # the factorial of the endpoints
# The control the issue asks for if time allows: joint's objective, frames and sequential steps
# on Gardner alone (all of a meta-batch's games on it). Added on 2026-11-26 (fourth sitting),
# after the endpoints were reported: its comparisons are secondary (README, "Gardner-only").
CONTROL_ARMS = ("gardner",)
# The scratch curve's checkpoints (configs/gardner.py:cpu iterations of 4,096 frames): 4k-262k
# frames. Amended on 2026-11-26 from (1, 2, 4, 8, 16) after the first calibrations: against
# the 66k-frame references a random network still scored 0.28-0.42 on four of five variants,
# so no mid reference with range existed (README, "Amendment").
REFERENCE_ITERATIONS = (1, 2, 4, 8, 16, 32, 64)
GAME_ARMS = ("scratch",) + ARMS + CONTROL_ARMS
# The six fog-free held-out variants of configs/joat.py (fog goes to a later study).
VARIANTS = (
    "atomic",
    "rifle",
    "extinction",
    "capture=rifle,goal=extinction",
    "gardner,start=shuffle:17,colour=other",
    "baby,capture=atomic,goal=king",
)
# The variants of the primary analysis (Amendment 2's calibration: a mid with range).
PRIMARY_VARIANTS = (
    "atomic",
    "extinction",
    "capture=rifle,goal=extinction",
    "baby,capture=atomic,goal=king",
)
OLD_ADAM = "adam"  # the old inner procedure: Adam with b1 = 0, fresh per task, lr 1e-3


@dataclasses.dataclass(frozen=True)
class Preset:
    """The study's sizes. `joat_preset` gives the network, tasks, games, plies, simulations
    and k of pretraining (configs/joat.py); the rest is the protocol."""

    joat_preset: str
    pretrain_iterations: int  # outer iterations of every arm
    reference_preset: str  # configs/gardner.py preset of the scratch curve
    reference_iterations: tuple[int, ...]  # curve checkpoints (reference iterations)
    seeds: tuple[int, ...] = (0, 1, 2)
    variants: tuple[str, ...] = VARIANTS
    arms: tuple[str, ...] = ARMS + CONTROL_ARMS
    num_tasks: int = 0  # 0: the joat preset's tasks per outer iteration
    games_per_task: int = 0  # 0: the joat preset's G
    adapt_points: tuple[int, ...] = (0, 1, 2, 4)
    adapt_games: int = 16  # games per adaptation iteration
    # The yardstick (Amendment 2, registered 2026-11-26 before any cell was played with it):
    # raw policies (0 simulations) sampling every move from their softmax, 256 games after a
    # paired 2-ply policy opening. The first yardstick (64 games, a deterministic 16-simulation
    # search, 4-ply opening) had no range on 5 of the 6 variants (README, "Second calibration").
    games: int = 256  # games per match
    simulations: int = 0  # evaluation search, both sides (0: the raw policy)
    opening_plies: int = 2
    sampled: bool = True  # every move sampled from the mover's own policy (match.py)
    step_sizes: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)  # SGD candidates
    dataset_draws: int = 8  # reference self-play draws per variant (5 adapt + 3 held out)
    calibration_max: float = 0.25  # the mid reference: random init scores at most this
    # A variant is in the primary analysis when it has a mid and the final reference's score
    # against it minus the random networks' is at least this (Amendment 2).
    min_range: float = 0.3
    long_iterations: int = 0  # 0: no long run
    long_every: int = 0
    # How the inner procedure is chosen: "held_out" (the sensitivity stage of 2026-11-26, on
    # the held-out variants' reference self-play, the old Adam among the candidates) or
    # "training_tasks" (Amendment 3's arm-neutral rule: `procedure_tasks` fog-free training
    # points, the self-play of the exported model `procedure_data`, a path from the project
    # root; SGD only, the grid extended by 3x past a winner at its end).
    procedure_rule: str = "held_out"
    procedure_tasks: int = 8
    procedure_data: str = ""
    # A preset whose committed pretraining runs this one copies where the run's config is
    # exactly this preset's (Amendment 3 reuses the cpu preset's seeds 0-2).
    reuse: str = ""
    # The second yardstick (Amendment 3): every cell's points also played against the mid
    # with this many simulations on both sides (the value head drives the search), and the
    # adapted network's held-out policy and value loss on the final reference's self-play;
    # the endpoints then also at the pretraining-seed level. 0: neither.
    whole_network_simulations: int = 0
    # Amendment 4 (registered 2026-11-29, before its first run): each comparison (a, b) here
    # whose yardstick-1 AUC MDE at the registered `seeds` exceeds `mde_target` gets more
    # pretraining seeds of a and b (no scratch cells), as many as that spread needs (at most
    # `max_seeds`); decided once, from the spread alone (`extension.json`).
    extend: tuple[tuple[str, str], ...] = ()
    mde_target: float = 0.05
    max_seeds: int = 30
    # Amendment 5 (registered 2026-12-07, before its runs): whole rule components absent from
    # the joint and JOAT arms' pretraining region ("capture=atomic", "goal=extinction");
    # `procedure_rule` "fixed" pretrains JOAT's inner loop with SGD `fixed_step` and plays the
    # cells with SGD `adapt_step` (0: the same), one preset per step of the registered grid.
    held_out_components: tuple[str, ...] = ()
    fixed_step: float = 0.0
    adapt_step: float = 0.0


PRESETS = {
    # The tests' and the dry run's sizes: every stage, nothing learnt.
    "smoke": Preset(
        joat_preset="smoke",
        pretrain_iterations=2,
        reference_preset="smoke",
        reference_iterations=(1, 2),
        seeds=(0,),
        variants=("atomic", "gardner,start=shuffle:17,colour=other"),
        adapt_points=(0, 1),
        adapt_games=4,
        games=4,
        step_sizes=(0.1,),
        dataset_draws=3,
        long_iterations=2,
        long_every=1,
    ),
    # The issue's protocol on a 2-core CPU, over several sittings: 100 outer iterations x 4
    # tasks x 16 games x 32 plies = 204,800 frames and 800 sequential steps per arm.
    "cpu": Preset(
        joat_preset="cpu",
        pretrain_iterations=100,
        reference_preset="cpu",
        reference_iterations=REFERENCE_ITERATIONS,
        long_iterations=500,
        long_every=50,
    ),
    # Pretraining on one H100 (the games then run on the CPU: `--unpack`): the same network
    # and k, 16 tasks x 64 games per outer iteration, 16x the frames of the cpu preset.
    "gpu": Preset(
        joat_preset="cpu",
        pretrain_iterations=100,
        reference_preset="cpu",
        reference_iterations=REFERENCE_ITERATIONS,
        num_tasks=16,
        games_per_task=64,
        long_iterations=500,
        long_every=50,
    ),
    # Amendment 3 (issue 49): the cpu preset's recipe with ten pretraining seeds of the
    # rules-hidden arms joint, JOAT and gardner, on the 4 primary variants; seeds 0-2 are the
    # cpu preset's committed runs where their config is this one's (joint and gardner always,
    # JOAT if the step-size rule picks the cpu preset's step again). The inner procedure is
    # chosen on training tasks from the long run's final network's self-play.
    "power": Preset(
        joat_preset="cpu",
        pretrain_iterations=100,
        reference_preset="cpu",
        reference_iterations=REFERENCE_ITERATIONS,
        seeds=tuple(range(10)),
        variants=PRIMARY_VARIANTS,
        arms=("joint", "joat", "gardner"),
        step_sizes=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0),
        procedure_rule="training_tasks",
        procedure_data="experiments/adaptation/decisive_cpu/models/long/it500",
        reuse="cpu",
        whole_network_simulations=16,
        extend=(("joat", "joint"), ("joint", "gardner")),
    ),
}
# Amendment 5 (issue 69): the power preset's recipe with capture=atomic and goal=extinction
# held out of the joint and JOAT pretraining region, JOAT's inner loop at Amendment 3's SGD 0.3,
# the cells at SGD 0.3 (`heldout`) and 1.0 (`heldout1`). `heldout` copies the gardner runs and
# the gardner and scratch cells of `power` (the same configs); `heldout1` copies the
# pretraining of `heldout`.
PRESETS["heldout"] = dataclasses.replace(
    PRESETS["power"],
    procedure_rule="fixed",
    fixed_step=0.3,
    reuse="power",
    held_out_components=("capture=atomic", "goal=extinction"),
    extend=(("joat", "joint"), ("joint", "gardner")),
)
PRESETS["heldout1"] = dataclasses.replace(PRESETS["heldout"], reuse="heldout", adapt_step=1.0)


# ---------------------------------------------------------------------------------------------
# Bookkeeping


class Log:
    """Timestamped lines on stdout and in `<workdir>/study.log`; also a stream for the run
    loop's progress lines (each training run prints its own ETA)."""

    def __init__(self, workdir: Path):
        self.path = workdir / "study.log"
        self.started = time.time()

    def __call__(self, line: str) -> None:
        stamp = f"[{(time.time() - self.started) / 60:6.1f} min] "
        print(stamp + line, flush=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(stamp + line + "\n")

    def write(self, text: str) -> None:
        if text.strip():
            self(text.rstrip())

    def flush(self) -> None:
        pass


def slug(variant: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in variant)


def yardstick(preset: Preset) -> dict:
    """The match settings every curve point and cell is scored with: a curve or a cell
    scored with other settings is played again."""
    return {
        "games": preset.games,
        "simulations": preset.simulations,
        "opening_plies": preset.opening_plies,
        "opening": "policy",
        "sampled": preset.sampled,
    }


def yardstick2(preset: Preset) -> dict | None:
    """The second yardstick's settings (Amendment 3), or None for a preset without it (a cell
    recorded with other settings is played again)."""
    if not preset.whole_network_simulations:
        return None
    return {
        **yardstick(preset),
        "simulations": preset.whole_network_simulations,
        "held_out": "policy and value loss on the final reference's self-play draws 5-7",
    }


def yardstick_tag(preset: Preset) -> str:
    """A short name of `yardstick(preset)` for workdir names (g256-s0-o2-sampled)."""
    tag = f"g{preset.games}-s{preset.simulations}-o{preset.opening_plies}"
    return tag + ("-sampled" if preset.sampled else "")


DAMAGED_SUFFIX = ".damaged"


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_artefact(path: Path) -> tuple[dict | None, str | None]:
    """(the JSON object at `path`, None) when it reads; (None, None) when it is missing;
    (None, why) when it is damaged: not UTF-8 JSON (a copy cut short, a disk that filled
    up), or JSON that is not an object (every artefact is one)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None, None
    except UnicodeDecodeError as error:
        return None, f"not UTF-8 text: {error.reason} at byte {error.start}"
    try:
        info = json.loads(text)
    except json.JSONDecodeError as error:
        size = len(text.encode("utf-8"))
        where = f"line {error.lineno} column {error.colno} of {size} bytes"
        why = error.msg.removesuffix(" at")  # ("Unterminated string starting at")
        return None, f"not valid JSON: {why[0].lower()}{why[1:]} at {where}"
    if not isinstance(info, dict):
        return None, f"not a JSON object but {type(info).__name__}"
    return info, None


@dataclasses.dataclass(frozen=True)
class Study:
    """Where a study's files live: `artefacts` (small, committed) and `workdir` (heavy).
    `read_only`: another preset's committed artefacts, read and never changed; `warn` gets
    the one-line note of each damaged artefact (the study's log during a run)."""

    preset_name: str
    preset: Preset
    workdir: Path
    artefacts: Path
    read_only: bool = False
    warn: object = dataclasses.field(default=_warn, compare=False, repr=False)

    def path(self, *parts: str) -> Path:
        return self.artefacts.joinpath(*parts)

    def read(self, *parts: str):
        """The JSON artefact at `parts`, or None when it is missing. A damaged one counts as
        missing, so that the plan computes its unit again: it is named in one line and moved
        aside to `<name>.damaged` (kept for inspection; left where it is in read-only
        artefacts)."""
        path = self.path(*parts)
        info, damage = load_artefact(path)
        if damage is None:
            return info
        if self.read_only:
            self.warn(f"warning: damaged artefact {path} ({damage}) is not used")
            return None
        moved = set_aside(path)
        self.warn(
            f"warning: damaged artefact {path} ({damage}) moved to {moved}; its unit is "
            "computed again"
        )
        return None

    def damaged(self, *parts: str) -> str | None:
        """Why the artefact at `parts` is damaged, or None (missing or readable); moves
        nothing (`--status`)."""
        return load_artefact(self.path(*parts))[1]

    def write(self, info: dict, *parts: str) -> dict:
        path = self.path(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(info, indent=1))
        os.replace(temporary, path)  # a unit is done exactly when its JSON exists
        return info

    def reference_model(self, variant: str, iteration: int) -> Path:
        return self.path("models", "reference", slug(variant), f"it{iteration}")

    def pretrained_model(self, arm: str, seed: int) -> Path:
        return self.path("models", "pretrain", f"{arm}_s{seed}")


def set_aside(path: Path) -> Path:
    """Moves the damaged file `path` to `<path>.damaged` (`.damaged.1`, ... when taken);
    returns where."""
    moved = path.with_name(path.name + DAMAGED_SUFFIX)
    number = 0
    while moved.exists():
        number += 1
        moved = path.with_name(f"{path.name}{DAMAGED_SUFFIX}.{number}")
    os.replace(path, moved)
    return moved


def export(workdir: Path, step: int | None, out: Path, info: dict) -> None:
    """The parameters of `workdir`'s checkpoint `step` as an exported model at `out`."""
    from mmc_jax.infra import checkpoint

    _, params, config = checkpoint.load_model(workdir, step)
    meta = checkpoint.load_metadata(workdir, step)
    extra = meta.get("extra") or {}
    write_model(
        out, config, params, {"step": int(meta["step"]), "frames": extra.get("frames"), **info}
    )


def write_model(out: Path, config, params, info: dict) -> None:
    """`params` as an exported model at `out`, replacing whatever is there."""
    from mmc_jax.infra import checkpoint

    if out.exists():
        shutil.rmtree(out)
    checkpoint.export_model(out, config, params, info)


def _frames_at(workdir: Path, step: int) -> int:
    from mmc_jax.infra import metrics

    for record in metrics.read_metrics(workdir):
        if record.get("step") == step:
            return int(record["frames"])
    raise RuntimeError(f"no metrics record of iteration {step} in {workdir}")


# ---------------------------------------------------------------------------------------------
# Configs


def joat_config(preset: Preset, seed: int):
    from configs import joat

    config = joat.get_config(preset.joat_preset)
    config.seed = seed
    config.num_iterations = preset.pretrain_iterations
    if preset.num_tasks:
        config.meta.num_tasks = preset.num_tasks
    if preset.games_per_task:
        config.meta.games_per_task = preset.games_per_task
    config.eval.every = 0
    config.checkpoint.every = max(1, preset.pretrain_iterations // 10)
    config.checkpoint.max_to_keep = 2
    return config


def procedure_section(base, choice: dict):
    """`base` (an inner-learner section) set to the chosen procedure: {"optimizer": "sgd",
    "learning_rate": eta} (plain SGD, no momentum, no weight decay) or {"optimizer": "adam"}
    (the old one: Adam, b1 = 0, lr 1e-3, fresh per task)."""
    section = base.copy_and_resolve_references()
    with section.unlocked():
        section.optimizer = choice["optimizer"]
        section.weight_decay = 0.0
        if choice["optimizer"] == "sgd":
            section.momentum = 0.0
            section.learning_rate = float(choice["learning_rate"])
    return section


def arm_config(preset: Preset, arm: str, seed: int, choice: dict | None):
    """The pretraining config of `arm` (equal frames and sequential steps in every arm).
    JOAT arms need the procedure `choice` (their inner loop)."""
    config = joat_config(preset, seed)
    k = int(config.meta.inner_steps)
    if arm.endswith("+desc"):
        config.network.rule_planes = "descriptor"
    if arm.startswith("joat"):
        if choice is None:
            raise ValueError("a JOAT arm needs the chosen inner procedure (sensitivity stage)")
        config.meta.outer_lr = 1.0
        config.meta.outer_lr_schedule = "constant"
        config.inner = procedure_section(config.inner, choice)
        config.inner.steps = k
        config.adapt.learner = procedure_section(config.adapt.learner, choice)
    elif arm.startswith("joint") or arm == "gardner":
        config.meta.inner_steps = 1
        config.meta.fresh_inner_state = False
        config.meta.updates_per_iteration = k
        config.learner.batch_size = int(config.inner.batch_size)
        if arm == "gardner":
            # One task, Gardner, with every game of the meta-batch; joint averages n tasks'
            # gradients of one minibatch each, so one minibatch of n times the size here.
            tasks = int(config.meta.num_tasks)
            config.task_space.size = 0
            config.task_weights = type(config)({"gardner": 1.0})
            config.meta.num_tasks = 1
            config.meta.games_per_task = tasks * int(config.meta.games_per_task)
            config.learner.batch_size = tasks * int(config.inner.batch_size)
    else:
        raise ValueError(f"unknown arm {arm!r}; one of {ARMS + CONTROL_ARMS}")
    if arm != "gardner":  # (the gardner arm reads no task region: its runs stay shared)
        hold_out_components(config, preset.held_out_components)
    return config


def hold_out_components(config, components: tuple[str, ...]) -> None:
    """Removes whole rule components ("capture=atomic", "goal=extinction") from `config`'s
    task region (Amendment 5): no task drawn from it has one."""
    for component in components:
        field, _, value = component.partition("=")
        section = config.task_space
        if field == "capture" and value in section.captures:
            section.captures = tuple(c for c in section.captures if c != value)
        elif field == "goal" and any(p.split("/")[0] == value for p in section.goal_fogs):
            section.goal_fogs = tuple(p for p in section.goal_fogs if p.split("/")[0] != value)
        else:
            raise ValueError(f"held-out component {component!r} is not in the task region")


def cell_procedure(preset: Preset, choice: dict | None) -> dict | None:
    """The procedure the cells adapt with: the preset's `adapt_step` (SGD) or the chosen one."""
    if preset.adapt_step:
        return {"optimizer": "sgd", "learning_rate": float(preset.adapt_step)}
    return choice


def reference_config(preset: Preset, variant: str):
    """AlphaZero from scratch on `variant` with the best single-variant recipe, every curve
    iteration's checkpoint kept."""
    from configs import gardner

    config = gardner.get_config(preset.reference_preset)
    config.variant = variant
    config.seed = 0
    config.num_iterations = max(preset.reference_iterations)
    config.eval.every = 0
    config.checkpoint.every = 1
    config.checkpoint.keep_period = 1
    return config


def adaptation_joat_config(preset: Preset, choice: dict):
    """configs/joat.py (the preset's) with the chosen procedure as `adapt`'s learner and the
    study's evaluation settings; `adapt.adaptation_config` builds each cell's run from it."""
    config = joat_config(preset, 0)
    config.adapt.learner = procedure_section(config.adapt.learner, choice)
    config.adapt.learner.steps = int(config.meta.inner_steps)
    config.adapt.selfplay.batch_size = preset.adapt_games
    config.adapt.eval.opponents = ("greedy",)
    config.adapt.eval.max_plies = 0  # the rules' ply cap, as in training
    config.adapt.eval.opening_plies = preset.opening_plies
    with config.adapt.eval.unlocked():
        config.adapt.eval.opening = "policy"
        config.adapt.eval.sampled = preset.sampled
    config.adapt.checkpoint.save_replay = False
    if preset.whole_network_simulations:  # every point's parameters, for the second yardstick
        config.adapt.checkpoint.max_to_keep = len(preset.adapt_points) + 1
    return config


def prepare_all(preset: Preset) -> list[str]:
    """Builds and validates every config the preset runs (reference, each arm and seed, each
    candidate procedure's adaptation); returns their names. The tests call it for every preset."""
    from mmc_jax import adapt
    from mmc_jax.algorithms import alphazero, meta

    names = []
    for variant in preset.variants:
        alphazero.ALGORITHM.prepare_config(reference_config(preset, variant))
        names.append(f"reference {variant}")
    for choice in candidate_procedures(preset):
        for seed in preset.seeds:
            for arm in preset.arms:
                meta.ALGORITHM.prepare_config(arm_config(preset, arm, seed, choice))
                names.append(f"{arm} s{seed} {choice}")
        joat = adaptation_joat_config(preset, choice)
        for variant in preset.variants:
            network = joat.network.copy_and_resolve_references()
            run = adapt.adaptation_config(variant, max(preset.adapt_points), network, config=joat)
            alphazero.ALGORITHM.prepare_config(run)
            names.append(f"adapt {variant} {choice}")
    return names


def candidate_procedures(preset: Preset) -> list[dict]:
    """The inner procedures the preset chooses among: SGD at each step size, and under the
    held-out rule also the old fresh Adam."""
    sgd = [{"optimizer": "sgd", "learning_rate": float(eta)} for eta in preset.step_sizes]
    return ([{"optimizer": OLD_ADAM}] if preset.procedure_rule == "held_out" else []) + sgd


# ---------------------------------------------------------------------------------------------
# Stages


def references(study: Study, variant: str, log) -> dict:
    """The scratch curve's runs: AlphaZero from scratch on `variant`, each curve checkpoint
    exported into the artefacts."""
    from mmc_jax import train

    preset = study.preset
    done = study.read("reference", f"{slug(variant)}.json")
    if done and set(done["frames"]) == {str(i) for i in preset.reference_iterations}:
        return done
    if shared_references(study, variant):
        log(f"reference {variant}: copied from the cpu preset's artefacts (the same recipe)")
        return study.read("reference", f"{slug(variant)}.json")
    workdir = study.workdir / "reference" / slug(variant)
    log(f"reference {variant}: {max(preset.reference_iterations)} iterations from scratch")
    started = time.time()
    train.train_to_end(reference_config(preset, variant), workdir, stream=log)
    frames = {}
    for iteration in preset.reference_iterations:
        frames[str(iteration)] = _frames_at(workdir, iteration)
        export(
            workdir,
            iteration,
            study.reference_model(variant, iteration),
            {"description": f"{variant}: scratch reference, iteration {iteration}"},
        )
    return study.write(
        {"variant": variant, "frames": frames, "seconds": time.time() - started},
        "reference",
        f"{slug(variant)}.json",
    )


def shared_references(study: Study, variant: str) -> bool:
    """Copies the cpu preset's finished reference of `variant` when this preset trains the same
    one (the gpu preset: references are CPU work); whether it did."""
    cpu = PRESETS["cpu"]
    source = ROOT / "experiments" / "adaptation" / "decisive_cpu"
    same = (cpu.reference_preset, cpu.reference_iterations) == (
        study.preset.reference_preset,
        study.preset.reference_iterations,
    )
    if not same or study.artefacts.resolve() == source.resolve():
        return False
    info = committed("cpu", study.warn).read("reference", f"{slug(variant)}.json")
    if info is None:
        return False
    models = source / "models" / "reference" / slug(variant)
    shutil.copytree(models, study.path("models", "reference", slug(variant)), dirs_exist_ok=True)
    study.write(info, "reference", f"{slug(variant)}.json")
    return True


def pretrain(study: Study, arm: str, seed: int, choice: dict | None, log, pack=None) -> dict:
    """One pretraining run, exported into the artefacts (and added to `pack`)."""
    import jax

    from mmc_jax import train

    done = study.read("pretrain", f"{arm}_s{seed}.json")
    if done:
        return done
    source = reusable(study, arm, seed, choice)
    if source is not None:
        shutil.copytree(
            source.pretrained_model(arm, seed),
            study.pretrained_model(arm, seed),
            dirs_exist_ok=True,
        )
        info = {**source.read("pretrain", f"{arm}_s{seed}.json"), "from": source.preset_name}
        log(f"pretrain {arm} seed {seed}: the {source.preset_name} preset's run (the same config)")
        study.write(info, "pretrain", f"{arm}_s{seed}.json")
        if pack:
            write_pack(study, pack)
        return info
    config = arm_config(study.preset, arm, seed, choice)
    workdir = study.workdir / "pretrain" / f"{arm}_s{seed}"
    log(f"pretrain {arm} seed {seed}: {config.num_iterations} outer iterations")
    started = time.time()
    result = train.train_to_end(config, workdir, stream=log)
    step = int(result["iteration"])
    optimizer = (
        f"inner {choice}, eps {config.meta.outer_lr} constant, k {config.meta.inner_steps}"
        if arm.startswith("joat")
        else f"Adam b1 {config.learner.get('b1', 0.9)} lr {config.learner.learning_rate} "
        f"wd {config.learner.weight_decay}, {config.meta.updates_per_iteration} steps/iteration"
    )
    info = {
        "arm": arm,
        "seed": seed,
        "frames": _frames_at(workdir, step),
        "iterations": step,
        "sequential_steps": step
        * int(config.meta.inner_steps)
        * int(config.meta.updates_per_iteration),
        "optimizer": optimizer,
        "tasks_per_iteration": int(config.meta.num_tasks),
        "games_per_task": int(config.meta.games_per_task),
        "seconds": time.time() - started,
        # The config fixes the run; the device only its floating-point rounding and its time.
        "device": jax.devices()[0].device_kind,
    }
    export(workdir, step, study.pretrained_model(arm, seed), {"description": f"{arm} s{seed}"})
    study.write(info, "pretrain", f"{arm}_s{seed}.json")
    if pack:
        write_pack(study, pack)
    return info


def committed(preset_name: str, warn=_warn) -> Study:
    """The committed artefacts of another preset (read only; its workdir is not used)."""
    artefacts = ROOT / "experiments" / "adaptation" / f"decisive_{preset_name}"
    return Study(preset_name, PRESETS[preset_name], Path("/nonexistent"), artefacts, True, warn)


def reusable(study: Study, arm: str, seed: int, choice: dict | None) -> Study | None:
    """The `reuse` preset's committed artefacts when they hold the pretraining run (`arm`, `seed`)
    with exactly the config this preset would train (JOAT: with this preset's procedure
    `choice` against the one that preset chose); None otherwise."""
    if not study.preset.reuse:
        return None
    source = committed(study.preset.reuse, study.warn)
    if source.artefacts.resolve() == study.artefacts.resolve():
        return None
    if source.read("pretrain", f"{arm}_s{seed}.json") is None:
        return None
    if not (source.pretrained_model(arm, seed) / "model.json").exists():
        return None
    if arm.startswith("joat"):
        theirs = (source.read("sensitivity.json") or {}).get("choice")
        if choice is None or theirs is None:
            return None
    else:
        theirs = None
    mine = arm_config(study.preset, arm, seed, choice).to_dict()
    if mine != arm_config(source.preset, arm, seed, theirs).to_dict():
        return None
    return source


def _draw_fn(network, config):
    import jax

    from mmc_jax.training import games as games_lib
    from mmc_jax.training import selfplay

    def draw(params, rules_b, games, key):
        games, trajectory = games_lib.play_games(
            network, params, rules_b, games, key, config, False
        )
        return games, selfplay.compute_targets(trajectory, bootstrap=True)

    return jax.jit(draw)


def dataset(study: Study, variant: str):
    """(adaptation draws, held-out batch): self-play of the variant's final reference, in
    draws the size of an adaptation iteration (deterministic; recomputed, not stored)."""
    final = study.reference_model(variant, max(study.preset.reference_iterations))
    return selfplay_draws(study, final, variant)


def selfplay_draws(study: Study, model: Path, variant: str):
    """(adaptation draws, held-out batch): `dataset_draws` draws of the exported `model`'s
    self-play on `variant` (its own search settings; `adapt_games` games of the adaptation's
    plies each, keys 10,000 + i), the first (up to 5) to adapt on, the rest held out."""
    import jax
    import jax.numpy as jnp
    import ml_collections

    from mmc_jax import rules as R
    from mmc_jax.infra import checkpoint
    from mmc_jax.training import games as games_lib
    from mmc_jax.training import learner

    preset = study.preset
    network, params, saved = checkpoint.load_model(model)
    config = saved.copy_and_resolve_references()
    with config.unlocked():
        config.selfplay.batch_size = preset.adapt_games
        config.selfplay.num_plies = int(joat_config(preset, 0).adapt.selfplay.num_plies)
    config = ml_collections.FrozenConfigDict(config)
    rules_b = R.batch(variant, preset.adapt_games)
    games = games_lib.init_games(rules_b, False)
    draw = _draw_fn(network, config)
    draws = []
    for index in range(preset.dataset_draws):
        games, batch = draw(params, rules_b, games, jax.random.key(10_000 + index))
        draws.append(jax.device_get(batch))
    held = draws[5:] if len(draws) > 5 else draws[-1:]
    held_out = learner.Batch(
        *(jnp.concatenate([getattr(d, f) for d in held]) for f in learner.Batch._fields)
    )
    return draws[: max(1, min(5, len(draws) - 1))], held_out


def sensitivity(study: Study, log) -> dict:
    """The adaptation procedure, decided from the seed-0 joint starts: held-out loss (policy
    + value, on the final reference's self-play) after one and two procedures of each
    candidate, mean over variants and starts; the lowest wins."""
    import jax
    import ml_collections

    from mmc_jax.infra import checkpoint
    from mmc_jax.training import learner

    done = study.read("sensitivity.json")
    if done:
        return done
    preset = study.preset
    if preset.procedure_rule == "training_tasks":
        return procedure_on_training_tasks(study, log)
    if preset.procedure_rule == "fixed":  # Amendment 5: registered, nothing to choose
        choice = {"optimizer": "sgd", "learning_rate": float(preset.fixed_step)}
        log(f"procedure: {_procedure_name(choice)} for JOAT's inner loop (registered)")
        return study.write({"rule": "fixed (registered)", "choice": choice}, "sensitivity.json")
    cpu = committed("cpu", study.warn)
    decided = cpu.read("sensitivity.json") if study.preset_name != "cpu" else None
    if decided is not None:
        # One procedure for the whole study: a larger preset adapts as the cpu preset decided.
        log(f"sensitivity: the cpu preset's choice ({cpu.path('sensitivity.json')})")
        return study.write({**decided, "from": "cpu"}, "sensitivity.json")
    seed = preset.seeds[0]
    starts = [a for a in ("joint", "joint+desc") if a in preset.arms]
    joat = joat_config(preset, 0)
    procedure = jax.jit(learner.inner_procedure, static_argnums=(3, 4))
    rows = []
    for variant in preset.variants:
        adapt_draws, held_out = dataset(study, variant)
        for arm in starts:
            network, params0, saved = checkpoint.load_model(study.pretrained_model(arm, seed))
            net_config = ml_collections.FrozenConfigDict(saved.network)

            def losses(params, inner, network=network, held_out=held_out):
                _, metrics = learner.loss_fn(params, network, held_out, inner)
                return float(metrics["policy_loss"]) + float(metrics["value_loss"])

            for choice in candidate_procedures(preset):
                inner = ml_collections.FrozenConfigDict(procedure_section(joat.inner, choice))
                params, out = params0, {"0": losses(params0, inner)}
                for j in range(2):
                    draw = adapt_draws[j % len(adapt_draws)]
                    params, _ = procedure(params, draw, jax.random.key(j), net_config, inner)
                    out[str(j + 1)] = losses(params, inner)
                rows.append({"variant": variant, "arm": arm, "procedure": choice, "loss": out})
        log(
            f"sensitivity {variant}: "
            + ", ".join(
                f"{r['arm']} {_procedure_name(r['procedure'])} {r['loss']['1']:.3f}"
                for r in rows
                if r["variant"] == variant
            )
        )
    scores = {}
    for r in rows:
        name = _procedure_name(r["procedure"])
        scores.setdefault(name, []).append((r["loss"]["1"] + r["loss"]["2"]) / 2)
    means = {name: sum(v) / len(v) for name, v in scores.items()}
    best = min(means, key=means.get)
    choice = next(c for c in candidate_procedures(preset) if _procedure_name(c) == best)
    log(f"sensitivity: {best} chosen (" + ", ".join(f"{n} {m:.4f}" for n, m in means.items()) + ")")
    return study.write(
        {
            "criterion": "mean held-out loss (policy + value) after 1 and 2 procedures",
            "means": means,
            "choice": choice,
            "rows": rows,
        },
        "sensitivity.json",
    )


def training_tasks(preset: Preset) -> list[str]:
    """The first `procedure_tasks` fog-free training points of the preset's task space, in
    `meta.task_weights` order (never a held-out variant)."""
    from mmc_jax import rules as R
    from mmc_jax.algorithms import meta

    tasks = [t for t in meta.task_weights(joat_config(preset, 0)) if not R.has_fog(t)]
    return tasks[: preset.procedure_tasks]


def procedure_on_training_tasks(study: Study, log) -> dict:
    """Amendment 3's arm-neutral step-size rule: from the seed-0 joint and gardner starts and
    the scratch start (init seed 0), each SGD step size adapts on the training tasks' draws of
    `procedure_data`'s self-play; the lowest mean held-out loss (policy + value) after one and
    two procedures wins, the grid extended by 3x past a winner at either end (at most three
    times). Written as `sensitivity.json`, which every later stage reads."""
    import jax
    import ml_collections

    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint
    from mmc_jax.model import network as network_lib
    from mmc_jax.training import learner

    preset = study.preset
    seed = preset.seeds[0]
    data = ROOT / preset.procedure_data
    if not (data / "model.json").exists():
        raise ValueError(f"the step-size rule's data network {data} is not there")
    joat = joat_config(preset, 0)
    starts = []
    for arm in ("joint", "gardner"):
        if study.read("pretrain", f"{arm}_s{seed}.json") is None:
            raise ValueError(f"the step-size rule adapts the {arm} seed-{seed} start: pretrain it")
        network, params, saved = checkpoint.load_model(study.pretrained_model(arm, seed))
        starts.append((arm, network, params, ml_collections.FrozenConfigDict(saved.network)))
    network_config, params, _, _ = adapt.load_start("scratch", joat, seed)
    starts.append(
        (
            "scratch",
            network_lib.make_network(network_config),
            params,
            ml_collections.FrozenConfigDict(network_config),
        )
    )
    tasks = training_tasks(preset)
    procedure = jax.jit(learner.inner_procedure, static_argnums=(3, 4))
    datasets = {task: selfplay_draws(study, data, task) for task in tasks}
    rows = []

    def evaluate(eta: float) -> float:
        choice = {"optimizer": "sgd", "learning_rate": float(eta)}
        inner = ml_collections.FrozenConfigDict(procedure_section(joat.inner, choice))
        values = []
        for task, (adapt_draws, held_out) in datasets.items():
            for name, network, params0, net_config in starts:

                def losses(params, network=network, held_out=held_out):
                    _, metrics = learner.loss_fn(params, network, held_out, inner)
                    return float(metrics["policy_loss"]) + float(metrics["value_loss"])

                params, out = params0, {"0": losses(params0)}
                for j in range(2):
                    draw = adapt_draws[j % len(adapt_draws)]
                    params, _ = procedure(params, draw, jax.random.key(j), net_config, inner)
                    out[str(j + 1)] = losses(params)
                rows.append({"task": task, "start": name, "procedure": choice, "loss": out})
                values.append((out["1"] + out["2"]) / 2)
        mean = sum(values) / len(values)
        log(f"step-size rule: sgd {eta:g} mean held-out loss {mean:.4f}")
        return mean

    means = {float(eta): evaluate(eta) for eta in preset.step_sizes}
    extensions = []
    for _ in range(3):
        best = min(means, key=means.get)
        if len(means) > 1 and best == min(means):
            extension = best / 3
        elif len(means) > 1 and best == max(means):
            extension = best * 3
        else:
            break
        extensions.append(extension)
        means[extension] = evaluate(extension)
    best = min(means, key=means.get)
    interior = min(means) < best < max(means)
    choice = {"optimizer": "sgd", "learning_rate": best}
    log(f"step-size rule: sgd {best:g} chosen" + ("" if interior else " (at the grid's end)"))
    return study.write(
        {
            "rule": "Amendment 3: training tasks, arm-neutral",
            "criterion": "mean held-out loss (policy + value) after 1 and 2 procedures, over "
            "training tasks and the joint, gardner and scratch starts",
            "tasks": tasks,
            "starts": [f"{name} s{seed}" for name, *_ in starts],
            "data": preset.procedure_data,
            "means": {
                _procedure_name({"optimizer": "sgd", "learning_rate": e}): m
                for e, m in sorted(means.items())
            },
            "extensions": extensions,
            "interior": interior,
            "choice": choice,
            "rows": rows,
        },
        "sensitivity.json",
    )


def _procedure_name(choice: dict) -> str:
    if choice["optimizer"] == "sgd":
        return f"sgd {choice['learning_rate']:g}"
    return "adam b1=0 (fresh)"


def _match(network, params, variant, preset, key, opponent_model, opponent_simulations=None):
    from mmc_jax import adapt
    from mmc_jax.evaluation import match

    opponent_network, opponent_params = opponent_model
    result = match.play_match(
        network,
        params,
        variant,
        "checkpoint",
        preset.games,
        preset.simulations,
        key,
        opponent_network=opponent_network,
        opponent_params=opponent_params,
        opponent_simulations=opponent_simulations,
        opening_plies=preset.opening_plies,
        opening="policy",
        sampled=preset.sampled,
    )
    return adapt.match_summary(result)


def _random_init(preset: Preset, init_seed: int):
    """The scratch arm's start: (network, params) of configs/joat.py's network, rules hidden,
    initialised as `adapt --init_from scratch` does with `init_seed`."""
    from mmc_jax import adapt
    from mmc_jax.model import network as network_lib

    config = joat_config(preset, 0)
    network_config, params, _, _ = adapt.load_start("scratch", config, init_seed)
    return network_lib.make_network(network_config), params


def curve(study: Study, variant: str, log) -> dict:
    """Calibration (the mid reference) and the scratch curve's scores against it."""
    import jax

    from mmc_jax.infra import checkpoint

    preset = study.preset
    done = study.read("curve", f"{slug(variant)}.json")
    if (
        done
        and done.get("reference_iterations") == list(preset.reference_iterations)
        and done.get("yardstick") == yardstick(preset)
    ):
        return done  # (a curve of other references or another yardstick is played again)
    shared = shared_curve(study, variant)
    if shared is not None:
        log(f"curve {variant}: the {study.preset.reuse} preset's (the same references and mid)")
        return shared
    frames = references(study, variant, log)["frames"]  # (computed again if it was damaged)
    models = {
        it: checkpoint.load_model(study.reference_model(variant, it))[:2]
        for it in preset.reference_iterations
    }
    key = jax.random.key(7_000)
    network0, params0 = _random_init(preset, preset.seeds[0])
    calibration = {}
    mid = preset.reference_iterations[-1]
    for it in preset.reference_iterations:
        score = _match(network0, params0, variant, preset, key, models[it])
        calibration[str(it)] = score
        log(f"calibrate {variant}: random init vs reference it{it}: {score['score']:.3f}")
        if score["score"] <= preset.calibration_max:
            mid = it
            break
    points = [{"frames": 0, "source": "random init", "scores": []}]
    for init_seed in preset.seeds:
        network, params = _random_init(preset, init_seed)
        points[0]["scores"].append(_match(network, params, variant, preset, key, models[mid]))
    for it in preset.reference_iterations:
        network, params = models[it]
        result = _match(network, params, variant, preset, key, models[mid])
        points.append({"frames": frames[str(it)], "source": f"it{it}", "scores": [result]})
    for p in points:
        p["score"] = sum(s["score"] for s in p["scores"]) / len(p["scores"])
    calibrated = any(c["score"] <= preset.calibration_max for c in calibration.values())
    spread = points[-1]["score"] - points[0]["score"]  # the final reference minus random nets
    log(
        f"curve {variant} (mid = it{mid}): "
        + ", ".join(f"{p['frames']}: {p['score']:.2f}" for p in points)
    )
    return study.write(
        {
            "variant": variant,
            "mid": mid,
            "final": max(preset.reference_iterations),
            # False: no reference is strong enough (a random net scores above the bound
            # against every one): the yardstick has little range on this variant.
            "calibrated": calibrated,
            "range": spread,
            # In the primary analysis: a mid, and range against it (Amendment 2).
            "primary": calibrated and spread >= preset.min_range,
            "reference_iterations": list(preset.reference_iterations),
            "yardstick": yardstick(preset),
            "calibration": calibration,
            "points": points,
        },
        "curve",
        f"{slug(variant)}.json",
    )


def shared_curve(study: Study, variant: str) -> dict | None:
    """The `reuse` preset's committed curve of `variant` (its mid, calibration and scratch
    curve), written into this preset's artefacts, when both presets have the same references
    and yardstick; None otherwise."""
    preset = study.preset
    if not preset.reuse:
        return None
    source = committed(preset.reuse, study.warn)
    if source.artefacts.resolve() == study.artefacts.resolve():
        return None
    theirs = source.read("curve", f"{slug(variant)}.json")
    same_references = source.read("reference", f"{slug(variant)}.json") == study.read(
        "reference", f"{slug(variant)}.json"
    )
    if (
        theirs is None
        or not same_references
        or theirs.get("yardstick") != yardstick(preset)
        or theirs.get("reference_iterations") != list(preset.reference_iterations)
    ):
        return None
    return study.write({**theirs, "from": source.preset_name}, "curve", f"{slug(variant)}.json")


def whole_network_calibration(study: Study, variant: str, log) -> dict | None:
    """The second yardstick's range on `variant` (Amendment 3): a random network (seed 0) and
    the final reference against the mid, both sides searching; the variant enters the
    16-simulation comparisons when the final reference's score minus the random network's is
    at least `min_range`. None for a preset without the second yardstick."""
    import jax

    from mmc_jax.infra import checkpoint

    preset = study.preset
    settings = yardstick2(preset)
    if settings is None:
        return None
    done = study.read("curve2", f"{slug(variant)}.json")
    curve_info = curve(study, variant, log)
    if done and done["yardstick2"] == settings and done["mid"] == curve_info["mid"]:
        return done
    if preset.reuse and curve_info.get("from"):  # the same mid: the reused preset's range
        theirs = committed(preset.reuse, study.warn).read("curve2", f"{slug(variant)}.json")
        if theirs and theirs["yardstick2"] == settings and theirs["mid"] == curve_info["mid"]:
            return study.write({**theirs, "from": preset.reuse}, "curve2", f"{slug(variant)}.json")
    searched = dataclasses.replace(preset, simulations=preset.whole_network_simulations)
    mid = checkpoint.load_model(study.reference_model(variant, curve_info["mid"]))[:2]
    final = checkpoint.load_model(study.reference_model(variant, curve_info["final"]))[:2]
    key = jax.random.key(7_000)
    random_score = _match(*_random_init(preset, 0), variant, searched, key, mid)["score"]
    final_score = _match(*final, variant, searched, key, mid)["score"]
    spread = final_score - random_score
    log(
        f"yardstick 2 {variant}: random init {random_score:.3f}, final {final_score:.3f} "
        f"against the mid it{curve_info['mid']} (range {spread:.2f})"
    )
    return study.write(
        {
            "variant": variant,
            "mid": curve_info["mid"],
            "final": curve_info["final"],
            "random_vs_mid": random_score,
            "final_vs_mid": final_score,
            "range": spread,
            "in": spread >= preset.min_range,
            "yardstick2": settings,
        },
        "curve2",
        f"{slug(variant)}.json",
    )


_HELD_OUT: dict = {}  # (artefacts, variant) -> the held-out batch (self-play is recomputed)


def held_out_batch(study: Study, variant: str):
    """The final reference's held-out self-play draws of `variant` (`dataset`), computed once
    per process."""
    key = (str(study.artefacts.resolve()), variant)
    if key not in _HELD_OUT:
        _HELD_OUT[key] = dataset(study, variant)[1]
    return _HELD_OUT[key]


def whole_network_point(
    study: Study, network, params, variant: str, seed: int, iteration: int, choice: dict, mid
) -> dict:
    """The second yardstick at one adaptation point: the match against the mid with
    `whole_network_simulations` on both sides (keys paired over arms by seed and point) and
    the held-out policy and value loss."""
    import jax
    import ml_collections

    from mmc_jax.training import learner

    preset = study.preset
    searched = dataclasses.replace(preset, simulations=preset.whole_network_simulations)
    key = jax.random.fold_in(jax.random.key(seed + 2_000_003), iteration)
    match = _match(network, params, variant, searched, key, mid)
    inner = procedure_section(joat_config(preset, 0).inner, choice)
    _, metrics = learner.loss_fn(
        params, network, held_out_batch(study, variant), ml_collections.FrozenConfigDict(inner)
    )
    return {
        "simulations": preset.whole_network_simulations,
        "match": match,
        "policy_loss": float(metrics["policy_loss"]),
        "value_loss": float(metrics["value_loss"]),
    }


def cell(study: Study, arm: str, seed: int, variant: str, choice: dict, log) -> dict:
    """One adaptation cell: `arm`'s seed-`seed` start adapted to `variant` and evaluated."""
    import jax

    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint
    from mmc_jax.model import network as network_lib

    name = f"{arm}_s{seed}_{slug(variant)}"
    done = study.read("cells", f"{name}.json")
    preset = study.preset
    curve_info = curve(study, variant, log)
    if (
        done
        and done["mid"] == curve_info["mid"]
        and done.get("final") == curve_info["final"]
        and done.get("yardstick") == yardstick(preset)
        and done.get("yardstick2") == yardstick2(preset)
    ):
        return done  # (a cell of another mid, final reference or yardstick is played again)
    shared = shared_cell(study, arm, seed, variant, choice, curve_info)
    if shared is not None:
        log(f"cell {name}: the {shared['from']} preset's (the same start and procedure)")
        return shared
    # One workdir per mid reference and yardstick: an interrupted cell resumes with its
    # evaluated points, and a cell played against another mid starts afresh (a kept workdir
    # holds only the last checkpoints, so its earlier points could not be evaluated again).
    tag = yardstick_tag(preset)
    workdir = study.workdir / "games" / f"{name}_vs_it{curve_info['mid']}_{tag}"
    mid = study.reference_model(variant, curve_info["mid"])
    final = study.reference_model(variant, curve_info["final"])
    init = "scratch" if arm == "scratch" else str(study.pretrained_model(arm, seed))
    started = time.time()
    joat = adaptation_joat_config(preset, choice)
    results = adapt.run_adaptation(
        variant,
        init,
        workdir,
        iterations=max(preset.adapt_points),
        eval_at=list(preset.adapt_points),
        config=joat,
        num_games=preset.games,
        num_simulations=preset.simulations,
        reference=str(mid),
        head_to_head=False,
        seed=seed,  # the same evaluation keys in every arm: paired over (variant, seed)
        init_seed=seed,
        stream=None,
    )
    network_config, params0, _, _ = adapt.load_start(init, joat, seed)
    zero_shot = _match(
        network_lib.make_network(network_config),
        params0,
        variant,
        preset,
        jax.random.fold_in(jax.random.key(seed + 1_000_003), 300),
        checkpoint.load_model(final)[:2],
    )
    points = [
        {"iteration": p["iteration"], "frames": p["frames"], "matches": p["matches"]}
        for p in results["points"]
    ]
    whole = ""
    if yardstick2(preset) is not None:
        network = network_lib.make_network(network_config)
        mid_model = checkpoint.load_model(mid)[:2]
        for p in points:
            i = p["iteration"]
            params = params0 if i == 0 else checkpoint.load_model(workdir, i)[1]
            p["whole_network"] = whole_network_point(
                study, network, params, variant, seed, i, choice, mid_model
            )
        whole = f"; {preset.whole_network_simulations} sims " + ", ".join(
            f"{p['iteration']}: {p['whole_network']['match']['score']:.2f}" for p in points
        )
    log(
        f"cell {name}: vs mid "
        + ", ".join(f"{p['iteration']}: {p['matches']['reference']['score']:.2f}" for p in points)
        + whole
        + f"; zero-shot vs final {zero_shot['score']:.2f}"
    )
    return study.write(
        {
            "arm": arm,
            "seed": seed,
            "variant": variant,
            "procedure": choice,
            "mid": curve_info["mid"],
            "final": curve_info["final"],
            "yardstick": yardstick(preset),
            **({"yardstick2": yardstick2(preset)} if yardstick2(preset) else {}),
            "points": points,
            "zero_shot_final": zero_shot,
            "seconds": time.time() - started,
        },
        "cells",
        f"{name}.json",
    )


def shared_cell(study: Study, arm: str, seed: int, variant: str, choice: dict, curve_info: dict):
    """The `reuse` preset's committed cell (`arm`, `seed`, `variant`), written into this
    preset's artefacts, when it was played from the same start (scratch, or a pretraining run
    this preset copied from there) with the same procedure, mid, final reference and
    yardsticks (Amendment 5's gardner and scratch cells at SGD 0.3); None otherwise."""
    preset = study.preset
    if not preset.reuse:
        return None
    source = committed(preset.reuse, study.warn)
    if source.artefacts.resolve() == study.artefacts.resolve():
        return None
    if arm != "scratch":
        mine = study.read("pretrain", f"{arm}_s{seed}.json") or {}
        if mine.get("from") != source.preset_name:
            return None
    name = f"{arm}_s{seed}_{slug(variant)}"
    theirs = source.read("cells", f"{name}.json")
    if (
        theirs is None
        or theirs.get("procedure") != choice
        or theirs["mid"] != curve_info["mid"]
        or theirs.get("final") != curve_info["final"]
        or theirs.get("yardstick") != yardstick(preset)
        or theirs.get("yardstick2") != yardstick2(preset)
    ):
        return None
    return study.write({**theirs, "from": source.preset_name}, "cells", f"{name}.json")


def long_run(study: Study, choice: dict, log) -> dict | None:
    """The better descriptor arm (zero-shot against the final references, seed-0 cells) to
    `long_iterations`, each kept checkpoint played zero-shot on every variant."""
    import jax

    from mmc_jax import train
    from mmc_jax.infra import checkpoint

    preset = study.preset
    if not preset.long_iterations:
        return None
    done = study.read("long.json")
    if done and done.get("complete"):
        return done
    candidates = [a for a in ("joint+desc", "joat+desc") if a in preset.arms]
    means = {}
    for arm in candidates:
        cells = [
            study.read("cells", f"{arm}_s{preset.seeds[0]}_{slug(v)}.json") for v in preset.variants
        ]
        if any(c is None for c in cells):
            return None  # decided once the seed-0 cells of both arms are played
        means[arm] = sum(c["zero_shot_final"]["score"] for c in cells) / len(cells)
    arm = max(means, key=means.get)
    config = arm_config(preset, arm, preset.seeds[0], choice)
    config.num_iterations = preset.long_iterations
    config.checkpoint.every = preset.long_every
    config.checkpoint.keep_period = preset.long_every
    workdir = study.workdir / "long" / arm
    log(f"long run: {arm} to {preset.long_iterations} outer iterations (zero-shot means {means})")
    train.train_to_end(config, workdir, stream=log)
    info = {"arm": arm, "zero_shot_means": means, "points": [], "complete": False}
    for step in range(preset.long_every, preset.long_iterations + 1, preset.long_every):
        out = study.path("models", "long", f"it{step}")
        if not (out / "model.json").exists():
            export(workdir, step, out, {"description": f"{arm} long run, iteration {step}"})
        network, params = checkpoint.load_model(out)[:2]
        scores = {}
        for variant in preset.variants:
            final = study.reference_model(variant, max(preset.reference_iterations))
            scores[variant] = _match(
                network,
                params,
                variant,
                preset,
                jax.random.key(9_000),
                checkpoint.load_model(final)[:2],
            )
        info["points"].append(
            {"iteration": step, "frames": _frames_at(workdir, step), "zero_shot_final": scores}
        )
        mean = sum(s["score"] for s in scores.values()) / len(scores)
        log(f"long run it{step}: zero-shot mean {mean:.3f}")
    info["complete"] = True
    return study.write(info, "long.json")


# ---------------------------------------------------------------------------------------------
# The archive of finished pretraining runs (an accelerator's output, played on a CPU)


def _start_name(out: Path) -> str:
    """What `adapt --init_from` takes for the folder `out`: a shipped model's name when `out`
    is in the package's models, else the path."""
    from mmc_jax.infra import checkpoint

    shipped = Path(checkpoint.SHIPPED_DIR).resolve()
    return out.name if Path(out).resolve().parent == shipped else str(out)


def ship(study: Study, results: dict, out: Path) -> dict:
    """Exports the best pretrained start into `out`: the arm with the highest mean AUC over the
    primary variants' cells (every seed), its seed with the highest mean AUC there; the
    model's `adapt` section is the study's (the chosen procedure, the yardstick's matches), and
    `model.json` carries a card: how it was trained and what it scored. ValueError before every
    primary cell is played."""
    from mmc_jax.infra import checkpoint

    preset = study.preset
    primary = primary_variants(results)
    cells = [c for c in results["cells"] if c["variant"] in primary]
    expected = len(primary) * len(preset.seeds) * (len(preset.arms) + 1)
    if not primary or len(cells) < expected:
        raise ValueError(
            f"{len(cells)}/{expected} primary cells played: nothing is shipped before the "
            "endpoints are complete"
        )

    def mean_auc(arm, seed=None):
        values = [c["auc"] for c in cells if c["arm"] == arm and seed in (None, c["seed"])]
        return sum(values) / len(values)

    if yardstick2(preset):
        # Amendment 3's rule, fixed before its cells: JOAT if P2's AUC interval at the
        # pretraining-seed level lies wholly above 0, otherwise joint; always seed 0.
        p2 = seed_level(results, "joat", "joint", lambda r: r["auc"])
        mean, half = t_interval(p2)
        arm = "joat" if len(p2) > 1 and mean - half > 0 else "joint"
        seed = preset.seeds[0]
        chosen_by = (
            f"Amendment 3: JOAT if JOAT - joint AUC at the pretraining-seed level is above 0 "
            f"(here {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}], n={len(p2)}), else "
            f"joint; always seed {seed}, fixed before any cell (not chosen on its scores)"
        )
        per_seed = {
            s: sum(c["auc"] for c in cells if c["arm"] == arm and c["seed"] == s) / len(primary)
            for s in preset.seeds
        }
        arm_mean, arm_half = t_interval(list(per_seed.values()))
        selection = {
            "arm_mean_auc": arm_mean,
            "arm_mean_auc_ci95": [arm_mean - arm_half, arm_mean + arm_half],
            "per_seed_auc": {str(s): v for s, v in per_seed.items()},
            "note": "the shipped seed's own scores below are one of these seeds, not a selection",
            "absent": "the rules-told (+desc) arms: not in Amendment 3 (3 seeds each, history "
            "in decisive_cpu/)",
        }
    else:
        arm = max(preset.arms, key=mean_auc)
        seed = max(preset.seeds, key=lambda s: mean_auc(arm, s))
        chosen_by = (
            "the highest mean AUC (adaptation iterations 0-4, score against the mid "
            "reference) over the primary variants' cells of every seed, then its best seed"
        )
        selection = None
    choice = results["sensitivity"]["choice"]
    _, params, saved = checkpoint.load_model(study.pretrained_model(arm, seed))
    config = saved.copy_and_resolve_references()
    with config.unlocked():
        # The study's procedure and adaptation games; `adapt`'s own evaluation stays the
        # pretraining config's (the card gives the scores on the study's yardstick).
        evaluation = config.adapt.eval
        config.adapt = adaptation_joat_config(preset, choice).adapt
        config.adapt.eval = evaluation
    pretrain_info = results["pretrain"][f"{arm}_s{seed}"]
    mine = [c for c in results["cells"] if c["arm"] == arm and c["seed"] == seed]
    card = {
        "arm": arm,
        "seed": seed,
        "trained": (
            f"{arm} over the rule space of configs/joat.py:{preset.joat_preset} (the 8 "
            f"held-out variants never drawn), {pretrain_info['frames']:,} self-play frames, "
            f"{pretrain_info['sequential_steps']} sequential steps, {pretrain_info['optimizer']}"
        ),
        "adaptation": _procedure_name(choice) + f", {preset.adapt_games} games per iteration",
        "yardstick": yardstick(preset),
        "chosen_by": chosen_by,
        **(
            {
                "selection": selection,
                "reproduces": f"`python -m mmc_jax.adapt --init_from {_start_name(out)} "
                "--variant V` adapts "
                f"with this start's `adapt` section: {_procedure_name(choice)}, "
                f"{preset.adapt_games} games per iteration, the study's inner procedure",
            }
            if selection
            else {}
        ),
        "mean_auc_by_arm": {a: mean_auc(a) for a in (*preset.arms, "scratch")},
        "scores": {
            c["variant"]: {
                "primary": c["variant"] in primary,
                "auc": c["auc"],
                "vs_mid": {str(p["iteration"]): p["score"] for p in c["points"]},
                "zero_shot_vs_final": c["zero_shot_final"],
            }
            for c in mine
        },
        "results": f"experiments/adaptation/{study.artefacts.name}/results.md",
    }
    write_model(
        out,
        config,
        params,
        {
            "step": pretrain_info["iterations"],
            "frames": pretrain_info["frames"],
            "description": (
                f"the decisive study's shipped start by Amendment 3's rule ({arm}, seed {seed})"
                if selection
                else f"the decisive study's best pretrained start ({arm}, seed {seed})"
            ),
            "command": f"python experiments/adaptation/study.py --preset {study.preset_name} "
            f"--only report --ship {out}",
            "card": card,
        },
    )
    return card


def write_pack(study: Study, pack: Path) -> None:
    """Every finished pretraining run (its exported model and JSON) into the tar.gz `pack`,
    rewritten whole after each run, so a time limit keeps what finished."""
    pack = Path(pack)
    pack.parent.mkdir(parents=True, exist_ok=True)
    temporary = pack.with_name(pack.name + ".tmp")
    with tarfile.open(temporary, "w:gz") as archive:
        for info in sorted(study.path("pretrain").glob("*.json")):
            name = info.stem
            archive.add(info, arcname=f"pretrain/{info.name}")
            archive.add(study.pretrained_model(*_arm_seed(name)), arcname=f"models/pretrain/{name}")
        manifest = json.dumps({"preset": study.preset_name}).encode()
        entry = tarfile.TarInfo("pack.json")
        entry.size = len(manifest)
        archive.addfile(entry, io.BytesIO(manifest))
    os.replace(temporary, pack)


def _arm_seed(name: str) -> tuple[str, int]:
    arm, _, seed = name.rpartition("_s")
    return arm, int(seed)


def unpack(study: Study, pack: Path) -> list[str]:
    """Extracts a pack into the artefacts; returns the runs it added."""
    added = []
    with tarfile.open(pack, "r:gz") as archive:
        members = archive.getmembers()
        manifest = json.loads(archive.extractfile("pack.json").read())
        if manifest.get("preset") != study.preset_name:
            raise ValueError(
                f"{pack} holds preset {manifest.get('preset')!r} runs, not {study.preset_name!r}"
            )
        for member in members:
            if member.name == "pack.json":
                continue
            if member.name.startswith("/") or ".." in Path(member.name).parts:
                raise ValueError(f"{pack}: unsafe path {member.name!r}")
            if member.name.startswith("pretrain/") and not study.path(member.name).exists():
                added.append(Path(member.name).stem)
        archive.extractall(
            study.artefacts, members=[m for m in members if m.name != "pack.json"], filter="data"
        )
    return added


# ---------------------------------------------------------------------------------------------
# Statistics


def t_interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of Student's t 95% interval (0 for a single value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def minimum_detectable(values: list[float], n: int | None = None) -> float | None:
    """The smallest true mean difference a paired t test over these cells detects with 80%
    power at a two-sided 5% level: (t_0.975 + t_0.8) x sd / sqrt(n), sd from the cells; with
    `n`, projected to n units of the same sd (the MDE a design of n seeds would have)."""
    from scipy import stats

    if len(values) < 3:
        return None
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    n = len(values) if n is None else n
    return float(stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)


def scratch_equivalent_frames(points: list[tuple[int, float]], score: float) -> tuple[float, bool]:
    """(frames, censored): the frames at which the scratch curve `points` [(frames, score)]
    first reaches `score`, the curve taken as its running maximum and linear between points;
    0 for a score at or below the curve's start, and (the last frames, True) for a score the
    curve never reaches."""
    points = sorted(points)
    best = []
    top = -math.inf
    for frames, s in points:
        top = max(top, s)
        best.append((frames, top))
    if score <= best[0][1]:
        return float(best[0][0]), False
    for (f0, s0), (f1, s1) in zip(best, best[1:], strict=False):
        if s1 >= score > s0:
            return f0 + (f1 - f0) * (score - s0) / (s1 - s0), False
    return float(best[-1][0]), True


def auc(points: list[tuple[int, float]]) -> float:
    """Mean score over the adaptation iterations [(iteration, score)], trapezoidal."""
    points = sorted(points)
    if len(points) == 1:
        return points[0][1]
    area = sum(
        (i1 - i0) * (s0 + s1) / 2 for (i0, s0), (i1, s1) in zip(points, points[1:], strict=False)
    )
    return area / (points[-1][0] - points[0][0])


# ---------------------------------------------------------------------------------------------
# Report


def collect(study: Study) -> dict:
    """Everything finished so far, as one JSON-able dict."""
    preset = study.preset
    cells = {}
    for path in sorted(study.path("cells").glob("*.json")) if study.path("cells").is_dir() else []:
        c = study.read("cells", path.name)
        if c is None:  # damaged: moved aside, played again by the next run
            continue
        if c.get("yardstick") == yardstick(preset) and c.get("yardstick2") == yardstick2(preset):
            cells[(c["arm"], c["seed"], c["variant"])] = c  # (other yardsticks': history)
    decision = study.read("extension.json") if preset.extend else None
    curves = {v: study.read("curve", f"{slug(v)}.json") for v in preset.variants}
    curves = {
        v: c if c and c.get("yardstick") == yardstick(preset) else None for v, c in curves.items()
    }
    out = {
        "preset": study.preset_name,
        "settings": dataclasses.asdict(preset),
        "references": {v: study.read("reference", f"{slug(v)}.json") for v in preset.variants},
        "pretrain": {
            f"{a}_s{s}": study.read("pretrain", f"{a}_s{s}.json")
            for a in preset.arms
            for s in preset.seeds
        },
        "sensitivity": study.read("sensitivity.json"),
        "curves": curves,
        "cells": [],
        "long": study.read("long.json"),
        "calibration2": {v: study.read("curve2", f"{slug(v)}.json") for v in preset.variants}
        if yardstick2(preset)
        else None,
    }
    if decision:
        # Amendment 4's seeds: their cells apart, so every registered number stays the
        # registered seeds' (the extended comparisons read both lists, `seed_level_endpoints`).
        out["extension"] = {
            **decision,
            "pretrain": {
                f"{a}_s{s}": study.read("pretrain", f"{a}_s{s}.json")
                for s, arms in extension_runs(decision)
                for a in arms
            },
        }
        out["extension_cells"] = []
    for (arm, seed, variant), c in cells.items():
        row = {"arm": arm, "seed": seed, "variant": variant, "points": []}
        curve_points = None
        if curves.get(variant):
            curve_points = [(p["frames"], p["score"]) for p in curves[variant]["points"]]
        for p in c["points"]:
            score = p["matches"]["reference"]["score"]
            entry = {
                "iteration": p["iteration"],
                "frames": p["frames"],
                "score": score,
                "greedy": p["matches"].get("greedy", {}).get("score"),
                "opening_decided": p["matches"]["reference"].get("opening_decided"),
            }
            if curve_points:
                sef, censored = scratch_equivalent_frames(curve_points, score)
                entry.update(sef=sef, sef_censored=censored)
                if p["frames"]:
                    entry["speedup"] = sef / p["frames"]
            if "whole_network" in p:
                entry["score16"] = p["whole_network"]["match"]["score"]
                entry["policy_loss"] = p["whole_network"]["policy_loss"]
                entry["value_loss"] = p["whole_network"]["value_loss"]
            row["points"].append(entry)
        row["auc"] = auc([(p["iteration"], p["score"]) for p in row["points"]])
        for field in ("score16", "policy_loss", "value_loss"):
            if all(field in p for p in row["points"]):
                row[f"auc_{field}"] = auc([(p["iteration"], p[field]) for p in row["points"]])
        row["zero_shot_final"] = c["zero_shot_final"]["score"]
        if seed in preset.seeds:
            out["cells"].append(row)
        elif decision and arm in dict(extension_runs(decision)).get(seed, ()):
            out["extension_cells"].append(row)
    return out


def paired(results: dict, a: str, b: str, metric, b_metric=None) -> list[float]:
    """a - b over the (variant, seed) cells both arms have; `metric(row)` a number or None."""
    b_metric = b_metric or metric
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    diffs = []
    for (arm, seed, variant), row in by.items():
        other = by.get((b, seed, variant))
        if arm != a or other is None:
            continue
        x, y = metric(row), b_metric(other)
        if x is not None and y is not None:
            diffs.append(x - y)
    return diffs


def at(iteration: int, field: str = "score"):
    def metric(row):
        for p in row["points"]:
            if p["iteration"] == iteration:
                return p.get(field)
        return None

    return metric


def _difference_text(diffs: list[float]) -> str:
    if not diffs:
        return "-"
    mean, half = t_interval(diffs)
    mde = minimum_detectable(diffs)
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}] (n={len(diffs)}" + (
        f", MDE {mde:.3f})" if mde is not None else ")"
    )


def primary_variants(results: dict) -> list[str]:
    """The variants of the primary analysis: a calibrated mid with range (Amendment 2)."""
    return [v for v, c in (results.get("curves") or {}).items() if c and c.get("primary")]


def endpoints(results: dict) -> list[tuple[str, list[float]]]:
    """The pre-registered endpoints over the primary variants: (name, paired differences)."""
    primary = set(primary_variants(results))
    results = {**results, "cells": [c for c in results["cells"] if c["variant"] in primary]}
    rows = []
    for arm in ARMS:
        rows.append((f"P1 {arm} - scratch, iteration 0", paired(results, arm, "scratch", at(0))))
        rows.append(
            (f"P1 {arm} - scratch, AUC", paired(results, arm, "scratch", lambda r: r["auc"]))
        )
    for suffix in ("", "+desc"):
        rows.append(
            (
                f"P2 joat{suffix} - joint{suffix}, iteration 1",
                paired(results, f"joat{suffix}", f"joint{suffix}", at(1)),
            )
        )
        rows.append(
            (
                f"P2 joat{suffix} - joint{suffix}, AUC",
                paired(results, f"joat{suffix}", f"joint{suffix}", lambda r: r["auc"]),
            )
        )
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    interaction = []
    for (arm, seed, variant), row in by.items():
        if arm != "joat+desc":
            continue
        others = [by.get((a, seed, variant)) for a in ("joint+desc", "joat", "joint")]
        if all(others):
            interaction.append(
                (row["auc"] - others[0]["auc"]) - (others[1]["auc"] - others[2]["auc"])
            )
    rows.append(("P2 interaction (Reptile gain with - without descriptor), AUC", interaction))
    for iteration in (1, 2):
        rows.append(
            (
                f"P3 joint+desc at 0 - joat at {iteration}",
                paired(results, "joint+desc", "joat", at(0), at(iteration)),
            )
        )
    # The Gardner-only control (secondary, added after the endpoints): does pretraining on
    # one game transfer, and does the rule space add to it?
    if any(c["arm"] == "gardner" for c in results["cells"]):
        for name, a, b in (
            ("C1 gardner - scratch", "gardner", "scratch"),
            ("C2 joint - gardner", "joint", "gardner"),
        ):
            rows.append((f"{name}, iteration 0", paired(results, a, b, at(0))))
            rows.append((f"{name}, AUC", paired(results, a, b, lambda r: r["auc"])))
    return rows


def seed_level(
    results: dict, a: str, b: str, metric, variants: list[str] | None = None
) -> list[float]:
    """Amendment 3's analysis unit: for each pretraining seed, the mean over `variants` (default
    the primary ones) of a's cell metric minus b's in the same (seed, variant); a seed missing
    a cell or a value in either arm is left out."""
    variants = primary_variants(results) if variants is None else variants
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    out = []
    for seed in sorted({r["seed"] for r in results["cells"]}):
        diffs = []
        for v in variants:
            x, y = by.get((a, seed, v)), by.get((b, seed, v))
            x, y = (metric(x) if x else None), (metric(y) if y else None)
            if x is None or y is None:
                break
            diffs.append(x - y)
        else:
            if diffs:
                out.append(sum(diffs) / len(diffs))
    return out


def seeds_needed(diffs: list[float], target: float, cap: int) -> int:
    """The fewest seeds n (at least len(diffs), at most `cap`) at which the MDE projected from
    these per-seed differences' SD is at most `target`; `cap` when no n up to it is."""
    for n in range(len(diffs), cap + 1):
        if minimum_detectable(diffs, n) <= target:
            return n
    return cap


def decide_extension(study: Study, log) -> dict | None:
    """Amendment 4's decision, made once and kept in `extension.json`: for each comparison
    (a, b) of `preset.extend`, the SD of its per-seed yardstick-1 AUC differences over the
    registered seeds, the MDE at those seeds, and the seeds N it needs for `mde_target` (the
    registered number when its MDE is within it). Reads no difference's mean. None before
    every registered seed has both arms' primary cells (nothing is decided early)."""
    preset = study.preset
    if not preset.extend:
        return None
    decided = study.read("extension.json")
    if decided:
        return decided
    results = collect(study)
    comparisons = []
    for a, b in preset.extend:
        diffs = seed_level(results, a, b, lambda r: r["auc"])
        if len(diffs) < len(preset.seeds):
            return None
        mde = minimum_detectable(diffs)
        registered = len(preset.seeds)
        n = (
            registered
            if mde <= preset.mde_target
            else seeds_needed(diffs, preset.mde_target, preset.max_seeds)
        )
        mean = sum(diffs) / len(diffs)
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
        comparisons.append(
            {"a": a, "b": b, "sd": sd, "mde": mde, "seeds": n, "extended": n > registered}
        )
    decision = {
        "rule": "README, Amendment 4 (registered 2026-11-29)",
        "registered_seeds": list(preset.seeds),
        "mde_target": preset.mde_target,
        "max_seeds": preset.max_seeds,
        "comparisons": comparisons,
    }
    study.write(decision, "extension.json")
    log("Amendment 4: " + "; ".join(extension_summary(decision)))
    return decision


def extension_summary(decision: dict) -> list[str]:
    """One phrase per comparison of Amendment 4's decision: its MDE at the registered seeds
    and whether (and how far) it was extended."""
    registered = len(decision["registered_seeds"])
    return [
        f"{c['a']} - {c['b']}: MDE {c['mde']:.3f} at {registered} seeds, "
        + (f"extended to {c['seeds']} seeds" if c["extended"] else "not extended")
        for c in decision["comparisons"]
    ]


def extension_cells(decision: dict, variants) -> int:
    """How many cells Amendment 4's decision plays: each new seed's arms on every variant."""
    return len(variants) * sum(len(arms) for _, arms in extension_runs(decision))


def extension_runs(decision: dict) -> list[tuple[int, tuple[str, ...]]]:
    """(seed, arms) for each of Amendment 4's new seeds, in order: the arms of every extended
    comparison whose N reaches that seed."""
    first = max(decision["registered_seeds"]) + 1
    runs = []
    for seed in range(first, max((c["seeds"] for c in decision["comparisons"]), default=0)):
        arms: list[str] = []
        for c in decision["comparisons"]:
            if seed < c["seeds"]:
                arms += [x for x in (c["a"], c["b"]) if x not in arms]
        runs.append((seed, tuple(arms)))
    return runs


def primary_note(results: dict) -> str:
    """One line: the primary variants the analysis averages over, and a warning naming every
    variant that has cells but no primary curve (its `curve/` file missing, or no range),
    so that an average over fewer variants than played is never silent."""
    primary = primary_variants(results)
    played = sorted({c["variant"] for c in results["cells"]} - set(primary))
    line = f"primary variants: {', '.join(primary) or 'none'}"
    if played:
        left = ", ".join(played)
        line += (
            f" (warning: cells of {left} are left out: not primary, no calibrated mid with range)"
        )
    return line


def seed_level_table(results: dict, registered_seeds: int = 10) -> str:
    """`seed_level_endpoints` as markdown: per comparison the seeds, the mean difference of
    the per-seed means and its Student t 95% interval over the seeds, and Amendment 3's MDE
    at these seeds and at the `registered_seeds` it plans (projected from the same SD; "-"
    below 3 seeds)."""
    rows = [
        "| comparison (per-seed mean over the primary variants) | seeds | difference [95% CI] "
        f"| MDE | MDE at {registered_seeds} seeds |",
        "|---|---:|---|---:|---:|",
    ]
    for name, diffs in seed_level_endpoints(results):
        if diffs:
            mean, half = t_interval(diffs)
            cell = f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"
            projected = None if "(Amendment 4" in name else registered_seeds
            mdes = [minimum_detectable(diffs), projected and minimum_detectable(diffs, projected)]
            mde = " | ".join("-" if m is None else f"{m:.3f}" for m in mdes)
            rows.append(f"| {name} | {len(diffs)} | {cell} | {mde} |")
    return "\n".join(rows)


SEED_LEVEL_COMPARISONS = (
    ("P2", "joat", "joint"),
    ("P1", "joint", "scratch"),
    ("P1", "joat", "scratch"),
    ("C1", "gardner", "scratch"),
    ("C2", "joint", "gardner"),
)


def seed_level_endpoints(results: dict) -> list[tuple[str, list[float]]]:
    """Amendment 3's comparisons, each a list of per-seed differences (Student t over seeds):
    yardstick 1 (AUC, iteration 0 and 1 where registered), then yardstick 2 (the
    16-simulation AUC on the variants with its range, the held-out losses' AUC on every
    primary variant; lower loss is better)."""
    in16 = [v for v, c in (results.get("calibration2") or {}).items() if c and c.get("in")]
    in16 = [v for v in primary_variants(results) if v in in16]
    rows = []
    for tag, a, b in SEED_LEVEL_COMPARISONS:
        name = f"{tag} {a} - {b}"
        rows.append((f"{name}, AUC", seed_level(results, a, b, lambda r: r["auc"])))
        point = 1 if tag == "P2" else 0
        rows.append((f"{name}, iteration {point}", seed_level(results, a, b, at(point))))
    for tag, a, b in SEED_LEVEL_COMPARISONS:
        name = f"{tag} {a} - {b}"
        if in16:
            rows.append(
                (
                    f"{name}, 16-simulation AUC ({len(in16)} variants with range)",
                    seed_level(results, a, b, lambda r: r.get("auc_score16"), in16),
                )
            )
        for loss in ("policy_loss", "value_loss"):
            rows.append(
                (
                    f"{name}, held-out {loss.replace('_', ' ')} AUC (lower is better)",
                    seed_level(results, a, b, lambda r, loss=loss: r.get(f"auc_{loss}")),
                )
            )
    return rows + extension_endpoints(results)


def extension_endpoints(results: dict) -> list[tuple[str, list[float]]]:
    """Amendment 4's rows, after every registered one: each extended comparison's per-seed
    differences (yardstick 1, AUC and the registered iteration) over seeds 0 to N-1."""
    decision = results.get("extension") or {}
    merged = {**results, "cells": results["cells"] + results.get("extension_cells", [])}
    tags = {(a, b): tag for tag, a, b in SEED_LEVEL_COMPARISONS}
    rows = []
    for c in decision.get("comparisons", []):
        if not c["extended"]:
            continue
        a, b, n = c["a"], c["b"], c["seeds"]
        tag = tags.get((a, b), "")
        within = {**merged, "cells": [r for r in merged["cells"] if r["seed"] < n]}
        name = f"{tag} {a} - {b}".strip()
        point = 1 if tag == "P2" else 0
        label = f"(Amendment 4, seeds 0-{n - 1})"
        rows.append((f"{name}, AUC {label}", seed_level(within, a, b, lambda r: r["auc"])))
        rows.append((f"{name}, iteration {point} {label}", seed_level(within, a, b, at(point))))
    return rows


SPEEDUP_THRESHOLD = 0.4  # Amendment 5: the score against the mid both curves must reach
ADAPT_RESOLUTION = 512.0  # one adaptation iteration's frames: a start already at T
UNREACHED = (4096.0, 8192.0)  # a cell short of T after 2,048 frames (registered, sensitivity)


def speedup_rows(results: dict, threshold: float = SPEEDUP_THRESHOLD, unreached: float = 4096.0):
    """Amendment 5's speed-up in frames, per arm: for each seed the geometric mean over the
    primary variants of F_s / F_a (scratch-curve frames to `threshold` against the mid over the
    cell's adaptation frames to it, both curves as running maxima, linear between points; a
    cell starting at or above it counts one adaptation iteration, one short of it after its
    last point `unreached` frames). Returns [(arm, per-seed log ratios, started, unreached,
    cells)]."""
    primary = primary_variants(results)
    scratch_frames = {}
    for v in primary:
        curve_points = [(p["frames"], p["score"]) for p in results["curves"][v]["points"]]
        scratch_frames[v] = scratch_equivalent_frames(curve_points, threshold)[0]
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    rows = []
    for arm in [a for a in GAME_ARMS if any(r["arm"] == a for r in results["cells"])]:
        logs, started, short, cells = [], 0, 0, 0
        for seed in sorted({r["seed"] for r in results["cells"]}):
            ratios = []
            for v in primary:
                row = by.get((arm, seed, v))
                if row is None:
                    break
                points = [(p["frames"], p["score"]) for p in row["points"]]
                frames, censored = scratch_equivalent_frames(points, threshold)
                cells += 1
                if censored:
                    short += 1
                    frames = unreached
                elif min(points)[1] >= threshold:
                    started += 1
                if not censored:
                    frames = max(frames, ADAPT_RESOLUTION)
                ratios.append(math.log(scratch_frames[v] / frames))
            else:
                if ratios:
                    logs.append(sum(ratios) / len(ratios))
        rows.append((arm, logs, started, short, cells))
    return rows


def speedup_table(results: dict) -> str:
    """`speedup_rows` as markdown, at both registered values for unreached cells."""
    lines = [
        f"Speed-up in frames to {SPEEDUP_THRESHOLD} against the mid (Amendment 5): scratch "
        "frames / adaptation frames, geometric mean over the primary variants per seed, "
        "Student t over seeds.",
        "",
        "| arm | seeds | ratio [95% CI] | unreached at 8,192 | cells at T from the start | "
        "cells short of T |",
        "|---|---:|---|---|---:|---:|",
    ]
    low, high = (speedup_rows(results, unreached=u) for u in UNREACHED)
    for (arm, logs, started, short, cells), (_, logs8, *_) in zip(low, high, strict=True):
        if not logs:
            continue
        texts = []
        for values in (logs, logs8):
            mean, half = t_interval(values) if len(values) > 1 else (values[0], math.nan)
            texts.append(
                f"{math.exp(mean):.1f}x [{math.exp(mean - half):.1f}, {math.exp(mean + half):.1f}]"
            )
        lines.append(
            f"| {arm} | {len(logs)} | {texts[0]} | {texts[1]} | {started}/{cells} | "
            f"{short}/{cells} |"
        )
    return "\n".join(lines)


def unseen_rule_rows(results: dict, other: dict) -> list[tuple[str, list[float]]]:
    """Amendment 5's D rows: this preset's joint and JOAT minus `other`'s (Amendment 3's, the
    same variants, seeds and procedure) per seed, yardstick 1: what holding the rule out costs."""
    theirs = [{**r, "arm": f"{r['arm']}@{other['preset']}"} for r in other["cells"]]
    merged = {**results, "cells": results["cells"] + theirs}
    rows = []
    for arm in ("joint", "joat"):
        name = f"D {arm} - {arm}@{other['preset']}"
        rows.append(
            (
                f"{name}, AUC",
                seed_level(merged, arm, f"{arm}@{other['preset']}", lambda r: r["auc"]),
            )
        )
        rows.append(
            (f"{name}, iteration 0", seed_level(merged, arm, f"{arm}@{other['preset']}", at(0)))
        )
    return rows


def amendment5_text(study: Study, results: dict) -> str:
    """The speed-up table, and for a preset with held-out components the D rows against the
    power preset's committed cells (at the same procedure only)."""
    parts = [speedup_table(results)]
    if study.preset.held_out_components:
        power = collect(committed("power", study.warn))
        same = (results.get("sensitivity") or {}).get("choice") == cell_procedure(
            study.preset, (results.get("sensitivity") or {}).get("choice")
        )
        if same:
            table = seed_level_table({**results, "cells": []})  # the header only
            rows = table.splitlines()[:2]
            for name, diffs in unseen_rule_rows(results, power):
                if diffs:
                    mean, half = t_interval(diffs)
                    mde = minimum_detectable(diffs)
                    rows.append(
                        f"| {name} | {len(diffs)} | {mean:+.3f} [{mean - half:+.3f}, "
                        f"{mean + half:+.3f}] | {'-' if mde is None else f'{mde:.3f}'} | - |"
                    )
            parts.append("\n".join(rows))
    return "\n\n".join(parts)


def report(study: Study, results: dict) -> str:
    preset = study.preset
    cells = results["cells"]
    variants = [v for v in preset.variants if any(c["variant"] == v for c in cells)]
    arms = [a for a in GAME_ARMS if any(c["arm"] == a for c in cells)]
    iterations = sorted({p["iteration"] for c in cells for p in c["points"]})
    finished_pretrain = sum(1 for v in results["pretrain"].values() if v)
    expected_cells = len(preset.variants) * len(preset.seeds) * (len(preset.arms) + 1)
    lines = [f"# The decisive adaptation study ({study.preset_name} preset)", ""]
    lines += ["## Current result", ""]
    lines.append(
        f"- Progress: {sum(1 for v in results['references'].values() if v)}/{len(preset.variants)}"
        f" references, {finished_pretrain}/{len(preset.arms) * len(preset.seeds)} pretraining"
        f" runs, {len(cells)}/{expected_cells} adaptation cells"
        + (", the long run done" if (results.get("long") or {}).get("complete") else "")
        + "."
    )
    if results.get("sensitivity"):
        s = results["sensitivity"]
        lines.append(
            f"- Adaptation procedure (and JOAT's inner loop): {_procedure_name(s['choice'])}, "
            + (
                "chosen by held-out loss: "
                + ", ".join(f"{n} {m:.3f}" for n, m in s["means"].items())
                if "means" in s
                else f"{s.get('rule', 'registered')}"
            )
            + "."
        )
    curves = {v: c for v, c in (results.get("curves") or {}).items() if c}
    primary = primary_variants(results)
    if curves:
        lines.append(
            "- Primary analysis (a mid where a random network scores <= "
            f"{preset.calibration_max:.2f}, and range >= {preset.min_range:.2f}: the final "
            "reference's score against the mid minus the random networks'): "
            + (", ".join(f"`{v}` (range {curves[v]['range']:.2f})" for v in primary) or "none")
            + ". Out (secondary only): "
            + (
                ", ".join(
                    f"`{v}` ("
                    + (f"range {c['range']:.2f}" if c.get("calibrated") else "no mid")
                    + ")"
                    for v, c in curves.items()
                    if v not in primary
                )
                or "none"
            )
            + ". Endpoints below are over the primary variants' cells (README, Amendment 2)."
        )
    if yardstick2(preset):
        lines.append(
            "- Endpoints at the pretraining-seed level (README, Amendment 3): per seed the mean "
            "over the primary variants of the paired cell difference, Student t over seeds; "
            "n = seeds, MDE at 80% power, 5% two-sided."
        )
        calibration2 = {v: c for v, c in (results.get("calibration2") or {}).items() if c}
        if calibration2:
            lines.append(
                f"- Yardstick 2 ({preset.whole_network_simulations} simulations) range "
                "(final reference minus a random network, against the mid): "
                + ", ".join(
                    f"`{v}` {c['range']:.2f}" + ("" if c["in"] else " (out)")
                    for v, c in calibration2.items()
                )
                + "."
            )
    for name, diffs in seed_level_endpoints(results) if yardstick2(preset) else endpoints(results):
        if diffs:
            lines.append(f"- {name}: {_difference_text(diffs)}")
    if results.get("extension"):
        planned = extension_cells(results["extension"], preset.variants)
        lines.append(
            "- Amendment 4 (README): "
            + "; ".join(extension_summary(results["extension"]))
            + f"; {len(results['extension_cells'])}/{planned} of its cells in."
        )
        if len(results["extension_cells"]) < planned:
            lines.append(
                "- **Amendment 4 incomplete**: its rows cover the new seeds played so far; "
                "they are not findings before all its seeds are in."
            )
    if len(cells) < expected_cells:
        lines.append(
            "- **Incomplete**: the numbers above cover the cells played so far; "
            "no endpoint is a finding before all seeds are in."
        )
    lines.append("")
    head = " | ".join(f"it {i}" for i in iterations)
    if cells:
        lines += [
            "## Score against the mid reference (mean +- t 95% over seeds)",
            "",
            f"| variant | arm | {head} | zero-shot vs final | SEF at it 1 (speed-up) |",
            "|---|---|" + "---:|" * (len(iterations) + 2),
        ]
    for variant in variants:
        for arm in arms:
            rows = [c for c in cells if c["variant"] == variant and c["arm"] == arm]
            if not rows:
                continue
            texts = []
            for i in iterations:
                values = [at(i)(r) for r in rows if at(i)(r) is not None]
                if values:
                    m, h = t_interval(values)
                    texts.append(f"{m:.2f}" + (f" +- {h:.2f}" if h else ""))
                else:
                    texts.append("-")
            zs = t_interval([r["zero_shot_final"] for r in rows])
            sef = [at(1, "sef")(r) for r in rows if at(1, "sef")(r) is not None]
            speedup = [at(1, "speedup")(r) for r in rows if at(1, "speedup")(r) is not None]
            censored = any(at(1, "sef_censored")(r) for r in rows)
            sef_text = "-"
            if sef:
                sef_text = f"{sum(sef) / len(sef):,.0f}" + ("+" if censored else "")
                sef_text += f" ({sum(speedup) / len(speedup):.0f}x)" if speedup else ""
            lines.append(
                f"| `{variant}` | {arm} | " + " | ".join(texts) + f" | {zs[0]:.2f} | {sef_text} |"
            )
    if any(results["curves"].values()):
        lines += ["", "## The scratch curves (score against the mid reference)", ""]
        for variant, c in results["curves"].items():
            if c:
                lines.append(
                    f"- `{variant}` (mid = it{c['mid']}"
                    + ("" if c.get("calibrated", True) else ", NOT calibrated: no range")
                    + "): "
                    + ", ".join(f"{p['frames']:,} frames {p['score']:.2f}" for p in c["points"])
                )
    decided = [
        p["opening_decided"]
        for c in cells
        for p in c["points"]
        if p.get("opening_decided") is not None
    ]
    if decided:
        lines += [
            "",
            f"Games over before the opening ended: {100 * sum(decided) / len(decided):.1f}% "
            f"of the matches' games (mean over {len(decided)} matches).",
        ]
    long = results.get("long") or {}
    if long.get("points"):
        lines += [
            "",
            f"## Zero-shot transfer against pretraining frames (long run: {long['arm']}, seed "
            f"{preset.seeds[0]})",
            "",
            "Score against each variant's final reference, the yardstick's matches "
            "(`transfer.png`); primary variants marked *.",
            "",
            "| iteration | frames | "
            + " | ".join(f"`{v}`" + ("*" if v in primary else "") for v in preset.variants)
            + " | mean |",
            "|---:|---:|" + "---:|" * (len(preset.variants) + 1),
        ]
        for p in long["points"]:
            scores = [p["zero_shot_final"][v]["score"] for v in preset.variants]
            lines.append(
                f"| {p['iteration']} | {p['frames']:,} | "
                + " | ".join(f"{x:.2f}" for x in scores)
                + f" | {sum(scores) / len(scores):.3f} |"
            )
    if results.get("pretrain"):
        lines += [
            "",
            "## Pretraining runs",
            "",
            "| run | frames | sequential steps | optimizer | minutes |",
            "|---|---:|---:|---|---:|",
        ]
        for name, info in results["pretrain"].items():
            if info:
                lines.append(
                    f"| {name} | {info['frames']:,} | {info['sequential_steps']} "
                    f"| {info['optimizer']} | {info['seconds'] / 60:.1f} |"
                )
    text = "\n".join(lines) + "\n"
    study.path("results.md").write_text(text)
    study.path("results.json").write_text(json.dumps(results, indent=1))
    return text


def plot(study: Study, results: dict) -> None:
    """`games.png` (score against the mid reference over adaptation frames, per variant, the
    scratch curve beside the arms) and `transfer.png` (the long run, zero-shot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cells = results["cells"]
    variants = [
        v
        for v in study.preset.variants
        if results["curves"].get(v) or any(c["variant"] == v for c in cells)
    ]
    if variants:
        columns = min(3, len(variants))
        rows = math.ceil(len(variants) / columns)
        figure = Figure(figsize=(4.5 * columns, 3.4 * rows), dpi=90)
        FigureCanvasAgg(figure)
        for index, variant in enumerate(variants):
            axes = figure.add_subplot(rows, columns, index + 1)
            c = results["curves"].get(variant)
            if c:
                xs = [max(p["frames"], 1) for p in c["points"]]
                axes.plot(
                    xs, [p["score"] for p in c["points"]], "k--", marker="s", label="scratch recipe"
                )
            for arm in GAME_ARMS:
                arm_rows = [r for r in cells if r["variant"] == variant and r["arm"] == arm]
                if not arm_rows:
                    continue
                by_frames: dict = {}
                for r in arm_rows:
                    for p in r["points"]:
                        by_frames.setdefault(max(p["frames"], 1), []).append(p["score"])
                xs = sorted(by_frames)
                axes.plot(
                    xs, [sum(by_frames[x]) / len(by_frames[x]) for x in xs], marker="o", label=arm
                )
            axes.set_xscale("log")
            axes.set_ylim(-0.02, 1.02)
            axes.set_title(variant, fontsize=8)
            axes.set_xlabel("frames of training on the variant (1 = none)")
            axes.set_ylabel("score vs mid reference")
            axes.grid(alpha=0.3)
            if index == 0:
                axes.legend(fontsize=6)
        figure.tight_layout()
        figure.savefig(study.path("games.png"))
    long = results.get("long")
    if long and long.get("points"):
        figure = Figure(figsize=(5, 3.4), dpi=90)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot(1, 1, 1)
        for variant in study.preset.variants:
            xs = [p["frames"] for p in long["points"]]
            axes.plot(
                xs,
                [p["zero_shot_final"][variant]["score"] for p in long["points"]],
                marker=".",
                label=variant,
            )
        axes.axhline(0.5, color="grey", linewidth=0.6, linestyle="--")
        axes.set_xlabel(f"pretraining frames ({long['arm']})")
        axes.set_ylabel("zero-shot score vs final reference")
        axes.legend(fontsize=6)
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(study.path("transfer.png"))
    if yardstick2(study.preset):
        plot_seed_level(study, results)


def plot_seed_level(study: Study, results: dict) -> None:
    """`endpoints.png`: every score comparison at the pretraining-seed level (the losses are on
    another scale and stay in results.md): each seed's difference as a dot, the mean with its
    Student t 95% interval as a bar, the MDE as a tick either side of 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [(n, d) for n, d in seed_level_endpoints(results) if d and "loss" not in n]
    if not rows:
        return
    figure = Figure(figsize=(7.5, 0.32 * len(rows) + 1.2), dpi=90)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for y, (_, diffs) in enumerate(reversed(rows)):
        mean, half = t_interval(diffs)
        axes.scatter(diffs, [y] * len(diffs), s=9, color="grey", alpha=0.6, zorder=2)
        axes.errorbar(mean, y, xerr=half, fmt="o", color="black", capsize=3, zorder=3)
        mde = minimum_detectable(diffs)
        if mde is not None:
            axes.plot([-mde, mde], [y, y], "|", color="tab:red", markersize=8, zorder=1)
    axes.axvline(0.0, color="black", linewidth=0.6)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([f"{n} (n={len(d)})" for n, d in reversed(rows)], fontsize=6)
    axes.set_xlabel(
        "difference in score vs mid (dots: seeds; bar: mean, t 95%; red ticks: +-MDE)", fontsize=7
    )
    axes.grid(alpha=0.3, axis="x")
    figure.tight_layout()
    figure.savefig(study.path("endpoints.png"))


# ---------------------------------------------------------------------------------------------
# The plan


def run(
    study: Study,
    log,
    *,
    only: str = "all",
    budget_minutes: float = 0.0,
    pack=None,
    seeds=None,
    variants=None,
) -> bool:
    """Runs the stages in order until done or out of time; True when everything is done."""
    preset = study.preset
    started = time.time()
    requested = seeds
    seeds = tuple(s for s in seeds or preset.seeds if s in preset.seeds)
    variants = variants or preset.variants

    def out_of_time() -> bool:
        return bool(budget_minutes) and time.time() - started > 60 * budget_minutes

    def want(stage: str) -> bool:
        return only == "all" or only == stage

    complete = True
    if want("references") or want("all"):
        for v in variants:
            if out_of_time():
                return False
            references(study, v, log)
    if want("pretrain"):
        # The joint and gardner arms do not depend on the procedure: the seed-0 ones first
        # (the procedure's stage adapts them), and all of them in a pretraining-only run.
        for seed in seeds if only == "pretrain" else seeds[:1]:
            for arm in [a for a in preset.arms if not a.startswith("joat")]:
                if out_of_time():
                    return False
                pretrain(study, arm, seed, None, log, pack)
    if preset.procedure_rule == "fixed":
        sensitivity(study, log)  # (registered: written at once)
    if only == "pretrain" and study.read("sensitivity.json") is None:
        # A pretraining-only run (an accelerator's) does not decide the procedure. The JOAT
        # arms wait for `--only sensitivity` on the CPU and a second call.
        if preset.procedure_rule == "training_tasks":
            log("the JOAT arms wait for the step-size stage (`--only sensitivity`, Amendment 3)")
        else:
            log("the JOAT arms wait for the sensitivity stage (it needs the references)")
        return False
    if want("sensitivity") or want("all"):
        if out_of_time():
            return False
        sensitivity(study, log)
    choice = (study.read("sensitivity.json") or {}).get("choice")
    for seed in seeds:
        if want("pretrain") or want("all"):
            for arm in preset.arms:
                if out_of_time():
                    return False
                pretrain(study, arm, seed, choice, log, pack)
        if want("games") or want("all"):
            for v in variants:
                if out_of_time():
                    return False
                curve(study, v, log)
                whole_network_calibration(study, v, log)  # (a preset with yardstick 2)
                for arm in ("scratch", *preset.arms):
                    if arm != "scratch" and study.read("pretrain", f"{arm}_s{seed}.json") is None:
                        complete = False
                        continue
                    if out_of_time():
                        return False
                    cell(study, arm, seed, v, cell_procedure(preset, choice), log)
    if preset.extend and only in ("all", "pretrain", "games"):
        done = extend(study, log, only, choice, requested, variants, out_of_time, pack)
        complete = done and complete
    if want("long") or want("all"):
        if out_of_time():
            return False
        complete = long_run(study, choice, log) is not None and complete
    return complete


def extend(study: Study, log, only, choice, requested, variants, out_of_time, pack) -> bool:
    """Amendment 4's runs (`run`'s stages for its new seeds: the extended comparisons' arms'
    pretraining and their cells, no scratch); True when they are all done, False while the
    decision waits for the registered cells or out of time."""
    decision = decide_extension(study, log)
    if decision is None:
        return False
    complete = True
    for seed, arms in extension_runs(decision):
        if requested and seed not in requested:
            continue
        if only in ("all", "pretrain"):
            for arm in arms:
                if out_of_time():
                    return False
                pretrain(study, arm, seed, choice, log, pack)
        if only in ("all", "games"):
            for v in variants:
                for arm in arms:
                    if study.read("pretrain", f"{arm}_s{seed}.json") is None:
                        complete = False
                        continue
                    if out_of_time():
                        return False
                    cell(study, arm, seed, v, cell_procedure(study.preset, choice), log)
    return complete


def extension_status(decision: dict | None, registered: int, done) -> list[str]:
    """`status`'s lines for Amendment 4: its decision per comparison and its pretraining runs
    (`done(*parts)` the state of one artefact)."""
    if not decision:
        return [f"Amendment 4: - (decided once the {registered} registered seeds' cells are in)"]
    lines = [f"Amendment 4 {line}" for line in extension_summary(decision)]
    for seed, arms in extension_runs(decision):
        lines += [f"pretrain {a} s{seed}: {done('pretrain', f'{a}_s{seed}.json')}" for a in arms]
    return lines


def status(study: Study) -> str:
    """What is done, one line per unit; a damaged artefact is not done and is named in a line
    of its own (it is moved aside only by a run, which computes its unit again)."""
    preset = study.preset
    notes: list[str] = []
    # Reads nothing into place and moves nothing: another preset's damaged files are noted.
    view = dataclasses.replace(study, read_only=True, warn=notes.append)
    damaged: list[str] = []

    def read(*parts: str):
        path = study.path(*parts)
        damage = study.damaged(*parts)
        if damage:
            damaged.append(
                f"damaged: {path} ({damage}); the next run moves it to "
                f"{path.name}{DAMAGED_SUFFIX} and computes its unit again"
            )
            return None
        return view.read(*parts)

    def done(*parts: str) -> str:
        before = len(damaged)
        if read(*parts):
            return "done"
        return "- (damaged)" if len(damaged) > before else "-"

    lines = []
    for v in preset.variants:
        lines.append(f"reference {v}: {done('reference', f'{slug(v)}.json')}")
        lines.append(f"curve {v}: {done('curve', f'{slug(v)}.json')}")
    choice = (read("sensitivity.json") or {}).get("choice")
    if preset.procedure_rule == "fixed":  # registered: known before the stage writes it
        choice = {"optimizer": "sgd", "learning_rate": float(preset.fixed_step)}
    for s in preset.seeds:
        for a in preset.arms:
            state = done("pretrain", f"{a}_s{s}.json")
            if state == "-" and a.startswith("joat") and choice is None:
                state = "- (waits for the procedure)"
            elif state == "-":
                source = reusable(view, a, s, choice)
                state = f"- (the {source.preset_name} preset's run is reused)" if source else "-"
            lines.append(f"pretrain {a} s{s}: {state}")
    rule = {"training_tasks": "training tasks", "fixed": "registered"}.get(
        preset.procedure_rule, "held-out"
    )
    lines.append(
        f"sensitivity ({rule}): "
        + (f"done, {_procedure_name(choice)}" if choice else done("sensitivity.json"))
    )
    total = len(preset.variants) * len(preset.seeds) * (len(preset.arms) + 1)
    if preset.extend:
        decision = read("extension.json")
        lines += extension_status(decision, len(preset.seeds), done)
        total += extension_cells(decision, preset.variants) if decision else 0
    folder = study.path("cells")
    names = sorted(path.name for path in folder.glob("*.json")) if folder.is_dir() else []
    have = sum(read("cells", name) is not None for name in names)
    broken = len(names) - have
    lines.append(f"cells: {have}/{total}" + (f" ({broken} damaged)" if broken else ""))
    long = read("long.json")
    if not preset.long_iterations:
        lines.append("long run: none in this preset")
    else:
        lines.append(f"long run: {'done' if long and long.get('complete') else '-'}")
    return "\n".join(lines + damaged + notes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python experiments/adaptation/study.py",
        description="The decisive adaptation study (resumable; the same command every sitting).",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--workdir", default=None, help="heavy state (default runs/study_PRESET)")
    parser.add_argument(
        "--artefacts",
        default=None,
        help="small results, committed (default experiments/adaptation/decisive_PRESET; "
        "the smoke preset: WORKDIR/artefacts)",
    )
    parser.add_argument("--budget-minutes", type=float, default=0.0, help="stop between units")
    parser.add_argument(
        "--only",
        choices=("all", "references", "pretrain", "sensitivity", "games", "long", "report"),
        default="all",
    )
    parser.add_argument(
        "--ship",
        default=None,
        metavar="FOLDER",
        help="after the report: export the best pretrained start (mean AUC over the primary "
        "cells) with the study's adaptation settings and its card into FOLDER, exit",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="a subset of the preset's seeds (power: or of Amendment 4's, once decided)",
    )
    parser.add_argument("--variants", nargs="+", help="a subset of the preset's variants")
    parser.add_argument("--iterations", type=int, help="pretraining iterations (a dry run: 1)")
    parser.add_argument("--pack", default=None, help="archive every finished pretraining run here")
    parser.add_argument("--unpack", default=None, help="add a pack's runs to the artefacts, exit")
    parser.add_argument("--status", action="store_true", help="say what is done, exit")
    parser.add_argument(
        "--seed-level",
        action="store_true",
        help="print the endpoints at the pretraining-seed level from the committed cells, exit",
    )
    parser.add_argument("--prepare", action="store_true", help="validate every config, exit")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset]
    if args.iterations is not None:
        if args.iterations < 1:
            parser.error("--iterations must be at least 1")
        preset = dataclasses.replace(preset, pretrain_iterations=args.iterations)
    if args.budget_minutes < 0:
        parser.error("--budget-minutes must be >= 0")
    workdir = Path(args.workdir or f"runs/study_{args.preset}")
    for flag, path in (("--workdir", workdir), ("--artefacts", args.artefacts)):
        if path is not None and Path(path).exists() and not Path(path).is_dir():
            parser.error(f"{flag} {path} is a file, not a folder")
    if args.artefacts:
        artefacts = Path(args.artefacts)
    elif args.preset == "smoke":
        artefacts = workdir / "artefacts"
    else:
        artefacts = ROOT / "experiments" / "adaptation" / f"decisive_{args.preset}"
    seeds = tuple(args.seeds) if args.seeds else None
    allowed = set(preset.seeds) | (set(range(preset.max_seeds)) if preset.extend else set())
    if seeds and not set(seeds) <= allowed:
        parser.error(
            f"--seeds {list(seeds)} not among the preset's {list(preset.seeds)}"
            + (f" (or Amendment 4's, below {preset.max_seeds})" if preset.extend else "")
        )
    variants = None
    if args.variants:
        from mmc_jax import rules as R

        try:
            variants = tuple(R.canonical(v) for v in args.variants)
        except ValueError as error:
            parser.error(f"--variants: {error}")
        known = {R.canonical(v): v for v in preset.variants}
        unknown = [v for v in variants if v not in known]
        if unknown:
            parser.error(f"--variants {unknown} not among the preset's {list(preset.variants)}")
        variants = tuple(known[v] for v in variants)
    study = Study(args.preset, preset, workdir, artefacts)
    if args.status:
        print(status(study))
        return 0
    if args.seed_level:
        results = collect(study)
        print(primary_note(results))
        print(seed_level_table(results))
        if results["cells"] and primary_variants(results):
            print()
            print(amendment5_text(study, results))
        return 0
    from mmc_jax.infra import startup

    startup.start()  # persistent compile cache: a relaunched sitting loads its programs
    if args.prepare:
        names = prepare_all(preset)
        print(f"{len(names)} configs prepared")
        return 0
    workdir.mkdir(parents=True, exist_ok=True)
    artefacts.mkdir(parents=True, exist_ok=True)
    log = Log(workdir)
    study = dataclasses.replace(study, warn=log)  # a damaged artefact's note in study.log too
    if args.unpack:
        try:
            added = unpack(study, Path(args.unpack))
        except (OSError, ValueError, KeyError, tarfile.TarError) as error:
            print(f"error: --unpack {args.unpack}: {error}", file=sys.stderr)
            return 2
        log(f"unpacked {len(added)} runs: {', '.join(added) or 'none new'}")
        return 0
    complete = True
    if args.only != "report":
        from mmc_jax import train
        from mmc_jax.infra import storage

        try:
            with storage.workdir_lock(workdir):  # one study process per workdir
                complete = run(
                    study,
                    log,
                    only=args.only,
                    budget_minutes=args.budget_minutes,
                    pack=Path(args.pack) if args.pack else None,
                    seeds=seeds,
                    variants=variants,
                )
        except storage.WorkdirBusy as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            log("interrupted: finished units are kept; rerun the same command to continue")
            return 130
        except train.Stopped as error:
            # A signal (a time limit's SIGTERM) stopped a training unit: it is not exported,
            # recorded or packed, and no later unit starts.
            log(f"stopped ({error}): finished units are kept; rerun the same command to continue")
            return 143
    results = collect(study)
    text = report(study, results)
    plot(study, results)
    print(text)
    if args.ship:
        try:
            card = ship(study, results, Path(args.ship))
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        log(f"shipped {card['arm']} seed {card['seed']} to {args.ship}")
    log(
        ("done" if complete else "stopped (rerun to continue)")
        + f"; results: {study.path('results.md')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
