"""What the learners share around their games: the config checks they all make, self-play of
board games (plain, or the fair search under fog), its start positions, the replay ring's
layout, and the probe that says whether parameters can start a run. No learner imports
another (`tests/test_architecture.py`): AlphaZero, JOAT, TD(λ) and the supervised learner take
these from here."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh

from mmc_jax import rules as R
from mmc_jax.infra import checkpoint as checkpoint_lib
from mmc_jax.infra import sharding
from mmc_jax.model import network as network_lib
from mmc_jax.rules.contract import BOARD, BoardGame
from mmc_jax.training import fog as fog_lib
from mmc_jax.training import learner, selfplay


def check_positive(config: ml_collections.ConfigDict, names: str, allow_zero: bool = False) -> None:
    """Raises ValueError naming the first of the space-separated dotted `names` that is not a
    positive (or, with `allow_zero`, non-negative) number."""
    for name in names.split():
        node = config
        for part in name.split("."):
            node = node[part]
        ok = isinstance(node, int | float) and not isinstance(node, bool)
        ok = ok and (node >= 0 if allow_zero else node > 0)
        if not ok:
            bound = "non-negative" if allow_zero else "positive"
            raise ValueError(f"config.{name} must be {bound}, got {node!r}")


def check_keep_period(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError unless `checkpoint.keep_period` (0: off) is a non-negative multiple
    of `checkpoint.every`: a period that no saved iteration falls on would keep nothing."""
    period = config.checkpoint.get("keep_period", 0)
    every = config.checkpoint.every
    if isinstance(period, bool) or not isinstance(period, int) or period < 0:
        raise ValueError(
            f"config.checkpoint.keep_period must be a non-negative integer, got {period!r}"
        )
    if period % every:
        raise ValueError(
            f"config.checkpoint.keep_period={period} is not a multiple of "
            f"config.checkpoint.every={every}: no saved checkpoint would be kept by it"
        )


def fair_fog(config: ml_collections.ConfigDict) -> bool:
    """Whether self-play uses the fair search of `mmc_jax.training.fog` (some variant of the run
    has fog and `selfplay.omniscient` is off). A compile key carries it as `fog`."""
    if "fog" in config:
        return bool(config.fog)
    return fog_lib.uses_fog(list(config.variants)) and not bool(
        config.selfplay.get("omniscient", False)
    )


def init_games(rules_b: R.Rules, fog: bool, game: BoardGame = BOARD):
    """Start positions [B] of `game` (`R.State`), or `fog.FogGames` with both players'
    beliefs."""
    state = game.init(rules_b)
    return fog_lib.start_games(state) if fog else state


def board_state(games) -> R.State:
    """The `R.State` of self-play games (`R.State` or `fog.FogGames`)."""
    return games.state if isinstance(games, fog_lib.FogGames) else games


def play_games(
    network,
    params,
    rules_b,
    games,
    key,
    config,
    fog: bool,
    mesh: Mesh | None = None,
    game: BoardGame = BOARD,
):
    """`selfplay.selfplay` of `game` (the Game contract's board game), or under fog
    `fog.fog_selfplay` (the fair determinized search).

    On `mesh` each device plays its own games with its own search loops
    (`sharding.map_games`); the games are the same as on one device."""
    play = fog_lib.fog_selfplay if fog else selfplay.selfplay
    run = sharding.map_games(
        lambda params, rules_b, games, key: play(
            network, params, rules_b, games, key, config, game
        ),
        mesh,
        in_axes=(None, 0, 0, None),
        out_axes=(0, 1),  # the games [B]; the trajectory [T, B]
    )
    return run(params, rules_b, games, key)


def value_q_weight(config: ml_collections.ConfigDict) -> float:
    """`selfplay.value_q_weight` (0.0 in configs written before it existed): the weight of the
    search's value against the game's result in the value target (`selfplay.compute_targets`)."""
    return float(config.selfplay.get("value_q_weight", 0.0))


def check_value_q_weight(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError unless `selfplay.value_q_weight` is a number in [0, 1]."""
    weight = config.selfplay.get("value_q_weight", 0.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
        raise ValueError(
            f"config.selfplay.value_q_weight must be in [0, 1] (0: the game's result alone, "
            f"1: the search's value alone), got {weight!r}"
        )


def example_batch() -> learner.PackedBatch:
    """A one-sample `learner.PackedBatch` of `ShapeDtypeStruct`s: the replay ring's layout."""
    return learner.example_packed()


@functools.cache
def _probe_fn(network, variants: tuple[str, ...]):
    """The jitted probe loss of `network` on the start positions of `variants`."""
    rules = R.batch(list(variants))

    def loss(params):
        state = BOARD.init(rules)
        planes = BOARD.legal_planes(rules, state)
        mask = BOARD.planes_to_mask(planes)
        logits, value = network.apply({"params": params}, BOARD.observe(rules, state, planes), mask)
        uniform = mask / jnp.maximum(mask.sum(-1, keepdims=True), 1)
        policy = -jnp.sum(jnp.where(mask, uniform * jax.nn.log_softmax(logits), 0.0), axis=-1)
        return jnp.mean(policy) + jnp.mean(jnp.square(value))

    return jax.jit(loss)


def probe_params(config: ml_collections.ConfigDict, params: Any) -> str | None:
    """Why `params` are no start (a non-finite loss on a probe batch: the start positions of
    the run's variants against a uniform policy and a drawn value), or None."""
    network = network_lib.make_network(config.network)
    variants = tuple(config.get("variants") or (config.variant,))[:8]
    loss = float(_probe_fn(network, variants)(jax.device_get(params)))
    if np.isfinite(loss):
        return None
    size = checkpoint_lib.largest_magnitude(params)
    return (
        f"its parameters give a non-finite loss on a probe batch ({loss}; largest |parameter| "
        f"{size:.2g}): they exploded"
    )
