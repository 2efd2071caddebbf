"""Brute-force belief for reconnaissance-blind minichess, in plain Python on top of the
independent reference (tests/recon_reference.py): the set of whole boards consistent with one
player's reports, enumerated by trying every request of the opponent on every board.

Never imports `mmc_jax`; `mmc_jax.search.recon_belief` is tested against it.
"""

from __future__ import annotations

import recon_reference as RR


def other(colour: str) -> str:
    return "b" if colour == "w" else "w"


class BruteBelief:
    """Every board (25-tuples, reference layout) `colour` holds possible."""

    def __init__(self, rules: RR.SenseRules, colour: str, start_board):
        self.rules, self.colour = rules, colour
        self.boards = {tuple(start_board)}

    def _game(self, board, turn: str) -> RR.Game:
        return RR.Game(self.rules, board, turn)

    def opponent_moved(self, notification: int | None) -> None:
        """The opponent made some request; it captured on `notification` (None: nothing)."""
        them = other(self.colour)
        out = set()
        for board in self.boards:
            game = self._game(board, them)
            for request in RR.requestable(self.rules, game.own(them), them):
                after, _, capture = game.resolve(request)
                if capture == notification:
                    out.add(after)
        self.boards = out

    def sensed(self, contents: dict[int, str]) -> None:
        self.boards = {b for b in self.boards if all(b[s] == p for s, p in contents.items())}

    def moved(self, request: str, taken: str, capture: int | None) -> None:
        out = set()
        for board in self.boards:
            after, got_taken, got_capture = self._game(board, self.colour).resolve(request)
            if (got_taken, got_capture) == (taken, capture):
                out.add(after)
        self.boards = out

    def opponent_sets(self) -> set[frozenset]:
        """The candidates as sets of (square, piece) of the opponent's pieces."""
        them = other(self.colour)
        return {frozenset((s, p) for s, p in enumerate(b) if RR.mine(p, them)) for b in self.boards}
