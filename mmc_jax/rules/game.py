"""The game as pure array functions of one game; `mmc_jax.rules` vmaps them over a batch.

The board is kept from the point of view of the side to move (its pawns move up, towards
rank index 4) as seven `uint32` bitboards: one per piece type and one for the mover's pieces.
After every move the board is mirrored rank-wise and the colours swapped, so move generation
only ever generates White-like moves.

Legal moves are generated bit-parallel: for every move vector the set of from-squares that may
use it is one bitboard, so the 49 action planes are 49 bitboards. King safety uses the classic
check mask and pin rays computed from the king outwards, adapted to rifle captures, atomic
explosions and colour-restricted movement; nothing tries moves on a copy of the board.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax.rules import tables as T
from mmc_jax.rules.variants import (
    CAPTURE_ATOMIC,
    CAPTURE_NORMAL,
    CAPTURE_RIFLE,
    CAPTURES,
    COLOURS,
    GOALS,
    VARIANTS,
    Rules,
)

HISTORY = 100  # positions kept for repetition: none older than the 50-move window can recur
FULL = np.uint32(T.FULL)  # numpy: importing the rules must not start a JAX backend
ZERO = np.uint32(0)
NUM_VARIANTS = len(VARIANTS)
# Observation channels: 6 own pieces, 6 opponent pieces, hidden, colour, 50-move clock,
# repetition, ply / PLY_SCALE, then the rules descriptor: capture (3), goal (3), fog (1),
# colour (3) one-hots.
BOARD_CHANNELS = 17
DESCRIPTOR_CHANNELS = len(CAPTURES) + len(GOALS) + 1 + len(COLOURS)
OBS_CHANNELS = BOARD_CHANNELS + DESCRIPTOR_CHANNELS
OBS_SHAPE = (5, 5, OBS_CHANNELS)
# The observation layout's name; checkpoints record it (see network.check_obs_layout).
OBS_LAYOUT = "board17-abs-ply-fogsafe+descriptor10"
# Plies are observed as ply / PLY_SCALE whatever the ply cap, so the channel means the same
# under every `max_plies`.
PLY_SCALE = 256.0


@struct.dataclass(kw_only=True)
class State:
    """One game (or, with a leading axis, a batch of games).

    Fields:
      pieces: uint32[6] bitboards of P, N, B, R, Q, K (both colours), mover's view.
      own: uint32 bitboard of the side to move's pieces, mover's view.
      turn: int32, colour to move (0 White, 1 Black).
      halfmove: int32, plies since the last capture or pawn move.
      fullmove: int32, FEN move number.
      ply: int32, plies played since `init` (or since the FEN was loaded).
      terminated: bool, the game is over.
      rewards: float32[2], [White, Black] reward of the transition that produced this state.
      hash_history: uint32[100], hashes of this position and the 99 before it (0 = none).
    """

    pieces: jax.Array
    own: jax.Array
    turn: jax.Array
    halfmove: jax.Array
    fullmove: jax.Array
    ply: jax.Array
    terminated: jax.Array
    rewards: jax.Array
    hash_history: jax.Array


# ----------------------------------------------------------------------------- bitboards


def shift(x, df: int, dr: int):
    """Move every set bit of `x` by (df files, dr ranks); bits leaving the board vanish."""
    amount, mask = T.shift_params(df, dr)
    y = x << amount if amount >= 0 else x >> -amount
    return y & jnp.uint32(mask)


def computed_once(x: jax.Array) -> jax.Array:
    """`x` unchanged, as the result of a reduction, so that XLA materialises it.

    XLA fuses elementwise producers into their consumers and, where the consumer broadcasts
    (a per-game value spread over 5 x 5 x 27 observation entries), recomputes the whole
    producer chain for every output element: the move generation's visibility and the step's
    state update ran 675 times per game inside `observe`. Where several fusions read one
    value (the 49 move planes all read the king safety), each recomputes it. A reduction is
    never fused into its consumer, so its result is computed once. (`optimization_barrier`
    does not help: XLA:CPU removes it before fusion.) Exact: x OR 0 and max(x, -inf) are x.
    Stack several per-game words into one call: every call is one more XLA:CPU thunk.
    """
    if jnp.issubdtype(x.dtype, jnp.floating):
        zero, op = jnp.array(-jnp.inf, x.dtype), jax.lax.max
    else:
        zero, op = jnp.zeros((), x.dtype), jax.lax.bitwise_or
    pair = jnp.where(jnp.arange(2) == 0, x[..., None], zero)  # [..., 2]: (x, identity)
    return jax.lax.reduce(pair, zero, op, (x.ndim,))


def shift_dir(x, d: int, n: int = 1):
    df, dr = T.DIRECTIONS[d]
    return shift(x, df * n, dr * n)


def back_dir(x, d: int, n: int = 1):
    """Squares whose `n`-step neighbour in direction `d` is in `x`."""
    df, dr = T.DIRECTIONS[d]
    return shift(x, -df * n, -dr * n)


def mirror(x):
    """Mirror a bitboard rank-wise (the other side's point of view)."""
    r = T.RANK_MASKS
    return (
        ((x & jnp.uint32(r[0])) << 4)
        | ((x & jnp.uint32(r[1])) << 2)
        | (x & jnp.uint32(r[2]))
        | ((x & jnp.uint32(r[3])) >> 2)
        | ((x & jnp.uint32(r[4])) >> 4)
    )


def _gate(flag, x):
    return jnp.where(flag, x, ZERO)


def _any(x):
    return x != ZERO


def king_neighbourhood(k):
    out = ZERO
    for d in range(8):
        out = out | shift_dir(k, d)
    return out


# ----------------------------------------------------------------------------- attacks


def _or_all(x, axis: int = 0):
    """Bitwise OR of `x` over `axis`, as one reduction (computed once, never fused and repeated
    into each consumer; see `computed_once`)."""
    return jax.lax.reduce(x, ZERO, jax.lax.bitwise_or, (axis,))


def _gates(flags, x):
    """`x` where each of the boolean `flags` (same shape) holds, else the empty board."""
    return jnp.where(flags, x, ZERO)


def _take(x, indices):
    """`x[..., indices]` for static `indices`, as slices of runs of consecutive indices (reversed
    where a run descends) joined by one concatenation: XLA:CPU runs a gather in a fusion element by
    element, a slice or a reversal is a plain loop."""
    indices = [int(i) for i in np.asarray(indices).ravel()]
    pieces, start = [], 0
    while start < len(indices):
        end, step = start + 1, 0
        if end < len(indices) and abs(indices[end] - indices[start]) == 1:
            step = indices[end] - indices[start]
            while end < len(indices) and indices[end] - indices[end - 1] == step:
                end += 1
        low, high = min(indices[start], indices[end - 1]), max(indices[start], indices[end - 1])
        run = x[..., low : high + 1]
        pieces.append(jnp.flip(run, axis=-1) if step < 0 else run)
        start = end
    return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=-1)


