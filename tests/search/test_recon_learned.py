"""The learned recon agent (`search.recon_learned`, `algorithms.recon`): shapes and
masking, its searches' targets, fairness (same information, same decisions), learning, resume,
and its place in the arena and the scripts. Tiny sizes: compilation dominates on 2 CPU cores."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from configs import recon as recon_config
from mmc_jax import algorithms
from mmc_jax import rules as R
from mmc_jax.algorithms import recon as TL
from mmc_jax.evaluation import players
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.model import recon_net
from mmc_jax.model.network import MASKED_LOGIT
from mmc_jax.rules import recon
from mmc_jax.rules import tables as T
from mmc_jax.search import recon_belief as RB
from mmc_jax.search import recon_learned as L
from mmc_jax.search import recon_score as S
from mmc_jax.training import runloop

ROOT = Path(__file__).resolve().parents[2]
SEARCH = L.SearchConfig(worlds=3, candidates=6, blocks=1, channels=8, world_hidden=16)


def run_config(iterations: int = 2, **overrides):
    """configs/recon.py:smoke with `SEARCH`'s sizes, 2 games x 6 plies, exploration on."""
    config = recon_config.get_config("smoke").copy_and_resolve_references()
    config.unlock()
    config.num_iterations = iterations
    config.selfplay.games = 2
    config.selfplay.explore = 0.5
    config.search.worlds, config.search.candidates = SEARCH.worlds, SEARCH.candidates
    config.network.blocks, config.network.channels = SEARCH.blocks, SEARCH.channels
    config.network.world_hidden = SEARCH.world_hidden
    config.learner.minibatch = 16
    for dotted, value in overrides.items():
        section, name = dotted.split("__")
        config[section][name] = value
    return config


CONFIG = TL.train_config(run_config())


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
    """(final state, workdir) of an unbroken two-iteration `train --config configs/recon.py`
    run through the one run loop."""
    workdir = tmp_path_factory.mktemp("unbroken")
    result = runloop.run(TL.ALGORITHM, run_config(2), workdir, stream=None)
    return result.state, workdir


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
    rules = R.stack([R.get("recon", max_plies=CONFIG.max_plies)] * CONFIG.games)
    play = jax.jit(functools.partial(TL.selfplay, config=CONFIG))
    examples, stats = play(train_state.params, rules, jax.random.key(7))
    assert 0 < float(stats["turns"]) <= CONFIG.games * CONFIG.max_plies
    chex.assert_shape(examples.obs, (2 * CONFIG.games * CONFIG.max_plies, 5, 5, 41))
    batch = TL.minibatch(examples, jax.random.key(0), CONFIG.minibatch)
    assert np.all(np.asarray(examples.weight)[np.asarray(batch_rows(examples, batch))] == 1)
    optimizer = TL.make_optimizer(CONFIG)

    @jax.jit  # one program, not hundreds of operations compiled one at a time
    def step(params, opt_state):
        before, grads = jax.value_and_grad(lambda p: TL.loss_fn(p, batch, CONFIG)[0])(params)
        updates, _ = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return before, params, TL.loss_fn(params, batch, CONFIG)[0]

    before, params, after = step(train_state.params, train_state.opt_state)
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), train_state.params, params)
    assert all(jax.tree.leaves(changed))
    assert after < float(before)


def test_refilled_selfplay_plays_whole_games_back_to_back_and_drops_the_cut_one(trained):
    """A 2-ply cap in a scan of 7 turns: every slot plays 3 whole games (turns 0-5), then a
    fourth the scan cuts, whose turn does not train; each new game starts from the start."""
    config = CONFIG._replace(refill=True, max_plies=7)
    rules = R.stack([R.get("recon", max_plies=2)] * config.games)
    play = jax.jit(functools.partial(TL.selfplay, config=config))
    examples, stats = play(trained[0].params, rules, jax.random.key(3))
    games = config.games
    assert float(stats["games"]) == 3 * games and float(stats["turns"]) == 6 * games
    assert float(stats["plies"]) == 2.0
    weight = np.asarray(examples.world_weight).reshape(7, games)
    np.testing.assert_array_equal(weight, [[1] * games] * 6 + [[0] * games])
    np.testing.assert_array_equal(examples.weight, np.concatenate([weight.ravel()] * 2))
    world = np.asarray(examples.world).reshape(7, games, -1)
    for t in (2, 4, 6):
        np.testing.assert_array_equal(world[t], world[0])
    assert not np.array_equal(world[1], world[0])


