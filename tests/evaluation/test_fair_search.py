"""The fair (PIMC) search reads observations only: invariance, and the omniscient contrast."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.model import network as network_lib
from mmc_jax.training import fog as fog_lib

# Same observation and legal moves (the knight is hidden either way), different true states.
PAIR = ("4k/5/2n2/5/K4 w - - 0 1", "4k/5/4n/5/K4 w - - 0 1")


@pytest.fixture(scope="module")
def tiny():
    network = network_lib.PolicyValueNet(num_blocks=1, channels=8, value_hidden=8)
    return network, network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)


@pytest.fixture(scope="module")
def searches(tiny):
    """`searches(omniscient)`: the action weights of both `PAIR` positions, each search
    compiled when a test first asks for it."""
    network, params = tiny
    rules = R.batch("dark", 1)

    @functools.partial(jax.jit, static_argnames="omniscient")
    def run(state, key, omniscient):
        planes = R.legal_planes(rules, state)
        if omniscient:
            return fog_lib.omniscient_search(
                network, params, rules, state, key, num_simulations=16, gumbel_scale=0.0
            ).action_weights
        games = fog_lib.start_games(state, exact=False)
        observation, belief = fog_lib.observe_and_update(rules, games, planes)
        return fog_lib.fair_search(
            network, params, rules, observation, belief, key, num_worlds=4, num_simulations=16
        ).action_weights

    # The same key for each position, one game per call (rows of a batch get different keys).
    @functools.cache
    def weights(omniscient: bool) -> np.ndarray:
        return np.concatenate(
            [np.asarray(run(R.stack([R.from_fen(f)]), jax.random.key(3), omniscient)) for f in PAIR]
        )

    return weights


def test_fair_search_is_invariant_to_hidden_pieces(searches):
    weights = searches(False)
    assert weights[0].sum() == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_array_equal(weights[0], weights[1])


@pytest.mark.slow
def test_omniscient_search_reads_hidden_pieces(searches):
    weights = searches(True)
    assert np.abs(weights[0] - weights[1]).max() > 0.05


@pytest.mark.slow
def test_fog_selfplay_records_fair_targets(tiny):
    network, params = tiny
    config = ml_collections.ConfigDict(
        {
            "selfplay": {
                "num_plies": 3,
                "num_simulations": 4,
                "num_worlds": 2,
                "num_candidates": 8,
                "gumbel_scale": 1.0,
                "max_num_considered_actions": 4,
                "temperature_plies": 1,
            }
        }
    )
    rules = R.batch("dark", 4)
    games = fog_lib.start_games(R.init(rules))
    run = jax.jit(lambda g, k: fog_lib.fog_selfplay(network, params, rules, g, k, config))
    games, trajectory = run(games, jax.random.key(0))
    assert trajectory.action_weights.shape == (3, 4, R.NUM_ACTIONS)
    sums = np.asarray(trajectory.action_weights.sum(-1))
    np.testing.assert_allclose(sums, 1.0, atol=1e-5)
    legal = np.asarray(trajectory.legal_action_mask)
    taken = np.take_along_axis(legal, np.asarray(trajectory.action)[..., None], -1)
    assert taken.all()
    assert np.all(np.asarray(games.state.ply) == 3)
    assert jnp.all(trajectory.mover[1] == 1)
