"""The batch-first search (`mmc_jax.search.mcts`) against mctx's own: equal trees, actions, weights.

A toy game whose every node's prior, value, reward and termination are pseudo-random functions
of the path that reached it; batches mixing games with few valid root actions, none at all,
a depth limit, and both policies (Gumbel MuZero, with and without Gumbel noise; MuZero PUCT).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from mmc_jax.search import mcts

BATCH = 6


def toy_recurrent_fn(num_actions: int):
    def recurrent_fn(params, key, action, embedding):
        del key
        path = embedding * 31 + action.astype(jnp.uint32) + 1
        keys = jax.vmap(lambda p: jax.random.fold_in(params, p))(path)
        parts = jax.vmap(lambda k: jax.random.uniform(k, (num_actions + 3,)))(keys)
        done = parts[:, -1] < 0.15
        output = mctx.RecurrentFnOutput(
            reward=jnp.where(done, jnp.sign(parts[:, -2] - 0.5), 0.0),
            discount=jnp.where(done, 0.0, -1.0),
            prior_logits=4.0 * parts[:, :num_actions],
            value=jnp.where(done, 0.0, 2.0 * parts[:, -3] - 1.0),
        )
        return output, path

    return recurrent_fn


def toy_root(num_actions: int, seed: int):
    key = jax.random.key(seed)
    k1, k2, k3 = jax.random.split(key, 3)
    root = mctx.RootFnOutput(
        prior_logits=3.0 * jax.random.normal(k1, (BATCH, num_actions)),
        value=jax.random.uniform(k2, (BATCH,), minval=-1, maxval=1),
        embedding=jnp.arange(BATCH, dtype=jnp.uint32) * 7919,
    )
    invalid = jax.random.uniform(k3, (BATCH, num_actions)) < 0.4
    invalid = invalid.at[0].set(False)  # every action valid
    invalid = invalid.at[1].set(True)  # no valid action (a finished game)
    invalid = invalid.at[2].set(jnp.arange(num_actions) != 3)  # one valid action
    return root, invalid


POLICIES = {
    "gumbel": (mctx.gumbel_muzero_policy, mcts.gumbel_muzero_policy, {}),
    "gumbel_no_noise": (
        mctx.gumbel_muzero_policy,
        mcts.gumbel_muzero_policy,
        {"gumbel_scale": 0.0},
    ),
    "gumbel_4": (
        mctx.gumbel_muzero_policy,
        mcts.gumbel_muzero_policy,
        {"max_num_considered_actions": 4},
    ),
    "muzero": (mctx.muzero_policy, mcts.muzero_policy, {}),
}


@functools.cache
def _compiled(policy_name: str, side: int, num_actions: int, sims: int, max_depth):
    reference, ours, kwargs = POLICIES[policy_name]
    policy = (reference, ours)[side]
    recurrent_fn = toy_recurrent_fn(num_actions)

    @jax.jit
    def run(params, key, root, invalid):
        return policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=sims,
            invalid_actions=invalid,
            max_depth=max_depth,
            **kwargs,
        )

    return run


SHAPES = [(5, 1, None), (7, 24, None), (40, 16, 3), (9, 12, 1), (12, 32, None)]


def cases():
    """Every policy with every (num_actions, sims, max_depth); the fast tier runs a diagonal
    (shape i with policy i mod 4: every policy and every shape once), the slow tier the rest."""
    names = list(POLICIES)
    for i, shape in enumerate(SHAPES):
        for j, name in enumerate(names):
            marks = () if j == i % len(names) else (pytest.mark.slow,)
            yield pytest.param(
                name, *shape, marks=marks, id=f"{shape[0]}-{shape[1]}-{shape[2]}-{name}"
            )


@pytest.mark.parametrize("policy_name, num_actions, sims, max_depth", list(cases()))
def test_batch_first_search_equals_mctx(policy_name, num_actions, sims, max_depth):
    for seed in range(2):
        root, invalid = toy_root(num_actions, seed)
        params = jax.random.key(100 + seed)
        key = jax.random.key(seed)
        args = (params, key, root, invalid)
        want = _compiled(policy_name, 0, num_actions, sims, max_depth)(*args)
        got = _compiled(policy_name, 1, num_actions, sims, max_depth)(*args)
        np.testing.assert_array_equal(got.action, want.action)
        np.testing.assert_allclose(got.action_weights, want.action_weights, rtol=1e-6, atol=1e-7)
        for field in ("node_visits", "children_visits", "children_index", "parents"):
            np.testing.assert_array_equal(
                getattr(got.search_tree, field), getattr(want.search_tree, field), err_msg=field
            )
        for field in ("node_values", "children_values", "raw_values", "children_prior_logits"):
            np.testing.assert_allclose(
                getattr(got.search_tree, field),
                getattr(want.search_tree, field),
                rtol=1e-6,
                atol=1e-6,
                err_msg=field,
            )
        np.testing.assert_array_equal(got.search_tree.embeddings, want.search_tree.embeddings)


def test_deep_trees_are_walked_to_the_end():
    """With one action the tree is a chain: every simulation walks to its bottom and backs up
    through all of it (the loops run until the last game is done)."""
    sims = 12
    root = mctx.RootFnOutput(
        prior_logits=jnp.zeros((BATCH, 1)), value=jnp.zeros(BATCH), embedding=jnp.zeros(BATCH)
    )

    def chain(params, key, action, embedding):
        del params, key
        output = mctx.RecurrentFnOutput(
            reward=jnp.zeros(BATCH),
            discount=-jnp.ones(BATCH),
            prior_logits=jnp.zeros((BATCH, 1)),
            value=jnp.ones(BATCH),
        )
        return output, embedding + 1 + action

    out = jax.jit(lambda key: mcts.muzero_policy(None, key, root, chain, sims))(jax.random.key(0))
    tree = out.search_tree
    np.testing.assert_array_equal(tree.node_visits[:, 0], sims + 1)
    np.testing.assert_array_equal(tree.node_visits[:, sims], 1)  # the deepest node
    np.testing.assert_array_equal(tree.parents[:, 1:], np.arange(sims)[None].repeat(BATCH, 0))
    np.testing.assert_array_equal(tree.embeddings[:, sims], sims)
    want = jax.jit(lambda key: mctx.muzero_policy(None, key, root, chain, sims))(jax.random.key(0))
    np.testing.assert_allclose(tree.node_values, want.search_tree.node_values, atol=1e-6)


def test_first_argmax_is_argmax_with_ties():
    key = jax.random.key(3)
    for size in (1, 5, 160):
        # Few distinct values, so most rows have ties for the maximum; some rows all -inf.
        scores = jax.random.randint(key, (64, size), 0, 4).astype(jnp.float32)
        scores = scores.at[:3].set(-jnp.inf)
        np.testing.assert_array_equal(mcts.first_argmax(scores), jnp.argmax(scores, axis=-1))
