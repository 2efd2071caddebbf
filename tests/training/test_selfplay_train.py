"""Tests for mmc_jax.training.selfplay, mmc_jax.train and configs/gardner.py (tiny configs).

Compile time dominates on a 2-core CPU, so the module compiles one self-play scan (`played`,
hand-made positions; the slow tier's: the fast tier plays through the smoke iterations) and
runs training only through the smoke iteration that the run loop's tests compile
(tests/runs_support.py): the properties of a training run (metrics, checkpoints, resume,
devices) are tested for every algorithm in tests/training/test_runloop.py.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from runs_support import smoke

from configs import gardner as gardner_config
from mmc_jax import rules as R
from mmc_jax import train
from mmc_jax.algorithms import alphazero
from mmc_jax.evaluation import match
from mmc_jax.infra import sharding
from mmc_jax.model import network
from mmc_jax.training import learner, runloop, selfplay

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = ROOT / "configs" / "gardner.py"

# Black to move has one legal move (Nd5-e3, blocking the rook's check); then Re2xe3 mates
# (8 legal moves, so 16 simulations visit all and find it).
MATE_BLACK_TO_MOVE = "2Knk/5/5/4R/5 b - - 0 1"
# The same with colours swapped: White's only move Nd1-e3, then Re4xe3 mates.
MATE_WHITE_TO_MOVE = "5/4r/5/5/2kNK w - - 0 1"
# A position and its a<->e mirror: promotions straight and capturing toward either side,
# a bishop and a knight (checks the mirror action map against the engine's legal moves).
MIRROR_PAIR = ("r1n1k/1P3/5/2B2/1N2K w - - 0 1", "k1n1r/3P1/5/2B2/K2N1 w - - 0 1")


def load_config(preset: str | None = None):
    config = gardner_config.get_config(preset)
    config.replay.backfill_outcomes = True  # as `cpu` and `full`; off in `smoke` itself
    return config


# ---------------------------------------------------------------------------------------------
# Self-play on hand-made positions


def played_config():
    config = load_config("smoke")
    config.selfplay.num_plies = 3
    config.selfplay.num_simulations = 16
    config.selfplay.max_num_considered_actions = 16  # every legal move of the mate positions
    config.selfplay.gumbel_scale = 0.0  # deterministic: the search must find the mate
    config.selfplay.temperature_plies = 0
    return config


@pytest.fixture(scope="module")
def played():
    """Three plies of 6 games: Black forced then mated, its colour-swapped twin, 2 x the start
    position, and the `MIRROR_PAIR`."""
    config = played_config()
    net = network.make_network(config.network)
    params = jax.jit(lambda key: network.init_params(net, key, R.OBS_SHAPE))(jax.random.key(0))
    rules_b = R.batch("gardner", 6)
    start = R.init(rules_b)
    fens = [MATE_BLACK_TO_MOVE, MATE_WHITE_TO_MOVE, None, None, *MIRROR_PAIR]
    games = [R.from_fen(f) if f else jax.tree.map(lambda x: x[0], start) for f in fens]
    state = jax.tree.map(lambda s, *xs: jnp.stack(xs).astype(s.dtype), start, *games)
    play = jax.jit(
        lambda params, rules_b, state, key: selfplay.selfplay(
            net, params, rules_b, state, key, config
        )
    )
    final_state, trajectory = jax.device_get(play(params, rules_b, state, jax.random.key(1)))
    return final_state, trajectory, jax.device_get(start)


@pytest.mark.slow
def test_trajectory_shapes_and_search_distributions(played):
    _, trajectory, _ = played
    num_plies, batch_size = 3, 6
    chex.assert_shape(trajectory.obs, (num_plies, batch_size, *R.OBS_SHAPE))
    chex.assert_shape(
        [trajectory.legal_action_mask, trajectory.action_weights],
        (num_plies, batch_size, R.NUM_ACTIONS),
    )
    chex.assert_shape(
        [trajectory.action, trajectory.mover, trajectory.ply, trajectory.terminated],
        (num_plies, batch_size),
    )
    chex.assert_shape(trajectory.rewards, (num_plies, batch_size, 2))
    assert trajectory.valid.all()
    weights, legal = trajectory.action_weights, trajectory.legal_action_mask
    assert legal.any(axis=-1).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert (weights >= 0).all()
    assert (weights[~legal] == 0).all(), "search weight on an illegal move"
    played_legal = np.take_along_axis(legal, trajectory.action[..., None], axis=-1)[..., 0]
    assert played_legal.all()


@pytest.mark.slow
def test_forced_mate_ends_the_game_and_resets(played):
    final_state, trajectory, start = played
    # Game 0: Black (forced), then White mates. Game 1: the colour-swapped twin.
    legal_count = trajectory.legal_action_mask.sum(axis=-1)
    np.testing.assert_array_equal(legal_count[0, :2], [1, 1])  # forced
    assert (legal_count[1, :2] <= 16).all()  # every reply is searched
    np.testing.assert_array_equal(trajectory.mover[:2, 0], [1, 0])
    np.testing.assert_array_equal(trajectory.mover[:2, 1], [0, 1])
    np.testing.assert_array_equal(trajectory.terminated[:, 0], [False, True, False])
    np.testing.assert_array_equal(trajectory.terminated[:, 1], [False, True, False])
    np.testing.assert_array_equal(trajectory.rewards[1, 0], [1.0, -1.0])
    np.testing.assert_array_equal(trajectory.rewards[1, 1], [-1.0, 1.0])
    assert not trajectory.terminated[:, 2:4].any()
    # After the mate the slot holds a fresh game: White to move from the start, ply 0.
    np.testing.assert_array_equal(trajectory.obs[2, 0], trajectory.obs[0, 2])
    np.testing.assert_array_equal(trajectory.ply[2, :2], [0, 0])
    np.testing.assert_array_equal(trajectory.mover[2, :2], [0, 0])
    assert not final_state.terminated.any()
    np.testing.assert_array_equal(final_state.ply[:4], [1, 1, 3, 3])
    np.testing.assert_array_equal(start.ply, 0)


@pytest.mark.slow
def test_value_targets_signs_and_masks(played):
    _, trajectory, _ = played
    batch = selfplay.compute_targets(jax.tree.map(jnp.asarray, trajectory))
    num_plies, batch_size = trajectory.mover.shape
    chex.assert_shape(batch.obs, (num_plies * batch_size, *R.OBS_SHAPE))
    value = np.asarray(batch.value_target).reshape(num_plies, batch_size)
    mask = np.asarray(batch.value_mask).reshape(num_plies, batch_size)
    # The loser's move (ply 0) gets -1, the winner's mating move (ply 1) +1, for both colours.
    np.testing.assert_array_equal(value[:2, :2], [[-1.0, -1.0], [1.0, 1.0]])
    assert mask[:2, :2].all()
    # The games started by the reset, and the start-position games, were cut off: masked.
    assert not mask[2, :2].any()
    assert not mask[:, 2:4].any()
    np.testing.assert_array_equal(value[~mask], 0.0)
    # Policy targets are the search weights.
    np.testing.assert_allclose(
        np.asarray(batch.policy_target).reshape(trajectory.action_weights.shape),
        trajectory.action_weights,
    )


def test_compute_targets_boundaries_draws_and_invalid_samples():
    # One game slot over 6 plies: a game Black wins at ply 2, a draw at ply 4, a cut-off game;
    # a second slot whose first sample is invalid (the game was already over).
    num_plies, batch_size = 6, 2
    mover = np.tile(np.array([0, 1, 0, 1, 0, 1])[:, None], (1, batch_size)).astype(np.int32)
    terminated = np.zeros((num_plies, batch_size), bool)
    rewards = np.zeros((num_plies, batch_size, 2), np.float32)
    terminated[2, 0], rewards[2, 0] = True, [-1.0, 1.0]  # White moved and lost (e.g. atomic)
    terminated[4, 0] = True  # a draw
    terminated[0, 1] = True
    valid = np.ones((num_plies, batch_size), bool)
    valid[0, 1] = False
    weights = np.full((num_plies, batch_size, R.NUM_ACTIONS), 1.0 / R.NUM_ACTIONS, np.float32)
    trajectory = selfplay.Trajectory(
        obs=jnp.zeros((num_plies, batch_size, *R.OBS_SHAPE)),
        legal_action_mask=jnp.ones((num_plies, batch_size, R.NUM_ACTIONS), bool),
        action_weights=jnp.asarray(weights),
        action=jnp.zeros((num_plies, batch_size), jnp.int32),
        mover=jnp.asarray(mover),
        ply=jnp.zeros((num_plies, batch_size), jnp.int32),
        terminated=jnp.asarray(terminated),
        rewards=jnp.asarray(rewards),
        valid=jnp.asarray(valid),
        root_value=jnp.full((num_plies, batch_size), 0.5, jnp.float32),
    )
    batch = jax.jit(selfplay.compute_targets)(trajectory)
    value = np.asarray(batch.value_target).reshape(num_plies, batch_size)
    mask = np.asarray(batch.value_mask).reshape(num_plies, batch_size)
    np.testing.assert_array_equal(value[:, 0], [-1, 1, -1, 0, 0, 0])
    np.testing.assert_array_equal(mask[:, 0], [True, True, True, True, True, False])
    np.testing.assert_array_equal(mask[:, 1], False)
    policy = np.asarray(batch.policy_target).reshape(weights.shape)
    np.testing.assert_array_equal(policy[0, 1], 0.0)  # invalid sample: no policy target
    stats = jax.device_get(jax.jit(selfplay.trajectory_stats)(trajectory))
    assert stats["frames"] == 11 and stats["games"] == 2 and stats["black_wins"] == 1

    # Bootstrapped: the game cut off at ply 5 (Black to move, search value 0.5 for Black)
    # takes that value, seen from each sample's mover; finished games are unchanged.
    boot = jax.jit(functools.partial(selfplay.compute_targets, bootstrap=True))(trajectory)
    value = np.asarray(boot.value_target).reshape(num_plies, batch_size)
    mask = np.asarray(boot.value_mask).reshape(num_plies, batch_size)
    np.testing.assert_array_equal(value[:, 0], [-1, 1, -1, 0, 0, 0.5])
    np.testing.assert_array_equal(mask[:, 0], True)
    np.testing.assert_array_equal(value[1:, 1], [0.5, -0.5, 0.5, -0.5, 0.5])
    np.testing.assert_array_equal(mask[:, 1], [False, True, True, True, True, True])


def test_game_results_give_each_ply_the_next_game_end_in_its_slot():
    ended = np.zeros((5, 2), bool)
    ended[[1, 3], 0] = True  # slot 0: games end at turns 1 and 3, turn 4 starts a third
    ended[3, 1] = True  # slot 1: one game over turns 0-3
    result = np.zeros((5, 2, 2), np.float32)
    result[1, 0], result[3, 0], result[3, 1] = [1, -1], [0.5, -0.5], [-1, 1]
    got, known = selfplay.game_results(jnp.asarray(ended), jnp.asarray(result))
    expected = np.zeros((5, 2, 2), np.float32)
    expected[:2, 0], expected[2:4, 0], expected[:4, 1] = [1, -1], [0.5, -0.5], [-1, 1]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(known, [[1, 1]] * 4 + [[0, 0]])


@pytest.mark.slow
def test_muzero_selfplay_traces():
    # Shapes only (tracing, no compile): the PUCT path with Dirichlet noise and argmax play.
    config = load_config("smoke")
    config.selfplay.algorithm = "muzero"
    net = network.make_network(config.network)
    rules_b = R.batch("gardner", 2)
    state = R.init(rules_b)

    def play(key):
        params = network.init_params(net, key, R.OBS_SHAPE)
        return selfplay.selfplay(net, params, rules_b, state, key, config)

    final_state, trajectory = jax.eval_shape(play, jax.random.key(0))
    chex.assert_shape(trajectory.action_weights, (4, 2, R.NUM_ACTIONS))
    chex.assert_shape(final_state.turn, (2,))


# ---------------------------------------------------------------------------------------------
# Mirror augmentation


def test_no_current_variant_is_file_symmetric():
    assert selfplay.file_symmetric_variants() == ()
    assert selfplay._board_is_file_symmetric("rnknr/ppppp/5/PPPPP/RNKNR w - - 0 1")


@pytest.mark.slow
def test_mirror_action_map_matches_the_engine(played):
    _, trajectory, _ = played
    mirror = selfplay.MIRROR_FILE_ACTIONS
    np.testing.assert_array_equal(mirror[mirror], np.arange(R.NUM_ACTIONS))
    legal, mirrored_legal = trajectory.legal_action_mask[0, 4], trajectory.legal_action_mask[0, 5]
    assert legal.sum() > 10
    np.testing.assert_array_equal(legal[mirror], mirrored_legal)
    # ... and the observations of the two positions are each other's file flip.
    np.testing.assert_array_equal(trajectory.obs[0, 4][:, ::-1], trajectory.obs[0, 5])


def test_mirror_files_flips_observations_and_permutes_policies():
    num_samples = 3
    obs = jax.random.normal(jax.random.key(0), (num_samples, *R.OBS_SHAPE))
    policy = jax.nn.softmax(jax.random.normal(jax.random.key(1), (num_samples, R.NUM_ACTIONS)))
    batch = learner.Batch(
        obs, policy > 1e-3, policy, jnp.ones(num_samples), jnp.ones(num_samples, bool)
    )
    mirror_files = jax.jit(selfplay.mirror_files)  # one compile instead of many eager ops
    mirrored = mirror_files(batch)
    np.testing.assert_array_equal(mirrored.obs[:, :, 0], obs[:, :, 4])
    twice = mirror_files(mirrored)
    jax.tree.map(np.testing.assert_array_equal, twice, batch)
    random_mirror = jax.jit(selfplay.random_mirror)
    kept = random_mirror(jax.random.key(2), batch, jnp.zeros(num_samples, bool))
    jax.tree.map(np.testing.assert_array_equal, kept, batch)


# ---------------------------------------------------------------------------------------------
# Config and CLI


def test_config_presets_and_validation():
    for preset in (None, "full", "cpu", "smoke"):
        config = alphazero.prepare_config(load_config(preset))
        assert config.variants == (config.variant,)
    with pytest.raises(ValueError, match="unknown preset"):
        load_config("huge")
    config = load_config("smoke")
    config.variant = "chess960"
    with pytest.raises(ValueError, match="valid variants: gardner, baby"):
        alphazero.prepare_config(config)
    config = load_config("smoke")
    config.selfplay.batch_size = -8  # 0 fills the device: tests/training/test_memory_estimate.py
    with pytest.raises(ValueError, match="selfplay.batch_size must be non-negative"):
        alphazero.prepare_config(config)
    config = load_config("smoke")
    config.selfplay.algorithm = "alphabeta"
    with pytest.raises(ValueError, match="algorithm"):
        alphazero.prepare_config(config)
    config = load_config("smoke")
    config.eval.every, config.eval.num_games = 1, 3
    with pytest.raises(ValueError, match="even"):
        alphazero.prepare_config(config)
    assert gardner_config.get_config("cpu").replay.backfill_outcomes  # cut-off games: a result
    assert gardner_config.get_config("full").replay.backfill_outcomes
    assert not gardner_config.get_config("smoke").replay.backfill_outcomes
    config = load_config("smoke")
    config.selfplay.value_bootstrap = True
    with pytest.raises(ValueError, match="backfill_outcomes=False"):
        alphazero.prepare_config(config)
    config.replay.backfill_outcomes = False
    alphazero.prepare_config(config)
    config = load_config("cpu")
    config.checkpoint.every, config.checkpoint.keep_period = 5, 25
    alphazero.prepare_config(config)
    config.checkpoint.keep_period = 12
    with pytest.raises(ValueError, match="keep_period=12 is not a multiple of"):
        alphazero.prepare_config(config)
    config.checkpoint.keep_period = -5
    with pytest.raises(ValueError, match="keep_period must be a non-negative integer"):
        alphazero.prepare_config(config)
    config = load_config("smoke")
    assert config.selfplay.value_q_weight == 0.0  # AlphaZero's target, the result alone
    config.selfplay.value_q_weight = 0.5
    alphazero.prepare_config(config)
    config.selfplay.value_q_weight = 1.5
    with pytest.raises(ValueError, match=r"value_q_weight must be in \[0, 1\].*got 1.5"):
        alphazero.prepare_config(config)
    with pytest.raises(ValueError, match="not divisible by the 8 devices"):
        sharding.check_batch_divisible(12, 8, "selfplay.batch_size")


def test_config_flags_override_and_reject_typos(monkeypatch):
    from absl import flags

    def parse(*args):
        argv = ["train", *args, "--workdir=w"]
        monkeypatch.setattr(sys, "argv", argv)  # config_flags reads the overrides from it
        flag_values = flags.FlagValues()
        train.define_flags(flag_values)
        flag_values(argv)
        return flag_values.config

    config = parse(f"--config={CONFIG_PATH}:cpu", "--config.variant=atomic")
    assert config.variant == "atomic"
    assert config.selfplay.batch_size == load_config("cpu").selfplay.batch_size
    # A locked config: a misspelt field is an error (config_flags raises AttributeError).
    with pytest.raises((flags.Error, AttributeError, KeyError), match="bogus"):
        parse(f"--config={CONFIG_PATH}:smoke", "--config.selfplay.bogus=1")


@pytest.mark.parametrize(
    "config, override, expected",
    [
        ("gardner.py:smoke", "selfplay.batchsize=8", "config.selfplay.batch_size"),
        ("joat.py:smoke", "meta.inner_step=3", "config.meta.inner_steps"),
    ],
)
def test_cli_names_the_nearest_fields_of_a_misspelt_one_in_one_line(
    tmp_path, config, override, expected
):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmc_jax.train",
            f"--config={ROOT / 'configs' / config}",
            f"--config.{override}",
            f"--workdir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert completed.returncode == 2
    misspelt = override.split("=")[0]
    (line,) = completed.stderr.splitlines()  # one line, no traceback
    assert line.startswith(f"error: config has no field {misspelt!r}; did you mean {expected}")
    assert line.endswith("?"), line
    assert not os.listdir(tmp_path)  # nothing started


def test_cli_rejects_an_unknown_variant(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmc_jax.train",
            f"--config={CONFIG_PATH}:smoke",
            "--config.variant=chess960",
            f"--workdir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert completed.returncode != 0
    assert "unknown variant 'chess960'" in completed.stderr
    assert "gardner, baby, mallet" in completed.stderr


def test_non_finite_loss_is_a_clear_error():
    runloop.check_finite({"train/policy_loss": 1.0, "selfplay/games": 3}, 4, "note")
    with pytest.raises(FloatingPointError, match="iteration 4.*train/value_loss.*kept"):
        runloop.check_finite({"train/value_loss": float("nan")}, 4, "kept")


# ---------------------------------------------------------------------------------------------
# Training: the evaluation hook (the run loop's properties: tests/training/test_runloop.py)


def test_evaluation_hook_logs_scores(tmp_path, monkeypatch):
    calls = []

    def fake_play_match(
        network, params, variant, opponent, num_games, num_simulations, key, **kwargs
    ):
        calls.append((variant, opponent, num_games, num_simulations))
        return {"score": 0.75, "score_ci95": [0.6, 0.9], "wins": 3, "draws": 0, "losses": 1}

    monkeypatch.setattr(match, "play_match", fake_play_match)
    config = smoke("alphazero", 1)  # the program of the run loop's tests (runs_support.py)
    config.eval.every = 1
    stream = io.StringIO()
    result = train.train(config, tmp_path, stream=stream)
    assert calls == [("gardner", "random", 4, 4), ("gardner", "greedy", 4, 4)]
    assert result["eval/score_vs_random"] == 0.75
    assert result["eval/score_high_vs_greedy"] == 0.9
    assert "eval@1 random 0.75 [0.60,0.90]" in stream.getvalue()
    assert (tmp_path / "plots" / "score_vs_random.png").exists()


def test_one_move_generation_gives_the_planes_of_the_games_and_of_their_starts():
    """`selfplay.planes_and_starts` (one move generation over the games and their starts) equals
    `legal_planes` of the games, `init` and `legal_planes` of the starts, in a batch that mixes
    a stuck start (monochromatic), a sensing variant's (finished at once), fog, and games in
    progress and over."""
    variants = ["gardner", "monochromatic", "recon", "dark", "atomic", "baby", "extinction"]
    rules_b = R.batch(variants, 14)
    state = R.init(rules_b)
    for key in range(6):  # random plies: some games in progress, some over
        mask = R.legal_action_mask(rules_b, state)
        state = R.step(rules_b, state, R.random_legal_action(jax.random.key(key), mask))
    planes, start, start_planes = jax.jit(selfplay.planes_and_starts)(rules_b, state)
    np.testing.assert_array_equal(planes, R.legal_planes(rules_b, state))
    chex.assert_trees_all_equal(start, R.init(rules_b))
    np.testing.assert_array_equal(start_planes, R.legal_planes(rules_b, R.init(rules_b)))
    assert bool(start.terminated[1]) and bool(start.terminated[2])  # stuck, and sensing
    assert not bool(start.terminated[0]) and bool(np.asarray(start_planes[0]).any())