def _toward_king(allowed):
    """[..., 8, 4]: may a piece at distance n + 1 from the king in direction d move onto it, i.e.
    along the opposite direction (`allowed` [..., 40]; opposite directions come in pairs)."""
    rays = allowed[..., :32].reshape(*allowed.shape[:-1], 4, 2, 4)
    return jnp.flip(rays, axis=-2).reshape(*allowed.shape[:-1], 8, 4)


def attacked_squares(pieces, them, occ, allowed):
    """Squares attacked by the pieces in `them` (moving down the board) given occupancy `occ`.

    Unrolled over directions and distances on purpose: the vectorised form (the 8 directions as
    an array axis, as `king_rays`) compiled no faster here and ran move generation 1.4x slower
    (XLA:CPU's reduction over a short minor axis, once per game), and this runs twice per
    position.
    """
    pawn, knight, bishop, rook, queen, king = (pieces[i] & them for i in range(6))
    empty = ~occ
    out = ZERO
    for d in range(8):
        slider = (rook | queen) if T.ORTHOGONAL[d] else (bishop | queen)
        reach = shift_dir(slider, d)
        out = out | _gate(allowed[T.vector_index(d, 1)], reach | shift_dir(king, d))
        for n in range(2, 5):
            reach = shift_dir(reach & empty, d)
            out = out | _gate(allowed[T.vector_index(d, n)], reach)
    for k, (df, dr) in enumerate(T.KNIGHT_VECTORS):
        out = out | _gate(allowed[32 + k], shift(knight, df, dr))
    for d in (4, 7):  # their pawns capture south-west and south-east in our view
        out = out | _gate(allowed[T.vector_index(d, 1)], shift_dir(pawn, d))
    return out


def king_rays(king, occ, orth_sliders, diag_sliders, allowed):
    """Walk the 8 rays out of `king` (one bit, or zero) through occupancy `occ`.

    Unrolled over directions and distances on purpose, as `attacked_squares`: the vectorised form
    (the 8 rays as an array axis) ran move generation about 15% slower.
    Returns:
      checkers: sliders that attack the king (first blocker on a ray, of the right kind,
        at a distance its colour rule allows).
      check_line: empty squares between the king and those checkers.
      xray_first: [8] per direction, the first blocker when an attacking slider stands right
        behind it (a pinned piece if it is ours, a shield if it is theirs).
    """
    checkers = ZERO
    check_line = ZERO
    xray_first = []
    for d in range(8):
        sliders = orth_sliders if T.ORTHOGONAL[d] else diag_sliders
        walker0 = shift_dir(king, d)
        walker1 = ZERO
        first = ZERO
        line = ZERO
        pin = ZERO
        checker = ZERO
        for n in range(1, 5):
            attacker_ok = allowed[T.vector_index(T.OPPOSITE[d], n)]
            hit1 = walker1 & occ
            pin = pin | _gate(attacker_ok, hit1 & sliders)
            walker1 = shift_dir(walker1 & ~occ, d)
            hit0 = walker0 & occ
            checker = checker | _gate(attacker_ok, hit0 & sliders)
            first = first | hit0
            walker1 = walker1 | shift_dir(hit0, d)
            line = line | (walker0 & ~occ)
            walker0 = shift_dir(walker0 & ~occ, d)
        checkers = checkers | checker
        check_line = check_line | jnp.where(_any(checker), line, ZERO)
        xray_first.append(jnp.where(_any(pin), first, ZERO))
    return checkers, check_line, jnp.stack(xray_first)


def short_checkers(king, pieces, them, allowed):
    """Knights and pawns of `them` that attack `king`."""
    sources = _shift_each(jnp.asarray(king)[..., None], _SHORT_SHIFTS)  # [..., 10]
    knight = (pieces[T.KNIGHT] & them)[..., None]
    pawn = (pieces[T.PAWN] & them)[..., None]
    attackers = sources & jnp.where(jnp.arange(10) < 8, knight, pawn)
    return _or_all(_gates(_take(allowed, _SHORT_VECTOR), attackers), attackers.ndim - 1)