def batch_rows(examples, batch):
    """The example rows a minibatch drew (matched by observation and target)."""
    obs = np.asarray(examples.obs).reshape(len(examples.obs), -1)
    drawn = np.asarray(batch["obs"]).reshape(len(batch["obs"]), -1)
    return [int(np.flatnonzero((obs == row).all(axis=1))[0]) for row in drawn]


def test_export_writes_a_recon_run_as_every_learner_does_and_the_agents_load_it(
    trained, tmp_path, capsys
):
    """`python -m mmc_jax.export` on a recon workdir: `params.msgpack` and its card, as any
    learner's export (the algorithm's `model_kind`), read back by `algorithms.open_model` with
    the same parameters and search sizes, a step of the run too (`--step`); the board-game
    loader refuses it in one line."""
    from mmc_jax import export
    from mmc_jax.infra import checkpoint

    unbroken, workdir = trained
    out = tmp_path / "model"
    assert export.main(["--checkpoint", str(workdir), "--out", str(out), "--command", "c"]) == 0
    assert "step 2 of" in capsys.readouterr().out
    card = json.loads((out / "model.json").read_text())
    assert card["step"] == 2 and card["command"] == "c" and card["format"] == 1
    assert card["observation_layout"] == TL.MODEL_LAYOUT
    assert card["description"].startswith("recon: ReconNet 1x8")
    model = algorithms.open_model(out)
    assert model.network == SEARCH and model.sensing and model.exported
    chex.assert_trees_all_equal(model.params, unbroken.params)
    first = tmp_path / "first"
    assert export.main(["--checkpoint", str(workdir), "--out", str(first), "--step", "1"]) == 0
    assert algorithms.open_model(first).step == 1
    with pytest.raises(ValueError, match="the sensing variant 'recon'"):
        checkpoint.load_model(str(out))
    with pytest.raises(ValueError, match="the sensing variant 'recon'"):
        checkpoint.load_model(str(workdir))
    params_file = out / "params.msgpack"
    params_file.write_bytes(params_file.read_bytes()[:100])
    with pytest.raises(ValueError, match="params.msgpack is damaged"):
        algorithms.open_model(out)


