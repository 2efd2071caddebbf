"""The learned recon agent (`search.recon_learned`, `algorithms.recon`): shapes and
masking, its searches' targets, fairness (same information, same decisions), learning, resume,
and its place in the arena and the scripts. Tiny sizes: compilation dominates on 2 CPU cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.algorithms import recon as TL
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.model import recon_net
from mmc_jax.model.network import MASKED_LOGIT
from mmc_jax.rules import recon
from mmc_jax.rules import tables as T
from mmc_jax.search import recon_belief as RB
from mmc_jax.search import recon_learned as L
from mmc_jax.search import recon_score as S

ROOT = Path(__file__).resolve().parents[2]
SEARCH = L.SearchConfig(worlds=3, candidates=6, blocks=1, channels=8, world_hidden=16)
CONFIG = TL.TrainConfig(
    games=2, max_plies=6, belief_size=8, moves_per_board=8, search=SEARCH, updates=2, explore=0.5,
    minibatch=16,
)  # fmt: skip


@pytest.fixture(scope="module")
def params():
    return recon_net.init_params(SEARCH, jax.random.key(0))


@pytest.fixture(scope="module")
def searches():
    net = recon_net.make_net(SEARCH)

    @jax.jit
    def both(params, rules, sense_state, move_state, sense_belief, move_belief, key):
        sense = L.sense_search(net, params, SEARCH, rules, sense_state, sense_belief, key)
        move = L.move_search(net, params, SEARCH, rules, move_state, move_belief, key)
        return sense, move

    return both


def _bit(name):
    return np.uint32(1 << T.square("abcde".index(name[0]), int(name[1]) - 1))


def _hidden_knight_moved(state):
    """The start with Black's b5 knight on a3 instead: White cannot tell (nothing sensed)."""
    pieces = np.asarray(state.pieces).copy()
    pieces[T.KNIGHT] = (pieces[T.KNIGHT] & ~_bit("b5")) | _bit("a3")
    return state.replace(pieces=jnp.asarray(pieces))


def test_network_outputs_have_recon_shapes_and_mask_illegal_actions(params):
    net = recon_net.make_net(SEARCH)
    obs = jax.random.normal(jax.random.key(1), (3, 5, 5, recon_net.OBS_CHANNELS))
    mask = jnp.zeros((3, recon.NUM_ACTIONS), bool).at[:, recon.SENSE_BASE :].set(True)
    features = jax.random.normal(jax.random.key(2), (3, recon_net.WORLD_FEATURES))
    (logits, value), world = net.apply({"params": params}, obs, mask, features)
    chex.assert_shape(logits, (3, recon.NUM_ACTIONS))
    chex.assert_shape([value, world], (3,))
    assert np.all(np.asarray(logits)[:, : recon.SENSE_BASE] == MASKED_LOGIT)
    assert np.all(np.asarray(logits)[:, recon.SENSE_BASE :] > MASKED_LOGIT)
    assert np.all(np.abs(np.asarray(value)) <= 1) and np.all(np.abs(np.asarray(world)) <= 1)
    rules = R.get("recon")
    state = recon.init(rules)
    chex.assert_shape(L.observation(rules, state, RB.initial(rules, 0, 8)), (5, 5, 41))
    chex.assert_shape(L.true_world_features(rules, state), (recon_net.WORLD_FEATURES,))


def test_a_fresh_world_value_ranks_requests_as_the_pimc_score_does(params):
    # At initialisation the world value is tanh(PRIOR_SCALE x the hand-written prior), so the
    # move search's q orders requests as PIMC's `request_scores` does (wins are +1 in both).
    rules = R.get("recon")
    state = recon.init(rules)
    belief = RB.initial(rules, 0, 8)
    own = belief.own
    world = RB.sample(jax.random.key(7), belief, 1)
    requests = jnp.arange(RB.NUM_REQUESTS)
    requestable = np.asarray(A.requestable_mask(rules, own))
    q = np.asarray(
        L.q_table(recon_net.make_net(SEARCH), params, rules, own, world, requests, state.ply)
    )
    score = np.asarray(A.request_scores(rules, own, world[0]))
    q, score = q[0][requestable], score[requestable]
    differ = np.abs(score[:, None] - score[None, :]) > 1e-4
    assert differ.sum() > 100  # the start has requests of different scores
    agree = np.sign(q[:, None] - q[None, :]) == np.sign(score[:, None] - score[None, :])
    assert np.all(agree[differ])
    features = L.true_world_features(rules, state)[None]
    fresh = recon_net.make_net(SEARCH).apply({"params": params}, features, method="world_value")
    expected = np.tanh(L.PRIOR_SCALE * float(S.prior(rules, state.pieces, state.own)))
    assert float(fresh[0]) == pytest.approx(expected, abs=1e-6)


