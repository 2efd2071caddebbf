"""Static trip counts inside a simulation (issue 38): no loop of a self-play ply waits for data.

On an accelerator every iteration of a loop whose trip count depends on data is a round trip
to the host. The search's walk, its backup and atomic king safety run a number of steps fixed
at trace time instead; these tests check that the self-play program has no such loop inside
its simulation loop (its jaxpr as each platform lowers it, and the program XLA:CPU compiles),
that both walks (`mcts.simulate`'s "steps" and "nodes") still equal mctx, and that atomic
king safety equals the per-target loop it replaced.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import mctx
import ml_collections
import numpy as np
import pytest
from jaxpr_support import eqns, subjaxprs
from test_mcts import POLICIES, toy_recurrent_fn, toy_root

from mmc_jax import rules as R
from mmc_jax.model import network
from mmc_jax.rules import game
from mmc_jax.rules import tables as T
from mmc_jax.rules.variants import CAPTURE_ATOMIC
from mmc_jax.search import mcts
from mmc_jax.training import selfplay

SIMULATIONS = 5  # no other scan of a ply is this long

# ----------------------------------------------------------------------------- the program


def _names(jaxpr, platform: str) -> list[str]:
    """The primitives `platform` runs; a `platform_dependent` is resolved when lowering (only
    the platform's branch is lowered), so it is named so and not counted as a `cond`."""
    return [
        "platform_dependent" if eqn.params.get("branches_platforms") is not None else name
        for eqn in eqns(jaxpr, platform)
        for name in [eqn.primitive.name]
    ]


def _simulation_loops(jaxpr, platform: str):
    """The body of every simulation loop: the outermost scans `SIMULATIONS` long (a `fori_loop`
    with static bounds is a scan, its length fixed at trace time; a `while` has no length).
    Inside one, the backup's scan over the path's levels may be as long (its depth bound is
    the number of simulations)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan" and eqn.params["length"] == SIMULATIONS:
            found.append(eqn.params["jaxpr"].jaxpr)
        else:
            for sub in subjaxprs(eqn, platform):
                found.extend(_simulation_loops(sub, platform))
    return found


@functools.cache
def _selfplay_ply(algorithm: str):
    """The jaxpr of one self-play ply (`selfplay.selfplay`) over a batch mixing every capture
    mode, the rules an argument (so no variant's code is folded away as a constant)."""
    config = ml_collections.ConfigDict()
    config.selfplay = ml_collections.ConfigDict(
        dict(
            num_plies=1,
            num_simulations=SIMULATIONS,
            algorithm=algorithm,
            gumbel_scale=1.0,
            max_num_considered_actions=4,
            temperature_plies=8,
            temperature=1.0,
        )
    )
    net_config = ml_collections.ConfigDict(dict(num_blocks=1, channels=8))
    net = network.make_network(net_config)
    params = network.init_params(net, jax.random.key(0), R.OBS_SHAPE)
    rules_b = R.stack([R.get(v) for v in ("gardner", "atomic", "rifle", "atomic")])
    state = R.init(rules_b)

    def ply(params, rules_b, state, key):
        return selfplay.selfplay(net, params, rules_b, state, key, config)

    return (
        jax.make_jaxpr(ply)(params, rules_b, state, jax.random.key(1)),
        ply,
        (
            params,
            rules_b,
            state,
            jax.random.key(1),
        ),
    )


@pytest.mark.parametrize("algorithm", ["gumbel_muzero", "muzero"])
@pytest.mark.parametrize("platform", ["cpu", pytest.param("cuda", marks=pytest.mark.slow)])
def test_no_data_dependent_loop_inside_a_simulation(algorithm, platform):
    """Inside the simulation loop of a self-play ply every loop is a scan (a trip count fixed
    at trace time; it lowers to a `while` whose condition compares the counter with a
    constant): no `while` primitive, which is what a `lax.while_loop` or a `fori_loop` with a
    traced bound becomes. On an accelerator there is no `cond` either (it too reads its
    predicate on the host); the CPU skips idle walk steps with one, which costs nothing there."""
    jaxpr = _selfplay_ply(algorithm)[0].jaxpr
    loops = _simulation_loops(jaxpr, platform)
    assert len(loops) == 1
    inside = _names(loops[0], platform)
    assert "scan" in inside  # the walk
    assert "while" not in inside
    if platform == "cpu":
        assert "cond" in inside  # the walk's idle steps skipped
    else:
        assert "cond" not in inside
    if algorithm == "gumbel_muzero":  # (muzero's Dirichlet noise draws with a while_loop)
        assert "while" not in _names(jaxpr, platform)


def test_the_check_tells_data_dependent_loops_from_static_ones():
    """The check above is not vacuous: a `while_loop` (the old walk), a `fori_loop` bounded by
    a traced value (the old backup, by the batch's deepest leaf) and the old per-target atomic
    loop are `while`s; a `fori_loop` with static bounds is a scan."""
    arrays = (jnp.ones(3, bool), jnp.ones(3, jnp.int32))

    def walk(walking, depth):
        return jax.lax.while_loop(
            lambda c: jnp.any(c[0]), lambda c: (c[0] & False, c[1] + 1), (walking, depth)
        )

    def backup(walking, depth):
        return jax.lax.fori_loop(0, jnp.max(depth), lambda i, v: v * 2.0, jnp.ones(3))

    def static(walking, depth):
        return jax.lax.fori_loop(0, 4, lambda i, v: v * 2.0, jnp.ones(3))

    for fn, loops in ((walk, ["while"]), (backup, ["while"]), (static, ["scan"])):
        names = _names(jax.make_jaxpr(fn)(*arrays).jaxpr, "cpu")
        assert [n for n in names if n in ("while", "scan")] == loops
    rules = R.get("atomic")
    pieces, own = rules.start_pieces, rules.start_own
    old = jax.make_jaxpr(_per_target_loop)(pieces, own, rules, game.FULL).jaxpr
    assert "while" in _names(old, "cpu")
    new = jax.make_jaxpr(game._atomic_capture_sources)(pieces, own, rules, game.FULL).jaxpr
    assert "while" not in _names(new, "cpu")


@pytest.mark.slow
def test_compiled_selfplay_loops_all_have_known_trip_counts():
    """XLA:CPU's compiled self-play ply (gumbel_muzero): XLA annotates every `while` whose trip
    count it can prove with `known_trip_count`; every one of them has it (7 loops: the
    simulations, the walk and five of threefry's rounds; before issue 38, 6 of 12 had none)."""
    _, ply, args = _selfplay_ply("gumbel_muzero")
    text = jax.jit(ply).lower(*args).compile().as_text()
    loops = [line for line in text.splitlines() if re.search(r" = .*\swhile\(", line)]
    assert loops
    unknown = [line[:120] for line in loops if "known_trip_count" not in line]
    assert not unknown, unknown


# ----------------------------------------------------------------------------- the walks


@functools.cache
def _ours(policy_name: str, walk: str, num_actions: int, sims: int, max_depth):
    _, ours, kwargs = POLICIES[policy_name]
    recurrent_fn = toy_recurrent_fn(num_actions)

    @jax.jit
    def run(params, key, root, invalid):
        return ours(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=sims,
            invalid_actions=invalid,
            max_depth=max_depth,
            walk=walk,
            **kwargs,
        )

    return run


@functools.cache
def _reference(policy_name: str, num_actions: int, sims: int, max_depth):
    reference, _, kwargs = POLICIES[policy_name]
    recurrent_fn = toy_recurrent_fn(num_actions)
    return jax.jit(
        lambda params, key, root, invalid: reference(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=sims,
            invalid_actions=invalid,
            max_depth=max_depth,
            **kwargs,
        )
    )


def _assert_trees_equal(got: mctx.Tree, want: mctx.Tree):
    for field in ("node_visits", "children_visits", "children_index", "parents"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
    for field in ("node_values", "children_values", "raw_values", "children_prior_logits"):
        np.testing.assert_allclose(
            getattr(got, field), getattr(want, field), rtol=1e-6, atol=1e-6, err_msg=field
        )
    np.testing.assert_array_equal(got.embeddings, want.embeddings)


@pytest.mark.parametrize("walk", mcts.WALKS)
@pytest.mark.parametrize("policy_name", list(POLICIES))
@pytest.mark.parametrize(
    "num_actions, sims, max_depth",
    [  # the fast tier: one shape (a depth limit, more actions than simulations)
        pytest.param(7, 24, None, marks=pytest.mark.slow),
        (40, 16, 3),
        pytest.param(9, 12, 1, marks=pytest.mark.slow),
    ],
)
def test_each_walk_equals_mctx(walk, policy_name, num_actions, sims, max_depth):
    """Both walks, whichever platform runs the tests (tests/search/test_mcts.py checks the walk its
    platform picks)."""
    for seed in range(2):
        root, invalid = toy_root(num_actions, seed)
        args = (jax.random.key(100 + seed), jax.random.key(seed), root, invalid)
        want = _reference(policy_name, num_actions, sims, max_depth)(*args)
        got = _ours(policy_name, walk, num_actions, sims, max_depth)(*args)
        np.testing.assert_array_equal(got.action, want.action)
        np.testing.assert_allclose(got.action_weights, want.action_weights, rtol=1e-6, atol=1e-7)
        _assert_trees_equal(got.search_tree, want.search_tree)


def _random_rule(key, tree, node, depth):
    """An interior rule that reads its key and its depth only (mctx's PUCT reads its key for a
    1e-7 tie-break, so equal trees there barely test that each node gets the walk's key)."""
    del tree, node
    draw = jax.random.randint(key, (), 0, 1 << 20)
    return ((draw + depth.astype(jnp.int32) * 7) % 3).astype(jnp.int32)


@pytest.mark.parametrize("walk", mcts.WALKS)
def test_each_node_gets_the_key_and_depth_the_walk_gives_it(walk):
    num_actions, sims = 3, 24
    root, _ = toy_root(num_actions, 0)
    kwargs = dict(
        root=root,
        recurrent_fn=toy_recurrent_fn(num_actions),
        root_action_selection_fn=functools.partial(_random_rule, depth=jnp.float32(0)),
        interior_action_selection_fn=_random_rule,
        num_simulations=sims,
    )
    params, key = jax.random.key(7), jax.random.key(8)
    want = jax.jit(lambda p, k: mctx.search(p, k, **kwargs))(params, key)
    got = jax.jit(lambda p, k: mcts.search(p, k, walk=walk, **kwargs))(params, key)
    _assert_trees_equal(got, want)
    assert int(jnp.max(got.node_visits[:, 0])) == sims + 1
    # Deep enough that several depths (and their keys) take part.
    parents = np.asarray(got.parents)
    depth = np.zeros_like(parents)
    for n in range(1, sims + 1):
        depth[:, n] = depth[np.arange(len(depth)), np.maximum(parents[:, n], 0)] + 1
    assert depth.max() >= 4


# ----------------------------------------------------------------------------- atomic


def _lowest_square(x):
    bit = x & (~x + jnp.uint32(1))
    return bit, jax.lax.population_count(bit - jnp.uint32(1)).astype(jnp.int32)


def _per_target_loop(pieces, own, rules, targets):
    """`game._atomic_capture_sources` as it was before issue 38: one king-safety test per
    capture square, in a `while_loop` over the targets (the reference)."""
    allowed = rules.vector_allowed
    occ = pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]
    opp = occ & ~own
    king = pieces[T.KING]
    own_king, opp_king = king & own, king & opp
    own_king_zone = game.king_neighbourhood(own_king)
    neighbours = jnp.asarray(T.NEIGHBOURS)
    source_bits = jnp.asarray(T.SOURCE_BITS)

    def body(carry):
        remaining, sources = carry
        target_bit, target = _lowest_square(remaining)
        blast = target_bit | (neighbours[target] & ~pieces[T.PAWN])
        survivors = occ & ~blast
        own_exploded = game._any(own_king & (neighbours[target] | target_bit))
        opp_exploded = game._any(opp_king & blast)
        touching = game._any(own_king_zone & opp_king & survivors)
        them = opp & survivors
        left = pieces & survivors
        orth = (left[T.ROOK] | left[T.QUEEN]) & them
        diag = (left[T.BISHOP] | left[T.QUEEN]) & them
        checkers, _, xray_first = game.king_rays(own_king, survivors, orth, diag, allowed)
        checkers = checkers | game.short_checkers(own_king, left, them, allowed)
        shields = xray_first[0]
        for x in xray_first[1:]:
            shields = shields | x
        safe = jnp.where(game._any(checkers), game.ZERO, game.FULL & ~shields)
        legal_from = jnp.where(
            own_exploded, game.ZERO, jnp.where(opp_exploded | touching, game.FULL, safe)
        )
        return remaining & ~target_bit, sources | (legal_from & source_bits[:, target])

    targets = jnp.where(rules.capture_mode == CAPTURE_ATOMIC, targets & opp, game.ZERO)
    start = (targets, jnp.zeros(T.NUM_VECTORS, jnp.uint32))
    return jax.lax.while_loop(lambda carry: game._any(carry[0]), body, start)[1]


def _random_positions(rng, n: int):
    """Boards of random density with at most one king a side (sometimes none), many pawns,
    random colours: most of them impossible in play, which is the point."""
    pieces = np.zeros((n, 6), np.uint32)
    own = np.zeros(n, np.uint32)
    for g in range(n):
        density = rng.uniform(0.2, 0.9)
        squares = rng.permutation(T.NUM_SQUARES)
        for side in range(2):
            if rng.random() < 0.95:
                pieces[g, T.KING] |= np.uint32(1 << squares[side])
                own[g] |= np.uint32((1 << squares[side]) if side == 0 else 0)
        for sq in squares[2:]:
            if rng.random() < density:
                kind = rng.choice(5, p=[0.4, 0.15, 0.15, 0.15, 0.15])
                pieces[g, kind] |= np.uint32(1 << sq)
                if rng.random() < 0.5:
                    own[g] |= np.uint32(1 << sq)
    return pieces, own


def test_atomic_capture_sources_equal_the_per_target_loop():
    """The closed form against the loop on random boards, targets, colour rules (random move
    vectors allowed) and capture modes."""
    rng = np.random.default_rng(38)
    n = 8000
    pieces, own = _random_positions(rng, n)
    targets = rng.integers(0, 1 << T.NUM_SQUARES, n, dtype=np.uint32)
    targets = np.where(rng.random(n) < 0.5, np.uint32(game.FULL), targets)
    allowed = np.where(rng.random((n, 1)) < 0.5, True, rng.random((n, T.NUM_VECTORS)) < 0.7)
    modes = np.where(rng.random(n) < 0.9, CAPTURE_ATOMIC, 0).astype(np.int32)
    rules = R.stack([R.get("atomic")] * n).replace(
        vector_allowed=jnp.asarray(allowed), capture_mode=jnp.asarray(modes)
    )
    want = jax.jit(jax.vmap(_per_target_loop))(pieces, own, rules, targets)
    got = jax.jit(jax.vmap(game._atomic_capture_sources))(pieces, own, rules, targets)
    assert int(jnp.sum(jnp.any(want != 0, axis=1))) > n // 2  # captures to compare
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