def test_replay_keeps_live_rows_newest_first_and_pools_them_with_this_iteration():
    config = CONFIG._replace(replay_iterations=3, replay_rows=4)
    n = 2 * config.games * config.max_plies
    assert TL.kept_rows(config) == (4, 4)
    assert TL.kept_rows(config._replace(replay_rows=10**6)) == (n, n // 2)
    empty = TL.empty_replay(config)
    chex.assert_shape(empty.obs, (2, 4, 5, 5, recon_net.OBS_CHANNELS))
    assert float(empty.weight.sum()) == 0 and float(empty.world_weight.sum()) == 0

    def examples(first: float, live: int) -> TL.Examples:
        rows, boards = np.arange(n, dtype=np.float32), np.arange(n // 2, dtype=np.float32)
        return TL.Examples(
            obs=jnp.broadcast_to((first + rows)[:, None, None, None],
                                 (n, 5, 5, recon_net.OBS_CHANNELS)),
            mask=jnp.ones((n, recon.NUM_ACTIONS), bool),
            target=jnp.zeros((n, recon.NUM_ACTIONS), jnp.float32),
            result=jnp.asarray(first + rows), weight=jnp.asarray(rows < live, jnp.float32),
            world=jnp.broadcast_to((first + boards)[:, None], (n // 2, recon_net.WORLD_FEATURES)),
            world_result=jnp.asarray(first + boards),
            world_weight=jnp.asarray(boards < live, jnp.float32),
        )  # fmt: skip

    # Three live rows of many: all three are kept, the fourth row kept is padding (weight 0).
    kept = TL.keep(examples(0.0, 3), jax.random.key(0), config)
    live = sorted(float(r) for r, w in zip(kept.result, kept.weight, strict=True) if w == 1)
    assert live == [0.0, 1.0, 2.0] and float(kept.weight.sum()) == 3
    assert float(kept.world_weight.sum()) == 3
    np.testing.assert_array_equal(kept.obs[:, 0, 0, 0], kept.result)  # rows stay whole
    # Plenty live: four distinct live rows (without replacement).
    many = TL.keep(examples(100.0, n), jax.random.key(1), config)
    assert len(set(np.asarray(many.result).tolist())) == 4 and float(many.weight.sum()) == 4
    replay = TL.pushed(TL.pushed(empty, kept), many)
    np.testing.assert_array_equal(replay.result[0], many.result)  # newest first
    np.testing.assert_array_equal(replay.result[1], kept.result)
    replay = TL.pushed(replay, kept)
    np.testing.assert_array_equal(replay.result[1], many.result)  # the oldest slot dropped
    pool = TL.with_replay(examples(0.0, 3), replay)
    assert pool.obs.shape[0] == n + 2 * 4 and pool.world.shape[0] == n // 2 + 2 * 4
    assert float(pool.weight.sum()) == 3 + 3 + 4


def test_a_run_with_replay_resumes_bit_identically_and_draws_from_the_kept_rows(tmp_path):
    """Replay across iterations (`--config.replay.iterations`): the replay is in every
    checkpoint, a resumed run equals an unbroken one, replay included, and the second
    iteration draws from its own decisions plus the first's kept rows."""
    config = run_config(2, replay__iterations=3)
    unbroken = runloop.run(TL.ALGORITHM, config, tmp_path / "unbroken", stream=None).state
    assert isinstance(unbroken, TL.ReplayState)
    workdir = tmp_path / "run"
    runloop.run(TL.ALGORITHM, run_config(1, replay__iterations=3), workdir, stream=None)
    resumed = runloop.run(TL.ALGORITHM, config, workdir, stream=None).state
    chex.assert_trees_all_equal(resumed, unbroken)
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    first, second = records
    kept = min(TL.kept_rows(TL.train_config(config))[0], 2 * first["selfplay/frames"])
    assert first["replay/decisions"] == 2 * first["selfplay/frames"]
    assert second["replay/decisions"] == 2 * second["selfplay/frames"] + kept
    assert float(unbroken.replay.weight[0].sum()) == kept  # the newest slot: iteration 2's
    # A run recorded before replay existed (no `replay` section) reads as one iteration.
    old = run_config(1).to_dict()
    del old["replay"]
    assert TL.train_config(ml_collections.ConfigDict(old)).replay_iterations == 1
    # One recorded before the inverse-CDF sampler draws as it did: Gumbel noise.
    old = run_config(1).to_dict()
    del old["learner"]["sampler"]
    assert TL.train_config(ml_collections.ConfigDict(old)).sampler == "gumbel"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("learner__learning_rate", 1e30, "config.learner.learning_rate=1e+30 must be a finite"),
        ("selfplay__adjudicate", float("inf"), "config.selfplay.adjudicate=inf must be a finite"),
        ("learner__anchor", 1.5, "config.learner.anchor=1.5 must be a finite number in [0.0, 1"),
        ("selfplay__games", 0, "config.selfplay.games must be at least 1, got 0"),
        ("learner__sampler", "fast", "config.learner.sampler='fast': one of ('inverse_cdf',"),
    ],
)
def test_recon_configs_refuse_bad_values_in_one_line(field, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TL.prepare_config(run_config(**{field: value}))


def test_recon_configs_refuse_a_variant_without_sensing():
    config = run_config()
    config.variant = "dark"
    with pytest.raises(ValueError, match="has no sensing"):
        TL.prepare_config(config)


def test_learned_agent_plays_both_colours_in_the_arena(trained):
    train_state, _ = trained
    learned, random = players.recon_kinds("learned"), players.recon_kinds("random")
    agents = np.array([[learned, random], [random, learned]], np.int32)
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
        ("run.py", ["--agents", "learned,random"], "the agent 'learned' needs --checkpoint"),
        ("run.py", ["--agents", "learned,random", "--checkpoint", "/nonexistent"],
         "--checkpoint /nonexistent: no such checkpoint directory: /nonexistent"),
        ("run.py", ["--agents", "learned,random", "--checkpoint", "gardner-cpu"],
         "--checkpoint gardner-cpu: a board-game model; a sensing variant (recon) plays a "
         "sensing model"),
        ("run.py", ["--agents", "random,greedy"], "unknown recon agent 'greedy'"),
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