def test_searches_choose_legal_actions_with_targets_on_legal_actions(params, searches):
    rules = R.get("recon")
    state = recon.init(rules)
    belief = RB.initial(rules, 0, 8)
    moving = recon.step(rules, state, recon.SENSE_BASE + 15)
    after = RB.after_sense(belief, *RB.sensed_content(recon.player_info(moving)), jax.random.key(3))
    sense, move = searches(params, rules, state, moving, belief, after, jax.random.key(4))
    for decision, phase_state in ((sense, state), (move, moving)):
        legal = np.asarray(recon.legal_action_mask(rules, phase_state))
        target = np.asarray(decision.target)
        assert legal[int(decision.action)]
        assert target.sum() == pytest.approx(1.0, abs=1e-5)
        assert np.all(target[~legal] == 0) and np.all(np.asarray(decision.mask) == legal)
    assert int(sense.action) >= recon.SENSE_BASE and int(move.action) <= recon.PASS


def test_window_values_prefer_the_window_whose_result_changes_the_move():
    # Two worlds calling for opposite requests; window 0 tells them apart, window 1 does not.
    q = jnp.array([[1.0, -1.0], [-1.0, 1.0]])
    same = np.ones((2, 2, 16), bool)
    same[0, 1, 0] = same[1, 0, 0] = False
    values = np.asarray(L.window_values(q, jnp.ones(2, bool), jnp.asarray(same)))
    assert values[0] == pytest.approx(1.0) and values[1] == pytest.approx(0.0)


