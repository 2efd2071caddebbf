"""Tests for mmc_jax.evaluate: greedy policy, arena statistics, colour balance, load_model, CLI.

Compile time dominates on 2 CPU cores, so the tests share few compiled programs: every
random / greedy match uses one baseline arena (`NUM_GAMES` games; variant, key and ply cap are
data, not compile-time constants), the colour-balance test one arena with a policy function,
and the model tests one arena with a tiny network (which the in-process CLI run reuses). The
greedy positions go through one small jitted function (3 s for the 7 positions, against 8.5 s
op by op under `jax.disable_jit` on the 2-core CPU).
"""

import json
import os
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from mmc_jax import evaluate
from mmc_jax import rules as R
from mmc_jax.evaluation import elo, match, policies
from mmc_jax.infra import checkpoint
from mmc_jax.model import network

NUM_GAMES = 128  # every baseline match: one compiled arena


@jax.jit
def _greedy(key, rules, state):
    planes = R.legal_planes(rules, state)
    return policies.greedy_policy(key, rules, state, planes), R.planes_to_mask(planes)


def greedy_choices(variant: str, fen: str, num_games: int = 16, seed: int = 0):
    """(UCI moves greedy picks in `num_games` copies of the position, legal UCI moves)."""
    rules = R.batch(variant, num_games)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_games, *jnp.shape(x))), R.from_fen(fen))
    actions, mask = _greedy(jax.random.key(seed), rules, state)
    legal = np.flatnonzero(np.asarray(mask)[0])
    chex.assert_shape(actions, (num_games,))
    to_uci = lambda a: R.action_to_uci(variant, fen, int(a))  # noqa: E731
    return {to_uci(a) for a in np.asarray(actions)}, {to_uci(a) for a in legal}


@pytest.mark.parametrize(
    "variant, fen, best, also_legal",
    [
        # Knight c2 can take the queen on b4 or the pawn on d4.
        ("gardner", "4k/1q1p1/5/2N2/K4 w - - 0 1", "c2b4", "c2d4"),
        # The same for Black (the board is in the mover's view): knight c1 takes b3, not d3.
        ("gardner", "4k/5/1Q1P1/5/2n1K b - - 0 1", "c1b3", "c1d3"),
        # Promoting to a queen (+8) beats taking a knight (+3) and under-promotions.
        ("gardner", "k4/3P1/5/5/Kn3 w - - 0 1", "d4d5q", "a1b1"),
        # Taking the rook while promoting (+5 +8) beats promoting alone ...
        ("gardner", "k3r/3P1/5/5/K4 w - - 0 1", "d4e5q", "d4d5q"),
        # ... but a rifle capture leaves the pawn where it was (no promotion: +5 < +8) ...
        ("rifle", "k3r/3P1/5/5/K4 w - - 0 1", "d4d5q", "d4e5"),
        # ... and an atomic capture blows it up.
        ("atomic", "k3r/3P1/5/5/K4 w - - 0 1", "d4d5q", "d4e5q"),
        # Where kings can be taken, taking one beats taking the queen.
        ("dark", "k4/5/5/4K/R3q w - - 0 1", "a1a5", "a1e1"),
    ],
)
def test_greedy_takes_the_most_material(variant, fen, best, also_legal):
    chosen, legal = greedy_choices(variant, fen)
    assert {best, also_legal} <= legal
    assert chosen == {best}


@pytest.mark.slow
def test_greedy_without_captures_plays_varied_legal_moves():
    chosen, legal = greedy_choices("gardner", R.START_FENS["gardner"], num_games=64)
    assert chosen <= legal
    assert len(chosen) >= 4  # ties broken at random, not always the same move


