"""Recon players with the seven callbacks of the reconchess API, and a game runner.

A bot written for reconchess (Johns Hopkins APL's reconnaissance blind chess) ports with
little change: the callbacks, their order and their arguments are those of
`reconchess.Player`, with plain values instead of python-chess objects:

  colour         True for White, False for Black (as `chess.WHITE` / `chess.BLACK`)
  board          the start position as a FEN string (public to both players)
  squares        names, 'c3'
  sense action   the name of a window's lowest-file, lowest-rank corner (absolute: Black's
                 window 0 with W = 2 is a4-b5, named 'a4'); returning None senses the first
                 window (sensing is not optional in these rules)
  sense result   [(square, piece letter or None)] for the window's squares ('P' White, 'p'
                 Black, as python-chess symbols)
  moves          UCI strings ('a4a5q'); None is a pass, in requests and in taken moves

`play_game(white, black, variant)` drives two Players on the true state (the jitted
`mmc_jax.rules.recon.step`) and calls them in reconchess order: at each turn
handle_opponent_move_result, choose_sense, handle_sense_result, choose_move,
handle_move_result; handle_game_start and handle_game_end once. `BeliefPlayer` is the fair
agent of `recon_agents` (random or information-gain sensing, random or PIMC moves) behind this
interface: it keeps its exact belief from the callbacks alone.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax.evaluation import recon_agents as A
from mmc_jax.rules import notation, recon
from mmc_jax.rules import tables as T
from mmc_jax.search import recon_belief as RB

KINDS = "PNBRQK"


class Player:
    """The reconchess callbacks; subclass and override (every default does nothing, senses
    the first window and passes)."""

    def handle_game_start(self, color: bool, board: str, opponent_name: str) -> None:
        """The game starts: your colour, the start FEN, the opponent's name."""

    def handle_opponent_move_result(self, captured_my_piece: bool, capture_square) -> None:
        """At the start of each of your turns: whether (and where) the opponent's last move
        captured one of your pieces."""

    def choose_sense(self, sense_actions: list[str], move_actions: list[str], seconds_left):
        """The window to sense (its corner square name)."""
        return sense_actions[0]

    def handle_sense_result(self, sense_result: list[tuple[str, str | None]]) -> None:
        """The content of the sensed window."""

    def choose_move(self, move_actions: list[str], seconds_left):
        """The move to request (UCI) or None to pass."""
        return None

    def handle_move_result(
        self, requested_move, taken_move, captured_opponent_piece: bool, capture_square
    ) -> None:
        """What happened to your request: the move taken (None: a pass or a failed request)
        and where it captured."""

    def handle_game_end(self, winner_color, win_reason: str, game_history) -> None:
        """The game is over: the winner (True, False or None for a draw) and why."""


# ----------------------------------------------------------------------------- squares


def square_name(view_square: int, colour: int) -> str:
    """Absolute name of a square given in `colour`'s view (0 White, 1 Black)."""
    return recon.square_name(view_square, colour)


def view_square(name: str, colour: int) -> int:
    """A square name as an index in `colour`'s view; ValueError for a bad name."""
    if not isinstance(name, str) or len(name) != 2 or name[0] not in notation.FILES:
        raise ValueError(f"bad square {name!r}: expected a name like 'c3'")
    if name[1] not in "12345":
        raise ValueError(f"bad square {name!r}: expected a name like 'c3'")
    rank = int(name[1]) - 1
    return T.square(notation.FILES.index(name[0]), rank if colour == 0 else 4 - rank)


def window_names(side: int, colour: int) -> list[str]:
    """The windows of side `side` for `colour`, by absolute corner name, in window order."""
    n = 6 - side
    names = []
    for w in range(n * n):
        rank, file = divmod(w, n)
        corner = rank if colour == 0 else 4 - (rank + side - 1)
        names.append(f"{notation.FILES[file]}{corner + 1}")
    return names


def window_contents(pieces, own, colour: int, window_bits: int):
    """[(square name, piece letter or None)] of a window (mover's-view bitboards)."""
    out = []
    for sq in range(T.NUM_SQUARES):
        if not window_bits >> sq & 1:
            continue
        letter = None
        for t in range(6):
            if int(pieces[t]) >> sq & 1:
                white = bool(int(own) >> sq & 1) == (colour == 0)
                letter = KINDS[t] if white else KINDS[t].lower()
        out.append((square_name(sq, colour), letter))
    return sorted(out)


def move_text(action: int, colour: int, own_pawns: int, rifle: bool):
    """UCI text of a request or taken move id; None for `PASS`."""
    return None if action == recon.PASS else recon.action_to_text(action, colour, own_pawns, rifle)


def move_id(text, colour: int) -> int:
    """Action id of a UCI move (None or 'pass': `PASS`)."""
    return recon.PASS if text in (None, "pass") else notation.uci_to_action(text, colour)
