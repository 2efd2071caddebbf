"""mctx glue: batched AlphaZero search over the real rules.

`root_fn` evaluates the network on the current positions; `recurrent_fn` steps the real
(jitted) rules for an action, so the tree's nodes hold engine `State`s (453 bytes each). The
two-player value flip is mctx's `discount = -1`; a finished game gets discount 0 and value 0,
so nothing below a terminal node leaks into the backup. Illegal actions are masked inside the
tree too (mctx masks only the root): the network gives them a -1e9 logit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mctx

from mmc_jax import rules as R

ALGORITHMS = ("gumbel_muzero", "muzero")


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


def make_recurrent_fn(network, rules: R.Rules):
    """mctx recurrent_fn stepping the real rules (`rules` [B] is closed over)."""

    def recurrent_fn(params, rng_key, action, state):
        del rng_key
        mover = state.turn
        planes = R.legal_planes(rules, state)
        next_state, next_planes = R.step_with_planes(rules, state, action, planes)
        # Reward of the transition for the player who moved (mctx backs up r + discount * v).
        reward = jnp.take_along_axis(next_state.rewards, mover[:, None], axis=1)[:, 0]
        logits, value, _ = evaluate(network, params, rules, next_state, next_planes)
        done = next_state.terminated
        output = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, -1.0),
            prior_logits=logits,
            value=jnp.where(done, 0.0, value),
        )
        return output, next_state

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
    """Batched search from `state` [B]; returns mctx's PolicyOutput (action, action_weights).

    `algorithm="gumbel_muzero"` (default; `gumbel_scale=0` for evaluation: deterministic
    sequential halving) or `"muzero"` (PUCT with Dirichlet root noise). Games that are already
    over get a uniform dummy search (callers ignore them). `planes` are the roots'
    `legal_planes` [B, 49] if the caller has them (saves a move generation).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown search algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    logits, value, mask = evaluate(network, params, rules, state, planes)
    # A finished game has no legal action; give it one so mctx's masking stays well defined.
    has_move = mask.any(axis=-1, keepdims=True)
    invalid = ~jnp.where(has_move, mask, jnp.ones_like(mask))
    root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
    recurrent_fn = make_recurrent_fn(network, rules)
    if algorithm == "gumbel_muzero":
        return mctx.gumbel_muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=num_simulations,
            invalid_actions=invalid,
            max_num_considered_actions=max_num_considered_actions,
            gumbel_scale=gumbel_scale,
        )
    return mctx.muzero_policy(
        params,
        key,
        root,
        recurrent_fn,
        num_simulations=num_simulations,
        invalid_actions=invalid,
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_fraction=dirichlet_fraction,
        temperature=temperature,
    )
