"""TD(λ) with afterstate play (`algorithms/td_lambda.py`): the λ-returns on a hand-computed
game, their offline equivalence with the seed's backward-view eligibility traces, the one-ply
player (its resume and export: tests/training/test_algorithm_contract.py)."""

from __future__ import annotations

import chex
import jax
import numpy as np
import optax
import pytest

from configs import td_lambda as td_config
from mmc_jax import rules as R
from mmc_jax.algorithms import td_lambda
from mmc_jax.model import network as network_lib
from mmc_jax.search import one_ply
from mmc_jax.training import runloop

LAM = 0.5


def returns_of(reward, ends, next_value, explored, live, lam=LAM):
    columns = [np.asarray(x)[:, None] for x in (reward, ends, next_value, explored, live)]
    return np.asarray(td_lambda.lambda_returns(*columns, lam))[:, 0]


def test_lambda_returns_of_a_hand_computed_game():
    # Four moves; the last wins for its mover (t = 3). V_{t+1} as the network saw them.
    next_value = [0.2, -0.4, 0.6, -1.0]  # t = 3's next position is lost for the side to move
    reward = [0.0, 0.0, 0.0, 1.0]
    ends = [False, False, False, True]
    g3 = 1.0
    g2 = -((1 - LAM) * 0.6 + LAM * g3)  # -0.8
    g1 = -((1 - LAM) * -0.4 + LAM * g2)  # 0.6
    g0 = -((1 - LAM) * 0.2 + LAM * g1)  # -0.4
    got = returns_of(reward, ends, next_value, [False] * 4, [True] * 4)
    np.testing.assert_allclose(got, [g0, g1, g2, g3], rtol=1e-6)
    np.testing.assert_allclose(got, [-0.4, 0.6, -0.8, 1.0], rtol=1e-6)
    # An exploratory move at t = 1 cuts the trace there: G_1 = -V_2, G_0 follows from it.
    cut = returns_of(reward, ends, next_value, [False, True, False, False], [True] * 4)
    np.testing.assert_allclose(cut, [-((1 - LAM) * 0.2 + LAM * 0.4), 0.4, -0.8, 1.0], rtol=1e-6)
    # Padding after the end stays 0 and never leaks into the game.
    padded = returns_of(reward + [0.0], ends + [False], next_value + [0.3], [False] * 5,
                        [True] * 4 + [False])  # fmt: skip
    np.testing.assert_allclose(padded, [g0, g1, g2, g3, 0.0], rtol=1e-6)


@pytest.mark.parametrize("explored_at", [None, 0, 2, 4])
def test_lambda_returns_equal_the_seeds_backward_view_with_the_weights_held(explored_at):
    """Tabular V over 5 states visited in order, then a terminal move: the sum of the seed's
    updates (δ_t e_t with the alternating trace e_t = -λ e_{t-1} + ∇V(s_t), reset after an
    exploratory move's update) equals Σ_t (G_t - V(s_t)) ∇V(s_t) (the forward view)."""
    rng = np.random.default_rng(explored_at or 7)
    steps = 6
    values = rng.uniform(-0.9, 0.9, steps)  # V(s_t), tabular: ∇V(s_t) is the one-hot e_t
    reward = np.zeros(steps)
    reward[-1] = -1.0  # the last move loses (e.g. an illegal or suicidal move)
    ends = np.arange(steps) == steps - 1
    explored = np.arange(steps) == (explored_at if explored_at is not None else -1)
    next_value = np.append(values[1:], 0.0)  # V_{t+1}; the last is unused (the move ends)
    # The seed's backward view.
    trace, backward = np.zeros(steps), np.zeros(steps)
    for t in range(steps):
        target = reward[t] if ends[t] else -values[t + 1]
        delta = target - values[t]
        trace = -LAM * trace + np.eye(steps)[t]
        backward += delta * trace
        if explored[t]:
            trace = np.zeros(steps)
    forward = returns_of(reward, ends, next_value, explored, np.ones(steps, bool)) - values
    np.testing.assert_allclose(forward, backward, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny():
    config = td_config.get_config("smoke")
    network = network_lib.make_network(config.network)
    return network, network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)


def test_the_one_ply_player_takes_a_winning_king_capture_and_the_opponents_worst_move(tiny):
    network, params = tiny
    # White to move can take the black king: the rook on e1 takes it on e5.
    state = R.stack([R.from_fen("4k/5/5/5/K3R w - - 0 1")])
    rules = R.batch("gardner", 1)
    action, explored, value, nxt = jax.jit(
        lambda s, k: one_ply.action(network, params, rules, s, k)
    )(state, jax.random.key(0))
    assert R.action_to_uci("gardner", "4k/5/5/5/K3R w - - 0 1", int(action[0])) == "e1e5"
    assert not bool(explored[0]) and float(value[0]) == -1.0 and bool(nxt.terminated[0])


def smoke(iterations):
    config = td_config.get_config("smoke").copy_and_resolve_references()
    config.unlock()
    config.num_iterations = iterations
    return config


def test_td_configs_refuse_fog_and_bad_values_in_one_line():
    config = smoke(1)
    config.variant = "dark"
    with pytest.raises(ValueError, match="has fog"):
        td_lambda.prepare_config(config)
    config = smoke(1)
    config.td.lam = 1.5
    with pytest.raises(ValueError, match=r"config.td.lam=1.5 must be a finite number in \[0.0"):
        td_lambda.prepare_config(config)
    config = smoke(1)
    config.learner.sampler = "fast"
    with pytest.raises(ValueError, match=r"config.learner.sampler='fast': one of \("):
        td_lambda.prepare_config(config)


def test_a_checkpoint_of_the_optimizer_before_make_optimizer_resumes_exactly(tmp_path, monkeypatch):
    """A run written when TD(λ) built `optax.adamw` itself (no schedule step count in its
    optimizer state) resumes under `learner.make_optimizer` to the unbroken run's parameters."""
    unbroken = runloop.run(td_lambda.ALGORITHM, smoke(2), tmp_path / "unbroken", stream=None)
    with monkeypatch.context() as patch:
        patch.setattr(
            td_lambda,
            "_optimizer",
            lambda config: optax.adamw(float(config.learner.learning_rate), weight_decay=1e-4),
        )
        runloop.run(td_lambda.ALGORITHM, smoke(1), tmp_path / "old", stream=None)
    resumed = runloop.run(td_lambda.ALGORITHM, smoke(2), tmp_path / "old", stream=None)
    assert resumed.start_iteration == 1
    chex.assert_trees_all_equal(resumed.state.params, unbroken.state.params)
