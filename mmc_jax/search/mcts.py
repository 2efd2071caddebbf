"""Batch-first Monte Carlo tree search: mctx's algorithm without vmapped while loops.

`mctx.search` writes its two inner loops for one game and batches them with `jax.vmap`: the
walk down the tree (`simulate`) and the value backup up to the root (`backward`) are each a
`lax.while_loop` under `vmap`. A while loop whose condition differs per game is batched into
one loop that runs until every game is done, with a `select` between the new and the old
carry on every iteration, for every game, over the *whole* carry. The backup's carry is the
tree itself (arrays [B, nodes, actions]): each of its iterations copies and selects four
whole tree arrays to change one entry per game. On a 2-core CPU (B = 64, 32 simulations,
160 actions) that backup was a quarter of a self-play scan and the walk, which also computes
both the root rule and the interior rule at every depth (a `lax.cond` on a batched predicate
runs both branches), another quarter; the network was a fifth (experiments/bench/README.md).

Here the same algorithm is written for the batch. The walk takes its first step with the root
rule for every game, then steps with the interior rule only, and records the nodes it passes.
The backup then reads and writes the tree once for the whole path (scatters with
`mode="drop"` for the entries past a game's leaf): only the value recurrence up the path
runs level by level, over [B] vectors. On a 2-core CPU that made a self-play scan 5-18%
faster than the backup that walked up one edge per loop step (experiments/bench/README.md).
No loop inside a simulation has a trip count that depends on the data (issue 38: on an
accelerator each iteration of such a loop waits on the host): the walk runs a number of steps
fixed by the tree's size and `max_depth` (`walk_steps`), masked for the games that have
stopped, and the backup covers every level of the path (tests/search/test_static_search.py checks
the self-play program).
mctx's own pieces are used unchanged wherever they are per node: the `mctx.Tree` layout, the
action-selection rules (`mctx.gumbel_muzero_root_action_selection`,
`mctx.muzero_action_selection`, vmapped over the batch) and the Q transforms. The interior
Gumbel rule, run at every depth of every walk, is restated here with an argmax made of two
plain reductions (`first_argmax`): XLA:CPU runs `jnp.argmax` as scalar code. The random
keys are split exactly as mctx splits them, so for equal inputs the trees, actions and weights
equal mctx's (tests/search/test_mcts.py checks this against `mctx.gumbel_muzero_policy` and
`mctx.muzero_policy`). The draws over the batch go through `sharding.draw_for_games`, which
gives the same values when the search runs under `sharding.map_games`, each device searching
its own games.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import mctx

from mmc_jax.infra import sharding

Tree = mctx.Tree


def get_per_game(x: jax.Array, *index: jax.Array) -> jax.Array:
    """`x[b, index[0][b], index[1][b], ...]` for every game b (indices [B] or [B, k]).

    Written per game (vmapped) rather than with explicit row numbers, so that the gather keeps
    the game axis as a batch dimension: XLA's SPMD partitioner then splits it along a sharded
    game batch instead of all-gathering the tree onto every device.
    """
    return jax.vmap(lambda x, *i: x[i])(x, *index)


def set_per_game(x: jax.Array, *index: jax.Array, value: jax.Array, mode: str | None = None):
    """`x.at[b, index[0][b], ...].set(value[b], mode=mode)` for every game b (see
    `get_per_game`)."""
    return jax.vmap(lambda x, v, *i: x.at[i].set(v, mode=mode))(x, value, *index)


def _select_batched(fn, keys, tree: Tree, node_index, depth) -> jax.Array:
    """An mctx per-node action-selection rule applied to every game of the batch."""
    return jax.vmap(fn)(keys, tree, node_index, depth)


def _split_each(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-game (next key, selection key), as mctx's simulate splits its per-game key."""
    pairs = jax.vmap(jax.random.split)(keys)
    return pairs[:, 0], pairs[:, 1]


