"""The learned agent of reconnaissance-blind minichess (`fog=sense:W`): `python -m mmc_jax.train`.

What every config shares (presets, overrides, resuming, the header): configs/__init__.py.

Self-play of the learned recon agent (`mmc_jax.algorithms.recon`: network + one-ply searches over
worlds sampled from each side's exact belief, for the sense window and for the move), both sides
the agent, then Adam steps on that iteration's decisions. It runs in the one run loop: orbax
checkpoints (parameters and Adam's state), a bit-identical resume, SIGTERM, the workdir lock,
progress with an ETA, `metrics.jsonl` and plots.

Presets:

  cpu      python -m mmc_jax.train --config configs/recon.py:cpu --workdir runs/recon
      A 2-core CPU: 2x32 trunk, 64 games x up to 60 plies per iteration, 8 belief worlds x 32
      candidates per search, 32 Adam steps of 256 drawn from this iteration's decisions
      (`--config.replay.iterations=4`: and from 2,048 kept of each of the 3 before), 200
      iterations (a cap: stop it on the clock
      with SIGTERM or Ctrl-C and resume later). About a minute of compilation, then about
      20-30 s per iteration on a quiet 2-core CPU. Evaluation every 25 iterations: 32
      colour-balanced games against information-gain sensing + PIMC (`entropy-pimc`).
      The recipe whose final checkpoint met issue 47's target (0.865 against entropy-pimc
      after 60 CPU-minutes, experiments/recon/README.md "Run 4") adds
      `--config.selfplay.explore=0.1 --config.replay.iterations=4
      --config.selfplay.refill=True --config.selfplay.games=32`
      (`python experiments/recon/no_collapse.py train --run 4`).
  full     the same on an accelerator with 1024 games per iteration and 64 Adam steps.
  smoke    the tests' run: a 1x8 trunk, 4 games x 6 plies, 2 iterations (seconds after compiling).

Score the result with `python -m mmc_jax.evaluate --variant recon --checkpoint W --opponent
entropy-pimc` (or every pair: `python experiments/recon/run.py --checkpoint W --agents
learned,entropy-pimc`).
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
    preset = common.preset(arg, "configs/recon.py", PRESETS)

    config = ml_collections.ConfigDict()
    config.algorithm = "recon"  # mmc_jax.algorithms.REGISTRY
    config.variant = "recon"  # any sensing variant (fog=sense:2 or sense:3)
    config.seed = 0
    config.num_iterations = 200

    config.selfplay = ml_collections.ConfigDict()
    config.selfplay.games = 64  # self-play games per iteration (split over the devices)
    config.selfplay.max_plies = 60  # ply cap of a self-play game (a draw by rule)
    config.selfplay.belief_size = 64  # candidate boards each side's belief keeps
    config.selfplay.moves_per_board = 32  # opponent requests expanded per candidate board
    config.selfplay.explore = 0.0  # share of moves replaced by a random requestable one
    # A game that reaches the ply cap scores tanh(this x White's material lead) for White in
    # training (0: a draw): keeps a value signal when self-play turns passive.
    config.selfplay.adjudicate = 0.2
    # False: each slot plays one game through the scan of max_plies turns (a finished game's
    # turns are padding: run 3's games lasted 19-29 plies). True: a finished game is replaced
    # by a new one in its slot; the turns of the game cut by the scan's end do not train.
    config.selfplay.refill = False

    config.search = ml_collections.ConfigDict()
    config.search.worlds = 8  # belief samples per search
    config.search.candidates = 32  # requests evaluated per move search

    config.network = ml_collections.ConfigDict()
    config.network.blocks = 2
    config.network.channels = 32
    config.network.world_hidden = 128

    config.learner = ml_collections.ConfigDict()
    config.learner.updates = 32  # Adam steps per iteration
    config.learner.minibatch = 256
    config.learner.learning_rate = 1e-3
    config.learner.weight_decay = 1e-4
    config.learner.optimizer = "adamw"
    config.learner.weight_decay_mask = "all"  # every parameter decays, biases too
    common.schedule_and_clip(config.learner, max_grad_norm=0.0)
    config.learner.anchor = 0.5  # share of the world value's target that is the prior's value
    # How minibatch rows are drawn (learner.draw_rows): "inverse_cdf", or "gumbel", the same
    # distribution drawn with [rows, pool] Gumbel noise (57% of recon's learner time), which
    # the runs before 2026-11-28 used (set it to reproduce them; a config recorded without
    # this field reads as "gumbel").
    config.learner.sampler = "inverse_cdf"

    # Replay across iterations: the learner draws its minibatches from this iteration's
    # decisions and from `rows` decisions (and true boards) kept of each of the previous
    # `iterations - 1` iterations (1: this iteration's alone, as the runs before 2026-11-28).
    config.replay = ml_collections.ConfigDict()
    config.replay.iterations = 1
    config.replay.rows = 2048

    config.eval = ml_collections.ConfigDict()
    config.eval.every = 25  # iterations; 0 disables
    config.eval.num_games = 32  # colour-balanced games per opponent
    config.eval.opponents = ("entropy-pimc",)  # recon agents (evaluation.players.recon_agents())

    config.checkpoint = common.checkpointing(every=1, max_to_keep=3, save_replay=False)

    if preset in ("full", "default"):
        config.selfplay.games = 1024
        config.learner.updates = 64
        config.checkpoint.every = 5
    elif preset == "smoke":
        config.num_iterations = 2
        config.selfplay.games = 4
        config.selfplay.max_plies = 6
        config.selfplay.belief_size = 8
        config.selfplay.moves_per_board = 8
        config.search.worlds = 2
        config.search.candidates = 4
        config.network.blocks = 1
        config.network.channels = 8
        config.network.world_hidden = 8
        config.learner.updates = 2
        config.learner.minibatch = 8
        config.replay.rows = 16
        config.eval.every = 0
        config.eval.num_games = 2

    config.lock()
    return config