def test_searches_decide_the_same_for_true_states_with_the_same_information(params, searches):
    rules = R.get("recon")
    real = recon.init(rules)
    other = _hidden_knight_moved(real)
    assert not np.array_equal(np.asarray(real.pieces), np.asarray(other.pieces))
    belief = RB.initial(rules, 0, 8)
    key = jax.random.key(5)
    decisions = []
    for state in (real, other):
        # Window 0 (a1-b2) holds only White's pieces: the sense tells White the same thing.
        moving = recon.step(rules, state, recon.SENSE_BASE + 0)
        info = recon.player_info(moving)
        after = RB.after_sense(belief, *RB.sensed_content(info), jax.random.key(6))
        decisions.append((info, searches(params, rules, state, moving, belief, after, key)))
    (info_a, decided_a), (info_b, decided_b) = decisions
    chex.assert_trees_all_equal(info_a, info_b)
    chex.assert_trees_all_equal(decided_a, decided_b)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(final TrainState, workdir) of an unbroken two-iteration run."""
    workdir = tmp_path_factory.mktemp("unbroken")
    return TL.train(CONFIG, workdir, iterations=2, log=lambda line: None), workdir


def test_capped_games_are_adjudicated_by_material_and_decided_ones_kept():
    rules = R.get("recon")
    state = recon.init(rules)
    pieces = np.asarray(state.pieces).copy()
    pieces[T.QUEEN] &= state.own  # Black's queen gone: White is 9 ahead, whoever is to move
    white_to_move = state.replace(pieces=jnp.asarray(pieces))
    sensed = recon.step(rules, white_to_move, recon.SENSE_BASE)
    black_to_move = recon.step(rules, sensed, recon.PASS)
    leads = [float(TL.white_material_lead(s)) for s in (white_to_move, black_to_move)]
    assert leads == [9.0, 9.0] and float(TL.white_material_lead(state)) == 0.0
    rewards = np.array([[0.0, 0.0], [1.0, -1.0], [0.0, 0.0]], np.float32)
    out = TL.adjudicated(rewards, np.array([9.0, -9.0, 0.0]), 0.2)
    np.testing.assert_allclose(out, [[np.tanh(1.8), -np.tanh(1.8)], [1, -1], [0, 0]], rtol=1e-6)
    np.testing.assert_array_equal(TL.adjudicated(rewards, np.array([9.0, 0, 0]), 0.0), rewards)
    # The world value's target: half the result, half the prior's value (the last feature).
    world = np.zeros((2, recon_net.WORLD_FEATURES), np.float32)
    world[:, -1] = [0.5, -1.0]
    np.testing.assert_allclose(
        TL.anchored(np.array([1.0, 0.0]), world, 0.5), [0.5 + 0.5 * np.tanh(0.5), -0.5 * np.tanh(1)]
    )


def test_a_training_step_changes_parameters_and_lowers_the_loss_on_a_fixed_batch(trained):
    train_state, _ = trained
    examples, _ = TL.selfplay(train_state.params, jax.random.key(7), CONFIG)
    batch = TL.minibatch(examples, np.random.default_rng(0), CONFIG.minibatch)
    before = float(TL.loss_fn(train_state.params, batch, CONFIG)[0])
    params, _, _ = TL.update(train_state.params, train_state.opt_state, batch, config=CONFIG)
    after = float(TL.loss_fn(params, batch, CONFIG)[0])
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), train_state.params, params)
    assert all(jax.tree.leaves(changed))
    assert after < before


def test_a_resumed_run_equals_an_unbroken_run(trained, tmp_path):
    unbroken, _ = trained
    TL.train(CONFIG, tmp_path, iterations=1, log=lambda line: None)
    lines = []
    resumed = TL.train(CONFIG, tmp_path, iterations=2, log=lines.append)
    assert lines[0].startswith("resumed from") and resumed.iteration == 2
    chex.assert_trees_all_equal(resumed.params, unbroken.params)
    chex.assert_trees_all_equal(resumed.opt_state, unbroken.opt_state)
    restored, config = TL.load(tmp_path / TL.CHECKPOINT)
    assert config == CONFIG
    chex.assert_trees_all_equal(restored.params, unbroken.params)
    TL.export_params(tmp_path / TL.CHECKPOINT, tmp_path / "model.pkl")
    params, search = TL.load_params(tmp_path / "model.pkl")
    assert search == SEARCH
    chex.assert_trees_all_equal(params, unbroken.params)


def test_learned_agent_plays_both_colours_in_the_arena(trained):
    train_state, _ = trained
    agents = np.array([[A.AGENTS["learned"], A.AGENTS["random"]],
                       [A.AGENTS["random"], A.AGENTS["learned"]]], np.int32)  # fmt: skip
    rules = R.stack([R.get("recon", max_plies=4)] * 2)
    rewards, plies, stats = A.play_games(
        rules, agents, jax.random.key(8), size=8, moves_per_board=8, worlds=3,
        params=train_state.params, learned=SEARCH,
    )  # fmt: skip
    chex.assert_shape(rewards, (2, 2))
    assert np.all(plies >= 1) and np.all(rewards.sum(1) == 0)


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("train.py", ["--workdir", "/tmp/x"], "give --iterations or --budget-minutes"),
        ("train.py", ["--workdir", "/tmp/x", "--iterations", "0"], "--iterations must be posit"),
        ("train.py", ["--workdir", "/tmp/x", "--iterations", "1", "--variant", "dark"],
         "dark is not a sensing variant"),
        ("train.py", ["--workdir", "/tmp/x", "--iterations", "1", "--anchor", "1.5"],
         "--anchor must be in [0, 1], got 1.5"),
        ("train.py", ["--workdir", "/tmp/x", "--iterations", "1", "--adjudicate", "nan"],
         "--adjudicate must be at least 0, got nan"),
        ("run.py", ["--agents", "learned,random"], "the agent 'learned' needs --checkpoint"),
        ("run.py", ["--agents", "learned,random", "--checkpoint", "/nonexistent.pkl"],
         "--checkpoint /nonexistent.pkl:"),
    ],
)  # fmt: skip
def test_recon_scripts_refuse_bad_input_in_one_line(script, args, message):
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "recon" / script), *args],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
