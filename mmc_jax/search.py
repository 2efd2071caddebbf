"""mctx glue: batched AlphaZero search over the real rules, in a compact action space.

The engine numbers moves 0..1224 (pgx's `gardner_chess` layout), but no position has more
than `MAX_LEGAL_MOVES` legal moves, and mctx's per-node bookkeeping (priors, visit counts,
values, child indices: arrays [B, nodes, actions]) costs time in proportion to the number of
actions it is told about: 176 ms per 32-simulation search of 64 games over 1225 actions
against 16 ms over 160 on a 2-core CPU, with a recurrent_fn that does nothing. So the tree
works on *slots*: slot k of a node is its (k+1)-th legal move in engine order. `compact`
maps a position's logits into its slots; `slot_to_action` maps a slot back to the engine's
action id; `expand` maps slot weights back to [B, 1225].

Why 160 slots suffice, for any placement of pieces (not only reachable ones): with n pieces of
the side to move on the board, a piece other than a pawn has at most min(16, 25 - n) moves
(16: a queen on c3; each move goes to a different square not holding one of the mover's
pieces), and a pawn at most 3 target squares x 4 promotion pieces = 12, min(3, 25 - n) x 4 in
general, with at most 5 pawns able to promote (one rank). The maximum over n and the number p
of promoting pawns of p * 4 * min(3, 25 - n) + (n - p) * min(16, 25 - n) is 160 (n = 15,
p = 5); tests/test_search.py recomputes it and checks the counts of random positions.

`recurrent_fn` steps the real (jitted) rules; a tree node holds the engine `State` (453 bytes)
and its legal-move planes (196 bytes), so each simulation generates moves once (for the new
position). The two-player value flip is mctx's `discount = -1`; a finished game gets discount
0 and value 0, so nothing below a terminal node leaks into the backup. Empty slots get the
logit `MASKED_LOGIT` in every node, so illegal moves are never expanded inside the tree either.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mctx

from mmc_jax import rules as R
from mmc_jax.network import MASKED_LOGIT

ALGORITHMS = ("gumbel_muzero", "muzero")

MAX_LEGAL_MOVES = 160


def evaluate(network, params, rules: R.Rules, state: R.State, planes=None):
    """(logits [B, 1225] with illegal moves masked, value [B], legal mask [B, 1225]).

    `planes` are the positions' `legal_planes` if the caller has them (saves a move generation).
    """
    if planes is None:
        planes = R.legal_planes(rules, state)
    obs = R.observe(rules, state, planes)
    mask = R.planes_to_mask(planes)
    logits, value = network.apply({"params": params}, obs, mask)
    return logits, value, mask


def action_slots(mask: jax.Array) -> jax.Array:
    """int32 [B, 1225]: the slot of every legal action (its rank among the legal actions in
    engine order), `MAX_LEGAL_MOVES` for illegal ones."""
    rank = jnp.cumsum(mask, axis=-1, dtype=jnp.int32) - 1
    return jnp.where(mask, rank, MAX_LEGAL_MOVES)


def compact(values: jax.Array, slots: jax.Array, fill: float = MASKED_LOGIT) -> jax.Array:
    """[B, 1225] per-action values -> [B, MAX_LEGAL_MOVES] per-slot values (`fill` in the
    slots beyond the legal moves). `slots` from `action_slots`."""
    rows = jnp.arange(values.shape[0])[:, None]
    out = jnp.full((values.shape[0], MAX_LEGAL_MOVES), fill, values.dtype)
    return out.at[rows, slots].set(values, mode="drop")


def expand(slot_values: jax.Array, slots: jax.Array) -> jax.Array:
    """[B, MAX_LEGAL_MOVES] per-slot values -> [B, 1225] per-action values (0 where illegal)."""
    padded = jnp.pad(slot_values, ((0, 0), (0, 1)))
    return jnp.take_along_axis(padded, slots, axis=1)


def slot_to_action(mask: jax.Array, slot: jax.Array) -> jax.Array:
    """int32 [B]: the engine action of `slot` [B] given the legal `mask` [B, 1225] (the first
    action whose legal-move count exceeds the slot; 0 when there is none)."""
    count = jnp.cumsum(mask, axis=-1, dtype=jnp.int32)
    return jnp.argmax(count > slot[:, None], axis=-1).astype(jnp.int32)


def make_recurrent_fn(network, rules: R.Rules):
    """mctx recurrent_fn over slots, stepping the real rules (`rules` [B] is closed over).

    The embedding is `(State [B], legal planes [B, 49])`.
    """

    def recurrent_fn(params, rng_key, slot, embedding):
        del rng_key
        state, planes = embedding
        action = slot_to_action(R.planes_to_mask(planes), slot)
        next_state, next_planes = R.step_with_planes(rules, state, action, planes)
        # Reward of the transition for the player who moved (mctx backs up r + discount * v).
        reward = jnp.take_along_axis(next_state.rewards, state.turn[:, None], axis=1)[:, 0]
        logits, value, mask = evaluate(network, params, rules, next_state, next_planes)
        done = next_state.terminated
        output = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, -1.0),
            prior_logits=compact(logits, action_slots(mask)),
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
) -> mctx.PolicyOutput:
    """Batched search from `state` [B]; returns an mctx `PolicyOutput` whose `action` [B] is
    an engine action id and `action_weights` [B, 1225] are over engine actions (zero on illegal
    ones); its `search_tree` is mctx's tree over slots (see the module docstring).

    `algorithm="gumbel_muzero"` (default; `gumbel_scale=0` for evaluation: deterministic
    sequential halving) or `"muzero"` (PUCT with Dirichlet root noise). Games that are already
    over get a dummy search (callers ignore them; their action is 0 and weights are zero).
    `planes` are the roots' `legal_planes` [B, 49] if the caller has them (saves a move
    generation).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown search algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if planes is None:
        planes = R.legal_planes(rules, state)
    logits, value, mask = evaluate(network, params, rules, state, planes)
    slots = action_slots(mask)
    num_legal = mask.sum(axis=-1, dtype=jnp.int32)
    # A finished game has no legal action; give it one slot so mctx's masking stays defined.
    valid = jnp.arange(MAX_LEGAL_MOVES) < jnp.maximum(num_legal, 1)[:, None]
    root = mctx.RootFnOutput(
        prior_logits=compact(logits, slots), value=value, embedding=(state, planes)
    )
    recurrent_fn = make_recurrent_fn(network, rules)
    if algorithm == "gumbel_muzero":
        output = mctx.gumbel_muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=num_simulations,
            invalid_actions=~valid,
            max_num_considered_actions=max_num_considered_actions,
            gumbel_scale=gumbel_scale,
        )
    else:
        output = mctx.muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=num_simulations,
            invalid_actions=~valid,
            dirichlet_alpha=dirichlet_alpha,
            dirichlet_fraction=dirichlet_fraction,
            temperature=temperature,
        )
    return output.replace(
        action=slot_to_action(mask, output.action),
        action_weights=expand(output.action_weights, slots),
    )