def check_match(result: dict, num_games: int) -> None:
    """Consistency of a play_match result."""
    assert result["num_games"] == num_games
    assert result["wins"] + result["draws"] + result["losses"] == num_games
    for colour in ("white", "black"):
        part = result[colour]
        assert part["games"] == num_games // 2
        assert part["wins"] + part["draws"] + part["losses"] == num_games // 2
    for key in ("wins", "draws", "losses"):
        assert result["white"][key] + result["black"][key] == result[key]
    assert 0.0 <= result["score"] <= 1.0
    assert result["score"] == pytest.approx((result["wins"] + 0.5 * result["draws"]) / num_games)
    for interval in (result["score_ci95"], result["score_ci95_wilson"]):
        low, high = interval
        assert 0.0 <= low <= result["score"] <= high <= 1.0
    json.dumps(result)  # JSON-able


@pytest.mark.slow
def test_random_vs_random_statistics():
    result = match.play_match("random", None, "gardner", "random", NUM_GAMES, 0, jax.random.key(0))
    check_match(result, NUM_GAMES)
    assert result["illegal_moves"] == {"model": 0, "opponent": 0}
    assert result["score_ci95"][0] < 0.5 < result["score_ci95"][1]  # no side is favoured
    again = match.play_match("random", None, "gardner", "random", NUM_GAMES, 0, jax.random.key(0))
    assert again == result  # reproducible from the key


@pytest.mark.slow
def test_greedy_beats_random():
    result = match.play_match("greedy", None, "gardner", "random", NUM_GAMES, 0, jax.random.key(1))
    check_match(result, NUM_GAMES)
    # Greedy rarely loses but mostly draws: it does not look for mates, so its games end in
    # stalemates (about 60% of its draws in gardner) or bare kings (about 1/3). Over 12 seeds
    # at 256 games: score 0.566-0.600, about 17% wins and 0.6% losses; the per-game sd is
    # 0.18, so at 128 games the score's sd is 0.016 and both thresholds below are more than
    # 3 sd from their means.
    assert result["score"] > 0.53
    assert result["wins"] - result["losses"] >= 8


@pytest.mark.slow
@pytest.mark.parametrize("variant", R.VARIANTS)
def test_greedy_plays_only_legal_moves(variant):
    result = match.play_match(
        "greedy",
        None,
        variant,
        "greedy",
        NUM_GAMES,
        0,
        jax.random.key(2),
        max_plies=60,
        opening_plies=4,
    )
    check_match(result, NUM_GAMES)
    assert result["illegal_moves"] == {"model": 0, "opponent": 0}
    assert result["max_plies"] == 60 and result["mean_plies"] <= 60
    if variant == "monochromatic":  # White has no move at the start: drawn at once
        assert result["draws"] == NUM_GAMES and result["mean_plies"] == 0


def test_colour_balance_with_an_illegal_mover():
    """A model that always plays an illegal move loses every game at its first move: at ply 0
    when it is White (the first half of the games), after the opponent's move when Black."""

    def illegal_policy(key, rules, state):
        del key, rules
        return jnp.full(state.turn.shape, -1, jnp.int32)

    result = match.play_match(
        illegal_policy, None, "gardner", "random", NUM_GAMES, 0, jax.random.key(3)
    )
    check_match(result, NUM_GAMES)
    assert result["losses"] == NUM_GAMES and result["score"] == 0.0
    assert result["illegal_moves"] == {"model": NUM_GAMES, "opponent": 0}
    assert result["white"]["mean_plies"] == 0.0
    assert result["black"]["mean_plies"] == 1.0
    assert result["ci_method"] == "wilson" and result["score_ci95"][1] > 0.0
    assert result["elo"] is None