# ----------------------------------------------------------------------------- move generation


class Analysis(struct.PyTreeNode):
    """Legal moves of a position and whether the side to move is in check."""

    planes: jax.Array  # uint32[49], from-squares that may play each action plane
    in_check: jax.Array  # bool


def _blast_cover(squares, pawns):
    """The capture squares t whose explosion removes a piece standing on `squares`.

    A capture on t removes t and the non-pawns next to it, so a piece on s goes for t = s and,
    unless it is a pawn, for the t next to s (being neighbours is symmetric).
    """
    return squares | king_neighbourhood(squares & ~pawns)


def _shift_table(vectors) -> tuple[np.ndarray, np.ndarray]:
    """(amounts, masks) int32 / uint32 arrays of `shift` for an array of (df, dr) vectors."""
    vectors = np.asarray(vectors)
    params = [T.shift_params(int(df), int(dr)) for df, dr in vectors.reshape(-1, 2)]
    shape = vectors.shape[:-1]
    amounts = np.array([a for a, _ in params], np.int32).reshape(shape)
    masks = np.array([m for _, m in params], np.uint32).reshape(shape)
    return amounts, masks


def _shift_each(x, table):
    """`shift(x, df, dr)` for every vector of a `_shift_table` at once (one elementwise op
    with per-element shift amounts, so XLA keeps it in one loop)."""
    amounts, masks = table
    up = jnp.asarray(np.maximum(amounts, 0).astype(np.uint32))
    down = jnp.asarray(np.maximum(-amounts, 0).astype(np.uint32))
    return jnp.where(jnp.asarray(amounts >= 0), x << up, x >> down) & jnp.asarray(masks)


# The square at distance n + 1 from the king along direction d: [8, 4].
_RAY_SHIFTS = _shift_table([[(df * n, dr * n) for n in range(1, 5)] for df, dr in T.DIRECTIONS])
# Squares from which a knight (8) or a pawn (2, moving down the board) attacks the king.
_SHORT_SHIFTS = _shift_table(list(T.KNIGHT_VECTORS) + [T.DIRECTIONS[5], T.DIRECTIONS[6]])
_SHORT_VECTOR = np.array([32 + k for k in range(8)] + [T.vector_index(d, 1) for d in (5, 6)])
# The squares whose move along each of the 40 vectors lands in a set: `shift` back by it, [40].
_BACK_SHIFTS = _shift_table(
    [(-df * n, -dr * n) for (df, dr) in T.DIRECTIONS for n in range(1, 5)]
    + [(-df, -dr) for df, dr in T.KNIGHT_VECTORS]
)
_BACK_SHIFTS_BY_SHIELD = tuple(x[:, None] for x in _BACK_SHIFTS)  # [40, 1]: against [24]
# Which of the 8 directions are orthogonal: [8].
_ORTHOGONAL = np.array(T.ORTHOGONAL)
# Vectors of distance 1 (the king's steps, the pawns' moves): [8], one per direction.
_STEP_VECTOR = np.array([T.vector_index(d, 1) for d in range(8)])
_IS_STEP_VECTOR = np.isin(np.arange(T.NUM_VECTORS), _STEP_VECTOR)
# The pawns' three vectors (forward, captures toward the e-file and the a-file).
_PAWN_VECTOR = np.array([T.vector_index(d, 1) for d in T.PAWN_DIRECTIONS])
# Action plane p of planes 9-48 is the move vector `T.PLANE_VECTOR_INDEX[p]`.
_VECTOR_OF_PLANE = T.PLANE_VECTOR_INDEX[9:]
# Which of the 40 vectors are the pawns' push and captures.
_PAWN_PUSH = np.arange(T.NUM_VECTORS) == _PAWN_VECTOR[0]
_PAWN_CAPTURE = np.isin(np.arange(T.NUM_VECTORS), _PAWN_VECTOR[1:])


