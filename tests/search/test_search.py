"""The search's compact action space (slots): the bound, the maps, and search outputs."""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rules_support import random_placement

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.model.network import MASKED_LOGIT


def test_slot_bound_is_the_maximum_of_the_move_count_bound():
    # p promoting pawns (at most 5, one rank) with 4 pieces x min(3, free squares) moves each,
    # the other n - p pieces at most min(16, free squares) moves each (module docstring).
    bound = max(
        p * 4 * min(3, 25 - n) + (n - p) * min(16, 25 - n)
        for n in range(26)
        for p in range(min(5, n) + 1)
    )
    assert bound == search.MAX_LEGAL_MOVES == 160


def test_legal_move_counts_stay_within_the_slots(engine, rollout):
    rng = random.Random(7)
    variants, fens = [], []
    for variant in R.VARIANTS:
        for _ in range(24):
            variants.append(variant)
            fens.append(random_placement(rng, variant))
    # Crowded positions with promoting pawns and many queens.
    for variant in ("gardner", "rifle", "atomic", "extinction"):
        variants += [variant, variant]
        fens += ["n1n1n/PPPPP/QQQQQ/5/K3k w - - 0 1", "1r1r1/PPPPP/2Q2/Q3Q/K1Q1k w - - 0 1"]
    masks, _ = engine.analyse(variants, fens)
    counts = masks.sum(axis=1)
    assert counts.max() <= search.MAX_LEGAL_MOVES
    assert counts.max() >= 40  # the crowded positions really are crowded
    rollout_max = max(int(p.mask.sum(axis=1).max()) for p in rollout.plies)
    assert 0 < rollout_max <= search.MAX_LEGAL_MOVES


def test_slot_maps_hold_every_legal_move_once(engine, rollout):
    """The slots of a position are exactly its legal moves (each once, then empty slots), the
    single-slot lookup agrees with the full table, and compact / expand invert each other."""
    rng = np.random.default_rng(0)
    rules = engine.rules(rollout.variants)
    legal_planes = jax.jit(R.legal_planes)
    planes = np.concatenate([np.asarray(legal_planes(rules, s)) for s in rollout.pre[::15]])
    masks = np.concatenate([p.mask for p in rollout.plies[::15]])
    assert planes.shape == (masks.shape[0], 49)
    actions, valid = jax.device_get(search.all_slot_actions(jnp.asarray(planes)))
    counts = masks.sum(axis=1)
    for i in range(masks.shape[0]):
        n = counts[i]
        assert valid[i].sum() == n and valid[i, :n].all()
        assert sorted(actions[i, :n]) == list(np.flatnonzero(masks[i]))
        # Numbered plane by plane, squares in order within a plane (action = 49 * sq + plane).
        order = (actions[i, :n] % 49) * 25 + actions[i, :n] // 49
        assert (np.diff(order) > 0).all()
    slots = rng.integers(0, search.MAX_LEGAL_MOVES, size=(masks.shape[0], 3)).astype(np.int32)
    one, one_valid = jax.device_get(search.slot_actions(jnp.asarray(planes), jnp.asarray(slots)))
    np.testing.assert_array_equal(one_valid, np.take_along_axis(valid, slots, axis=1))
    np.testing.assert_array_equal(
        np.where(one_valid, one, -1), np.where(one_valid, np.take_along_axis(actions, slots, 1), -1)
    )

    values = rng.normal(size=masks.shape).astype(np.float32)
    compact = np.asarray(
        search.compact(jnp.asarray(values), jnp.asarray(actions), jnp.asarray(valid))
    )
    assert np.all(compact[~valid] == MASKED_LOGIT)
    expanded = np.asarray(
        search.expand(jnp.asarray(compact), jnp.asarray(actions), jnp.asarray(valid))
    )
    np.testing.assert_array_equal(expanded, np.where(masks, values, 0.0))


@pytest.mark.slow
def test_search_weights_and_action_live_on_legal_moves_of_crowded_positions():
    """Run the search on positions with many legal moves, including one finished game: the
    weights are a distribution over exactly the legal moves, and the action is legal."""
    from mmc_jax.evaluation.policies import UniformPriorNetwork

    fens = [
        "n1n1n/PPPPP/QQQQQ/5/K3k w - - 0 1",
        "1r1r1/PPPPP/2Q2/Q3Q/K1Q1k w - - 0 1",
        R.START_FENS["gardner"],
        "k4/1Q3/1K3/5/5 b - - 0 1",  # Black is checkmated
    ]
    variants = ["gardner", "atomic", "rifle", "gardner"]
    rules = R.stack([R.get(v) for v in variants])
    state = jax.tree.map(lambda *xs: jnp.stack(xs), *[R.from_fen(f) for f in fens])
    mask = np.asarray(R.legal_action_mask(rules, state))
    assert mask[:3].sum(axis=1).min() > 0 and mask[3].sum() == 0
    output = search.run_search(
        UniformPriorNetwork(), {}, rules, state, jax.random.key(0), num_simulations=24
    )
    weights = np.asarray(output.action_weights)
    action = np.asarray(output.action)
    for i in range(3):
        np.testing.assert_allclose(weights[i].sum(), 1.0, rtol=1e-5)
        assert np.all(weights[i][~mask[i]] == 0)
        assert mask[i, action[i]]
    assert np.all(weights[3] == 0)