def instantiate_tree(root: mctx.RootFnOutput, num_simulations: int, invalid_actions, extra_data):
    """An empty tree of `num_simulations + 1` nodes per game with the root (node 0) filled."""
    batch, num_actions = root.prior_logits.shape
    nodes = num_simulations + 1
    dtype = root.value.dtype
    per_action = (batch, nodes, num_actions)
    tree = Tree(
        node_visits=jnp.zeros((batch, nodes), jnp.int32),
        raw_values=jnp.zeros((batch, nodes), dtype),
        node_values=jnp.zeros((batch, nodes), dtype),
        parents=jnp.full((batch, nodes), Tree.NO_PARENT, jnp.int32),
        action_from_parent=jnp.full((batch, nodes), Tree.NO_PARENT, jnp.int32),
        children_index=jnp.full(per_action, Tree.UNVISITED, jnp.int32),
        children_prior_logits=jnp.zeros(per_action, root.prior_logits.dtype),
        children_values=jnp.zeros(per_action, dtype),
        children_visits=jnp.zeros(per_action, jnp.int32),
        children_rewards=jnp.zeros(per_action, dtype),
        children_discounts=jnp.zeros(per_action, dtype),
        embeddings=jax.tree.map(
            lambda x: jnp.zeros((batch, nodes) + x.shape[1:], x.dtype), root.embedding
        ),
        root_invalid_actions=invalid_actions,
        extra_data=extra_data,
    )
    root_index = jnp.full((batch,), Tree.ROOT_INDEX, jnp.int32)
    return _set_node(tree, root_index, root.prior_logits, root.value, root.embedding)


def _set_node(tree: Tree, node, prior_logits, value, embedding) -> Tree:
    """Write a freshly evaluated node `node` [B] (one visit more if it was written before)."""
    return tree.replace(
        children_prior_logits=set_per_game(tree.children_prior_logits, node, value=prior_logits),
        raw_values=set_per_game(tree.raw_values, node, value=value),
        node_values=set_per_game(tree.node_values, node, value=value),
        node_visits=set_per_game(
            tree.node_visits, node, value=get_per_game(tree.node_visits, node) + 1
        ),
        embeddings=jax.tree.map(
            lambda t, s: set_per_game(t, node, value=s), tree.embeddings, embedding
        ),
    )


WALKS = ("steps", "nodes")


def walk_steps(width: int) -> int:
    """Static bound on the interior steps of a walk whose path has `width` entries.

    A walk takes its first step with the root rule (child depth 1) and then one interior step
    per level; it stops at an unexpanded edge or at `max_depth`. Every node it walks through
    exists, and at simulation s the tree holds s + 1 <= num_simulations nodes, so a child's
    depth is at most min(max_depth, nodes - 1) = width - 1: at most width - 2 interior steps.
    """
    return max(width - 2, 0)


def simulate(
    key,
    tree: Tree,
    root_selection,
    interior_selection,
    max_depth: int,
    node_depth: jax.Array | None = None,
    walk: str | None = None,
):
    """Walk every game's tree from the root to an unexpanded edge (or to `max_depth`).

    Returns (node [B], action [B], path int32 [B, width], depth int32 [B]): the edge to
    expand next, the nodes walked through (`path[:, d]` is the node at depth d for d < depth,
    the root at 0; other entries are `nodes`, out of range) and the depth of the edge's child.
    `width` is one more than the deepest possible child, max(min(max_depth, nodes - 1), 1). The
    first step uses the root rule for all games; later steps the interior rule, only for the
    games still walking.

    The walk always runs `walk_steps(width)` interior steps, a number fixed at trace time; a
    game that has stopped keeps its values (masking). No loop waits for the last game, so on
    an accelerator nothing waits on the host. `walk` says where the interior rule runs:
    "steps" at each step for every game, skipping a step with a `lax.cond` once no game walks
    (free on the CPU, where the early exit of a `while_loop` was the cheap part; on an
    accelerator a `cond` reads its predicate on the host); "nodes" once for every node of the
    tree, before the walk, which then only follows the nodes' choices (no branch at all; wide
    work an accelerator does in a few kernels, but on the CPU 32 nodes cost ~10x the ~3.6
    levels a walk visits). None: "steps" on the CPU, "nodes" elsewhere. "nodes" needs
    `node_depth` [B, nodes], each node's depth, for the rules that read their key or depth
    (each node gets the key and depth the walk would give it at that node).
    """
    batch, nodes = tree.node_values.shape
    keys, selection_keys = _split_each(sharding.draw_for_games(jax.random.split, key, batch))
    node = jnp.full((batch,), Tree.ROOT_INDEX, jnp.int32)
    action = jax.vmap(root_selection)(selection_keys, tree, node)
    next_node = get_per_game(tree.children_index, node, action)
    depth = jnp.ones((batch,), jnp.int32)
    walking = (next_node != Tree.UNVISITED) & (depth < max_depth)
    width = max(min(max_depth, nodes - 1), 1) + 1  # the first step is taken whatever max_depth
    path = jnp.full((batch, width), nodes, jnp.int32).at[:, 0].set(Tree.ROOT_INDEX)
    steps = walk_steps(width)
    carry = (keys, node, action, next_node, depth, path, walking)
    if steps > 0:
        walk_by = {
            "steps": functools.partial(_walk_by_steps, tree, interior_selection, max_depth, steps),
            "nodes": functools.partial(
                _walk_by_nodes, tree, interior_selection, node_depth, max_depth, steps
            ),
        }
        if walk is None:
            carry = jax.lax.platform_dependent(
                carry, cpu=walk_by["steps"], default=walk_by["nodes"]
            )
        elif walk in walk_by:
            carry = walk_by[walk](carry)
        else:
            raise ValueError(f"unknown walk {walk!r}; expected one of {WALKS} or None")
    _, node, action, _, depth, path, _ = carry
    return node, action, path, depth


