"""`mmc_jax.faces.openspiel_game`: every variant as an OpenSpiel game. OpenSpiel's random
simulation test on a perfect-information variant, dark and a sensing variant; the legal actions
equal the project's rules on random games; the observations are the Game contract's fair
views; OpenSpiel's MCTS bot plays Gardner and outcome-sampling MCCFR runs on a small dark
game."""

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from mmc_jax import rules as R  # noqa: E402  (after the skip: an optional extra)
from mmc_jax.faces import openspiel_game as spiel  # noqa: E402


def _load(variant: str, max_plies: int = 40):
    return pyspiel.load_game(spiel.SHORT_NAME, {"variant": variant, "max_plies": max_plies})


@pytest.mark.parametrize(
    "variant, information",
    [
        ("gardner", "PERFECT_INFORMATION"),
        ("dark", "IMPERFECT_INFORMATION"),
        ("goal=king,fog=sense:3", "IMPERFECT_INFORMATION"),
    ],
)
def test_openspiel_random_simulation_test_passes(variant, information):
    game = _load(variant)
    assert game.get_type().information == getattr(pyspiel.GameType.Information, information)
    pyspiel.random_sim_test(game, num_sims=3, serialize=False, verbose=False)


@pytest.mark.parametrize("variant", ["gardner", "capture=atomic,goal=king", "dark"])
def test_legal_actions_are_the_rules_on_random_games(variant):
    game = _load(variant, max_plies=60)
    rng = np.random.default_rng(0)
    positions = 0
    for _ in range(3):
        state = game.new_initial_state()
        while not state.is_terminal():
            fen = state.fen()
            strings = sorted(state.action_to_string(a) for a in state.legal_actions())
            assert strings == sorted(R.legal_moves(variant, fen)), fen
            positions += 1
            state.apply_action(int(rng.choice(state.legal_actions())))
        assert sum(state.returns()) == 0.0
        if any(state.returns()):  # decided on the board: the rules see it from the FEN alone
            assert R.result(variant, state.fen()) in ("1-0", "0-1")
    assert positions > 30


@pytest.mark.parametrize("variant", ["dark", "goal=king,fog=sense:3"])
def test_observations_are_the_contracts_fair_views(variant):
    game = _load(variant)
    state = game.new_initial_state()
    rng = np.random.default_rng(1)
    for _ in range(7):
        state.apply_action(int(rng.choice(state.legal_actions())))
    mover = state.current_player()
    contract_game = game.contract_game
    want_mover = contract_game.observe(game.rules, state._state)[0]
    want_waiting = contract_game.observe_waiting(game.rules, state._state)[0]
    np.testing.assert_array_equal(state.observation_tensor(mover), np.ravel(want_mover))
    np.testing.assert_array_equal(state.observation_tensor(1 - mover), np.ravel(want_waiting))
    # Perfect recall: the information state is the player's decisions, its own only.
    own = len(state.information_state_string(mover).split(" | "))
    assert own == len(state.decisions[mover]) + 1


def test_openspiel_mcts_bot_plays_gardner():
    from open_spiel.python.algorithms import mcts

    game = _load("gardner", max_plies=12)
    evaluator = mcts.RandomRolloutEvaluator(1, np.random.RandomState(0))
    bot = mcts.MCTSBot(game, 2.0, 6, evaluator, random_state=np.random.RandomState(0))
    state = game.new_initial_state()
    for _ in range(4):
        action = bot.step(state)
        assert action in state.legal_actions()
        state.apply_action(action)


def test_outcome_sampling_mccfr_runs_on_a_small_dark_game():
    from open_spiel.python.algorithms import outcome_sampling_mccfr

    game = _load("dark", max_plies=6)
    solver = outcome_sampling_mccfr.OutcomeSamplingSolver(game)
    for _ in range(30):
        solver.iteration()
    state = game.new_initial_state()
    probs = solver.average_policy().action_probabilities(state)
    assert set(probs) == set(state.legal_actions())
    assert sum(probs.values()) == pytest.approx(1.0)


def test_bad_parameters_are_refused_in_one_line():
    with pytest.raises(ValueError, match="did you mean"):
        _load("gardnr")
    with pytest.raises(ValueError, match="max_plies must be a positive integer"):
        _load("gardner", max_plies=0)


def test_an_illegal_action_is_refused_not_played():
    """OpenSpiel's games refuse an illegal action; this one lost the game for the mover."""
    state = _load("gardner").new_initial_state()
    illegal = next(a for a in range(1225) if a not in state.legal_actions())
    with pytest.raises(ValueError, match=f"action {illegal} is not legal here"):
        state.apply_action(illegal)
    assert not state.is_terminal() and state.history() == []
