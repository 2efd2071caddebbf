"""JOAT / Reptile meta-training over the rule space: `python -m mmc_jax.train` config.

What every config shares (presets, overrides, resuming, the header): configs/__init__.py.

What it trains (mmc_jax/algorithms/meta.py): `task_space.size` variants are drawn once from a
declared region of the rule space (`task_space`: starts gardner/baby/mallet/any of the 240 shuffles,
every capture, every goal/fog pair, colour any/other; each of those values equally likely,
`task_space.sampling`), never one of the 8 evaluation variants
`HELD_OUT` (dark, atomic, rifle, extinction and four composed points). Every outer iteration
samples `meta.num_tasks` of them, self-plays G games of each (the fair fog search for fog
tasks), and adapts phi to every task with the inner procedure (`inner`: k steps of Adam with
b1 = 0, started fresh per task, on that task's own draw); phi moves toward the mean adapted
parameters (eps). `python -m mmc_jax.adapt` runs the same inner procedure per adaptation
iteration (the `adapt` section: its learner IS `inner`, G games per iteration), so
meta-training optimises exactly what adaptation does.

Presets:

  full             python -m mmc_jax.train --config configs/joat.py:full --workdir runs/joat
      One accelerator (H100 class): 6x128 ResNet computing in bfloat16 there, 7 tasks x G
      games x 64 plies x 32 simulations per outer iteration, G filling the device (the
      largest power of two whose memory estimate fits half of it, at most 16,384 games in
      all: 7 x 2048 on an H100 or H200, 26.8 GiB by the estimate; the run prints it); k = 16
      inner steps of 512, 300 outer iterations. Once the card is full an outer iteration is
      bounded by the 64 plies of search in sequence, then the k inner steps (the n tasks'
      inner loops run vmapped, the k steps of each in sequence). Checkpoints without the
      replay rings (`checkpoint.save_replay`): a resume starts them empty (each task's
      refills the next time it is drawn), and says so.
  cpu              python -m mmc_jax.train --config configs/joat.py:cpu --workdir runs/joat
      2x32 net, 4 tasks x 16 games x 32 plies x 16 simulations (2 sampled worlds per move in
      fog tasks), k = 8 inner steps of 128, 60 iterations. On one H100 (the study's pretraining,
      experiments/adaptation/study.py --preset gpu): compile 60-68 s, then about 0.4-0.6 s per
      outer iteration.
  quick            as cpu, but 4 tasks x 8 games, k = 4, 40 iterations: the README's first
      command. Measured on an idle 2-core CPU (2026-12-07): 107 s in all, iteration 1 after
      30-37 s (compile 21-25 s; 77 s on 2026-11-22), then 1.4-2 s per outer iteration (41k
      positions).
  smoke            the tests' run: 1x8 net, 2 tasks x 4 games x 4 plies x 4 simulations, k = 2,
      2 outer iterations, 8 fog-free tasks drawn per point. Learns nothing.

The switches:

  --config.holdout='dark;capture=atomic,goal=king'   held-out specs (";"-separated)
  --config.task_space.size=256      more tasks from the region; 0: the registered variants by
                                    --config.task_weights.<name> (the first JOAT)
  --config.task_space.sampling=point   uniform over the region's points (nearly all shuffled
                                    starts) instead of uniform per component
  --config.meta.fresh_inner_state=False   the first JOAT's shared, averaged inner Adam state
  --config.meta.inner_steps=1 --config.meta.fresh_inner_state=False
                                    joint multi-task training, the control
                                    (mmc_jax/algorithms/meta.py); with
                                    --config.meta.updates_per_iteration=8 it takes as many
                                    sequential gradient steps as k = 8
  --config.meta.outer_lr=0.5 --config.meta.outer_lr_schedule=linear   Reptile's annealed eps
  --config.network.rule_planes=descriptor   tell the network the rules (capture, goal, fog,
                                    colour planes become inputs; checkpoints of the other
                                    setting are refused)

The `adapt` section holds the settings of `python -m mmc_jax.adapt` for checkpoints of this run
(AlphaZero iterations on one variant: games, plies, simulations, learner, evaluation).
"""

from __future__ import annotations

import ml_collections

try:
    from configs import common
except ImportError:  # loaded by file path from outside the repository root
    import importlib.util
    import os

    _spec = importlib.util.spec_from_file_location(
        "configs.common", os.path.join(os.path.dirname(os.path.abspath(__file__)), "common.py")
    )
    common = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(common)

PRESETS = ("full", "default", "cpu", "quick", "smoke")

ALL_WEIGHTS = {
    "gardner": 1.0,
    "baby": 1.0,
    "mallet": 1.0,
    "rifle": 1.0,
    "atomic": 1.0,
    "dark": 1.0,
    "extinction": 1.0,
    "monochromatic": 0.0,  # the start position has no legal move (rules.md)
    "bichromatic": 1.0,
}