# The walk's carry, as `simulate` builds it: (keys [B], node [B], action [B], next_node [B],
# depth [B], path [B, width], walking [B]).


def _advance_walk(tree: Tree, max_depth: int, carry, step_action):
    """One level down for the games still walking, `step_action` [B] chosen at next_node."""
    keys, node, action, next_node, depth, path, walking = carry
    width = path.shape[1]
    step_next = get_per_game(tree.children_index, next_node, step_action)
    step_depth = depth + 1
    still = (step_next != Tree.UNVISITED) & (step_depth < max_depth)
    path = set_per_game(path, jnp.where(walking, depth, width), value=next_node, mode="drop")
    return (
        keys,
        jnp.where(walking, next_node, node),
        jnp.where(walking, step_action, action),
        jnp.where(walking, step_next, next_node),
        jnp.where(walking, step_depth, depth),
        path,
        walking & still,
    )


def _walk_by_steps(tree: Tree, interior_selection, max_depth: int, steps: int, carry):
    """The walk's interior steps, the interior rule applied at each step to every game, a
    step skipped (`lax.cond`) once no game walks."""
    depth_dtype = tree.children_prior_logits.dtype

    def step(carry):
        keys, selection_keys = _split_each(carry[0])
        _, _, _, next_node, depth, _, _ = carry
        step_action = _select_batched(
            interior_selection, selection_keys, tree, next_node, depth.astype(depth_dtype)
        )
        return _advance_walk(tree, max_depth, (keys,) + carry[1:], step_action)

    def body(_, carry):
        return jax.lax.cond(jnp.any(carry[-1]), step, lambda carry: carry, carry)

    return jax.lax.fori_loop(0, steps, body, carry)


def _walk_by_nodes(tree: Tree, interior_selection, node_depth, max_depth: int, steps: int, carry):
    """The walk's interior steps, the interior rule applied once to every non-root node (with
    the key and depth the walk would give it there) before a walk that follows the choices."""
    nodes = tree.node_values.shape[1]
    depth_dtype = tree.children_prior_logits.dtype
    # The key of interior step d (depth d) is the d-th of the chain the steps would split.
    # A scan, not a Python loop: an unrolled chain of `steps` splits stacked into one array is
    # a program that grows with the square of the tree (see `backward`).
    keys, by_depth = jax.lax.scan(lambda keys, _: _split_each(keys), carry[0], length=steps)
    by_depth = jnp.swapaxes(by_depth, 0, 1)  # [B, steps]
    others = jnp.arange(1, nodes, dtype=jnp.int32)  # the root takes the root rule
    depths = node_depth[:, 1:]
    node_keys = jnp.take_along_axis(by_depth, jnp.clip(depths - 1, 0, steps - 1), axis=1)

    def choose(keys, tree, depths):
        return jax.vmap(interior_selection, in_axes=(0, None, 0, 0))(
            keys, tree, others, depths.astype(depth_dtype)
        )

    choice = jax.vmap(choose)(node_keys, tree, depths)  # [B, nodes - 1]

    def body(_, carry):
        return _advance_walk(tree, max_depth, carry, get_per_game(choice, carry[3] - 1))

    return jax.lax.fori_loop(0, steps, body, (keys,) + carry[1:])