def test_statistics_helpers():
    low, high = elo.wilson_interval(0.5, 100)
    assert low == pytest.approx(0.4038, abs=1e-3) and high == pytest.approx(0.5962, abs=1e-3)
    stats = elo.match_statistics(np.array([1, 0, 0, -1, 1, 0]), np.arange(6))
    assert (stats["wins"], stats["draws"], stats["losses"]) == (2, 3, 1)
    assert stats["white"]["wins"] == 1 and stats["black"]["wins"] == 1
    assert stats["ci_method"] == "normal"
    sd = np.std([1, 0.5, 0.5, 0, 1, 0.5], ddof=1)
    assert stats["score_ci95"][1] - stats["score"] == pytest.approx(1.96 * sd / np.sqrt(6), 1e-3)
    assert elo.elo_difference(0.5) == 0.0 and elo.elo_difference(1.0) is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(variant="chess"), "valid variants: gardner"),
        (dict(num_games=3), "even"),
        (dict(num_games=0), "positive"),
        (dict(opponent="stockfish"), "unknown opponent"),
        (dict(opponent="checkpoint"), "needs a network"),
    ],
)
def test_play_match_argument_errors(kwargs, message):
    args = dict(variant="gardner", opponent="random", num_games=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        match.play_match(
            "random",
            None,
            args["variant"],
            args["opponent"],
            args["num_games"],
            0,
            jax.random.key(0),
        )


# ---------------------------------------------------------------------------------------------
# A tiny network from a checkpoint


TINY = dict(num_blocks=1, channels=8, policy_channels=4, value_channels=2, value_hidden=8)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A workdir with one checkpoint of a tiny random network (plus optimizer state and a
    counter, which load_model must skip)."""
    workdir = str(tmp_path_factory.mktemp("run"))
    config = ml_collections.ConfigDict(
        dict(variants=["gardner"], network=TINY, learner=dict(optimizer="adam", learning_rate=1e-3))
    )
    net = network.make_network(config.network)
    # Random values of the right shapes: `init_params` would compile for ~8 s.
    shapes = jax.eval_shape(
        lambda key: network.init_params(net, key, R.OBS_SHAPE), jax.random.key(0)
    )
    rng = np.random.default_rng(0)
    params = jax.tree.map(
        lambda s: jnp.asarray(0.1 * rng.standard_normal(s.shape), s.dtype), shapes
    )
    state = {"params": params, "opt_state": optax.adam(1e-3).init(params), "iteration": 7}
    checkpoint.save_checkpoint(workdir, 7, state, config=config)
    return workdir, params


def test_load_model_restores_params_and_config(saved_run):
    workdir, params = saved_run
    net, restored, config = checkpoint.load_model(workdir)
    assert config.network.channels == 8 and list(config.variants) == ["gardner"]
    assert net == network.make_network(ml_collections.ConfigDict(TINY))
    chex.assert_trees_all_close(restored, params)
    _, from_step_dir, _ = checkpoint.load_model(os.path.join(workdir, "checkpoints", "7"))
    chex.assert_trees_all_close(from_step_dir, params)


def test_load_model_errors(saved_run, tmp_path):
    workdir, _ = saved_run
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        checkpoint.load_model(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoint.load_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="step 3"):
        checkpoint.load_model(workdir, step=3)
    assert not os.path.exists(tmp_path / "checkpoints")  # looking created nothing

    # A sidecar without a network config, and one whose config does not fit the parameters.
    _, params = saved_run
    checkpoint.save_checkpoint(tmp_path / "no_config", 1, {"params": params})
    with pytest.raises(ValueError, match="no network config"):
        checkpoint.load_model(tmp_path / "no_config")
    wider = ml_collections.ConfigDict(dict(network=dict(TINY, channels=16)))
    checkpoint.save_checkpoint(tmp_path / "wider", 1, {"params": params}, config=wider)
    with pytest.raises(ValueError, match="does not match"):
        checkpoint.load_model(tmp_path / "wider")


MODEL_MATCH = dict(num_games=4, num_simulations=2, opponent_simulations=0, max_plies=16)


@pytest.mark.slow
def test_model_vs_checkpoint_opponent_and_cli(saved_run, capsys):
    """The search model against the raw policy of the same checkpoint; then the same match
    through the CLI (the same compiled arena), whose JSON must agree."""
    workdir, _ = saved_run
    net, params, _ = checkpoint.load_model(workdir)
    result = match.play_match(
        net,
        params,
        "gardner",
        "checkpoint",
        MODEL_MATCH["num_games"],
        MODEL_MATCH["num_simulations"],
        jax.random.key(0),
        opponent_network=net,
        opponent_params=params,
        opponent_simulations=MODEL_MATCH["opponent_simulations"],
        max_plies=MODEL_MATCH["max_plies"],
        opening_plies=match.NETWORK_OPENING_PLIES,  # the CLI's default between two networks
    )
    check_match(result, MODEL_MATCH["num_games"])
    assert result["illegal_moves"] == {"model": 0, "opponent": 0}
    assert result["num_simulations"] == 2 and result["opponent_simulations"] == 0

    cli_args = [
        "--checkpoint", workdir,
        "--variant", "gardner",
        "--opponent", workdir,
        "--games", str(MODEL_MATCH["num_games"]),
        "--simulations", str(MODEL_MATCH["num_simulations"]),
        "--opponent-simulations", str(MODEL_MATCH["opponent_simulations"]),
        "--max-plies", str(MODEL_MATCH["max_plies"]),
        "--json",
    ]  # fmt: skip
    status = evaluate.main(cli_args)
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    for key in ("wins", "draws", "losses", "score", "score_ci95", "white", "black"):
        assert printed[key] == result[key]
    assert printed["opponent"] == workdir and printed["model"] == workdir
    assert printed["opening_plies"] == match.NETWORK_OPENING_PLIES
    # Both sides deterministic: the compacting arena plays the same games.
    assert evaluate.main([*cli_args, "--compact", "2"]) == 0
    compacted = json.loads(capsys.readouterr().out)
    for key in ("wins", "draws", "losses", "score", "mean_plies", "white", "black"):
        assert compacted[key] == printed[key]
    # Two deterministic searches without random openings would replay one game per colour:
    # refused, not counted as independent games.
    with pytest.raises(ValueError, match="opening_plies"):
        match.play_match(
            net, params, "gardner", "checkpoint", 4, 2, jax.random.key(0),
            opponent_network=net, opponent_params=params, opening_plies=0,
        )  # fmt: skip


def test_uniform_prior_network_outputs():
    mask = jnp.zeros((3, R.NUM_ACTIONS), bool).at[:, 5].set(True)
    logits, value = policies.UniformPriorNetwork().apply({}, jnp.zeros((3, *R.OBS_SHAPE)), mask)
    chex.assert_shape([logits, value], [(3, R.NUM_ACTIONS), (3,)])
    assert float(logits[0, 5]) == 0.0 and float(logits[0, 4]) == network.MASKED_LOGIT
    assert not np.any(np.asarray(value))


# ---------------------------------------------------------------------------------------------
# CLI errors (subprocesses: the message and exit status a user sees)


def test_cli_errors_are_clear(tmp_path):
    cases = [
        (["--variant", "chess"], "unknown variant 'chess'; valid variants: gardner, baby"),
        (["--variant", "gardner", "--games", "3"], "--games must be even"),
        (["--variant", "gardner", "--checkpoint", str(tmp_path)], "no checkpoint under"),
        (
            ["--variant", "gardner", "--opponent", "stockfish"],
            "'stockfish'; players of board: random, greedy",
        ),
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "mmc_jax.evaluate", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for args, _ in cases
    ]
    for (args, message), process in zip(cases, processes, strict=True):
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 2, (args, stderr)
        assert message in stderr, (args, stderr)
        assert "Traceback" not in stderr, (args, stderr)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--games", "0"], "--games must be positive"),
        (["--games", "x"], "--games must be an integer"),
        (["--simulations", "-1"], "--simulations must be non-negative"),
        (["--max-plies", "0"], "--max-plies must be positive"),
        (["--checkpoint", "/nonexistent/run"], "no such checkpoint directory"),
        (["--compact", "0"], "--compact must be positive"),
        (["--opponent", "uci:stockfish", "--compact", "8"], "--compact: a match with a UCI"),
    ],
)
def test_cli_argument_errors_in_process(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--variant", "gardner", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Sensing variants: the players of sensing variants in the compiled recon arena. Both matches
# hold the learned model, so they share one compiled program (2 games; the ply cap is data).

LEARNED_MODEL = "experiments/recon/learned/model"  # the shipped learned recon agent's export
SENSING_MATCH = ["--variant", "recon", "--games", "2", "--max-plies", "6"]


def test_evaluate_plays_a_sensing_variant_with_the_learned_model_through_the_player_table(
    capsys,
):
    status = evaluate.main(
        [*SENSING_MATCH, "--checkpoint", LEARNED_MODEL, "--opponent", "random", "--json"]
    )
    assert status == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["variant"] == "recon" and result["num_games"] == 2
    assert result["model"] == LEARNED_MODEL and result["opponent"] == "random"
    assert result["wins"] + result["draws"] + result["losses"] == 2
    assert result["white"]["games"] == result["black"]["games"] == 1
    assert result["max_plies"] == 6 and result["worlds"] == 8 and result["seed"] == 0
    assert 1 <= result["mean_plies"] <= 6
    low, high = result["score_ci95_wilson"]
    assert 0 <= low <= result["score"] <= high <= 1
    # The other side's spelling, any two players of sensing variants, and the text report.
    argv = [
        *SENSING_MATCH,
        "--checkpoint",
        "entropy-pimc",
        "--opponent",
        "learned:" + LEARNED_MODEL,
    ]
    assert evaluate.main(argv) == 0
    text = capsys.readouterr().out
    assert f"recon: entropy-pimc vs learned:{LEARNED_MODEL}, 2 games (worlds 8" in text
    assert "ply cap 6)" in text and "score " in text and "Wilson [" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--variant", "recon", "--checkpoint", "random", "--opponent", "greedy"],
         "--opponent 'greedy' plays the board variants, not the sensing variants (fog=sense:W); "
         "players of recon: random, random-pimc, entropy-pimc, learned:model"),
        (["--variant", "recon", "--checkpoint", "gardner-cpu"],
         "--checkpoint gardner-cpu: a board-game model; a sensing variant (recon) plays a "
         "sensing model"),
        (["--variant", "recon", "--checkpoint", "one-ply:gardner-cpu"],
         "--checkpoint 'one-ply:gardner-cpu' plays the board variants, not the sensing"),
        (["--variant", "gardner", "--opponent", "entropy-pimc"],
         "--opponent 'entropy-pimc' plays the sensing variants (fog=sense:W), not the board "
         "variants; players of board: random, greedy"),
        (["--variant", "gardner", "--checkpoint", "learned:" + LEARNED_MODEL],
         "plays the sensing variants (fog=sense:W), not the board variants"),
        (["--variant", "gardner", "--checkpoint", LEARNED_MODEL],
         "its config is for the sensing variant 'recon'"),
        (["--variant", "recon"],
         "--checkpoint: a sensing variant's match (recon) plays a player of sensing variants"),
        (["--variant", "recon", "--checkpoint", "random", "--simulations", "8"],
         "--simulations is for board variants, not recon"),
        (["--variant", "recon", "--checkpoint", "random", "--pgn", "games.pgn"],
         "--pgn is for board variants, not recon: their games are not PGN"),
        (["--variant", "gardner", "--worlds", "4"],
         "--worlds is for sensing variants (fog=sense:W), not gardner"),
        (["--variant", "recon", "--checkpoint", "random", "--compact", "8"],
         "--compact is for board variants, not recon: the recon arena does not shrink"),
        (["--variant", "dark", "--checkpoint", "gardner-cpu", "--compact", "8"],
         "compact: the fair fog arena does not shrink its batch"),
    ],
)  # fmt: skip
def test_evaluate_refuses_a_player_or_flag_of_the_other_game_in_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(args)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert message in error[-1] and "Traceback" not in "\n".join(error), error