def _atomic_capture_sources(pieces, own, rules, targets):
    """[40] for each move vector, the from-squares whose atomic capture along it is legal.

    A capture on square t is legal when it does not explode our king and leaves it safe: the
    opponent's king explodes, or the kings touch after the blast, or no piece checks our king
    once the blast is gone and the capturer is not the last piece shielding our king from a
    slider. Everything here is a set of capture squares t, one bitboard, computed for all t at
    once with a fixed number of bit operations (no loop over the targets, whose count depends
    on the position): a blast changes the king's safety only through the 32 squares on the
    king's 8 rays (a piece there survives for the t outside its `_blast_cover`) and the 10
    squares a knight or pawn checks it from. It runs in three stages, each one XLA loop over
    a few words per game computed once (see `computed_once`): XLA:CPU's cost here is the
    number of such loops, and a non-atomic game pays it too (nothing can skip it).
    """
    allowed = rules.vector_allowed
    # Computed once (`analyse` did it for the position): each loop below would otherwise
    # recompute the move generation's attacks for each of its words.
    targets = computed_once(targets)
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    opp = occ & ~own
    pawns, king = pieces[T.PAWN], pieces[T.KING]
    own_king, opp_king = king & own, king & opp

    # Stage 1, per square: ray[d, i] is the square at distance i + 1 from our king in
    # direction d; survives[d, i] the t for which a piece there still stands after the blast;
    # attacker[d, i] whether it is their slider that checks our king along the ray (if nothing
    # surviving stands between). short_gone: the t whose blast takes a knight or pawn that
    # checks our king (all t where there is none).
    ray = _shift_each(own_king, _RAY_SHIFTS)
    sliders = (
        jnp.where(jnp.asarray(T.ORTHOGONAL)[:, None], pieces[T.ROOK], pieces[T.BISHOP])
        | pieces[T.QUEEN]
    )
    attacker = _any(ray & sliders & opp) & _toward_king(allowed)
    survives = jnp.where(_any(ray & occ), FULL & ~_blast_cover(ray, pawns), ZERO)
    short = (
        _shift_each(own_king, _SHORT_SHIFTS)
        & opp
        & jnp.where(jnp.arange(10) < 8, pieces[T.KNIGHT], pawns)
    )
    short = jnp.where(_take(allowed, _SHORT_VECTOR), short, ZERO)
    short_gone = jnp.where(_any(short), _blast_cover(short, pawns), FULL)
    stage = computed_once(
        jnp.concatenate([survives.ravel(), jnp.where(attacker, FULL, ZERO).ravel(), short_gone])
    )
    survives, attacker, short_gone = (
        stage[:32].reshape(8, 4),
        stage[32:64].reshape(8, 4),
        stage[64:],
    )

    # Stage 2, per ray: beyond[i] the t for which the first surviving piece at distance > i
    # is an attacker (beyond[0]: a check); shield[d, i] the t for which ray[d, i] holds the
    # first surviving piece with an attacker right behind it (at distance 4 nothing is behind).
    beyond = [ZERO] * 5
    for i in reversed(range(4)):
        beyond[i] = (survives[:, i] & attacker[:, i]) | (~survives[:, i] & beyond[i + 1])
    in_front = ZERO
    shield = []
    for i in range(3):
        shield.append(survives[:, i] & ~in_front & beyond[i + 1])
        in_front = in_front | survives[:, i]
    checked = jax.lax.reduce(beyond[0], ZERO, jax.lax.bitwise_or, (0,))
    checked = checked | (FULL & ~jax.lax.reduce(short_gone, FULL, jax.lax.bitwise_and, (0,)))
    targets = jnp.where(rules.capture_mode == CAPTURE_ATOMIC, targets & opp, ZERO)
    legal = targets & ~(own_king | king_neighbourhood(own_king))  # not next to our king
    touching = king_neighbourhood(own_king) & opp_king
    # No safety test: their king explodes, or the kings touch and theirs survives.
    free = _blast_cover(opp_king, pawns) | jnp.where(
        _any(touching), FULL & ~_blast_cover(touching, pawns), ZERO
    )
    stage = computed_once(
        jnp.concatenate(
            [jnp.stack([legal & free, legal & ~free & ~checked]), jnp.stack(shield, 1).ravel()]
        )
    )
    anywhere, unshielded, shield = stage[0], stage[1], stage[2:]

    # Stage 3, per vector: from s along the vector onto t = s + vector, legal when t is free,
    # or t is safe and s is not its shield.
    shielding = ray[:, :3].ravel() & _shift_each(shield, _BACK_SHIFTS_BY_SHIELD)
    shielding = jax.lax.reduce(shielding, ZERO, jax.lax.bitwise_or, (1,))
    sources = _shift_each(anywhere, _BACK_SHIFTS) | (
        _shift_each(unshielded, _BACK_SHIFTS) & ~shielding
    )
    return computed_once(sources)