def expand(params, key, tree: Tree, recurrent_fn, parent, action, node) -> Tree:
    """Evaluate edge (`parent`, `action`) [B] with `recurrent_fn` and store it as `node` [B]."""
    embedding = jax.tree.map(lambda x: get_per_game(x, parent), tree.embeddings)
    step, embedding = recurrent_fn(params, key, action, embedding)
    tree = _set_node(tree, node, step.prior_logits, step.value, embedding)
    return tree.replace(
        children_index=set_per_game(tree.children_index, parent, action, value=node),
        children_rewards=set_per_game(tree.children_rewards, parent, action, value=step.reward),
        children_discounts=set_per_game(
            tree.children_discounts, parent, action, value=step.discount
        ),
        parents=set_per_game(tree.parents, node, value=parent),
        action_from_parent=set_per_game(tree.action_from_parent, node, value=action),
    )


def backward(tree: Tree, path: jax.Array, leaf_depth: jax.Array) -> Tree:
    """Back the value of each game's leaf `path[b, leaf_depth[b]]` up to its root.

    mctx walks up one edge per loop step and writes the tree at every step. Here the path is
    known from the walk, so the tree is read and written once for all of it: only the value
    recurrence `v_d = r_d + discount_d * v_(d+1)` runs level by level, over [B] vectors (the
    same operations in the same order as mctx's, so the same values). It runs over every level
    of the path in a `lax.scan` (a number of levels fixed at trace time: on an accelerator a
    loop bounded by the batch's deepest leaf would wait on the host), and a level below a
    game's leaf leaves its value unchanged. Entries of `path` beyond a leaf are out of range
    and their writes are dropped.

    Not a Python loop (issue 52): the path has up to `max_depth` levels (the number of
    simulations by default), and XLA fuses an unrolled chain of levels stacked into one array
    with each level's whole chain copied in: a program that grows with the square of the
    simulations (at 256, this backup alone compiled for 4 minutes into 300,000 lines of
    optimized HLO and 2 GiB of compiler memory; docs/engine.md has the table).
    """
    nodes = tree.node_values.shape[1]
    edges = path.shape[1] - 1
    index = jnp.arange(edges, dtype=jnp.int32)[None]
    on_path = index < leaf_depth[:, None]  # edge d: path[d] -> path[d + 1]
    parent = jnp.where(on_path, path[:, :-1], Tree.ROOT_INDEX)
    child = jnp.where(on_path, path[:, 1:], Tree.ROOT_INDEX)
    action = jnp.where(on_path, get_per_game(tree.action_from_parent, child), 0)
    reward = get_per_game(tree.children_rewards, parent, action)
    discount = get_per_game(tree.children_discounts, parent, action)
    leaf = jnp.take_along_axis(path, leaf_depth[:, None], axis=1)[:, 0]
    leaf_value = get_per_game(tree.node_values, leaf)

    def up(value, level):  # one level up the path: edge d, from the child's value
        reward_d, discount_d, on_path_d = level
        value = jnp.where(on_path_d, reward_d + discount_d * value, value)
        return value, value

    levels = (reward.T, discount.T, on_path.T)
    _, value_up = jax.lax.scan(up, leaf_value, levels, reverse=True)
    value_up = value_up.T  # [B, edges]: the value backed up through edge d
    count = get_per_game(tree.node_visits, parent)
    parent_value = (get_per_game(tree.node_values, parent) * count + value_up) / (count + 1.0)
    # The child of edge d holds its new value, or the leaf's own value on the last edge.
    child_value = jnp.where(
        index + 1 < leaf_depth[:, None],
        jnp.concatenate([parent_value[:, 1:], parent_value[:, :1]], axis=1),
        leaf_value[:, None],
    )
    target = jnp.where(on_path, parent, nodes)
    return tree.replace(
        node_values=set_per_game(tree.node_values, target, value=parent_value, mode="drop"),
        node_visits=set_per_game(tree.node_visits, target, value=count + 1, mode="drop"),
        children_values=set_per_game(
            tree.children_values, target, action, value=child_value, mode="drop"
        ),
        children_visits=set_per_game(
            tree.children_visits,
            target,
            action,
            value=get_per_game(tree.children_visits, parent, action) + 1,
            mode="drop",
        ),
    )


