"""Recon agents and the reconchess-style interface (`mmc_jax.evaluation.recon_agents`,
`recon_player`): callback order, fairness (two true games with the same history for a player
give it the same decisions), window naming, and one-line errors for bad input.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.evaluation import recon_player as P
from mmc_jax.search import recon_belief as RB

QUIET_FEN = "rnbqk/5/5/5/R3K w - - 0 1"


class Recorder(P.Player):
    """Wraps a Player and logs every callback: ('in', name, arguments) for what it is told,
    ('out', name, answer) for what it decides."""

    def __init__(self, inner: P.Player):
        self.inner, self.log, self.name = inner, [], getattr(inner, "name", "inner")

    def _told(self, name, *args):
        self.log.append(("in", name, args))
        return getattr(self.inner, name)(*args)

    def handle_game_start(self, color, board, opponent_name):
        self._told("handle_game_start", color, board, opponent_name)

    def handle_opponent_move_result(self, captured_my_piece, capture_square):
        self._told("handle_opponent_move_result", captured_my_piece, capture_square)

    def choose_sense(self, sense_actions, move_actions, seconds_left):
        self.log.append(("in", "choose_sense", (tuple(sense_actions), tuple(move_actions))))
        answer = self.inner.choose_sense(sense_actions, move_actions, seconds_left)
        self.log.append(("out", "choose_sense", answer))
        return answer

    def handle_sense_result(self, sense_result):
        self._told("handle_sense_result", tuple(sense_result))

    def choose_move(self, move_actions, seconds_left):
        self.log.append(("in", "choose_move", tuple(move_actions)))
        answer = self.inner.choose_move(move_actions, seconds_left)
        self.log.append(("out", "choose_move", answer))
        return answer

    def handle_move_result(self, requested_move, taken_move, captured, capture_square):
        self._told("handle_move_result", requested_move, taken_move, captured, capture_square)

    def handle_game_end(self, winner_color, win_reason, game_history):
        self._told("handle_game_end", winner_color, win_reason, len(game_history))


class Scripted(P.Player):
    """Black: senses its first window; requests `moves` in turn, then passes."""

    def __init__(self, moves):
        self.moves, self.name = list(moves), "scripted"

    def choose_move(self, move_actions, seconds_left):
        return self.moves.pop(0) if self.moves else None


def test_callbacks_come_in_reconchess_order():
    white = Recorder(P.RandomPlayer(seed=1))
    record = P.play_game(white, P.RandomPlayer(seed=2), "recon", max_plies=6)
    names = [name for kind, name, _ in white.log if kind == "in"]
    turn = [
        "handle_opponent_move_result",
        "choose_sense",
        "handle_sense_result",
        "choose_move",
        "handle_move_result",
    ]
    assert names[0] == "handle_game_start" and names[-1] == "handle_game_end"
    assert names[1:-1] == turn * (len(names[1:-1]) // len(turn))
    assert record.plies <= 6 and len(record.history) == 2 * record.plies
    first = white.log[1]
    assert first[2] == (False, None)  # nothing captured before White's first turn


def test_windows_are_named_by_their_absolute_corner():
    assert P.window_names(2, 0)[:2] == ["a1", "b1"] and P.window_names(2, 0)[4] == "a2"
    assert P.window_names(2, 1)[0] == "a4"  # rules.md: Black's window 0 with W = 2 is a4-b5
    assert P.window_names(3, 1)[0] == "a3" and len(P.window_names(3, 0)) == 9


def test_belief_player_decides_the_same_on_the_same_history():
    """White (information-gain sensing + PIMC) in two games that differ only in Black's
    hidden play (Black passes in one, moves its knight b5-a3 in the other): while White has
    been told the same things, it decides the same things, though the true boards differ."""
    compared = 0
    for seed in range(3):
        logs = []
        for black_moves in ([], ["b5a3"]):
            white = Recorder(P.BeliefPlayer("entropy-pimc", "recon", seed=seed))
            P.play_game(white, Scripted(black_moves), "recon", max_plies=10, fen=QUIET_FEN)
            logs.append(white.log)
        turns = 0
        for a, b in zip(*logs, strict=False):
            if a[0] == "in" and a != b:
                break
            if a[0] == "out":
                assert a == b, (seed, a, b)
                compared += turns >= 2  # after Black's first move
            turns += a[1] == "handle_opponent_move_result"
    assert compared >= 3


def test_information_gain_prefers_windows_that_split_the_belief():
    rules = R.get("recon")
    start = RB.initial(rules, 0, 8)
    # Two candidates that differ only on e5 (black king or black queen there).
    boards = np.array([np.asarray(start.boards[0])] * 2)
    e5 = np.uint32(1 << (5 * 4 + 4))
    boards[1, 5] &= ~e5
    boards[1, 4] |= e5
    belief = RB.from_boards(boards, start.own, 8)
    entropies = np.asarray(jax.jit(A.window_entropies)(rules, belief))
    assert np.argmax(entropies) == 15 and entropies[15] == pytest.approx(np.log(2))
    assert entropies[0] == 0.0


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: P.BeliefPlayer("clever"),
            "unknown recon agent 'clever'; recon agents: random, random-pimc",
        ),
        (lambda: P.BeliefPlayer("random", "gardner"), "gardner is not a sensing variant"),
        (lambda: P.play_game(P.Player(), P.Player(), "dark"), "dark is not a sensing variant"),
        (lambda: P.view_square("f9", 0), "bad square 'f9'"),
    ],
)
def test_bad_input_gives_a_one_line_error(make, message):
    with pytest.raises(ValueError, match=message) as error:
        make()
    assert "\n" not in str(error.value)


def test_an_unrequestable_move_is_a_one_line_error():
    class Cheater(P.Player):
        name = "cheater"

        def choose_move(self, move_actions, seconds_left):
            return "a1a5"

    with pytest.raises(ValueError, match="cheater requested 'a1a5', not a requestable") as error:
        P.play_game(Cheater(), P.Player(), "recon", max_plies=4)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("seed", [0, 1])
def test_belief_players_of_both_colours_hold_the_true_board(seed):
    """After a game between two BeliefPlayers, the last mover's (exact) belief holds the true
    final board: the callbacks carry everything the belief needs, for White and for Black."""
    players = [P.BeliefPlayer("random-pimc", "recon", seed=seed + c) for c in (0, 1)]
    record = P.play_game(*players, "recon", max_plies=5 + seed)
    final = R.recon_from_fen(record.fen)  # in the view of the side to move
    last = players[1 - int(final.turn)]
    opponent_of_last = np.asarray(final.pieces) & np.uint32(int(final.own))
    mirrored = np.array([P.mirror_bits(int(b)) for b in opponent_of_last], np.uint32)
    assert bool(last.belief.exact)
    assert bool(RB.contains(last.belief, mirrored))
