"""Builders shared by the presets of every config, and the preset check (`preset`).

Every network field is set here and only here (`network(size)`), so the configs cannot drift
apart; a preset picks a size and overrides what differs, in its own file. What the configs
share beyond code: configs/__init__.py.
"""

from __future__ import annotations

import glob
import os
import sys

import ml_collections

# Network sizes: (num_blocks, channels, policy_channels, value_channels, value_hidden).
NETWORK_SIZES = {
    "full": (6, 128, 32, 8, 128),  # one accelerator (H100 class)
    "cpu": (2, 32, 16, 8, 64),  # a 2-core CPU: 63k parameters
    "smoke": (1, 8, 4, 2, 8),  # the tests: learns nothing, compiles fast
}


def network(size: str, *, rule_planes: str) -> ml_collections.ConfigDict:
    """The `network` section at `size` ("full", "cpu", "smoke").

    `rule_planes`: "descriptor" (the network reads the rules descriptor planes: capture, goal,
    fog, colour; it is told the rules) or "none" (only the board channels).
    """
    blocks, channels, policy_channels, value_channels, value_hidden = NETWORK_SIZES[size]
    net = ml_collections.ConfigDict()
    net.num_blocks = blocks
    net.channels = channels
    net.policy_head = "conv"
    net.policy_channels = policy_channels
    net.value_channels = value_channels
    net.value_hidden = value_hidden
    net.layer_norm = False
    # The accelerator size computes in bfloat16 on a GPU/TPU and float32 on a CPU ("auto":
    # `mmc_jax.model.network.compute_dtype`; parameters and optimizer state stay float32); the
    # CPU sizes compute in float32. Pin either with --config.network.dtype=float32|bfloat16.
    # On the CPU (experiments/precision/README.md): the loss curves agree within noise, and
    # bf16 models score 0.514 on average against their float32 twins over five seeds, [0.446,
    # 0.583]: equal within the registered 0.1, so the accelerator size keeps bf16 compute.
    net.dtype = "auto" if size == "full" else "float32"
    net.rule_planes = rule_planes
    return net


def selfplay() -> ml_collections.ConfigDict:
    """The `selfplay` section (Gumbel MuZero, 64 plies x 32 simulations per iteration)."""
    section = ml_collections.ConfigDict()
    section.num_plies = 64  # plies per iteration; unfinished games continue next time
    section.num_simulations = 32
    section.algorithm = "gumbel_muzero"  # or "muzero"
    section.gumbel_scale = 1.0
    section.max_num_considered_actions = 16
    section.temperature_plies = 8  # sample the first plies of every game
    section.temperature = 1.0
    section.dirichlet_alpha = 0.3  # "muzero" only
    section.dirichlet_fraction = 0.25  # "muzero" only
    # Under fog (mmc_jax.evaluation.pimc): K sampled worlds per move and candidates per world; True
    # for `omniscient` searches the true state (the old behaviour: an upper bound, not fair).
    section.num_worlds = 4
    section.num_candidates = 32
    section.omniscient = False
    # Games cut off by the end of a scan: the search's value as their result (else no target).
    section.value_bootstrap = False
    # Value target = (1 - w) * the game's result + w * the search's value of the position
    # (0: the result alone, as AlphaZero; mmc_jax.training.selfplay.compute_targets).
    section.value_q_weight = 0.0
    return section


def schedule_and_clip(section: ml_collections.ConfigDict, max_grad_norm: float) -> None:
    """Sets the learning-rate schedule (constant) and gradient clip (0: off) fields of a
    `learner` section: every learner's optimizer reads them (`learner.make_optimizer`)."""
    section.lr_schedule = "constant"  # constant | cosine | warmup_cosine | linear
    section.warmup_steps = 0
    section.decay_steps = 0
    section.end_lr_factor = 0.0
    section.max_grad_norm = max_grad_norm


def learner(batch_size: int) -> ml_collections.ConfigDict:
    """The `learner` section: Adam at 1e-3, decoupled weight decay, gradient clipping."""
    section = ml_collections.ConfigDict()
    section.optimizer = "adam"
    section.learning_rate = 1e-3
    schedule_and_clip(section, max_grad_norm=1.0)
    section.weight_decay = 1e-4
    section.weight_decay_mode = "decoupled"
    section.value_loss_weight = 1.0
    section.batch_size = batch_size
    return section


def evaluation(every: int, num_games: int, num_simulations: int) -> ml_collections.ConfigDict:
    """The `eval` section: matches against random and greedy every `every` iterations."""
    section = ml_collections.ConfigDict()
    section.every = every  # iterations; 0 disables
    section.num_games = num_games
    section.num_simulations = num_simulations
    section.opponents = ("random", "greedy")
    return section


def checkpointing(every: int, max_to_keep: int, save_replay: bool) -> ml_collections.ConfigDict:
    """The `checkpoint` section.

    `save_replay`: whether checkpoints hold the replay ring. With it (the CPU presets) a
    resumed run is bit-identical to an unbroken one. Without it (the accelerator presets, whose
    rings are hundreds of MB) checkpoints hold parameters, optimizer state, games in progress
    and counters only, and a resume starts with an empty ring: the first iterations after it
    train on the samples played since (a ring of `replay.iterations` iterations refills in as
    many), it prints a note, and its first metrics record has `replay/restored` = 0 (1 when the
    ring came with the checkpoint). A checkpoint that holds a ring is read with it whatever
    this flag says now (one of the dense layout written before 2026-11-26 is packed on the way).
    """
    section = ml_collections.ConfigDict()
    section.every = every
    section.max_to_keep = max_to_keep
    # Also keep every checkpoint whose iteration is a multiple of this (0: only the last
    # `max_to_keep`), e.g. for `python -m mmc_jax.evaluate tournament --run WORKDIR`: an Elo
    # curve over training. Each kept one holds the replay too when `save_replay`.
    section.keep_period = 0
    section.save_replay = save_replay
    return section


def has_accelerator() -> bool:
    """Whether this machine has a GPU or TPU, read from devices and the environment without
    starting JAX (a multi-process run must call `jax.distributed.initialize` first)."""
    if os.environ.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return False
    return bool(
        glob.glob("/dev/nvidia[0-9]*")
        or glob.glob("/dev/accel[0-9]*")
        or os.environ.get("TPU_ACCELERATOR_TYPE")
        or os.environ.get("TPU_NAME")
    )


def default_preset(arg: str | None, config_name: str) -> str:
    """`arg`, or without one `full` on an accelerator and `cpu` on a CPU-only machine (said on
    stderr: the full preset is sized for an H100 and would run for days on a laptop)."""
    if arg:
        return arg
    if not has_accelerator():
        print(
            f"note: no accelerator found; using the cpu preset ({config_name}:cpu). "
            f"Ask for {config_name}:full to run the accelerator-sized one anyway.",
            file=sys.stderr,
        )
        return "cpu"
    return "full"


def preset(arg: str | None, config_name: str, presets: tuple[str, ...]) -> str:
    """`default_preset(arg, config_name)`, checked against the config's `presets`.

    Raises:
      ValueError: a preset the config does not have (the message lists them).
    """
    name = default_preset(arg, config_name)
    if name not in presets:
        raise ValueError(f"unknown preset {name!r} for {config_name}; one of {presets}")
    return name