def search(
    params: Any,
    rng_key: jax.Array,
    *,
    root: mctx.RootFnOutput,
    recurrent_fn,
    root_action_selection_fn,
    interior_action_selection_fn,
    num_simulations: int,
    max_depth: int | None = None,
    invalid_actions: jax.Array | None = None,
    extra_data: Any = None,
    walk: str | None = None,
) -> Tree:
    """`mctx.search` (same arguments but `loop_fn`, same result), batch-first.

    `root_action_selection_fn(key, tree, node)` and `interior_action_selection_fn(key, tree,
    node, depth)` are mctx's per-node rules: they see one game's tree. Every loop inside a
    simulation has a trip count fixed at trace time (see `simulate` for `walk`).
    """
    if max_depth is None:
        max_depth = num_simulations
    if invalid_actions is None:
        invalid_actions = jnp.zeros_like(root.prior_logits)

    def body(sim, carry):
        key, tree, node_depth = carry
        key, simulate_key, expand_key = jax.random.split(key, 3)
        parent, action, path, depth = simulate(
            simulate_key,
            tree,
            root_action_selection_fn,
            interior_action_selection_fn,
            max_depth,
            node_depth,
            walk,
        )
        node = get_per_game(tree.children_index, parent, action)
        node = jnp.where(node == Tree.UNVISITED, sim + 1, node)
        tree = expand(params, expand_key, tree, recurrent_fn, parent, action, node)
        path = set_per_game(path, depth, value=node)
        node_depth = set_per_game(node_depth, node, value=depth)
        return key, backward(tree, path, depth), node_depth

    tree = instantiate_tree(root, num_simulations, invalid_actions, extra_data)
    node_depth = jnp.zeros(tree.node_visits.shape, jnp.int32)
    return jax.lax.fori_loop(0, num_simulations, body, (rng_key, tree, node_depth))[1]


def reroot(
    tree: Tree, new_root: jax.Array, node_depth: jax.Array
) -> tuple[Tree, jax.Array, jax.Array]:
    """The subtree under node `new_root` [B] of each game's tree, as a tree of the same capacity.

    Nodes are created in index order and a child's index is greater than its parent's, so the
    subtree's nodes keep their order: they are renumbered 0, 1, ... (the new root is 0) and every
    per-node array is gathered through that map; `children_index` and `parents` are remapped
    (UNVISITED and NO_PARENT kept), the root's parent and action become NO_PARENT, the depths
    are counted from the new root. The slots past the subtree are empty, as in a new tree, so a
    search goes on by writing its new nodes from index `kept` on. `root_invalid_actions` and
    `extra_data` are the caller's (they belong to the root): they are returned unchanged.

    Membership is found by pointer jumping (each node's 2^k-th ancestor, k = 0, 1, ...: a fixed
    number of whole-array gathers, no loop over the nodes).

    Returns (tree, node_depth [B, nodes], kept int32 [B]: the subtree's nodes).
    """
    nodes = tree.node_visits.shape[1]
    index = jnp.arange(nodes, dtype=jnp.int32)

    def one(tree: Tree, root, depth):
        ancestor = jnp.where(tree.parents >= 0, tree.parents, index)  # a root is its own
        inside = index == root
        for _ in range(max(nodes - 1, 1).bit_length()):  # distances below 2^k covered
            inside = inside | inside[ancestor]
            ancestor = ancestor[ancestor]
        kept = jnp.sum(inside).astype(jnp.int32)
        renumber = jnp.where(inside, jnp.cumsum(inside) - 1, nodes).astype(jnp.int32)
        old = jnp.zeros(nodes, jnp.int32).at[renumber].set(index, mode="drop")
        used = index < kept

        def gather(x, empty):
            taken = x[old]
            mask = used.reshape((nodes,) + (1,) * (x.ndim - 1))
            return jnp.where(mask, taken, jnp.asarray(empty, x.dtype))

        def remap(x, missing):
            return jnp.where(x >= 0, renumber[jnp.maximum(x, 0)], missing)

        children = gather(tree.children_index, Tree.UNVISITED)
        parents = gather(tree.parents, Tree.NO_PARENT)
        action = gather(tree.action_from_parent, Tree.NO_PARENT)
        rebuilt = tree.replace(
            node_visits=gather(tree.node_visits, 0),
            raw_values=gather(tree.raw_values, 0),
            node_values=gather(tree.node_values, 0),
            parents=jnp.where(index == 0, Tree.NO_PARENT, remap(parents, Tree.NO_PARENT)),
            action_from_parent=jnp.where(index == 0, Tree.NO_PARENT, action),
            children_index=remap(children, Tree.UNVISITED),
            children_prior_logits=gather(tree.children_prior_logits, 0),
            children_values=gather(tree.children_values, 0),
            children_visits=gather(tree.children_visits, 0),
            children_rewards=gather(tree.children_rewards, 0),
            children_discounts=gather(tree.children_discounts, 0),
            embeddings=jax.tree.map(lambda x: gather(x, 0), tree.embeddings),
        )
        return rebuilt, gather(depth - depth[root], 0), kept

    per_game = tree.replace(root_invalid_actions=None, extra_data=None)
    rebuilt, depth, kept = jax.vmap(one)(per_game, new_root.astype(jnp.int32), node_depth)
    rebuilt = rebuilt.replace(
        root_invalid_actions=tree.root_invalid_actions, extra_data=tree.extra_data
    )
    return rebuilt, depth, kept


