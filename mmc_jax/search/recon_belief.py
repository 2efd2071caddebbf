"""Exact belief for reconnaissance-blind minichess (`fog=sense:W`, rules.md).

A player's belief is the set of true boards consistent with its own history: its own pieces,
its sense results, its requests with their taken moves and capture squares, and the
notifications of its captured pieces (rules.md, "What a player may use"). Its own pieces are
known, so a candidate board is the opponent's pieces alone, `uint32[6]` bitboards (P..K) in the
player's view; a `ReconBelief` holds `size` of them, padded, with a validity mask.

One turn of a player, in order (each a pure jittable function of one game; `jax.vmap` them
over games, as `mmc_jax.evaluation.recon_agents` does):

  after_opponent_move  every candidate x every request the opponent could make from its own
                       pieces there (and `PASS`), resolved by the referee's own `resolve`;
                       kept when the player's pieces after it are the player's pieces and its
                       capture square is the notification (skipped before the first move)
  after_sense          kept when the window's content is the sensed content
  after_own_move       the player's request resolved on every candidate; kept when it gives
                       the taken move and capture square the referee reported

Each update removes duplicates. The result is exact (`exact` stays True) as long as nothing
overflows; the true board is then always one of the valid candidates.

The fallbacks (documented approximations, fair: functions of the history and the key only):
  - more than `moves_per_board` requests on one candidate: a random cyclic block of that many
    of its requests is expanded (a random rotation of the request list, then the first ones);
  - more than `size` distinct consistent boards: `size` of them, drawn uniformly without
    replacement (a particle filter from then on);
  - no consistent board left (possible only after an overflow): the check that failed is
    dropped (after the opponent's move the previous candidates stay, as if it had passed;
    after a sense the window's content is written into every candidate; after an own move
    the candidates stay as the request resolved on them), so a belief is never empty.
Each of these clears `exact`; `overflows` counts the updates that used one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax.rules import recon
from mmc_jax.rules import tables as T
from mmc_jax.rules.game import mirror, planes_to_mask

DEFAULT_SIZE = 256
DEFAULT_MOVES_PER_BOARD = 64
NUM_REQUESTS = recon.PASS + 1  # move ids and PASS
ZERO = np.uint32(0)
_SQUARES = np.arange(T.NUM_SQUARES, dtype=np.uint32)


@struct.dataclass(kw_only=True)
class ReconBelief:
    """The boards a player holds possible (or, with a leading axis, one per game).

    Fields:
      boards: uint32[K, 6] the opponent's P, N, B, R, Q, K bitboards, in the player's view.
      valid: bool[K] which rows are candidates.
      own: uint32[6] the player's own pieces as of the last update (known to it).
      exact: bool, no fallback was ever used: the valid rows are exactly the consistent boards.
      overflows: int32, updates that used a fallback.
    """

    boards: jax.Array
    valid: jax.Array
    own: jax.Array
    exact: jax.Array
    overflows: jax.Array


def occupied(pieces):
    """uint32[...] union of the six bitboards of `pieces` [..., 6]."""
    return (
        pieces[..., 0]
        | pieces[..., 1]
        | pieces[..., 2]
        | pieces[..., 3]
        | pieces[..., 4]
        | (pieces[..., 5])
    )


def _bit(square):
    return jnp.where(square >= 0, jnp.uint32(1) << jnp.maximum(square, 0).astype(jnp.uint32), ZERO)


def count(belief: ReconBelief):
    """int32 number of candidate boards (`[B]` for a batch)."""
    return belief.valid.sum(-1).astype(jnp.int32)


def from_boards(boards, own_pieces, size: int = DEFAULT_SIZE) -> ReconBelief:
    """A belief holding the given distinct opponent boards (uint32[N, 6], N <= size) of a
    player whose pieces are `own_pieces` (uint32[6])."""
    boards = jnp.asarray(boards, jnp.uint32)
    n = boards.shape[0]
    if not 1 <= n <= size:
        raise ValueError(f"a belief of size {size} cannot hold {n} boards")
    return ReconBelief(
        boards=jnp.zeros((size, 6), jnp.uint32).at[:n].set(boards),
        valid=jnp.arange(size) < n,
        own=jnp.asarray(own_pieces, jnp.uint32),
        exact=jnp.bool_(True),
        overflows=jnp.int32(0),
    )


def initial(rules, colour, size: int = DEFAULT_SIZE) -> ReconBelief:
    """The belief of `colour` (0 White, 1 Black) at the variant's (public) start: one board."""
    white_view = rules.start_pieces & ~rules.start_own  # Black's pieces, White's view
    black_view = mirror(rules.start_pieces & rules.start_own)  # White's pieces, Black's view
    white = jnp.asarray(colour) == 0
    opponent = jnp.where(white, white_view, black_view)
    own = jnp.where(white, rules.start_pieces & rules.start_own, mirror(white_view))
    return ReconBelief(
        boards=jnp.zeros((size, 6), jnp.uint32).at[0].set(opponent),
        valid=jnp.arange(size) == 0,
        own=own,
        exact=jnp.bool_(True),
        overflows=jnp.int32(0),
    )