@jax.jit
def analyse(rules: Rules, pieces, own) -> Analysis:
    """Legal action planes of the position (`pieces`, `own`) under `rules`.

    The automatic draws (50 moves, repetition, K vs K, ply cap) are not applied here; a
    position already decided (king captured or exploded, extinction) has no moves.

    Jitted on its own so that a program which generates moves in several places (self-play's
    step, the search's step, `init`, the fog's visibility) traces and lowers it once, not at
    each call (JAX reuses the traced and lowered function for the same shapes, and XLA
    inlines the calls: the compiled program is as large as before). Trace and lowering of the
    smoke iterations on the 2-core CPU: AlphaZero 5.2 s before and 3.2 s after, JOAT 9.5 s
    and 5.5 s, TD(λ) 5.0 s and 3.6 s; their XLA compile (14-21 s) is unchanged.
    """
    allowed = rules.vector_allowed
    # The position often comes straight from a step's state update: computed once, not in
    # each fusion that reads it (see `computed_once`; the atomic captures' `while_loop` used to
    # force this, as a loop's operands are materialized).
    position = computed_once(jnp.concatenate([pieces, own[None]]))
    pieces, own = position[:6], position[6]
    pawn, knight, bishop, rook, queen, king = pieces
    occ = pawn | knight | bishop | rook | queen | king
    opp = occ & ~own
    empty = ~occ & FULL
    not_own = ~own & FULL
    own_king, opp_king = king & own, king & opp
    check_based = rules.check_based
    rifle = rules.capture_mode == CAPTURE_RIFLE
    atomic = rules.capture_mode == CAPTURE_ATOMIC

    # --- king safety -------------------------------------------------------------------
    attacked = attacked_squares(pieces, opp, occ & ~own_king, allowed)
    opp_orth = (rook | queen) & opp
    opp_diag = (bishop | queen) & opp
    slider_checkers, check_line, xray_first = king_rays(own_king, occ, opp_orth, opp_diag, allowed)
    checkers = slider_checkers | short_checkers(own_king, pieces, opp, allowed)
    # Every vector's filter derives its king safety from these: one reduction computes them
    # once (XLA would recompute them in each consumer's fusion; see `computed_once`).
    safety = computed_once(
        jnp.concatenate([jnp.stack([attacked, checkers, check_line]), xray_first])
    )
    attacked, checkers, check_line, xray_first = safety[0], safety[1], safety[2], safety[3:]
    touching = _any(king_neighbourhood(own_king) & opp_king)
    n_checkers = jax.lax.population_count(checkers)
    in_check = _any(checkers) & check_based & ~(atomic & touching)
    check_mask = jnp.where(
        n_checkers == 0, FULL, jnp.where(n_checkers == 1, checkers | check_line, ZERO)
    )
    pinned_axis = (xray_first[0::2] | xray_first[1::2]) & own  # [4]: the 4 lines through the king
    pinned = _or_all(pinned_axis)
    shields = _or_all(xray_first & opp)
    rifle_capture_ok = check_mask & ~shields
    # Squares our pieces attack (their attacks, seen from the mirrored board).
    our_attacks = mirror(
        attacked_squares(
            jnp.stack([mirror(p) for p in pieces]), mirror(own & ~king), mirror(occ), allowed
        )
    )
    atomic_sources = _atomic_capture_sources(pieces, own, rules, our_attacks)
    king_quiet_ok = ~attacked | jnp.where(atomic, king_neighbourhood(opp_king), ZERO)

    # --- which from-squares may use each of the 40 vectors: [40] words ----------------
    # The filter is bitwise in the from-squares (bit s of the result reads bit s of the
    # candidates only), so the candidates of all pieces on a vector are filtered together.
    quiet_to = _shift_each(empty, _BACK_SHIFTS)  # from-squares whose target is empty
    capture_to = _shift_each(opp, _BACK_SHIFTS)  # ... holds an opponent's piece
    # A pinned piece may move along its pin's line only; a knight never.
    along = jnp.broadcast_to(pinned_axis[:, None], (4, 8)).reshape(32)  # each line: 2 x 4 vectors
    off_axis = jnp.concatenate([pinned & ~along, jnp.broadcast_to(pinned, (8,))])
    quiet_ok = jnp.where(atomic & touching, FULL, _shift_each(check_mask, _BACK_SHIFTS) & ~off_axis)
    rifle_ok = _shift_each(rifle_capture_ok, _BACK_SHIFTS)
    capture_ok = jnp.where(rifle, rifle_ok, jnp.where(atomic, atomic_sources, quiet_ok))
    piece_ok = jnp.where(check_based, (quiet_to & quiet_ok) | (capture_to & capture_ok), FULL)
    king_quiet = _shift_each(king_quiet_ok, _BACK_SHIFTS)
    king_capture_ok = jnp.where(atomic, ZERO, jnp.where(rifle, rifle_ok, king_quiet))
    king_ok = (quiet_to & king_quiet) | (capture_to & king_capture_ok)
    # Without check rules the king moves anywhere it can, except that atomic forbids king
    # captures under every goal.
    king_ok = jnp.where(check_based, king_ok, jnp.where(atomic, quiet_to, FULL))

    not_own_to = _shift_each(not_own, _BACK_SHIFTS)
    # Sliders: reach[d, n - 1] are the sliders with empty squares at distances 1 .. n - 1.
    reach = jnp.where(_ORTHOGONAL, (rook | queen) & own, (bishop | queen) & own)  # [8]
    reaches = [reach]
    for n in range(1, 4):
        reach = reach & quiet_to[: 4 * 8].reshape(8, 4)[:, n - 1]
        reaches.append(reach)
    candidates = jnp.concatenate(
        [jnp.stack(reaches, axis=1).reshape(32), jnp.broadcast_to(knight & own, (8,))]
    )
    own_pawns = pawn & own
    # The pawns' vectors: forward onto an empty square, the two captures onto the opponent's.
    pawn_moves = jnp.where(
        jnp.asarray(_PAWN_PUSH), quiet_to, jnp.where(jnp.asarray(_PAWN_CAPTURE), capture_to, ZERO)
    )
    pawn_moves = pawn_moves & own_pawns
    candidates = (candidates & not_own_to) | pawn_moves
    kings = jnp.where(jnp.asarray(_IS_STEP_VECTOR), own_king & not_own_to, ZERO)
    moves = computed_once(_gates(allowed, (candidates & piece_ok) | (kings & king_ok)))  # [40]

    promoting = _take(moves, _PAWN_VECTOR) & own_pawns & jnp.uint32(T.RANK_MASKS[3])  # [3]
    # A rifle capture does not move the pawn, so it never under-promotes.
    promoting = jnp.where(jnp.arange(3) > 0, jnp.where(rifle, ZERO, promoting), promoting)
    planes = jnp.concatenate([jnp.tile(promoting, 3), _take(moves, _VECTOR_OF_PLANE)])

    # A position already decided by the last move has no moves.
    own_type_missing = ~_any(own_king)
    opp_type_missing = ~_any(opp_king)
    for p in pieces[:5]:
        own_type_missing = own_type_missing | (rules.extinction & ~_any(p & own))
        opp_type_missing = opp_type_missing | (rules.extinction & ~_any(p & opp))
    decided = own_type_missing | opp_type_missing
    planes = jnp.where(decided, ZERO, planes)
    return Analysis(planes=planes, in_check=in_check)


