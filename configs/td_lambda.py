"""TD(λ) on a value network with afterstate play: `python -m mmc_jax.train` config.

What every config shares (presets, overrides, resuming, the header): configs/__init__.py.

Each iteration plays `td.games` games of `variant` from the start, both sides the same network:
every legal move's next position is evaluated in one batched call and the move the opponent
likes least is played (a random one with probability `td.epsilon`); then the network's value is
trained toward the alternating-sign λ-returns of those games, cut at exploratory moves
(`mmc_jax/algorithms/td_lambda.py` says exactly which targets, and the test that they are the
seed's). The network is `configs/gardner.py`'s (its value head learns; its policy head stays as
initialised), so the result loads wherever a gardner model does.

Presets:

  cpu      python -m mmc_jax.train --config configs/td_lambda.py:cpu --workdir runs/td
      A 2-core CPU: the 2x32 net, 32 games x up to 80 plies per iteration (every legal move of
      every position evaluated: up to 160 network calls per position), 32 Adam steps of 256,
      300 iterations. Evaluation every 50 iterations against random and greedy (the search,
      32 simulations, with the untrained policy: the value does the work).
  full     the 6x128 net, 1024 games per iteration, 64 steps of 1024.
  smoke    the tests' run: a 1x8 net, 4 games x 6 plies, 2 iterations.
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
    preset = common.preset(arg, "configs/td_lambda.py", PRESETS)

    config = ml_collections.ConfigDict()
    config.algorithm = "td_lambda"  # mmc_jax.algorithms.REGISTRY
    config.variant = "gardner"  # any variant without fog
    config.seed = 0
    config.num_iterations = 300

    config.td = ml_collections.ConfigDict()
    config.td.games = 32  # games per iteration
    config.td.max_plies = 80  # ply cap (a draw by rule)
    config.td.lam = 0.7  # λ
    config.td.epsilon = 0.1  # share of random moves (the trace is cut after each)

    size = "smoke" if preset == "smoke" else "cpu" if preset == "cpu" else "full"
    config.network = common.network(size, rule_planes="descriptor")  # as configs/gardner.py
    config.learner = ml_collections.ConfigDict()
    config.learner.updates = 64 if size == "full" else 32
    config.learner.batch_size = 1024 if size == "full" else 256
    config.learner.learning_rate = 1e-3
    config.learner.optimizer = "adamw"
    config.learner.weight_decay = 1e-4
    config.learner.weight_decay_mask = "all"  # every parameter decays, biases too
    common.schedule_and_clip(config.learner, max_grad_norm=0.0)
    # How minibatch rows are drawn (learner.draw_rows): "inverse_cdf", or "gumbel", the same
    # distribution drawn with [rows, pool] Gumbel noise (57% of recon's learner time), which
    # the runs before 2026-11-28 used (set it to reproduce them; a config recorded without
    # this field reads as "gumbel").
    config.learner.sampler = "inverse_cdf"
    config.eval = common.evaluation(every=50, num_games=128, num_simulations=32)
    config.checkpoint = common.checkpointing(every=5, max_to_keep=2, save_replay=False)

    if preset in ("full", "default"):
        config.td.games = 1024
    elif preset == "smoke":
        config.num_iterations = 2
        config.td.games = 4
        config.td.max_plies = 6
        config.learner.updates = 2
        config.learner.batch_size = 8
        config.eval.every = 0
        config.eval.num_games = 4
        config.eval.num_simulations = 4
        config.checkpoint.every = 1

    config.lock()
    return config
