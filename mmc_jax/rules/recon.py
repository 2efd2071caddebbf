"""Reconnaissance-blind minichess (`fog=sense:W`, rules.md): one game as pure array functions.

The referee keeps the true board; each turn the mover first senses a W x W window, then requests
a move that is resolved on the true board (sliders stop at a hidden piece and capture it, a
pawn move that cannot be played is a pass). `mmc_jax.rules` vmaps these functions
(`recon_init`, `recon_step`, ...); one compiled step serves every sensing variant (window 2 or
3, normal or rifle captures, goal king or extinction, any start and colour rule), and a batch
may mix them.

Actions (`NUM_ACTIONS` = 1242, all from the mover's point of view, ranks mirrored for Black):
move ids 0-1224 as in the 1225-action games, `PASS` = 1225, `SENSE_BASE + w` = sense window
`w` (`w = (6 - W) * rank + file` of the window's lowest corner; 16 windows for W = 2, 9 for
W = 3, the others never legal). A state knows its phase (`SENSE` or `MOVE`); only that phase's
actions are legal. The 1225-action API is left as it is: its Rules, States and masks never see
an id above 1224, and it refuses sensing variants (see `mmc_jax.rules`).

What a player may use (rules.md, "What a player may use") is gathered by `player_info`: its
own pieces, its memory of sense results (updated by what it is told), the window it sensed this
turn, the notification of its captured piece, its last taken move and capture square, the ply
and the phase. `observe` is a function of that alone. The memory is the last sensed content of
each square, cleared where the player's own pieces stand, marked empty where its piece left a
square or its rifle capture emptied one, and cleared (an opponent piece of unknown type) where
the opponent captured one of its pieces (marked empty under rifle captures).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax.rules import notation
from mmc_jax.rules import tables as T
from mmc_jax.rules.game import PLY_SCALE, ZERO, back_dir, mirror, planes_to_mask, shift
from mmc_jax.rules.variants import CAPTURE_RIFLE, CAPTURES, COLOURS, GOALS, Rules

NUM_MOVES = T.NUM_ACTIONS  # 1225 move ids, as in every other variant
PASS = NUM_MOVES
SENSE_BASE = PASS + 1
MAX_WINDOWS = 16  # W = 2: (6 - 2) ** 2
NUM_ACTIONS = SENSE_BASE + MAX_WINDOWS
SENSE, MOVE = 0, 1  # phases
NO_SQUARE = -1
FULL = np.uint32(T.FULL)

# Observation channels: 6 own pieces, 6 opponent pieces as last sensed, last sensed empty,
# unknown, sensed this turn, notification, own last taken move (from, to, capture square),
# staleness of the memory, colour, phase, ply, then the rules descriptor: capture (3), goal (3),
# window side (2: W = 2, 3), colour (3) one-hots.
RECON_BOARD_CHANNELS = 23
RECON_DESCRIPTOR_CHANNELS = len(CAPTURES) + len(GOALS) + 2 + len(COLOURS)
RECON_OBS_CHANNELS = RECON_BOARD_CHANNELS + RECON_DESCRIPTOR_CHANNELS
RECON_OBS_SHAPE = (5, 5, RECON_OBS_CHANNELS)
RECON_OBS_LAYOUT = "recon23+descriptor11"


def _window_table() -> np.ndarray:
    """uint32[4, 16] squares (mover's view) of window w of side W at row W; zero elsewhere."""
    table = np.zeros((4, MAX_WINDOWS), np.uint32)
    for side in (2, 3):
        n = 6 - side
        for r in range(n):
            for f in range(n):
                bits = 0
                for df in range(side):
                    for dr in range(side):
                        bits |= 1 << T.square(f + df, r + dr)
                table[side, n * r + f] = bits
    return table


WINDOW_BITS = _window_table()


def _path_tables() -> tuple[np.ndarray, np.ndarray]:
    """([25, 49, 4] squares a move passes over and ends on, in order, -1 past its end;
    [49, 4] the plane of the same direction ending at each of those squares)."""
    path = -np.ones((T.NUM_SQUARES, T.NUM_PLANES, 4), np.int32)
    stop_plane = np.tile(np.arange(T.NUM_PLANES, dtype=np.int32)[:, None], (1, 4))
    for plane in range(9, 41):  # queen-like planes: a slider passes over its line
        vec = int(T.PLANE_VECTOR_INDEX[plane])
        direction, distance = divmod(vec, 4)
        for k in range(distance + 1):
            stop_plane[plane, k] = T.VECTOR_PLANE[T.vector_index(direction, k + 1)]
    for sq in range(T.NUM_SQUARES):
        f, r = divmod(sq, 5)
        for plane in range(T.NUM_PLANES):
            to = T.TO_SQUARE[sq, plane]
            if to < 0:
                continue
            if 9 <= plane < 41:
                direction, distance = divmod(int(T.PLANE_VECTOR_INDEX[plane]), 4)
                df, dr = T.DIRECTIONS[direction]
                for k in range(distance + 1):
                    path[sq, plane, k] = T.square(f + df * (k + 1), r + dr * (k + 1))
            else:
                path[sq, plane, 0] = to
    return path, stop_plane


PATH, STOP_PLANE = _path_tables()
PATH_LENGTH = (PATH >= 0).sum(-1).astype(np.int32)  # [25, 49]
_PAWN_FORWARD = np.zeros(T.NUM_PLANES, bool)
_PAWN_FORWARD[[0, 3, 6, T.VECTOR_PLANE[T.vector_index(T.PAWN_DIRECTIONS[0], 1)]]] = True
_SQUARES = np.arange(T.NUM_SQUARES, dtype=np.uint32)
_SQUARE_BITS_RANK_FILE = np.array(
    [[1 << T.square(f, r) for f in range(5)] for r in range(5)], np.uint32
)


@struct.dataclass(kw_only=True)
class ReconState:
    """One game of a sensing variant (or, with a leading axis, a batch of games).

    Fields (squares and bitboards in the mover's view unless said otherwise):
      pieces: uint32[6] true bitboards of P, N, B, R, Q, K (both colours).
      own: uint32, the mover's pieces.
      turn: int32, colour to move (0 White, 1 Black).
      fullmove: int32, FEN move number.
      ply: int32, moves and passes played (senses are not plies).
      phase: int32, `SENSE` or `MOVE`.
      terminated: bool, the game is over.
      rewards: float32[2], [White, Black] reward of the transition that produced this state.
      notification: int32, square where the opponent's last move captured one of the mover's
        pieces, `NO_SQUARE` if none.
      sensed: uint32, the window the mover sensed this turn (0 in the sense phase).
      taken: int32[2], per colour, its last taken move (0-1224 or `PASS`, in its own view),
        -1 before its first move.
      capture: int32[2], per colour, the square its last move captured on (its own view), or
        `NO_SQUARE`.
      known: uint32[2, 7], per colour in its own view: its memory of the opponent's P..K and
        of empty squares (the module docstring says how it is kept).
      seen_ply: int32[2, 25], per colour and square (its own view): the ply of the last news
        about the square's content, -1 if none.
    """

    pieces: jax.Array
    own: jax.Array
    turn: jax.Array
    fullmove: jax.Array
    ply: jax.Array
    phase: jax.Array
    terminated: jax.Array
    rewards: jax.Array
    notification: jax.Array
    sensed: jax.Array
    taken: jax.Array
    capture: jax.Array
    known: jax.Array
    seen_ply: jax.Array


class PlayerInfo(struct.PyTreeNode):
    """What the side to move may use (rules.md, "What a player may use"), in its view."""

    own_pieces: jax.Array  # uint32[6]
    known: jax.Array  # uint32[7] memory: opponent P..K, empty
    seen_ply: jax.Array  # int32[25]
    sensed: jax.Array  # uint32 window sensed this turn
    notification: jax.Array  # int32 square of its piece captured by the opponent's last move
    taken: jax.Array  # int32 its last taken move, -1 before its first
    capture: jax.Array  # int32 square of its last capture
    turn: jax.Array
    phase: jax.Array
    ply: jax.Array


# ----------------------------------------------------------------------------- helpers


def _any(x):
    return x != ZERO


def _bit(square):
    """uint32 bit of a square index, 0 for `NO_SQUARE`."""
    return jnp.where(square >= 0, jnp.uint32(1) << jnp.maximum(square, 0).astype(jnp.uint32), ZERO)


def mirror_square(square):
    """A square index in the other side's view (ranks mirrored); `NO_SQUARE` stays."""
    return jnp.where(square >= 0, 5 * (square // 5) + 4 - square % 5, NO_SQUARE)


def _occupied(pieces):
    return pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]


def _type_missing(pieces, side, extinction):
    missing = ~_any(pieces[T.KING] & side)
    for p in range(5):
        missing = missing | (extinction & ~_any(pieces[p] & side))
    return missing


def num_windows(rules: Rules):
    """int32 number of sense windows, (6 - W) ** 2 (0 without sensing)."""
    return jnp.where(rules.sense > 0, (6 - rules.sense) ** 2, 0)


def window_bits(rules: Rules, window):
    """uint32 squares (mover's view) of sense window `window` (int32 in [0, 16))."""
    return jnp.asarray(WINDOW_BITS)[jnp.clip(rules.sense, 0, 3), jnp.clip(window, 0, 15)]


# ----------------------------------------------------------------------------- moves


def requestable_planes(rules: Rules, own_pieces):
    """uint32[49] from-squares of every requestable move per action plane.

    Computed from the mover's own pieces alone (`own_pieces` uint32[6], mover's view), as if
    every other square were empty: every move under the movement and colour rules, every pawn
    diagonal step onto a square without an own piece, promotions to Q, R, B, N (a rifle pawn's
    diagonal step never promotes, so it has no under-promotion ids). `PASS` is always
    requestable and is not a plane.
    """
    allowed = rules.vector_allowed
    pawn, knight, bishop, rook, queen, king = (own_pieces[i] for i in range(6))
    not_own = ~_occupied(own_pieces) & FULL
    rifle = rules.capture_mode == CAPTURE_RIFLE
    planes = [ZERO] * T.NUM_PLANES
    sliders_by_axis = (rook | queen, bishop | queen)
    for d in range(8):
        reach = sliders_by_axis[0 if T.ORTHOGONAL[d] else 1]
        for n in range(1, 5):
            vec = T.vector_index(d, n)
            free = back_dir(not_own, d, n)
            moves = reach & free
            if n == 1:
                moves = moves | (king & free)
            planes[T.VECTOR_PLANE[vec]] = jnp.where(allowed[vec], moves, ZERO)
            reach = reach & free
    for k, (df, dr) in enumerate(T.KNIGHT_VECTORS):
        moves = knight & shift(not_own, -df, -dr)
        planes[T.VECTOR_PLANE[32 + k]] = jnp.where(allowed[32 + k], moves, ZERO)
    seventh = jnp.uint32(T.RANK_MASKS[3])
    for i, d in enumerate(T.PAWN_DIRECTIONS):
        vec = T.vector_index(d, 1)
        moves = jnp.where(allowed[vec], pawn & back_dir(not_own, d), ZERO)
        plane = T.VECTOR_PLANE[vec]
        planes[plane] = planes[plane] | moves
        promoting = moves & seventh
        if i > 0:
            promoting = jnp.where(rifle, ZERO, promoting)
        for piece in range(3):
            planes[3 * piece + i] = promoting
    return jnp.stack(planes)


def resolve(rules: Rules, pieces, own, action):
    """Play a requested move (a requestable id, or `PASS`) on the true board (mover's view).

    Returns (pieces uint32[6], own uint32, taken int32, capture int32): the board after it
    (still in the mover's view), the move actually taken (`PASS` when the request fails) and the
    square it captured on (`NO_SQUARE` if none). A slider stops at the first opponent piece on
    its line and captures it; a pawn step forward onto an occupied square and a pawn diagonal
    step onto a square without an opponent piece fail. Under rifle captures the capturer stays
    home (and a pawn does not promote); a pawn whose taken move ends on the last rank promotes
    to the requested piece (queen for a plain step).
    """
    is_pass = action == PASS
    move = jnp.clip(action, 0, NUM_MOVES - 1)
    from_sq, plane = move // T.NUM_PLANES, move % T.NUM_PLANES
    from_bit = jnp.uint32(1) << from_sq.astype(jnp.uint32)
    occ = _occupied(pieces)
    opp = occ & ~own
    moving = jnp.argmax(_any(pieces & from_bit))
    path = jnp.asarray(PATH)[from_sq, plane]  # [4]
    length = jnp.asarray(PATH_LENGTH)[from_sq, plane]
    on_path = (jnp.arange(4) < length) & _any((opp >> jnp.maximum(path, 0).astype(jnp.uint32)) & 1)
    # Only a slider can be stopped before its target; for the others the path is the target.
    end_k = jnp.where(jnp.any(on_path), jnp.argmax(on_path), jnp.maximum(length - 1, 0))
    end_sq = jnp.maximum(path[end_k], 0)
    end_plane = jnp.asarray(STOP_PLANE)[plane, end_k]
    end_bit = jnp.uint32(1) << end_sq.astype(jnp.uint32)
    captures = _any(end_bit & opp)
    pawn = moving == T.PAWN
    forward = jnp.asarray(_PAWN_FORWARD)[plane]
    fails = pawn & jnp.where(forward, _any(end_bit & occ), ~captures)
    played = ~is_pass & ~fails
    rifle = captures & (rules.capture_mode == CAPTURE_RIFLE)

    promotes = pawn & (end_sq % 5 == 4)
    under = jnp.asarray([T.ROOK, T.BISHOP, T.KNIGHT], jnp.int32)[jnp.minimum(plane, 8) // 3]
    placed = jnp.where(promotes, jnp.where(plane < 9, under, T.QUEEN), moving)
    types = jnp.arange(6)
    moved_pieces = (pieces & ~from_bit & ~end_bit) | jnp.where(types == placed, end_bit, ZERO)
    moved_own = (own & ~from_bit) | end_bit
    new_pieces = jnp.where(rifle, pieces & ~end_bit, moved_pieces)
    new_own = jnp.where(rifle, own, moved_own)
    new_pieces = jnp.where(played, new_pieces, pieces)
    new_own = jnp.where(played, new_own, own)
    taken = jnp.where(played, from_sq * T.NUM_PLANES + end_plane, PASS).astype(jnp.int32)
    capture = jnp.where(played & captures, end_sq, NO_SQUARE).astype(jnp.int32)
    return new_pieces, new_own, taken, capture


# ----------------------------------------------------------------------------- state


def from_position(pieces, own, turn, fullmove=1) -> ReconState:
    """A fresh game from mover's-view bitboards: the sense phase of `turn`'s first turn."""
    return ReconState(
        pieces=jnp.asarray(pieces, jnp.uint32),
        own=jnp.asarray(own, jnp.uint32),
        turn=jnp.asarray(turn, jnp.int32),
        fullmove=jnp.asarray(fullmove, jnp.int32),
        ply=jnp.int32(0),
        phase=jnp.int32(SENSE),
        terminated=jnp.bool_(False),
        rewards=jnp.zeros(2, jnp.float32),
        notification=jnp.int32(NO_SQUARE),
        sensed=jnp.uint32(0),
        taken=jnp.full(2, -1, jnp.int32),
        capture=jnp.full(2, NO_SQUARE, jnp.int32),
        known=jnp.zeros((2, 7), jnp.uint32),
        seen_ply=jnp.full((2, T.NUM_SQUARES), -1, jnp.int32),
    )


def init(rules: Rules) -> ReconState:
    """The start of a game of `rules` (White senses first); never finished at once."""
    return from_position(rules.start_pieces, rules.start_own, jnp.int32(0))


def legal_action_mask(rules: Rules, state: ReconState):
    """bool[1242] legal actions: the requestable moves and `PASS` in the move phase, the
    windows in the sense phase; all False once the game is over."""
    planes = requestable_planes(rules, state.pieces & state.own)
    moving = state.phase == MOVE
    live = ~state.terminated
    moves = planes_to_mask(planes) & moving & live
    windows = (jnp.arange(MAX_WINDOWS) < num_windows(rules)) & ~moving & live
    return jnp.concatenate([moves, (moving & live)[None], windows])


def _per_square(bits):
    """bool[25] of a bitboard."""
    return ((bits >> jnp.asarray(_SQUARES)) & 1) != 0


def _set_row(table, row, value):
    """`table` with `table[row]` replaced by `value` (row a traced int)."""
    rows = jnp.arange(table.shape[0]).reshape((-1,) + (1,) * (table.ndim - 1))
    return jnp.where(rows == row, value[None], table)


def _sense(rules: Rules, state: ReconState, window) -> ReconState:
    """The mover senses `window`: its memory takes the window's true content."""
    occ = _occupied(state.pieces)
    opp = occ & ~state.own
    memory = state.known[state.turn] & ~window
    seen = jnp.concatenate([state.pieces & opp & window, (~occ & FULL & window)[None]])
    ply = jnp.where(_per_square(window), state.ply, state.seen_ply[state.turn])
    return state.replace(
        phase=jnp.int32(MOVE),
        sensed=window,
        known=_set_row(state.known, state.turn, memory | seen),
        seen_ply=_set_row(state.seen_ply, state.turn, ply),
    )


def _move(rules: Rules, state: ReconState, action) -> ReconState:
    """The mover's request is resolved on the true board; both players are told their part."""
    mover, other = state.turn, 1 - state.turn
    pieces, own, taken, capture = resolve(rules, state.pieces, state.own, action)
    rifle = rules.capture_mode == CAPTURE_RIFLE
    captured = _bit(capture)
    from_bit = _bit(jnp.where(taken == PASS, NO_SQUARE, taken // T.NUM_PLANES))
    # The mover's memory: its pieces stand where they stand; its vacated square and the square
    # its rifle capture emptied are empty now.
    emptied = jnp.where(rifle & _any(captured), captured, from_bit)
    memory = state.known[mover] & ~own & ~emptied
    memory = memory.at[6].set(memory[6] | emptied)
    mover_ply = jnp.where(_per_square(emptied), state.ply, state.seen_ply[mover])
    # The opponent is told where it lost a piece: an unknown piece stands there now (nothing,
    # under rifle captures).
    notified = mirror(captured)
    other_memory = state.known[other] & ~notified
    other_memory = other_memory.at[6].set(other_memory[6] | jnp.where(rifle, notified, ZERO))
    other_ply = jnp.where(_per_square(notified) & rifle, state.ply, state.seen_ply[other])

    occ = _occupied(pieces)
    them = occ & ~own
    mover_lost = _type_missing(pieces, own, rules.extinction)
    mover_won = ~mover_lost & _type_missing(pieces, them, rules.extinction)
    ply = state.ply + 1
    terminated = mover_lost | mover_won | (ply >= rules.max_plies)
    mover_reward = jnp.where(mover_won, 1.0, jnp.where(mover_lost, -1.0, 0.0))
    sign = jnp.where(mover == 0, 1.0, -1.0) * jnp.float32([1.0, -1.0])
    known = _set_row(_set_row(state.known, mover, memory), other, other_memory)
    seen_ply = _set_row(_set_row(state.seen_ply, mover, mover_ply), other, other_ply)
    return ReconState(
        pieces=mirror(pieces),
        own=mirror(them),
        turn=other,
        fullmove=state.fullmove + mover,
        ply=ply,
        phase=jnp.int32(SENSE),
        terminated=terminated,
        rewards=(sign * mover_reward).astype(jnp.float32),
        notification=mirror_square(capture),
        sensed=jnp.uint32(0),
        taken=_set_row(state.taken, mover, taken),
        capture=_set_row(state.capture, mover, capture),
        known=known,
        seen_ply=seen_ply,
    )


def step(rules: Rules, state: ReconState, action) -> ReconState:
    """Play `action` (int32 in [0, 1242)) in one game: a sense in the sense phase, a move
    request or `PASS` in the move phase.

    An illegal action ends the game with a loss for the mover. A finished game is returned
    unchanged, with zero rewards. A move is a ply; the game is a draw by rule when the ply
    reaches `rules.max_plies`, unless that move decided it.
    """
    action = jnp.asarray(action, jnp.int32)
    in_range = (action >= 0) & (action < NUM_ACTIONS)
    action = jnp.clip(action, 0, NUM_ACTIONS - 1)
    legal = in_range & legal_action_mask(rules, state)[action]
    sensed = _sense(rules, state, window_bits(rules, action - SENSE_BASE))
    moved = _move(rules, state, action)
    played = jax.tree.map(lambda a, b: jnp.where(state.phase == SENSE, a, b), sensed, moved)
    loss = jnp.where(state.turn == 0, -1.0, 1.0) * jnp.float32([1.0, -1.0])
    illegal = state.replace(terminated=jnp.bool_(True), rewards=loss)
    finished = state.replace(rewards=jnp.zeros(2, jnp.float32))
    out = jax.tree.map(lambda a, b: jnp.where(legal, a, b), played, illegal)
    return jax.tree.map(lambda a, b: jnp.where(state.terminated, a, b), finished, out)


# ----------------------------------------------------------------------------- observation


def player_info(state: ReconState) -> PlayerInfo:
    """What the side to move may use: nothing of the opponent's pieces but its memory."""
    return PlayerInfo(
        own_pieces=state.pieces & state.own,
        known=state.known[state.turn],
        seen_ply=state.seen_ply[state.turn],
        sensed=state.sensed,
        notification=state.notification,
        taken=state.taken[state.turn],
        capture=state.capture[state.turn],
        turn=state.turn,
        phase=state.phase,
        ply=state.ply,
    )


def rules_descriptor(rules: Rules):
    """float32[11] one-hots of capture (3), goal (3), window side (2: W = 2, 3), colour (3)."""
    return jnp.concatenate(
        [
            jax.nn.one_hot(rules.capture_mode, len(CAPTURES), dtype=jnp.float32),
            jax.nn.one_hot(rules.goal, len(GOALS), dtype=jnp.float32),
            jax.nn.one_hot(rules.sense - 2, 2, dtype=jnp.float32),
            jax.nn.one_hot(rules.colour, len(COLOURS), dtype=jnp.float32),
        ]
    )


def observe_info(rules: Rules, info: PlayerInfo):
    """float32[5, 5, 34] observation of a player from its information alone, indexed
    [rank, file, channel] in its view.

    Channels: 0-5 own P N B R Q K; 6-11 opponent's P..K as last sensed; 12 last sensed empty;
    13 unknown (no own piece, nothing in memory); 14 the window sensed this turn; 15 the square
    where the opponent's last move captured an own piece; 16-18 the own last taken move's from
    and to squares and its capture square; 19 the memory's age, (ply - ply of the news) /
    `PLY_SCALE`, on remembered squares; 20 colour (1 when Black moves); 21 phase (1 in the
    move phase); 22 ply / `PLY_SCALE`; 23-33 the rules descriptor (`rules_descriptor`).
    """
    own = _occupied(info.own_pieces)
    memory = info.known & ~own
    remembered = memory[0] | memory[1] | memory[2] | memory[3] | memory[4] | memory[5] | memory[6]
    moved = info.taken >= 0
    move = jnp.clip(info.taken, 0, NUM_MOVES - 1)
    taken_from = jnp.where(moved & (info.taken != PASS), move // T.NUM_PLANES, NO_SQUARE)
    taken_to = jnp.where(
        taken_from >= 0, jnp.asarray(T.TO_SQUARE)[move // T.NUM_PLANES, move % T.NUM_PLANES], -1
    )
    boards = jnp.concatenate(
        [
            info.own_pieces,
            memory,
            jnp.stack(
                [
                    ~own & ~remembered & FULL,
                    info.sensed,
                    _bit(info.notification),
                    _bit(taken_from),
                    _bit(taken_to),
                    _bit(info.capture),
                ]
            ),
        ]
    )
    squares = jnp.asarray(_SQUARE_BITS_RANK_FILE)
    bits = ((boards[None, None, :] & squares[:, :, None]) != 0).astype(jnp.float32)
    age = (info.ply - info.seen_ply).astype(jnp.float32) / PLY_SCALE
    age = jnp.where(_per_square(remembered), age, 0.0)
    age = age.reshape(5, 5).T[:, :, None]  # squares are 5 * file + rank: [rank, file]
    flat = jnp.concatenate(
        [
            jnp.stack(
                [
                    info.turn.astype(jnp.float32),
                    (info.phase == MOVE).astype(jnp.float32),
                    info.ply.astype(jnp.float32) / PLY_SCALE,
                ]
            ),
            rules_descriptor(rules),
        ]
    )
    return jnp.concatenate([bits, age, jnp.broadcast_to(flat, (5, 5, flat.shape[0]))], axis=-1)


def observe(rules: Rules, state: ReconState):
    """float32[5, 5, 34] observation of the side to move: `observe_info(player_info(state))`."""
    return observe_info(rules, player_info(state))


# ----------------------------------------------------------------------------- notation


def action_to_text(action: int, turn: int, own_pawns: int, rifle: bool = False) -> str:
    """A recon action as text: a UCI move (mover's-view `own_pawns` bitboard decides the
    promotion letter: `q` for a plain pawn step onto the last rank, none for a rifle pawn's
    diagonal step), `pass`, or `sense:W` for window `w`."""
    action = int(action)
    if action == PASS:
        return "pass"
    if action >= SENSE_BASE:
        return f"sense:{action - SENSE_BASE}"
    from_sq, plane = divmod(action, T.NUM_PLANES)
    to_sq = int(T.TO_SQUARE[from_sq, plane])
    if to_sq < 0:
        raise ValueError(f"action {action} leaves the board")
    suffix = ""
    if int(own_pawns) >> from_sq & 1 and to_sq % 5 == 4:
        if plane < 9:
            suffix = "rbn"[plane // 3]
        elif not (rifle and to_sq // 5 != from_sq // 5):
            suffix = "q"
    squares = [from_sq, to_sq]
    if turn == 1:
        squares = [T.square(s // 5, 4 - s % 5) for s in squares]
    return "".join(notation.FILES[s // 5] + str(s % 5 + 1) for s in squares) + suffix


def square_name(square: int, turn: int) -> str | None:
    """Absolute name (`c3`) of a square given in `turn`'s view; None for `NO_SQUARE`."""
    square = int(square)
    if square < 0:
        return None
    f, r = divmod(square, 5)
    return f"{notation.FILES[f]}{(r if turn == 0 else 4 - r) + 1}"