def _mask_invalid(logits: jax.Array, invalid_actions) -> jax.Array:
    """Logits shifted to a maximum of 0, with the dtype's lowest value on invalid actions
    (finite, so a softmax over a row with no valid action stays defined)."""
    if invalid_actions is None:
        return logits
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(invalid_actions, jnp.finfo(logits.dtype).min, logits)


def _argmax_valid(scores: jax.Array, invalid_actions) -> jax.Array:
    if invalid_actions is not None:
        scores = jnp.where(invalid_actions, -jnp.inf, scores)
    return jnp.argmax(scores, axis=-1).astype(jnp.int32)


def first_argmax(scores: jax.Array) -> jax.Array:
    """`jnp.argmax` over the last axis (the first maximum) as two plain reductions: XLA:CPU
    runs argmax's single (value, index) reduction as scalar code, 4-5x slower here."""
    best = jnp.max(scores, axis=-1, keepdims=True)
    index = jnp.arange(scores.shape[-1], dtype=jnp.int32)
    return jnp.min(jnp.where(scores == best, index, scores.shape[-1]), axis=-1)


def gumbel_interior_action_selection(rng_key, tree: Tree, node_index, depth, *, qtransform):
    """`mctx.gumbel_muzero_interior_action_selection` (one game's node) with `first_argmax`:
    the action whose visit share lags most behind softmax(prior logits + completed Q)."""
    del rng_key, depth
    visits = tree.children_visits[node_index]
    improved = jax.nn.softmax(tree.children_prior_logits[node_index] + qtransform(tree, node_index))
    return first_argmax(improved - visits / (1 + jnp.sum(visits, axis=-1, keepdims=True)))


def _log_probs(probs: jax.Array) -> jax.Array:
    return jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))