def _compact(key, boards, keep, size: int):
    """(boards uint32[size, 6], valid bool[size], overflowed bool): the distinct kept rows of
    `boards` [N, 6]; a uniform sample of `size` of them when there are more."""
    n = boards.shape[0]
    columns = [jnp.where(keep, boards[:, t], ZERO) for t in range(6)]
    ordered = jax.lax.sort([~keep] + columns, num_keys=7)
    drop, rows = ordered[0], jnp.stack(ordered[1:], axis=-1)
    first = jnp.concatenate([jnp.ones(1, bool), jnp.any(rows[1:] != rows[:-1], axis=-1)])
    distinct = ~drop & first
    priority = jnp.where(distinct, jax.random.uniform(key, (n,)), 2.0)
    _, picked = jax.lax.sort([priority, jnp.arange(n)], num_keys=1)
    picked = picked[:size] if n >= size else jnp.concatenate([picked, jnp.zeros(size - n, int)])
    valid = distinct[picked] & (jnp.arange(size) < n)
    out = jnp.where(valid[:, None], rows[picked], ZERO)
    return out, valid, distinct.sum() > size


def _settle(belief: ReconBelief, key, boards, keep, fallback, fallback_keep, overflowed):
    """The belief of the kept candidates, or of the fallback ones when none is kept."""
    size = belief.boards.shape[0]
    empty = ~jnp.any(keep)
    boards = jnp.where(empty, fallback, boards)
    keep = jnp.where(empty, fallback_keep, keep)
    out, valid, too_many = _compact(key, boards, keep, size)
    used = empty | too_many | overflowed
    return ReconBelief(
        boards=out,
        valid=valid,
        own=belief.own,
        exact=belief.exact & ~used,
        overflows=belief.overflows + used.astype(jnp.int32),
    )


def _opponent_requests(rules, key, opponent, moves_per_board: int):
    """(int32[M] requests the opponent can make on a candidate, bool[M] valid, overflowed)."""
    planes = recon.requestable_planes(rules, mirror(opponent))
    mask = jnp.concatenate([planes_to_mask(planes), jnp.ones(1, bool)])
    overflowed = mask.sum() > moves_per_board
    offset = jnp.where(overflowed, jax.random.randint(key, (), 0, NUM_REQUESTS), 0)
    index = jnp.nonzero(jnp.roll(mask, -offset), size=moves_per_board, fill_value=-1)[0]
    return (index + offset) % NUM_REQUESTS, index >= 0, overflowed


def _opponent_children(rules, key, own_pieces, opponent, moves_per_board: int):
    """Every board after one opponent request on a candidate: (opponent uint32[M, 6], own
    uint32[M, 6], notification int32[M], valid bool[M], overflowed), in the player's view."""
    requests, valid, overflowed = _opponent_requests(rules, key, opponent, moves_per_board)
    pieces = mirror(opponent | own_pieces)  # the opponent's view
    their = occupied(mirror(opponent))
    resolve = jax.vmap(recon.resolve, in_axes=(None, None, None, 0))
    after, their_after, _, capture = resolve(rules, pieces, their, requests)
    theirs = mirror(after & their_after[:, None])
    mine = mirror(after & ~their_after[:, None])
    return theirs, mine, recon.mirror_square(capture), valid, overflowed


