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
import numpy as np

from mmc_jax import rules as R
from mmc_jax.evaluation import players as players_lib
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


# ----------------------------------------------------------------------------- the agent


@functools.partial(jax.jit, static_argnames=("moves_per_board",))
def _opponent_moved(rules, belief, notification, ply, key, *, moves_per_board):
    own = RB.own_after_notification(belief.own, notification)
    return RB.after_opponent_move(
        rules, belief, own, notification, ply, key, moves_per_board=moves_per_board
    )


_sensed = jax.jit(RB.after_sense)
_moved = jax.jit(RB.after_own_move)
_window = jax.jit(A.choose_window)
_request = jax.jit(A.choose_request, static_argnames=("worlds",))
_initial = jax.jit(RB.from_boards, static_argnums=2)


def mirror_bits(bits: int) -> int:
    """A bitboard (Python int) in the other side's view."""
    out = 0
    for sq in range(T.NUM_SQUARES):
        if bits >> sq & 1:
            out |= 1 << (5 * (sq // 5) + 4 - sq % 5)
    return out


class BeliefPlayer(Player):
    """A fair recon agent (`recon_agents`) behind the reconchess callbacks.

    `agent` names a recon agent of the player table (`players.recon_agents()`) but `learned`
    (random, random-pimc, entropy-pimc; the learned agent reads the observation that only the
    arena tracks), or is its `players.ReconAgent`;
    `variant` must be the game's sensing variant. Everything it decides comes from its
    callbacks.
    """

    def __init__(
        self,
        agent: str | players_lib.ReconAgent = "entropy-pimc",
        variant: str = "recon",
        *,
        seed: int = 0,
        size: int = RB.DEFAULT_SIZE,
        moves_per_board: int = RB.DEFAULT_MOVES_PER_BOARD,
        worlds: int = A.DEFAULT_WORLDS,
    ):
        if isinstance(agent, players_lib.ReconAgent):
            agent, (self.sense_kind, self.move_kind) = agent.name, agent.kinds
        else:
            self.sense_kind, self.move_kind = players_lib.recon_kinds(agent)
        self.name = agent
        if self.sense_kind == A.SENSE_LEARNED or self.move_kind == A.MOVE_LEARNED:
            raise ValueError(
                f"{agent}: the learned agent plays in the batched arena only (it reads what "
                "only the arena tracks): python -m mmc_jax.evaluate --variant "
                f"{R.canonical(variant)} --checkpoint <model>"
            )
        self.rules = R.get(R.check_variant(variant, sensing=True))
        if not R.is_sense(variant):
            raise ValueError(f"{R.canonical(variant)} is not a sensing variant (fog=sense:W)")
        self.rifle = R.parse(variant).capture == "rifle"
        self.size, self.moves_per_board, self.worlds = size, moves_per_board, worlds
        self.seed = seed

    def _key(self, purpose: int):
        self.calls += 1
        return jax.random.fold_in(jax.random.key(self.seed), self.calls * 8 + purpose)

    def handle_game_start(self, color: bool, board: str, opponent_name: str) -> None:
        self.colour = 0 if color else 1
        state = R.recon_from_fen(board)
        pieces, own = np.asarray(state.pieces), int(state.own)
        if int(state.turn) != self.colour:  # the start FEN is in the mover's view
            pieces, own = (
                np.array([mirror_bits(int(p)) for p in pieces], np.uint32),
                mirror_bits(own),
            )
            own = int(np.bitwise_or.reduce(pieces)) & ~own
        mine = pieces & np.uint32(own)
        theirs = pieces & ~np.uint32(own)
        self.belief = _initial(theirs[None], mine, self.size)
        self.turns, self.calls = 0, 0
        self.first_mover = int(state.turn) == self.colour

    def handle_opponent_move_result(self, captured_my_piece: bool, capture_square) -> None:
        square = view_square(capture_square, self.colour) if captured_my_piece else -1
        ply = 0 if (self.turns == 0 and self.first_mover) else 1
        self.belief = _opponent_moved(
            self.rules, self.belief, square, ply, self._key(0),
            moves_per_board=self.moves_per_board,
        )  # fmt: skip
        self.turns += 1

    def choose_sense(self, sense_actions, move_actions, seconds_left):
        window = int(_window(self._key(1), self.rules, self.belief, self.sense_kind))
        return window_names(int(self.rules.sense), self.colour)[window]

    def handle_sense_result(self, sense_result) -> None:
        window, seen = 0, np.zeros(6, np.uint32)
        for name, piece in sense_result:
            sq = view_square(name, self.colour)
            window |= 1 << sq
            if piece is not None and piece.isupper() != (self.colour == 0):
                seen[KINDS.index(piece.upper())] |= np.uint32(1 << sq)
        self.belief = _sensed(self.belief, np.uint32(window), seen, self._key(2))

    def choose_move(self, move_actions, seconds_left):
        request = int(
            _request(self._key(3), self.rules, self.belief, self.move_kind, worlds=self.worlds)
        )
        pawns = int(np.asarray(self.belief.own)[0])
        return move_text(request, self.colour, pawns, self.rifle)

    def handle_move_result(self, requested_move, taken_move, captured, capture_square) -> None:
        square = view_square(capture_square, self.colour) if captured else -1
        self.belief = _moved(
            self.rules, self.belief, move_id(requested_move, self.colour),
            move_id(taken_move, self.colour), square, self._key(4),
        )  # fmt: skip


class RandomPlayer(Player):
    """Random senses and random requests (a pass among them): the baseline, no belief."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.name = "random"

    def choose_sense(self, sense_actions, move_actions, seconds_left):
        return sense_actions[self.rng.integers(len(sense_actions))]

    def choose_move(self, move_actions, seconds_left):
        choices = list(move_actions) + [None]
        return choices[self.rng.integers(len(choices))]


# ----------------------------------------------------------------------------- the runner


@dataclasses.dataclass
class GameRecord:
    """A finished game: winner (True White, False Black, None draw), reason, final ply, the
    final position (FEN) and the history: (colour, kind, text) for every sense and move, kind
    `sense` or `move`, text the window corner or `requested->taken`."""

    winner: bool | None
    reason: str
    plies: int
    fen: str
    history: list[tuple[str, str, str]]


_step = jax.jit(recon.step)
_requestable = jax.jit(A.requestable_mask)


def _legal_texts(rules, state, rifle: bool) -> list[str]:
    """The requestable moves (UCI, no pass) of the side to move, in either phase."""
    mask = np.asarray(_requestable(rules, state.pieces & state.own))
    pawns = int(state.pieces[0]) & int(state.own)
    return [
        move_text(int(a), int(state.turn), pawns, rifle) for a in np.flatnonzero(mask[: recon.PASS])
    ]


def _request_id(player, move, legal: list[str], colour: int) -> int:
    if move is None or move == "pass":
        return recon.PASS
    if move not in legal:
        raise ValueError(
            f"{getattr(player, 'name', type(player).__name__)} requested {move!r}, not a "
            f"requestable move ({len(legal)} requestable, e.g. {', '.join(legal[:5])})"
        )
    return move_id(move, colour)


def _sense_id(player, choice, names: list[str]) -> int:
    if choice is None:
        return 0
    if choice not in names:
        raise ValueError(
            f"{getattr(player, 'name', type(player).__name__)} chose sense {choice!r}, not a "
            f"window corner (valid: {', '.join(names)})"
        )
    return names.index(choice)


def _play_turn(rules, state, player, rifle: bool, history: list, seconds: float):
    """One turn of `player` (the side to move): its callbacks in reconchess order."""
    colour = int(state.turn)
    notified = int(state.notification)
    player.handle_opponent_move_result(
        notified >= 0, square_name(notified, colour) if notified >= 0 else None
    )
    names = window_names(int(rules.sense), colour)
    legal = _legal_texts(rules, state, rifle)
    window = _sense_id(player, player.choose_sense(list(names), list(legal), seconds), names)
    state = _step(rules, state, recon.SENSE_BASE + window)
    bits = int(recon.WINDOW_BITS[int(rules.sense), window])
    player.handle_sense_result(window_contents(state.pieces, state.own, colour, bits))
    history.append(("wb"[colour], "sense", names[window]))
    move = player.choose_move(list(legal), seconds)
    request = _request_id(player, move, legal, colour)
    pawns = int(state.pieces[0]) & int(state.own)
    state = _step(rules, state, request)
    taken = move_text(int(state.taken[colour]), colour, pawns, rifle)
    capture = int(state.capture[colour])
    requested = move_text(request, colour, pawns, rifle)
    player.handle_move_result(
        requested, taken, capture >= 0, square_name(capture, colour) if capture >= 0 else None
    )
    history.append(("wb"[colour], "move", f"{requested or 'pass'}->{taken or 'pass'}"))
    return state


def play_game(
    white: Player,
    black: Player,
    variant: str = "recon",
    *,
    max_plies: int | None = None,
    fen: str | None = None,
    seconds: float = 900.0,
) -> GameRecord:
    """Play one game of a sensing variant between two Players on the true state."""
    variant = R.check_variant(variant, sensing=True)
    if not R.is_sense(variant):
        raise ValueError(f"{variant} is not a sensing variant (fog=sense:W): use recon, ...")
    kwargs = {} if max_plies is None else {"max_plies": max_plies}
    rules = R.get(variant, **kwargs)
    fen = R.start_fen(variant) if fen is None else fen
    state = R.recon_from_fen(fen)
    rifle = R.parse(variant).capture == "rifle"
    players = (white, black)
    for colour, player in enumerate(players):
        other = players[1 - colour]
        player.handle_game_start(colour == 0, fen, getattr(other, "name", type(other).__name__))
    history: list = []
    start = time.time()
    while not bool(state.terminated):
        player = players[int(state.turn)]
        state = _play_turn(rules, state, player, rifle, history, seconds - (time.time() - start))
    rewards = np.asarray(state.rewards)
    winner = None if rewards[0] == 0 else bool(rewards[0] > 0)
    goal = R.parse(variant).goal
    reason = "draw by the ply cap" if winner is None else f"{goal} captured"
    if goal == "extinction" and winner is not None:
        reason = "a type went extinct"
    record = GameRecord(winner, reason, int(state.ply), R.recon_to_fen(state), history)
    for player in players:
        player.handle_game_end(winner, reason, history)
    return record
