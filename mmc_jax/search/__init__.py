"""mctx glue: batched AlphaZero search over the real rules, in a compact action space.

The policies are mctx's Gumbel MuZero and MuZero, run by the batch-first loop of
`mmc_jax.search.mcts` (equal results, without mctx's vmapped while loops).

The engine numbers moves 0..1224 (pgx's `gardner_chess` layout), but no position has more
than `MAX_LEGAL_MOVES` legal moves, and mctx's per-node bookkeeping (priors, visit counts,
values, child indices: arrays [B, nodes, actions]) costs time in proportion to the number of
actions it is told about: 176 ms per 32-simulation search of 64 games over 1225 actions
against 16 ms over 160 on a 2-core CPU, with a recurrent_fn that does nothing. So the tree
works on *slots*: a node's slots hold its legal moves, numbered plane by plane from the 49
legal-move plane words (`slot_actions`); `compact` gathers a position's logits into its slots
and `expand` scatters slot weights back to the 1225 actions. Done this way (popcounts of the
plane words, no pass over the 1225-wide mask inside the tree) a whole search of 64 games costs
3-4x less than with slots numbered in action order through a prefix sum or scatter over the
mask, and about 8x less than with a tree over all 1225 actions.

Why 160 slots suffice, for any placement of pieces (not only reachable ones): with n pieces of
the side to move on the board, a piece other than a pawn has at most min(16, 25 - n) moves
(16: a queen on c3; each move goes to a different square not holding one of the mover's
pieces), and a pawn at most 3 target squares x 4 promotion pieces = 12, min(3, 25 - n) x 4 in
general, with at most 5 pawns able to promote (one rank). The maximum over n and the number p
of promoting pawns of p * 4 * min(3, 25 - n) + (n - p) * min(16, 25 - n) is 160 (n = 15,
p = 5); tests/search/test_search.py recomputes it and checks the counts of random positions.

`recurrent_fn` steps the real (jitted) rules; a tree node holds the engine `State` (453 bytes)
and its legal-move planes (196 bytes), so each simulation generates moves once (for the new
position). The two-player value flip is mctx's `discount = -1`; a finished game gets discount
0 and value 0, so nothing below a terminal node leaks into the backup. Empty slots get the
logit `MASKED_LOGIT` in every node, so illegal moves are never expanded inside the tree either.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import mctx

from mmc_jax import rules as R
from mmc_jax.model.network import MASKED_LOGIT
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD, BoardGame
from mmc_jax.search import mcts

ALGORITHMS = ("gumbel_muzero", "muzero")

MAX_LEGAL_MOVES = 160


def evaluate(network, params, rules: R.Rules, state: R.State, planes=None, game: BoardGame = BOARD):
    """(logits [B, 1225] with illegal moves masked, value [B], legal mask [B, 1225]) of the
    positions of `game` (the Game contract's board game).

    `planes` are the positions' `legal_planes` if the caller has them (saves a move generation).
    """
    if planes is None:
        planes = game.legal_planes(rules, state)
    obs = game.observe(rules, state, planes)
    mask = game.planes_to_mask(planes)
    logits, value = network.apply({"params": params}, obs, mask)
    return logits, value, mask


def _select_bit(word: jax.Array, rank: jax.Array) -> jax.Array:
    """int32: the square of the `rank`-th (from 0) set bit of each 25-bit `word` (same shapes),
    by binary search over prefix popcounts (5 steps); 24 where the word has no such bit."""
    low = jnp.zeros_like(rank)
    high = jnp.full_like(rank, T.NUM_SQUARES - 1)
    for _ in range(T.NUM_SQUARES.bit_length()):
        middle = (low + high) // 2
        below = (jnp.uint32(2) << middle.astype(jnp.uint32)) - jnp.uint32(1)  # bits 0..middle
        above = jax.lax.population_count(word & below).astype(jnp.int32) > rank
        high = jnp.where(above, middle, high)
        low = jnp.where(above, low, middle + 1)
    return jnp.minimum(low, T.NUM_SQUARES - 1)


def slot_actions(planes: jax.Array, slots: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The engine actions of `slots` int32 [B, S] of the positions with legal `planes` [B, 49].

    Slots are numbered plane by plane (the legal from-squares of plane 0 in square order, then
    plane 1, ...), which needs only the 49 plane words: popcounts give each plane's first slot,
    and a slot's square is found among the 25 bits of its plane's word. (A numbering in action
    order needs a prefix sum or a scatter over the 1225-wide mask; inside mctx's loop that costs
    4-8x more on the CPU.) For every slot at once, `all_slot_actions` is cheaper.

    Returns:
      (actions int32 [B, S], valid bool [B, S]): `valid` is False for slots at or beyond the
      number of legal moves (their action is a meaningless in-range id).
    """
    counts = jax.lax.population_count(planes).astype(jnp.int32)  # [B, 49]
    ends = jnp.cumsum(counts, axis=-1)  # slot after the last one of each plane
    plane = jnp.sum(ends[:, None, :] <= slots[:, :, None], axis=-1)
    return _plane_slot_actions(planes, counts, ends, plane, slots)


def _plane_slot_actions(planes, counts, ends, plane, slots):
    """`slot_actions`'s result from each slot's plane (the number of planes ending at or before
    it; 49 beyond the last legal move)."""
    valid = slots < ends[:, -1:]
    plane = jnp.minimum(plane, T.NUM_PLANES - 1)
    rank = slots - jnp.take_along_axis(ends - counts, plane, axis=1)  # index within the plane
    square = _select_bit(jnp.take_along_axis(planes, plane, axis=1), rank)
    return (T.NUM_PLANES * square + plane).astype(jnp.int32), valid


def all_slot_actions(planes: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(actions int32 [B, MAX_LEGAL_MOVES], valid bool [B, MAX_LEGAL_MOVES]) of every slot:
    `slot_actions` of slots 0..159, the same values.

    Each slot's plane comes from a histogram of where the 49 planes end (a scatter-add of 49
    counts per position) and its prefix sum over the slots, instead of comparing every slot with
    every plane's end ([B, 160, 49]): with the 5-step bit search this costs half the time (once
    per simulation, for the new node's priors).
    """
    batch = planes.shape[0]
    counts = jax.lax.population_count(planes).astype(jnp.int32)  # [B, 49]
    ends = jnp.cumsum(counts, axis=-1)
    ended = jnp.zeros((batch, MAX_LEGAL_MOVES + 1), jnp.int32)
    ended = ended.at[jnp.arange(batch)[:, None], jnp.minimum(ends, MAX_LEGAL_MOVES)].add(1)
    plane = jnp.cumsum(ended, axis=-1)[:, :MAX_LEGAL_MOVES]  # planes ending at or before slot
    slots = jnp.broadcast_to(jnp.arange(MAX_LEGAL_MOVES, dtype=jnp.int32), plane.shape)
    return _plane_slot_actions(planes, counts, ends, plane, slots)


def compact(values: jax.Array, actions: jax.Array, valid: jax.Array, fill=MASKED_LOGIT):
    """[B, 1225] per-action values -> [B, MAX_LEGAL_MOVES] per-slot values (`fill` in the
    empty slots); `actions`, `valid` from `all_slot_actions`."""
    return jnp.where(valid, jnp.take_along_axis(values, actions, axis=1), fill)


def expand(slot_values: jax.Array, actions: jax.Array, valid: jax.Array) -> jax.Array:
    """[B, MAX_LEGAL_MOVES] per-slot values -> [B, 1225] per-action values (0 where illegal)."""
    out = jnp.zeros((slot_values.shape[0], T.NUM_ACTIONS), slot_values.dtype)
    target = jnp.where(valid, actions, T.NUM_ACTIONS)
    return mcts.set_per_game(out, target, value=slot_values, mode="drop")


def make_recurrent_fn(network, rules: R.Rules, game: BoardGame = BOARD):
    """mctx recurrent_fn over slots, stepping `game`'s real rules (`rules` [B] is closed over).

    The embedding is `(State [B], legal planes [B, 49])`. The network is applied without a
    legal mask: the slots hold legal moves only, and empty slots get `MASKED_LOGIT`.
    """

    def recurrent_fn(params, rng_key, slot, embedding):
        del rng_key
        state, planes = embedding
        action, _ = slot_actions(planes, slot[:, None])
        next_state, next_planes = game.step_with_planes(rules, state, action[:, 0], planes)
        # Reward of the transition for the player who moved (mctx backs up r + discount * v).
        reward = jnp.take_along_axis(next_state.rewards, state.turn[:, None], axis=1)[:, 0]
        obs = game.observe(rules, next_state, next_planes)
        logits, value = network.apply({"params": params}, obs, None)
        done = next_state.terminated
        output = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, -1.0),
            prior_logits=compact(logits, *all_slot_actions(next_planes)),
            value=jnp.where(done, 0.0, value),
        )
        return output, (next_state, next_planes)

    return recurrent_fn


def run_search(
    network,
    params: Any,
    rules: R.Rules,
    state: R.State,
    key: jax.Array,
    *,
    num_simulations: int,
    algorithm: str = "gumbel_muzero",
    gumbel_scale: float = 1.0,
    max_num_considered_actions: int = 16,
    dirichlet_alpha: float = 0.3,
    dirichlet_fraction: float = 0.25,
    temperature: float = 1.0,
    planes: jax.Array | None = None,
    game: BoardGame = BOARD,
) -> mctx.PolicyOutput:
    """Batched search from `state` [B]; returns an mctx `PolicyOutput` whose `action` [B] is
    an engine action id and `action_weights` [B, 1225] are over engine actions (zero on illegal
    ones); its `search_tree` is mctx's tree over slots (see the module docstring).

    `algorithm="gumbel_muzero"` (default; `gumbel_scale=0` for evaluation: deterministic
    sequential halving) or `"muzero"` (PUCT with Dirichlet root noise). Games that are already
    over get a dummy search (callers ignore them; their action is 0 and weights are zero).
    `planes` are the roots' `legal_planes` [B, 49] if the caller has them (saves a move
    generation). `game`: the Game contract's board game whose rules the tree steps.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown search algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if planes is None:
        planes = game.legal_planes(rules, state)
    logits, value, _ = evaluate(network, params, rules, state, planes, game)
    actions, valid = all_slot_actions(planes)
    # A finished game has no legal action; give it one slot so mctx's masking stays defined.
    invalid = ~(valid | (jnp.arange(MAX_LEGAL_MOVES) == 0))
    root = mctx.RootFnOutput(
        prior_logits=compact(logits, actions, valid), value=value, embedding=(state, planes)
    )
    recurrent_fn = make_recurrent_fn(network, rules, game)
    if algorithm == "gumbel_muzero":
        policy = functools.partial(
            mcts.gumbel_muzero_policy,
            max_num_considered_actions=max_num_considered_actions,
            gumbel_scale=gumbel_scale,
        )
    else:
        policy = functools.partial(
            mcts.muzero_policy,
            dirichlet_alpha=dirichlet_alpha,
            dirichlet_fraction=dirichlet_fraction,
            temperature=temperature,
        )
    output = policy(params, key, root, recurrent_fn, num_simulations, invalid_actions=invalid)
    action = jnp.take_along_axis(actions, output.action[:, None].astype(jnp.int32), axis=1)[:, 0]
    has_move = valid[:, 0]
    return output.replace(
        action=jnp.where(has_move, action, 0),
        action_weights=expand(output.action_weights, actions, valid),
    )