def after_opponent_move(
    rules, belief: ReconBelief, own_pieces, notification, ply, key, *, moves_per_board: int
) -> ReconBelief:
    """The belief at the start of a turn, after the opponent's (unseen) move.

    `own_pieces` uint32[6] are the player's pieces now (its view; they were `belief.own`
    before the opponent's move), `notification` the square
    where the opponent's move captured one of them (`NO_SQUARE` if none), `ply` the game's ply
    (0: nobody has moved, the belief is returned unchanged).
    """
    size = belief.boards.shape[0]
    keys = jax.random.split(jax.random.fold_in(key, 0), size)
    children = jax.vmap(_opponent_children, in_axes=(None, 0, None, 0, None))
    theirs, mine, notified, valid, overflowed = children(
        rules, keys, belief.own, belief.boards, moves_per_board
    )
    keep = belief.valid[:, None] & valid
    keep = keep & jnp.all(mine == own_pieces, axis=-1) & (notified == notification)
    flat = theirs.reshape(-1, 6)
    # Fallback when nothing fits: the old candidates, as if the opponent had passed.
    old = jnp.zeros_like(theirs).at[:, 0].set(belief.boards).reshape(-1, 6)
    old_keep = jnp.zeros_like(keep).at[:, 0].set(belief.valid).reshape(-1)
    overflowed = jnp.any(overflowed & belief.valid)
    moved = _settle(
        belief, jax.random.fold_in(key, 1), flat, keep.reshape(-1), old, old_keep, overflowed
    ).replace(own=jnp.asarray(own_pieces, jnp.uint32))
    return jax.tree.map(lambda a, b: jnp.where(ply > 0, a, b), moved, belief)


def sensed_content(info: recon.PlayerInfo):
    """(window uint32, opponent pieces uint32[6] seen in it) of this turn's sense."""
    return info.sensed, info.known[:6] & info.sensed


def after_sense(belief: ReconBelief, window, seen, key) -> ReconBelief:
    """The belief after sensing `window` (uint32 squares, player's view) and seeing the
    opponent's pieces `seen` (uint32[6]) there (every other window square holds an own piece
    or nothing)."""
    keep = belief.valid & jnp.all((belief.boards & window) == seen, axis=-1)
    written = (belief.boards & ~window) | seen
    return _settle(belief, key, belief.boards, keep, written, belief.valid, jnp.bool_(False))


def after_own_move(rules, belief: ReconBelief, request, taken, capture, key):
    """The belief after the player's `request` was taken as `taken` (a move id or `PASS`)
    capturing on `capture` (`NO_SQUARE` if none)."""
    own_pieces = belief.own
    own = occupied(own_pieces)

    def resolve(opponent):
        after, own_after, got_taken, got_capture = recon.resolve(
            rules, opponent | own_pieces, own, request
        )
        return after & ~own_after, (got_taken == taken) & (got_capture == capture)

    theirs, fits = jax.vmap(resolve)(belief.boards)
    keep = belief.valid & fits
    settled = _settle(belief, key, theirs, keep, theirs, belief.valid, jnp.bool_(False))
    return settled.replace(own=own_after_move(rules, own_pieces, taken, capture))


def own_after_move(rules, own_pieces, taken, capture):
    """uint32[6] the player's pieces after its move was taken as `taken` capturing on
    `capture`: the taken move replayed on a board of its own pieces (and a stand-in opponent
    piece on the capture square)."""
    stand_in = jnp.zeros(6, jnp.uint32).at[0].set(_bit(capture))
    after, own_after, _, _ = recon.resolve(
        rules, own_pieces | stand_in, occupied(own_pieces), taken
    )
    return after & own_after


def own_after_notification(own_pieces, notification):
    """uint32[6] the player's pieces after the opponent captured on `notification`."""
    return own_pieces & ~_bit(notification)


def square_contents(belief: ReconBelief):
    """int32[K, 25] per candidate and square (player's view): 0 no opponent piece, 1 + type."""
    per_type = (belief.boards[:, :, None] >> jnp.asarray(_SQUARES)) & 1  # [K, 6, 25]
    types = jnp.arange(1, 7, dtype=jnp.uint32)[None, :, None]
    return (per_type * types).sum(1).astype(jnp.int32)


def contains(belief: ReconBelief, opponent):
    """bool: `opponent` (uint32[6]) is one of the candidates."""
    return jnp.any(belief.valid & jnp.all(belief.boards == opponent, axis=-1))


def sample(key, belief: ReconBelief, n: int):
    """uint32[n, 6] candidates drawn uniformly with replacement."""
    weights = belief.valid.astype(jnp.float32)
    index = jax.random.choice(key, belief.boards.shape[0], (n,), p=weights / weights.sum())
    return belief.boards[index]