_PLANE_OF_ACTION = np.tile(np.arange(T.NUM_PLANES), T.NUM_SQUARES)
_BIT_OF_ACTION = np.repeat(T.SQUARE_BITS, T.NUM_PLANES)


def planes_to_mask(planes):
    """uint32[..., 49] plane bitboards -> bool[..., 1225] (action = 49 * square + plane)."""
    # The barrier keeps XLA from fusing (and so repeating) move generation into this
    # 1225-wide loop.
    planes = jax.lax.optimization_barrier(planes)
    tiled = jnp.tile(planes, (1,) * (planes.ndim - 1) + (T.NUM_SQUARES,))
    return (tiled & jnp.asarray(_BIT_OF_ACTION)) != 0


def mask_to_planes(mask):
    """bool[..., 1225] -> uint32[..., 49] plane bitboards: the inverse of `planes_to_mask`."""
    by_square = mask.reshape(*mask.shape[:-1], T.NUM_SQUARES, T.NUM_PLANES)
    bits = jnp.asarray(T.SQUARE_BITS, jnp.uint32)[:, None]
    return jnp.sum(jnp.where(by_square, bits, jnp.uint32(0)), axis=-2, dtype=jnp.uint32)


def visible_squares(pieces, own, planes):
    """Squares the mover sees in dark chess: its pieces and the targets of its legal moves.

    Written as one reduction over the 40 shifted move planes, not as a chain of 40 ORs: XLA
    fuses an elementwise chain into each consumer and may recompute it for every output
    element (see `computed_once`); a reduction is computed once.
    """
    params = [T.shift_params(int(df), int(dr)) for df, dr in T.PLANE_VECTORS[9:]]
    amount = np.array([a for a, _ in params])
    left = jnp.asarray(np.maximum(amount, 0), jnp.uint32)
    right = jnp.asarray(np.maximum(-amount, 0), jnp.uint32)
    mask = jnp.asarray([m for _, m in params], jnp.uint32)
    targets = ((planes[9 : T.NUM_PLANES] << left) >> right) & mask
    return own | jax.lax.reduce(targets, jnp.uint32(0), jax.lax.bitwise_or, (0,))


# ----------------------------------------------------------------------------- state


def position_hash(pieces, own, turn):
    """32-bit hash of a position and side to move (never 0, which marks an empty slot)."""
    h = jnp.uint32(0x811C9DC5) ^ turn.astype(jnp.uint32)
    for word in [*pieces, own]:
        h = (h ^ word) * jnp.uint32(0x9E3779B1)
        h = h ^ (h >> 15)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    return jnp.where(h == 0, jnp.uint32(1), h)


def from_position(pieces, own, turn, halfmove=0, fullmove=1) -> State:
    """A fresh State from mover's-view bitboards (no history before it)."""
    pieces = jnp.asarray(pieces, jnp.uint32)
    own = jnp.asarray(own, jnp.uint32)
    turn = jnp.asarray(turn, jnp.int32)
    history = jnp.zeros(HISTORY, jnp.uint32).at[0].set(position_hash(pieces, own, turn))
    return State(
        pieces=pieces,
        own=own,
        turn=turn,
        halfmove=jnp.asarray(halfmove, jnp.int32),
        fullmove=jnp.asarray(fullmove, jnp.int32),
        ply=jnp.int32(0),
        terminated=jnp.bool_(False),
        rewards=jnp.zeros(2, jnp.float32),
        hash_history=history,
    )


def start_position(rules: Rules) -> State:
    """The start position of `rules` (one game) before its move generation: a sensing variant's
    is already finished; `end_if_stuck` with its planes makes it `init`'s. For a loop that
    generates the moves of its starts together with other positions (self-play)."""
    state = from_position(rules.start_pieces, rules.start_own, jnp.int32(0))
    return state.replace(terminated=rules.sense != 0)


def end_if_stuck(start: State, planes) -> State:
    """A `start_position` given its legal action planes: a start without a legal move
    (monochromatic: White's pieces are all stuck) is a finished game at once, a draw with
    zero rewards."""
    return start.replace(terminated=start.terminated | ~_any(planes.any()))


def init(rules: Rules) -> State:
    """The start position of `rules` (one game).

    A start position without a legal move is a finished game at once (`end_if_stuck`); so is a
    sensing variant's (`rules.sense`: its games are played through `mmc_jax.rules.recon`, never
    on the true board here).
    """
    state = start_position(rules)
    return end_if_stuck(state, analyse(rules, state.pieces, state.own).planes)


def legal_planes(rules: Rules, state: State):
    """uint32[49] legal action planes of one game; all zero once it is over (and for a sensing
    variant, which `mmc_jax.rules.recon` plays)."""
    planes = analyse(rules, state.pieces, state.own).planes
    return computed_once(jnp.where(state.terminated | (rules.sense != 0), ZERO, planes))


def legal_action_mask(rules: Rules, state: State):
    """bool[1225] legal actions of one game; all False once it is over."""
    return planes_to_mask(legal_planes(rules, state))


def capturer_lands(rules: Rules):
    """bool (per game): does a capturing piece end on the captured square? Only under normal
    captures (a rifle capturer stays where it was, an atomic one explodes), so only there does
    a pawn that captures onto the last rank promote."""
    return rules.capture_mode == CAPTURE_NORMAL