def _selfplay() -> ml_collections.ConfigDict:
    return common.selfplay()


def _learner() -> ml_collections.ConfigDict:
    return common.learner(batch_size=512)


# The evaluation variants of the adaptation study: never drawn as training tasks (they are
# excluded as exact rule-space points), each a variant the model has not played.
HELD_OUT = (
    "dark",
    "atomic",
    "rifle",
    "extinction",
    "capture=rifle,goal=extinction",
    "dark,capture=atomic",
    "gardner,start=shuffle:17,colour=other",
    "baby,capture=atomic,goal=king",
)
# The declared region of the rule space the tasks come from (goal/fog pairs as "goal/fog").
SPACE_STARTS = ("gardner", "baby", "mallet", "shuffle")
SPACE_CAPTURES = ("normal", "rifle", "atomic")
SPACE_GOAL_FOGS = ("checkmate/off", "king/off", "king/on", "extinction/off", "extinction/on")
SPACE_COLOURS = ("any", "other")


def _inner(steps: int, batch_size: int) -> ml_collections.ConfigDict:
    """The inner procedure (`learner.inner_procedure`): what meta-training optimises for and
    what `adapt` runs, Reptile's optimizer: Adam with b1 = 0, fresh for every task."""
    inner = common.learner(batch_size=batch_size)
    inner.b1 = 0.0
    inner.weight_decay = 0.0
    inner.steps = steps
    return inner


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The meta-training config of preset `arg` (None, "full", "cpu", "quick", "smoke"), locked."""
    preset = common.preset(arg, "configs/joat.py", PRESETS)
    if preset in ("default",):
        preset = "full"

    config = ml_collections.ConfigDict()
    config.algorithm = "joat"  # mmc_jax.algorithms.REGISTRY
    config.variants = ()  # derived from task_space (or task_weights) and holdout by
    # mmc_jax.algorithms.meta
    # Registry weights, used only with task_space.size = 0 (the first JOAT's distribution).
    config.task_weights = ml_collections.ConfigDict(dict(ALL_WEIGHTS))
    # Tasks: `size` points drawn once from this region (never a held-out point); every outer
    # iteration samples `meta.num_tasks` of them.
    config.task_space = ml_collections.ConfigDict()
    config.task_space.size = 64
    config.task_space.seed = 0
    config.task_space.starts = SPACE_STARTS
    config.task_space.captures = SPACE_CAPTURES
    config.task_space.goal_fogs = SPACE_GOAL_FOGS
    config.task_space.colours = SPACE_COLOURS
    # "component": every declared start entry ("shuffle" is one), capture, goal/fog pair and
    # colour equally likely; "point": uniform over the points, where 238 of 241 start arrays
    # are shuffles (the quick study of 2026-11-23 drew 63 shuffled starts of 64 that way).
    config.task_space.sampling = "component"
    config.holdout = ";".join(HELD_OUT)  # specs separated by ";" (or registry names by ",")
    config.seed = 0
    config.num_iterations = 300

    size = "smoke" if preset == "smoke" else "full" if preset == "full" else "cpu"
    # Off by default: the net is not told the rules (a held-out variant is no unseen input).
    config.network = common.network(size, rule_planes="none")
    config.selfplay = _selfplay()
    config.learner = _learner()

    config.meta = ml_collections.ConfigDict()
    config.meta.num_tasks = 7  # n, distinct variants per meta-batch
    # G, games per task in the mixed self-play batch; 0 (full): as many as fit the device's
    # memory with n x G <= 16,384 games in all, as configs/gardner.py:full (`runloop.fill_batch`)
    config.meta.games_per_task = 0
    config.meta.inner_steps = 16  # k; 1 = joint multi-task training
    config.meta.updates_per_iteration = 1  # meta-updates per self-play batch
    # Device groups the tasks are split over in the inner loop: a (task, data) mesh of
    # task_parallel x devices/task_parallel (a pod adapts many tasks at once); 1 = every device
    # runs every task's inner loop (self-play is data-parallel either way).
    config.meta.task_parallel = 1
    config.meta.outer_lr = 1.0  # eps; 1 = JOAT's plain averaging
    config.meta.outer_lr_schedule = "constant"  # or "linear" (Reptile)
    config.meta.outer_lr_end = 0.0  # eps after the last iteration with "linear"
    # Reptile's inner loop: `learner.inner_procedure` with `inner`, fresh for every task, on the
    # task's own draw (replay.iterations = 1), exactly what `adapt` runs per iteration.
    config.meta.fresh_inner_state = True
    config.inner = _inner(steps=16, batch_size=512)
    config.selfplay.value_bootstrap = True  # games cut by the scan: the search's value

    config.replay = ml_collections.ConfigDict()
    config.replay.iterations = 1  # per variant: the samples of its last N draws

    config.eval = ml_collections.ConfigDict()
    config.eval.every = 10
    config.eval.num_games = 128
    config.eval.num_simulations = 32
    config.eval.opponents = ("random", "greedy")
    config.eval.variants = ";".join(HELD_OUT)  # "": the training variants, then the held-out

    # The accelerator preset's checkpoints leave out the replay rings; a resume starts them
    # empty (configs/common.py:checkpointing). The CPU presets save them: bit-identical resume.
    config.checkpoint = common.checkpointing(every=5, max_to_keep=3, save_replay=preset != "full")

    # `python -m mmc_jax.adapt` on checkpoints of this run: AlphaZero on one variant.
    adapt = config.adapt = ml_collections.ConfigDict()
    adapt.num_iterations = 1
    adapt.selfplay = _selfplay()
    adapt.selfplay.batch_size = 512
    adapt.selfplay.mirror_augment = True
    adapt.selfplay.value_bootstrap = True
    adapt.selfplay.num_worlds = config.selfplay.get_ref("num_worlds")
    adapt.replay = ml_collections.ConfigDict()
    adapt.replay.iterations = 1
    adapt.eval = ml_collections.ConfigDict()
    adapt.eval.num_games = 400
    adapt.eval.num_simulations = 32
    adapt.eval.opponents = ("random", "greedy")
    adapt.eval.max_plies = 0  # 0: the rules' ply cap (256)
    # Random plies (paired across colours) opening games between two networks (the adapted
    # model against the unadapted one or a reference): deterministic searches would otherwise
    # replay a single game per colour.
    adapt.eval.opening_plies = 4
    adapt.checkpoint = ml_collections.ConfigDict()
    adapt.checkpoint.every = 1
    adapt.checkpoint.max_to_keep = 2
    adapt.checkpoint.save_replay = True

    if preset in ("cpu", "quick"):
        config.num_iterations = 60
        config.selfplay.num_plies = 32
        config.selfplay.num_simulations = 16
        config.meta.num_tasks = 4
        config.meta.games_per_task = 16
        config.meta.inner_steps = 8
        config.selfplay.num_worlds = 2  # fog tasks: 2 sampled worlds per move on a CPU
        config.learner.batch_size = 128
        config.inner.batch_size = 128
        config.eval.every = 20
        config.eval.num_games = 32
        config.eval.num_simulations = 16
        config.checkpoint.every = 1
        adapt.selfplay.num_plies = 32
        adapt.selfplay.num_simulations = 16
        adapt.eval.num_games = 64
        adapt.eval.num_simulations = 16
    if preset == "quick":
        config.num_iterations = 40
        config.meta.games_per_task = 8
        config.meta.inner_steps = 4
        config.eval.every = 0
        adapt.eval.num_games = 32
        adapt.eval.num_simulations = 8
        adapt.eval.max_plies = 100
    elif preset == "smoke":
        config.num_iterations = 2
        config.task_space.size = 8
        # No fog in the tests' tasks: the fair fog search has its own tests (test_fair_search).
        config.task_space.goal_fogs = ("checkmate/off", "king/off", "extinction/off")
        # Per point, as every smoke workdir written before per-component sampling (the legacy
        # fixtures of tests/training/test_runloop.py resume); the sampling itself: test_rules_space.
        config.task_space.sampling = "point"
        config.selfplay.num_plies = 4
        config.selfplay.num_simulations = 4
        config.selfplay.max_num_considered_actions = 4
        config.selfplay.temperature_plies = 2
        config.meta.num_tasks = 2
        config.meta.games_per_task = 4
        config.meta.inner_steps = 2
        config.learner.batch_size = 8
        config.inner.batch_size = 8
        config.eval.every = 0
        config.eval.num_games = 4
        config.eval.num_simulations = 2
        config.checkpoint.every = 1
        adapt.selfplay = config.selfplay.copy_and_resolve_references()
        adapt.selfplay.mirror_augment = True
        adapt.eval.num_games = 4
        adapt.eval.num_simulations = 0  # raw policy: a small arena to compile in the tests
        adapt.eval.max_plies = 16

    # One inner procedure: k = meta.inner_steps steps of `inner`, and the adaptation runs the
    # same per iteration, on one draw of the size a task gets in meta-training.
    config.inner.steps = config.meta.inner_steps
    adapt.learner = config.inner.copy_and_resolve_references()
    adapt.learner.fresh_state = True
    # (full: 0 here; `prepare_meta_config` sets it to the G the run fills the device with)
    adapt.selfplay.batch_size = config.meta.games_per_task

    config.lock()
    return config