def gumbel_muzero_policy(
    params: Any,
    rng_key: jax.Array,
    root: mctx.RootFnOutput,
    recurrent_fn,
    num_simulations: int,
    invalid_actions: jax.Array | None = None,
    max_depth: int | None = None,
    *,
    qtransform=mctx.qtransform_completed_by_mix_value,
    max_num_considered_actions: int = 16,
    gumbel_scale: float = 1.0,
    walk: str | None = None,
) -> mctx.PolicyOutput:
    """`mctx.gumbel_muzero_policy` on the batch-first `search`: equal outputs for equal inputs.

    The root samples `max_num_considered_actions` actions by Gumbel top-k and narrows them by
    sequential halving; interior nodes pick deterministically towards softmax(prior + completed
    Q). The action is the considered action with the best Gumbel + logit + completed Q, and the
    weights are softmax(prior + completed Q) over valid actions. `walk`: see `simulate`.
    """
    root = root.replace(prior_logits=_mask_invalid(root.prior_logits, invalid_actions))
    rng_key, gumbel_key = jax.random.split(rng_key)
    logits = root.prior_logits
    gumbel = gumbel_scale * sharding.gumbel(gumbel_key, logits.shape, logits.dtype)
    tree = search(
        params,
        rng_key,
        root=root,
        recurrent_fn=recurrent_fn,
        root_action_selection_fn=functools.partial(
            mctx.gumbel_muzero_root_action_selection,
            num_simulations=num_simulations,
            max_num_considered_actions=max_num_considered_actions,
            qtransform=qtransform,
        ),
        interior_action_selection_fn=functools.partial(
            gumbel_interior_action_selection, qtransform=qtransform
        ),
        num_simulations=num_simulations,
        max_depth=max_depth,
        invalid_actions=invalid_actions,
        extra_data=mctx.GumbelMuZeroExtraData(root_gumbel=gumbel),
        walk=walk,
    )
    visits = tree.summary().visit_counts
    completed_q = jax.vmap(qtransform, in_axes=(0, None))(tree, Tree.ROOT_INDEX)
    # Only the actions visited most (the last ones sequential halving kept) can be chosen.
    most_visited = visits == jnp.max(visits, axis=-1, keepdims=True)
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
    score = jnp.maximum(-1e9, gumbel + shifted + completed_q)
    score = score + jnp.where(most_visited, 0.0, -jnp.inf)
    return mctx.PolicyOutput(
        action=_argmax_valid(score, invalid_actions),
        action_weights=jax.nn.softmax(_mask_invalid(logits + completed_q, invalid_actions)),
        search_tree=tree,
    )


def muzero_policy(
    params: Any,
    rng_key: jax.Array,
    root: mctx.RootFnOutput,
    recurrent_fn,
    num_simulations: int,
    invalid_actions: jax.Array | None = None,
    max_depth: int | None = None,
    *,
    qtransform=mctx.qtransform_by_parent_and_siblings,
    dirichlet_fraction: float = 0.25,
    dirichlet_alpha: float = 0.3,
    pb_c_init: float = 1.25,
    pb_c_base: float = 19652.0,
    temperature: float = 1.0,
    walk: str | None = None,
) -> mctx.PolicyOutput:
    """`mctx.muzero_policy` on the batch-first `search`: equal outputs for equal inputs.

    PUCT selection; the root prior is mixed with Dirichlet noise; the action is sampled from
    the root visit counts raised to 1 / `temperature`. `walk`: see `simulate`.
    """
    rng_key, noise_key, search_key = jax.random.split(rng_key, 3)
    batch, num_actions = root.prior_logits.shape
    alpha = jnp.full((num_actions,), dirichlet_alpha)
    noise = sharding.draw_for_games(
        lambda k, b: jax.random.dirichlet(k, alpha, shape=(b,)), noise_key, batch
    )
    probs = (1 - dirichlet_fraction) * jax.nn.softmax(root.prior_logits)
    probs = probs + dirichlet_fraction * noise
    root = root.replace(prior_logits=_mask_invalid(_log_probs(probs), invalid_actions))
    interior = functools.partial(
        mctx.muzero_action_selection,
        pb_c_init=pb_c_init,
        pb_c_base=pb_c_base,
        qtransform=qtransform,
    )
    tree = search(
        params,
        search_key,
        root=root,
        recurrent_fn=recurrent_fn,
        root_action_selection_fn=functools.partial(interior, depth=0),
        interior_action_selection_fn=interior,
        num_simulations=num_simulations,
        max_depth=max_depth,
        invalid_actions=invalid_actions,
        walk=walk,
    )
    weights = tree.summary().visit_probs
    logits = _log_probs(weights)
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    logits = logits / jnp.maximum(jnp.finfo(logits.dtype).tiny, temperature)
    return mctx.PolicyOutput(
        action=sharding.categorical(rng_key, logits), action_weights=weights, search_tree=tree
    )