def _apply(rules: Rules, pieces, own, from_sq, to_sq, plane):
    """Play a (legal) move; returns (pieces, own, irreversible) still in the mover's view."""
    from_bit = jnp.uint32(1) << from_sq.astype(jnp.uint32)
    to_bit = jnp.uint32(1) << to_sq.astype(jnp.uint32)
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    is_capture = _any(to_bit & occ & ~own)
    moving = jnp.argmax(_any(pieces & from_bit))
    promotes = (moving == T.PAWN) & (to_sq % 5 == 4)
    placed = jnp.where(promotes, jnp.asarray(T.PROMOTION_PIECE)[plane], moving)
    types = jnp.arange(6)

    normal_pieces = (pieces & ~from_bit & ~to_bit) | jnp.where(types == placed, to_bit, ZERO)
    normal_own = (own & ~from_bit) | to_bit
    rifle_pieces = pieces & ~to_bit
    blast = to_bit | (jnp.asarray(T.NEIGHBOURS)[to_sq] & ~pieces[T.PAWN]) | from_bit
    atomic_pieces = pieces & ~blast
    atomic_own = own & ~blast

    rifle = is_capture & (rules.capture_mode == CAPTURE_RIFLE)
    atomic = is_capture & (rules.capture_mode == CAPTURE_ATOMIC)
    new_pieces = jnp.where(rifle, rifle_pieces, jnp.where(atomic, atomic_pieces, normal_pieces))
    new_own = jnp.where(rifle, own, jnp.where(atomic, atomic_own, normal_own))
    irreversible = is_capture | (moving == T.PAWN)
    return new_pieces, new_own, irreversible


def _type_missing(pieces, side, extinction):
    missing = ~_any(pieces[T.KING] & side)
    for p in range(5):
        missing = missing | (extinction & ~_any(pieces[p] & side))
    return missing


def step(rules: Rules, state: State, action) -> State:
    """Play `action` (int32 in [0, 1225)) in one game.

    An illegal action ends the game with a loss for the mover. A finished game is returned
    unchanged, with zero rewards. Rewards are +1/-1/0 for [White, Black] on the terminal
    transition only.
    """
    return step_with_planes(rules, state, action, legal_planes(rules, state))[0]


def step_with_planes(rules: Rules, state: State, action, planes):
    """`step` given the current position's `legal_planes`; also returns the next position's.

    A loop that keeps the planes of its positions (a random-play or self-play scan) generates
    moves once per ply instead of twice: the legality test of `action` is a bit test on
    `planes`, and the move generation that detects mate and stalemate after the move is
    handed back as `(next_state, next_planes)` (zero once the game is over).
    """
    action = jnp.asarray(action, jnp.int32)
    in_range = (action >= 0) & (action < T.NUM_ACTIONS)
    action = jnp.clip(action, 0, T.NUM_ACTIONS - 1)
    from_sq, plane = action // T.NUM_PLANES, action % T.NUM_PLANES
    to_sq = jnp.asarray(T.TO_SQUARE)[from_sq, plane]
    legal = computed_once(in_range & _any((planes[plane] >> from_sq.astype(jnp.uint32)) & 1))

    pieces, own, irreversible = _apply(
        rules, state.pieces, state.own, from_sq, jnp.maximum(to_sq, 0), plane
    )
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    # The opponent becomes the side to move: mirror the board and swap colours.
    next_pieces = mirror(pieces)
    next_own = mirror(occ & ~own)
    turn = 1 - state.turn
    halfmove = jnp.where(irreversible, 0, state.halfmove + 1)
    h = computed_once(position_hash(next_pieces, next_own, turn))  # compared with 100 entries
    window = jnp.arange(HISTORY) < halfmove
    repetitions = jnp.sum((state.hash_history == h) & window)
    history = jnp.concatenate([h[None], state.hash_history[:-1]])

    analysis = analyse(rules, next_pieces, next_own)
    # Decisive results, from the mover's side: it loses first if both sides are wiped out.
    mover_lost = _type_missing(pieces, own, rules.extinction)
    mover_won = ~mover_lost & _type_missing(pieces, occ & ~own, rules.extinction)
    no_moves = ~mover_lost & ~mover_won & ~_any(analysis.planes.any())
    mover_won = mover_won | (no_moves & analysis.in_check)
    decided = mover_lost | mover_won | no_moves
    kings_only = occ == pieces[T.KING]
    ply = state.ply + 1
    draw_by_rule = (
        (halfmove >= 100)
        | (repetitions >= 2)
        | (rules.kk_draw & kings_only)
        | (ply >= rules.max_plies)
    )
    mover_reward = jnp.where(mover_won, 1.0, jnp.where(mover_lost, -1.0, 0.0))
    mover_reward = jnp.where(legal, mover_reward, -1.0)
    # Both select every State leaf (100 history entries): computed once, not per entry.
    terminated = computed_once(~legal | decided | draw_by_rule)
    rewards = jnp.where(state.turn == 0, 1.0, -1.0) * mover_reward * jnp.float32([1.0, -1.0])

    played = State(
        pieces=next_pieces,
        own=next_own,
        turn=turn,
        halfmove=halfmove,
        fullmove=state.fullmove + state.turn,
        ply=ply,
        terminated=terminated,
        rewards=rewards.astype(jnp.float32),
        hash_history=history,
    )
    illegal = state.replace(terminated=jnp.bool_(True), rewards=rewards.astype(jnp.float32))
    finished = state.replace(rewards=jnp.zeros(2, jnp.float32))
    out = jax.tree.map(lambda a, b: jnp.where(legal, a, b), played, illegal)
    out = jax.tree.map(lambda a, b: jnp.where(state.terminated, a, b), finished, out)
    # Consumers index the planes per move slot or per action: computed once, not per element.
    return out, computed_once(jnp.where(out.terminated, ZERO, analysis.planes))


