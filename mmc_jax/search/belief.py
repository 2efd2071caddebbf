"""What a player may know under fog, and worlds sampled from it.

Fairness contract
-----------------
Under fog (`rules.fog`, e.g. `dark`) a player's computation may read its **observation
history** and nothing else:

* its own pieces (types and squares) and its own moves;
* after every ply, what it sees: the squares its legal moves reach, the opponent's pieces on
  those squares (types), and its legal moves themselves (it may try any of them);
* the capture events the rules reveal: a piece it captures (the target square was visible, so
  its type is known) and its own pieces disappearing;
* public facts: the variant's rules, the start position, whose turn it is, the ply count.

It may never read the true `State` of the other side's pieces. In this module the contract is
structural: `observe` is the only function that reads a `State`, and it keeps only the
fields above (an `Observation`); `update`, `after_move` and `sample_worlds` take an
`Observation` and a `Belief`, never a `State`. So two true states with the same observation
history give the same belief and (with the same key) the same sampled worlds, which
`tests/search/test_belief.py` and `tests/evaluation/test_fair_search.py` check.
(`Observation.tensor` is the network input `rules.observe`; the rules engineer owns its leak
fixes: the repetition flag and the 50-move clock under fog.)

The belief (per game and player, carried across plies)
------------------------------------------------------
`Belief` holds, in the owner's view (the mover's view when the owner is to move):

* `counts` int32[6]: the opponent's material believed (P N B R Q K): the start material, less
  every capture the owner made (type seen on the target square), with a pawn converted into
  the promoted type whenever the owner sees more opponent pieces of a type than it believed.
* `possible` uint32[6]: per type, the squares where an opponent piece of that type may stand.
  After each opponent move every set is widened by one pseudo-move of that type ignoring
  blockers (a superset of the truth), pawns that reach the owner's first rank add that square
  to Q R B N; then it is cut to the squares the owner does not see, plus the squares where it
  sees that type. Opponent pawns never stand on the owner's first or last rank.

What it ignores (all of which only widens the belief, so the sampled worlds stay fair): the
order of opponent moves (a piece may be counted as having moved in several places), blockers
during the widening, promotions never seen (the believed material then holds a pawn instead of
the promoted piece: such worlds are consistent with the observation but not with the truth),
pieces destroyed on hidden squares by the owner's own atomic explosions (they stay counted),
the 50-move clock and the repetition history (worlds start with a fresh clock and history).

Worlds and the consistency check
--------------------------------
`sample_worlds` places, for every type, the `counts - seen` unseen opponent pieces on hidden
squares allowed by `possible` (and not on hidden squares a pawn of the owner could capture on:
those are empty), one piece at a time, uniformly among the free allowed squares, the types
with the fewest allowed squares first.
Each candidate is checked by re-observing it: the owner's legal-move planes in the world must
equal the observed ones (its own pieces and the seen opponent pieces are there by
construction, and equal planes give equal visible squares). Of `num_candidates` candidates per
game, K worlds are drawn with replacement in proportion to `prod(n_i)` (the number of free
allowed squares at each placement: importance weights that turn the sequential proposal into
the uniform distribution over consistent placements: sampling-importance-resampling, exact as
`num_candidates` grows). When no candidate is consistent (`SampledWorlds.num_consistent == 0`,
a sampling failure) the worlds are drawn among complete placements that fail the check (still
fair: nothing true was read); the failure rate is measured in `experiments/dark`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax import rules as R
from mmc_jax.infra import sharding
from mmc_jax.rules import game
from mmc_jax.rules import tables as T
from mmc_jax.rules.variants import CAPTURE_ATOMIC

NUM_TYPES = 6
# Most unseen opponent pieces a world can hold (a side starts with 10 in every named variant).
MAX_HIDDEN = 16
# Placement order of the types: the most constrained first (one king; pawns last).
PLACEMENT_ORDER = np.array([T.KING, T.QUEEN, T.ROOK, T.BISHOP, T.KNIGHT, T.PAWN], np.int32)
FULL = np.uint32(T.FULL)
# Opponent pawns (moving down in the owner's view) stand on ranks 2-4 only.
PAWN_SQUARES = np.uint32(T.RANK_MASKS[1] | T.RANK_MASKS[2] | T.RANK_MASKS[3])
_LOW_BITS = np.asarray([(2 << j) - 1 for j in range(T.NUM_SQUARES)], np.uint32)


@struct.dataclass(kw_only=True)
class Observation:
    """What the side to move knows about the present position (one game; [B] batched).

    Fields:
      own_pieces: uint32[6] its own pieces per type, mover's view.
      own: uint32 its pieces.
      visible: uint32 the squares it sees (all of them without fog).
      seen: uint32[6] the opponent's pieces per type on visible squares.
      planes: uint32[49] its legal-move planes (zero once the game is over).
      turn: int32 colour to move; ply: int32 plies played; terminated: bool.
      tensor: float32[5, 5, C] the network input (`rules.observe`).
    """

    own_pieces: jax.Array
    own: jax.Array
    visible: jax.Array
    seen: jax.Array
    planes: jax.Array
    turn: jax.Array
    ply: jax.Array
    terminated: jax.Array
    tensor: jax.Array


@struct.dataclass(kw_only=True)
class Belief:
    """One player's belief about the opponent's pieces (one game; [B] batched). See the
    module docstring.

    Fields:
      counts: int32[6] believed opponent material (P N B R Q K).
      possible: uint32[6] per type, squares (owner's view) where such a piece may stand.
      opponent_moved: bool, the opponent has moved since the owner's last `update`.
    """

    counts: jax.Array
    possible: jax.Array
    opponent_moved: jax.Array


@struct.dataclass(kw_only=True)
class SampledWorlds:
    """K full positions per game consistent with the owner's observation ([B, K] batched).

    Fields:
      pieces: uint32[K, 6], own: uint32[K] the worlds in the owner's (mover's) view.
      consistent: bool[K] the world passed the re-observation check.
      num_consistent: int32 consistent candidates among those drawn (0: a sampling failure).
    """

    pieces: jax.Array
    own: jax.Array
    consistent: jax.Array
    num_consistent: jax.Array


def _popcount(x):
    return jax.lax.population_count(x).astype(jnp.int32)


# ----------------------------------------------------------------------------- observation


def observe(rules: R.Rules, state: R.State, planes: jax.Array | None = None) -> Observation:
    """The side to move's `Observation` of one game's `state` (the only reader of a `State`).

    `planes` are the state's `game.legal_planes` if the caller has them.
    """
    if planes is None:
        planes = game.legal_planes(rules, state)
    pieces, own = state.pieces, state.own
    visible = jnp.where(rules.fog, game.visible_squares(pieces, own, planes), jnp.uint32(T.FULL))
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    return Observation(
        own_pieces=pieces & own,
        own=own,
        visible=visible,
        seen=pieces & (occ & ~own & visible),
        planes=planes,
        turn=state.turn,
        ply=state.ply,
        terminated=state.terminated,
        tensor=game.observe(rules, state, True, planes),
    )


observe_batch = jax.vmap(observe)
observe_batch.__doc__ = "(Rules [B], State [B], planes [B, 49]) -> Observation [B]."


# ----------------------------------------------------------------------------- belief updates


def _opponent_material(pieces, own):
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    opponent = pieces & (occ & ~own)
    return _popcount(opponent), opponent


def initial_belief(
    pieces: jax.Array, own: jax.Array, *, to_move: bool, exact: bool = True
) -> Belief:
    """The belief of a player from a start position given in the player's own view.

    `pieces` uint32[6] / `own` uint32 are the position seen from the owner's side (for the
    side not to move: the state's board mirrored, `own` its pieces). With `exact` the owner
    knows where every opponent piece stands (a game's start position, which is public);
    without it (a FEN given to `analyse`) it knows the opponent's material only.
    `to_move`: the owner moves first (else the opponent moves before its first update).
    """
    counts, opponent = _opponent_material(pieces, own)
    anywhere = jnp.full(NUM_TYPES, FULL, jnp.uint32).at[T.PAWN].set(PAWN_SQUARES)
    possible = jnp.where(exact, opponent, anywhere)
    return Belief(counts=counts, possible=possible, opponent_moved=jnp.bool_(not to_move))


def initial_beliefs(state: R.State, *, exact: bool = True) -> tuple[Belief, Belief]:
    """(White's, Black's) beliefs at `state` (one game, no history before it)."""
    mover = initial_belief(state.pieces, state.own, to_move=True, exact=exact)
    mirrored = game.mirror(state.pieces)
    occ = mirrored[0] | mirrored[1] | mirrored[2] | mirrored[3] | mirrored[4] | mirrored[5]
    other = initial_belief(mirrored, occ & ~game.mirror(state.own), to_move=False, exact=exact)
    other = other.replace(opponent_moved=jnp.bool_(True))
    white = jax.tree.map(lambda a, b: jnp.where(state.turn == 0, a, b), mover, other)
    black = jax.tree.map(lambda a, b: jnp.where(state.turn == 0, a, b), other, mover)
    return white, black


def _slides(x, directions):
    out = x
    for d in directions:
        reach = x
        for _ in range(4):
            reach = game.shift_dir(reach, d)
            out = out | reach
    return out


def widen(possible: jax.Array) -> jax.Array:
    """uint32[6] -> uint32[6]: where each opponent type may stand after one opponent move.

    A superset: every piece may stay or make one pseudo-move of its type, ignoring blockers
    (opponent pawns move down in the owner's view); a pawn reaching the owner's first rank may
    have promoted to Q, R, B or N.
    """
    pawn, knight, bishop, rook, queen, king = (possible[i] for i in range(NUM_TYPES))
    pawn_moves = game.shift_dir(pawn, 0) | game.shift_dir(pawn, 4) | game.shift_dir(pawn, 7)
    promoted = pawn_moves & jnp.uint32(T.RANK_MASKS[0])
    knight_moves = knight
    for df, dr in T.KNIGHT_VECTORS:
        knight_moves = knight_moves | game.shift(knight, df, dr)
    return jnp.stack(
        [
            (pawn | pawn_moves) & jnp.uint32(PAWN_SQUARES),
            knight_moves | promoted,
            _slides(bishop, (4, 5, 6, 7)) | promoted,
            _slides(rook, (0, 1, 2, 3)) | promoted,
            _slides(queen, range(8)) | promoted,
            king | game.king_neighbourhood(king),
        ]
    )


def update(belief: Belief, observation: Observation) -> Belief:
    """The owner's belief once it sees `observation` (it is to move). One game."""
    possible = jnp.where(belief.opponent_moved, widen(belief.possible), belief.possible)
    hidden = jnp.uint32(T.FULL) & ~observation.visible
    possible = (possible & hidden) | observation.seen
    possible = possible.at[T.PAWN].set(possible[T.PAWN] & jnp.uint32(PAWN_SQUARES))
    seen_counts = _popcount(observation.seen)
    # Seeing more pieces of a type than believed: a pawn was promoted (the king never is).
    excess = jnp.maximum(seen_counts - belief.counts, 0).at[T.PAWN].set(0).at[T.KING].set(0)
    counts = belief.counts + excess
    counts = counts.at[T.PAWN].set(jnp.maximum(counts[T.PAWN] - excess.sum(), seen_counts[0]))
    return Belief(counts=counts, possible=possible, opponent_moved=jnp.bool_(False))


def after_move(
    belief: Belief, rules: R.Rules, observation: Observation, action: jax.Array
) -> Belief:
    """The owner's belief after it plays `action` in the position of `observation`.

    A capture removes the (visible) captured piece from the believed material; an atomic
    capture also removes the visible non-pawn opponent pieces next to the target square.
    """
    action = jnp.clip(jnp.asarray(action, jnp.int32), 0, T.NUM_ACTIONS - 1)
    to_sq = jnp.asarray(T.TO_SQUARE)[action // T.NUM_PLANES, action % T.NUM_PLANES]
    to_bit = jnp.where(to_sq >= 0, jnp.uint32(1) << jnp.maximum(to_sq, 0).astype(jnp.uint32), 0)
    to_bit = to_bit.astype(jnp.uint32)
    seen = observation.seen
    seen_occ = seen[0] | seen[1] | seen[2] | seen[3] | seen[4] | seen[5]
    capture = (to_bit & seen_occ) != 0
    blast = to_bit | (jnp.asarray(T.NEIGHBOURS)[jnp.maximum(to_sq, 0)] & ~observation.seen[0])
    removed = jnp.where(
        capture, jnp.where(rules.capture_mode == CAPTURE_ATOMIC, blast, to_bit), jnp.uint32(0)
    )
    lost = _popcount(observation.seen & removed)
    lost = jnp.where(observation.terminated, 0, lost)
    return Belief(
        counts=jnp.maximum(belief.counts - lost, 0),
        possible=belief.possible & ~removed,
        opponent_moved=jnp.bool_(True),
    )


update_batch = jax.vmap(update)
after_move_batch = jax.vmap(after_move)


# ----------------------------------------------------------------------------- worlds


def _nth_bit(word, n):
    """The bit of the n-th (0-based) set bit of `word` (0 if there are fewer)."""
    below = _popcount(word & jnp.asarray(_LOW_BITS))  # [25] set bits at or below each square
    square = jnp.sum(below <= n)
    bit = jnp.uint32(1) << jnp.minimum(square, T.NUM_SQUARES - 1).astype(jnp.uint32)
    return jnp.where(square < T.NUM_SQUARES, bit & word, jnp.uint32(0))


def _pawn_capture_squares(rules: R.Rules, observation: Observation):
    """Hidden squares an own pawn could capture on: they are empty (else they would be seen).

    Not used under atomic captures, where a capture may be illegal (it would explode the
    owner's king) and so leave an occupied square hidden.
    """
    pawns = observation.own_pieces[T.PAWN]
    out = jnp.uint32(0)
    for d in T.PAWN_DIRECTIONS[1:]:
        allowed = rules.vector_allowed[T.vector_index(d, 1)]
        out = out | jnp.where(allowed, game.shift_dir(pawns, d), jnp.uint32(0))
    out = out & ~observation.visible
    return jnp.where(rules.capture_mode == CAPTURE_ATOMIC, jnp.uint32(0), out)


def _candidate(key, rules: R.Rules, observation: Observation, belief: Belief):
    """One candidate world: (placed uint32[6], log proposal weight, complete, consistent)."""
    hidden = jnp.uint32(T.FULL) & ~observation.visible
    free = hidden & ~_pawn_capture_squares(rules, observation)
    allowed = belief.possible & free  # [6]
    unseen = jnp.maximum(belief.counts - _popcount(observation.seen), 0)
    # The type with the fewest allowed squares goes first (ties: `PLACEMENT_ORDER`). The order
    # depends on the belief only, so the importance weights stay exact.
    tie_break = jnp.zeros(NUM_TYPES, jnp.int32).at[PLACEMENT_ORDER].set(jnp.arange(NUM_TYPES))
    order = jnp.argsort(_popcount(allowed) * NUM_TYPES + tie_break)
    ends = jnp.cumsum(unseen[order])
    slots = jnp.arange(MAX_HIDDEN)
    slot_type = order[jnp.minimum(jnp.sum(ends[None] <= slots[:, None], 1), NUM_TYPES - 1)]
    active = slots < ends[-1]
    uniforms = jax.random.uniform(key, (MAX_HIDDEN,))

    def place(carry, slot):
        placed, occupied, log_weight, complete = carry
        kind, is_active, u = slot
        choices = allowed[kind] & ~occupied
        n = _popcount(choices)
        bit = _nth_bit(choices, jnp.minimum((u * n).astype(jnp.int32), jnp.maximum(n - 1, 0)))
        bit = jnp.where(is_active, bit, jnp.uint32(0))
        placed = placed.at[kind].set(placed[kind] | bit)
        log_weight = log_weight + jnp.where(is_active, jnp.log(jnp.maximum(n, 1)), 0.0)
        complete = complete & ((n > 0) | ~is_active)
        return (placed, occupied | bit, log_weight, complete), None

    init = (jnp.zeros(NUM_TYPES, jnp.uint32), jnp.uint32(0), jnp.float32(0.0), jnp.bool_(True))
    (placed, _, log_weight, complete), _ = jax.lax.scan(place, init, (slot_type, active, uniforms))
    complete = complete & (ends[-1] <= MAX_HIDDEN)
    pieces = observation.own_pieces | observation.seen | placed
    planes = game.analyse(rules, pieces, observation.own).planes
    consistent = complete & jnp.all(planes == observation.planes)
    return pieces, log_weight, complete, consistent


def sample_worlds(
    key: jax.Array,
    rules: R.Rules,
    observation: Observation,
    belief: Belief,
    num_worlds: int,
    num_candidates: int = 32,
) -> SampledWorlds:
    """K = `num_worlds` positions consistent with `observation` and `belief` (one game).

    Draws `num_candidates` candidates (static) and resamples K of them with replacement by
    importance weight among the consistent ones (see the module docstring). Consumes `key`.
    """
    candidate_key, choice_key = jax.random.split(key)
    keys = jax.random.split(candidate_key, num_candidates)
    pieces, log_weight, complete, consistent = jax.vmap(
        lambda k: _candidate(k, rules, observation, belief)
    )(keys)
    num_consistent = jnp.sum(consistent).astype(jnp.int32)
    usable = jnp.where(num_consistent > 0, consistent, complete)
    usable = jnp.where(jnp.any(usable), usable, jnp.ones_like(usable))
    logits = jnp.where(usable, log_weight, -jnp.inf)
    chosen = jax.random.categorical(choice_key, logits, shape=(num_worlds,))
    return SampledWorlds(
        pieces=pieces[chosen],
        own=jnp.broadcast_to(observation.own, (num_worlds,)),
        consistent=consistent[chosen],
        num_consistent=num_consistent,
    )


def sample_worlds_batch(
    key, rules, observation, belief, num_worlds: int, num_candidates: int = 32
) -> SampledWorlds:
    """`sample_worlds` over a batch: Rules [B], Observation [B], Belief [B] -> [B, K]."""
    keys = sharding.draw_for_games(jax.random.split, key, observation.own.shape[0])
    return jax.vmap(lambda k, r, o, b: sample_worlds(k, r, o, b, num_worlds, num_candidates))(
        keys, rules, observation, belief
    )


def world_states(worlds: SampledWorlds, observation: Observation) -> R.State:
    """State [B, K] of sampled worlds: the observed turn and ply, a fresh 50-move clock and
    repetition history (neither is fully known under fog)."""

    def one(pieces, own, turn, ply):
        return game.from_position(pieces, own, turn).replace(ply=ply)

    per_game = jax.vmap(one, in_axes=(0, 0, None, None))
    return jax.vmap(per_game)(worlds.pieces, worlds.own, observation.turn, observation.ply)
