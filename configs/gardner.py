"""AlphaZero on one variant (Gardner minichess by default): `python -m mmc_jax.train` config.

What every config shares (presets, overrides, resuming, the header): configs/__init__.py.

Presets:

  full             python -m mmc_jax.train --config configs/gardner.py:full --workdir runs/gardner
      One accelerator (H100 class): 6x128 ResNet, as many games as fit (`selfplay.batch_size`
      = 0: the run picks the largest power of two up to 16,384 whose estimated iteration
      fits in half the device's memory, and prints the estimate; 16,384 on an H100, where an
      iteration needs about 4 GiB) x 8 plies x 32 simulations per iteration, 128 minibatches
      of 1024, 400 iterations (52M positions at 16,384 games). Beyond about 16k games the
      card is compute-bound (33 network evaluations of ~0.1 GFLOP per move), so more games
      would only lengthen an iteration. Computes in bfloat16 there (`network.dtype` = auto).
      On one H200 (2026-11-27): 1.62 s per iteration, 81k frames/s (400 in 10.8 minutes);
      2.37 s in float32.
      Checkpoints without the replay ring (`checkpoint.save_replay`): a resume starts with an
      empty ring, which refills in `replay.iterations` = 4 iterations, and says so.
  cpu              bash experiments/gardner_cpu/run.sh runs/gardner_cpu   (30 minutes + eval)
      A 2-core CPU: 2x32 net (63k parameters), 128 games x 32 plies x 32 simulations per
      iteration, 32 minibatches of 256 from the last 8 iterations (games cut off by a scan get
      their result when they end: `replay.backfill_outcomes`), evaluation (64 games each against
      random and greedy, 32 simulations) every 15 iterations, a checkpoint (with the replay
      ring: a resume is bit-identical) every iteration. `num_iterations` = 400 is only a cap:
      the 30-minute protocol stops the run on the wall clock. Expect about 50 s of compilation,
      then 7-11 s per iteration on a 2-core CPU (about 200 iterations in the 30 minutes; on one
      H100 about 1 s); its results: experiments/gardner_cpu/README.md.
  smoke            python -m mmc_jax.train --config configs/gardner.py:smoke --workdir /tmp/s
      The tests' run: a 1x8 net, 8 games x 4 plies x 4 simulations, 2 iterations. About two
      minutes on 2 CPU cores, nearly all of it compilation. Learns nothing.

`--config.variant` takes any variant (e.g. `atomic`, one of mmc_jax.rules.VARIANTS); `variants`
is derived from `variant` by the trainer (it is the variant list checkpoints are checked
against).
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

PRESETS = ("full", "default", "cpu", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The run config of preset `arg` (None, "full" or "default", "cpu", "smoke"), locked."""
    preset = common.preset(arg, "configs/gardner.py", PRESETS)

    config = ml_collections.ConfigDict()
    config.algorithm = "alphazero"  # mmc_jax.algorithms.REGISTRY
    config.variant = "gardner"
    config.variants = ()  # derived from `variant` by mmc_jax.train.prepare_config
    config.seed = 0
    config.num_iterations = 400

    size = "smoke" if preset == "smoke" else "cpu" if preset == "cpu" else "full"
    # The network is told the rules (one variant here, so the planes are constant).
    config.network = common.network(size, rule_planes="descriptor")

    config.selfplay = common.selfplay()
    # Games played in parallel (divisible by the devices); 0: as many as fit on the device
    # (`mmc_jax.training.memory`, chosen and printed when the run starts).
    config.selfplay.batch_size = 0
    config.selfplay.num_plies = 8  # games run on from one iteration to the next
    # Left-right mirroring where valid: no current variant has a file-symmetric start
    # position (kings and queens on d/e), so this is a no-op for all of them.
    config.selfplay.mirror_augment = True

    config.learner = common.learner(batch_size=1024)
    # Minibatch updates per iteration; samples drawn from the replay without replacement.
    config.learner.steps_per_iteration = 128

    config.replay = ml_collections.ConfigDict()
    config.replay.iterations = 4  # window: the samples of the last N iterations
    # A game cut off by the end of a scan: its samples wait in the ring and get the game's
    # result when it ends in a later iteration (else they never train the value head). Off in
    # `smoke`, so that the test fixtures written before it still resume with that preset.
    config.replay.backfill_outcomes = preset != "smoke"

    config.eval = common.evaluation(every=10, num_games=128, num_simulations=32)

    # The replay ring goes into the checkpoints of the CPU presets (a resumed run is then
    # bit-identical to an unbroken one), not into those of `full` (4 x 131k samples of 953
    # bytes = 500 MB at 16,384 games): a resume there starts with an empty ring, which refills
    # in `replay.iterations` iterations (`configs/common.py:checkpointing` says what it does).
    config.checkpoint = common.checkpointing(
        every=5, max_to_keep=3, save_replay=preset in ("cpu", "smoke")
    )

    if preset == "cpu":
        config.num_iterations = 400  # a cap: the 30-minute run stops on the wall clock
        config.selfplay.batch_size = 128
        config.selfplay.num_plies = 32
        config.selfplay.num_simulations = 32
        config.learner.batch_size = 256
        config.learner.steps_per_iteration = 32
        config.replay.iterations = 8
        config.eval.every = 15
        config.eval.num_games = 64
        config.eval.num_simulations = 32
        config.checkpoint.every = 1  # a SIGKILL or a timeout loses at most one iteration
        config.checkpoint.max_to_keep = 2
    elif preset == "smoke":
        config.num_iterations = 2
        config.selfplay.batch_size = 8
        config.selfplay.num_plies = 4
        config.selfplay.num_simulations = 4
        config.selfplay.max_num_considered_actions = 4
        config.selfplay.temperature_plies = 2
        config.learner.batch_size = 8
        config.learner.steps_per_iteration = 2
        config.replay.iterations = 2
        config.eval.every = 0
        config.eval.num_games = 4
        config.eval.num_simulations = 4
        config.checkpoint.every = 1

    config.lock()
    return config