_SQUARE_BITS_RANK_FILE = np.array(
    [[1 << T.square(f, r) for f in range(5)] for r in range(5)], np.uint32
)


def rules_descriptor(rules: Rules):
    """float32[10] one-hots of capture (3), goal (3), fog (1), colour (3): what the rules are,
    the same for a named variant and the composed point equal to it."""
    return jnp.concatenate(
        [
            jax.nn.one_hot(rules.capture_mode, len(CAPTURES), dtype=jnp.float32),
            jax.nn.one_hot(rules.goal, len(GOALS), dtype=jnp.float32),
            rules.fog.astype(jnp.float32)[None],
            jax.nn.one_hot(rules.colour, len(COLOURS), dtype=jnp.float32),
        ]
    )


def observe(rules: Rules, state: State, fog: bool = True, planes=None):
    """float32[5, 5, C] observation from the side to move's view, indexed [rank, file, channel].

    Channels: 0-5 own P N B R Q K, 6-11 opponent's, 12 hidden (fog: squares the mover cannot
    see; the opponent's pieces there are not shown), 13 colour (1 when Black moves), 14 50-move
    clock / 100, 15 position seen before, 16 ply / `PLY_SCALE` (an absolute scale: the same
    under every ply cap), 17-26 the rules descriptor (`rules_descriptor`). Under fog the clock
    and the repetition flag are zero: both would reveal the opponent's hidden moves.
    With `fog=False` (static) the fog of war is skipped, which is exact for every variant
    whose `rules.fog` is False and saves a move generation; so does passing the position's
    `planes` (`legal_planes`) when they are at hand.
    """
    pieces, own = state.pieces, state.own
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    if fog:
        if planes is None:
            planes = analyse(rules, pieces, own).planes
        seen = jnp.where(rules.fog, visible_squares(pieces, own, planes), FULL)
    else:
        seen = FULL
    boards = jnp.concatenate([pieces & own, pieces & (occ & ~own) & seen, (~seen & FULL)[None]])
    window = jnp.arange(1, HISTORY) <= state.halfmove
    seen_before = jnp.any((state.hash_history[1:] == state.hash_history[0]) & window)
    clear = ~rules.fog
    scalars = jnp.stack(
        [
            state.turn.astype(jnp.float32),
            jnp.where(clear, state.halfmove.astype(jnp.float32) / 100.0, 0.0),
            (seen_before & clear).astype(jnp.float32),
            state.ply.astype(jnp.float32) / PLY_SCALE,
        ]
    )
    flat = jnp.concatenate([scalars, rules_descriptor(rules)])
    # Both are per game; the output repeats them 25 times: computed once, not per entry.
    boards, flat = computed_once(boards), computed_once(flat)
    squares = jnp.asarray(_SQUARE_BITS_RANK_FILE)
    bits = ((boards[None, None, :] & squares[:, :, None]) != 0).astype(jnp.float32)
    return jnp.concatenate([bits, jnp.broadcast_to(flat, (5, 5, flat.shape[0]))], axis=-1)


# The packed observation (`pack_observation`): the 13 board channels whose entries are 0 or 1
# (pieces, hidden squares) as 25-bit words, the other channels (equal on every square) as the
# bits of their float32 value.
PACKED_BIT_CHANNELS = 13


def pack_observation(obs):
    """float32[..., 5, 5, C] observations (`observe`'s layout) -> uint32[..., C], 25x smaller.

    Channels 0-12 become one bitboard each (bit set where the entry is nonzero), channels 13+
    (constant over the squares) the bit pattern of their value on a1. Exact for every
    observation `observe` makes: `unpack_observation` gives back the same array, bit for bit.
    """
    bits = obs[..., :PACKED_BIT_CHANNELS] != 0
    squares = jnp.asarray(_SQUARE_BITS_RANK_FILE)[:, :, None]
    boards = jnp.sum(jnp.where(bits, squares, jnp.uint32(0)), axis=(-3, -2), dtype=jnp.uint32)
    scalars = jax.lax.bitcast_convert_type(obs[..., 0, 0, PACKED_BIT_CHANNELS:], jnp.uint32)
    return jnp.concatenate([boards, scalars], axis=-1)


def unpack_observation(packed):
    """uint32[..., C] (`pack_observation`) -> the float32[..., 5, 5, C] observations."""
    boards = packed[..., None, None, :PACKED_BIT_CHANNELS]
    squares = jnp.asarray(_SQUARE_BITS_RANK_FILE)[:, :, None]
    bits = ((boards & squares) != 0).astype(jnp.float32)
    scalars = jax.lax.bitcast_convert_type(packed[..., PACKED_BIT_CHANNELS:], jnp.float32)
    scalars = jnp.broadcast_to(scalars[..., None, None, :], (*bits.shape[:-1], scalars.shape[-1]))
    return jnp.concatenate([bits, scalars], axis=-1)


def state_bytes() -> int:
    """Bytes of one game's State."""
    shapes = jax.eval_shape(lambda: from_position(np.zeros(6, np.uint32), 0, 0))
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(shapes))
