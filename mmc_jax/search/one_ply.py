"""The one-ply value player: every legal move's next position evaluated in one batched network
call, and the move whose next position the opponent likes least played (TD(λ)'s afterstate
player, `mmc_jax.algorithms.td_lambda`; any model plays it through the player table's
`one-ply` entry and `evaluate`/`ladder --search one-ply`).

A move that ends the game is scored by its result instead of the network; the value is always
the network's value head for the side to move in the next position (the opponent), so the
mover minimises it. Pure and jittable; no search tree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mmc_jax import rules as R
from mmc_jax.rules.contract import BOARD
from mmc_jax.search import all_slot_actions, evaluate


def afterstate_values(network, params, rules, state, planes):
    """(slot actions int32 [B, S], valid bool [B, S], the opponent's value of each next
    position float32 [B, S], next states [B, S]): every legal move tried in one batched call."""
    actions, valid = all_slot_actions(planes)
    slots = actions.shape[1]
    step = jax.vmap(BOARD.step, in_axes=(None, None, 1), out_axes=1)
    nxt = step(rules, state, actions)  # [B, S]
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), nxt)
    flat_rules = jax.tree.map(lambda x: jnp.repeat(x, slots, axis=0), rules)
    _, value, _ = evaluate(network, params, flat_rules, flat)
    value = value.reshape(actions.shape)
    mover = state.turn[:, None]
    opponent_reward = jnp.take_along_axis(nxt.rewards, (1 - mover)[..., None], axis=-1)[..., 0]
    value = jnp.where(nxt.terminated, opponent_reward, value)
    return actions, valid, value, nxt


def action(network, params, rules, state, key, epsilon: float = 0.0):
    """(int32 [B] the move the opponent likes least (random with probability `epsilon`),
    bool [B] explored, float32 [B] the opponent's value of the chosen move, next states)."""
    planes = BOARD.legal_planes(rules, state)
    actions, valid, value, nxt = afterstate_values(network, params, rules, state, planes)
    greedy = jnp.argmin(jnp.where(valid, value, jnp.inf), axis=1)
    pick_key, explore_key = jax.random.split(key)
    random_slot = R.random_legal_action(pick_key, valid)
    explored = jax.random.uniform(explore_key, greedy.shape) < epsilon
    slot = jnp.where(explored, random_slot, greedy)
    rows = jnp.arange(slot.shape[0])
    chosen = jax.tree.map(lambda x: x[rows, slot], nxt)
    return actions[rows, slot], explored, value[rows, slot], chosen
