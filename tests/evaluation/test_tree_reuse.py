"""Tree reuse in the model engine (issue 72 item 4): the grown search's tree is kept, and the
subtree under the moves played since is re-rooted and searched on.

The engine is the shipped 2x32 `gardner-cpu` model (as tests/commands/test_uci_serve.py's) with a
small tree (64 nodes), its programs and the re-root compiled once for the module. That a new
tree's search (reuse off, or the first search) is today's, bit for bit, was also checked against
the code before tree reuse on 40 searches (5 positions x 4 budgets, whole and in chunks).
"""

from __future__ import annotations

import importlib.util
import io
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import engine as engine_cli
from mmc_jax.evaluation import model_engine
from mmc_jax.search import mcts

CAPACITY = 64
NODES = 40


@pytest.fixture(scope="module")
def engine():
    model = model_engine.load_engine("gardner-cpu", capacity=CAPACITY)
    model.precompile_reuse("gardner")  # searches reuse from the second one on, reproducibly
    return model


def fresh_engine(engine, reuse_tree=False):
    """Another engine of the same model and capacity (the same compiled programs)."""
    return model_engine.ModelEngine(
        engine.network, engine.params, capacity=CAPACITY, reuse_tree=reuse_tree
    )


def two_plies(engine, first):
    """The position after the first search's move and the reply its search expects most."""
    after = engine.position("gardner", moves=[first.move])
    reply = first.pv[1] if len(first.pv) > 1 else next(iter(after.legal))
    return engine.position("gardner", moves=[first.move, reply])


def same_result(a, b):
    return (a.move, a.policy, a.value, a.pv, a.nodes) == (b.move, b.policy, b.value, b.pv, b.nodes)


def test_the_rerooted_tree_keeps_the_subtree_statistics_node_by_node(engine):
    engine.forget()
    first = engine.search(engine.position("gardner"), NODES)
    later = two_plies(engine, first)
    old = engine._kept.grown
    old_host = jax.device_get(old)
    actions = np.full(model_engine.REUSE_MAX_PLIES, -1, np.int32)
    actions[:2] = later.actions
    copy = jax.tree.map(jnp.copy, old)  # `_reroot` consumes its tree
    reused = model_engine._reroot(copy, jnp.asarray(actions), later.ply.state, jax.random.key(0))
    new = jax.device_get(reused.grown)
    assert bool(reused.found)

    # The new root found independently: the child whose position is the one reached.
    tree, states = old_host.tree, old_host.tree.embeddings[0]
    target = jax.device_get(jax.tree.map(lambda x: x[0], later.ply.state))
    after_first = jax.device_get(
        jax.tree.map(lambda x: x[0], engine.position("gardner", moves=later.moves[:1]).ply.state)
    )

    def child_with(node, state):
        for child in tree.children_index[0, node]:
            if child >= 0 and all(
                np.array_equal(np.asarray(a)[0, child], b)
                for a, b in zip(jax.tree.leaves(states), jax.tree.leaves(state), strict=True)
            ):
                return int(child)
        raise AssertionError("the position is not in the tree")

    root = child_with(child_with(0, after_first), target)
    inside, stack = [], [root]  # the subtree, in old index order
    while stack:
        node = stack.pop()
        inside.append(node)
        stack += [int(c) for c in tree.children_index[0, node] if c >= 0]
    inside.sort()
    renumber = {old_index: new_index for new_index, old_index in enumerate(inside)}
    assert int(reused.kept_nodes) == len(inside) > 1

    got = new.tree
    per_node = ("node_visits", "raw_values", "node_values", "children_values", "children_visits")
    per_node += ("children_rewards", "children_discounts")
    for old_index, n in renumber.items():
        for field in per_node:
            np.testing.assert_array_equal(
                getattr(got, field)[0, n], getattr(tree, field)[0, old_index], err_msg=field
            )
        for a, b in zip(
            jax.tree.leaves(got.embeddings), jax.tree.leaves(tree.embeddings), strict=True
        ):
            np.testing.assert_array_equal(a[0, n], b[0, old_index])
        children = tree.children_index[0, old_index]
        expected = [renumber[int(c)] if c >= 0 else mcts.Tree.UNVISITED for c in children]
        np.testing.assert_array_equal(got.children_index[0, n], expected)
        if n:
            assert got.parents[0, n] == renumber[int(tree.parents[0, old_index])]
            assert got.action_from_parent[0, n] == tree.action_from_parent[0, old_index]
            np.testing.assert_array_equal(
                got.children_prior_logits[0, n], tree.children_prior_logits[0, old_index]
            )
        assert new.node_depth[0, n] == old_host.node_depth[0, old_index] - 2
    # The root: no parent, the mask and masked priors of a new root, its visits as the base.
    assert got.parents[0, 0] == mcts.Tree.NO_PARENT
    invalid = np.asarray(model_engine._root_invalid(later.ply.planes))
    np.testing.assert_array_equal(got.root_invalid_actions, invalid)
    prior = np.asarray(
        model_engine._mask_invalid(tree.children_prior_logits[:, root], jnp.asarray(invalid))
    )
    np.testing.assert_array_equal(got.children_prior_logits[:, 0], prior)
    np.testing.assert_array_equal(got.extra_data.base_visits, tree.children_visits[:, root])
    assert int(reused.kept_visits) == int(tree.children_visits[0, root].sum())
    # Past the subtree the tree is empty, as a new one.
    rest = slice(len(inside), None)
    assert not got.node_visits[0, rest].any() and (got.parents[0, rest] == -1).all()
    assert (got.children_index[0, rest] == mcts.Tree.UNVISITED).all()


def test_a_second_search_at_equal_nodes_searches_on_from_the_kept_visits(engine):
    engine.forget()
    first = engine.search(engine.position("gardner"), NODES)
    later = two_plies(engine, first)
    reused = engine.search(later, NODES)
    root_visits = int(engine._kept.grown.tree.node_visits[0, 0])
    assert reused.kept_visits > 0 and reused.nodes == NODES
    assert root_visits == 1 + NODES + reused.kept_visits > 1 + NODES  # a new tree's: 1 + NODES
    assert reused.move in later.legal and abs(sum(reused.policy.values()) - 1) < 1e-5

    # Reuse off: the second search is a new tree's, bit for bit (as the first search of an
    # engine that never searched, and as this engine's after `forget`).
    off = fresh_engine(engine)
    off.search(off.position("gardner"), NODES)
    second = off.search(off.position("gardner", moves=later.moves), NODES)
    new = fresh_engine(engine, reuse_tree=True)
    alone = new.search(new.position("gardner", moves=later.moves), NODES)
    engine.forget()
    forgotten = engine.search(later, NODES)
    assert second.kept_visits == alone.kept_visits == forgotten.kept_visits == 0
    assert same_result(second, alone) and same_result(second, forgotten)


def test_a_position_that_does_not_extend_the_last_starts_anew(engine):
    engine.forget()
    start = engine.position("gardner")
    first = engine.search(start, 16)
    assert engine.search(two_plies(engine, first), 16).kept_visits > 0  # the control
    other = next(m for m in start.legal if m != first.move)
    assert engine.search(engine.position("gardner", moves=[other]), 16).kept_visits == 0
    again = engine.position("gardner", moves=[other])
    assert engine.search(again, 16).kept_visits == 0  # the same position: no move since
    engine.forget()  # ucinewgame
    line = engine.position("gardner", moves=[other, next(iter(again.legal))])
    assert engine.search(line, 16).kept_visits == 0
    baby = engine.position("baby", moves=[next(iter(engine.position("baby").legal))])
    assert engine.search(baby, 16).kept_visits == 0  # another variant
    engine.search(start, 16)
    params = engine.params
    engine.params = jax.tree.map(jnp.copy, params)  # another model
    try:
        assert engine.search(two_plies(engine, first), 16).kept_visits == 0
    finally:
        engine.params = params


def test_a_budget_over_the_capacity_with_a_kept_tree_falls_back_to_a_new_tree(engine):
    engine.forget()
    first = engine.search(engine.position("gardner"), CAPACITY)
    later = two_plies(engine, first)
    full = engine.search(later, CAPACITY)  # kept nodes + CAPACITY > CAPACITY + 1
    off = fresh_engine(engine)
    assert full.kept_visits == 0 and same_result(full, off.search(later, CAPACITY))
    # A timed search grows into the room the kept nodes leave.
    engine.forget()
    engine.search(engine.position("gardner"), CAPACITY)
    *_, timed = engine.grow_timed(later, CAPACITY, None)
    assert timed.kept_visits > 0 and timed.nodes + timed.kept_visits <= CAPACITY


def test_the_reuse_tree_uci_option_is_listed_and_accepted(engine):
    out = io.StringIO()
    model = fresh_engine(engine, reuse_tree=True)
    server = engine_cli.UciServer(model, out, warm_up=False)
    server.handle("uci")
    server.handle("setoption name ReuseTree value false")
    server.handle("setoption name ReuseTree value sometimes")
    server.handle("position startpos")
    server.handle("go nodes 8")
    deadline = time.monotonic() + 120
    while "bestmove" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    server.run(io.StringIO("quit\n"))
    lines = out.getvalue().splitlines()
    assert "option name ReuseTree type check default true" in lines
    assert server.options.reuse_tree is False and model.reuse_tree is False
    assert any("ReuseTree must be true or false" in line for line in lines)
    assert any(line.startswith("bestmove ") for line in lines)
    assert "ReuseTree" in engine_cli._parser().format_help()


def test_the_ab_harness_plays_colour_balanced_pairs_and_resumes(tmp_path, capsys):
    """experiments/strength/reuse.py at a toy size: two games (one opening, each engine White
    once), a summary; a rerun with more games plays only the new ones; other settings on the
    same files are refused."""
    path = Path(__file__).resolve().parents[2] / "experiments" / "strength" / "reuse.py"
    spec = importlib.util.spec_from_file_location("strength_reuse", path)
    reuse = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reuse)
    common = ["--model", "gardner-cpu", "--capacity", str(CAPACITY), "--max-plies", "10"]
    common += ["--out", str(tmp_path)]
    assert reuse.main(["nodes", "--games", "2", "--nodes", "32", *common]) == 0
    games = [json.loads(line) for line in (tmp_path / "nodes32.games.jsonl").open()]
    assert [(g["game"], g["opening"], g["reuse_white"]) for g in games] == [
        (0, 0, True),
        (1, 0, False),
    ]
    assert games[0]["moves"][:4] == games[1]["moves"][:4]  # the same random opening
    assert reuse.main(["nodes", "--games", "4", "--nodes", "32", *common]) == 0
    summary = json.loads((tmp_path / "nodes32.json").read_text())
    assert summary["games"] == 4 == summary["wins"] + summary["draws"] + summary["losses"]
    low, high = summary["score_ci95_wilson"]
    assert low <= summary["score"] <= high and summary["reuse_kept_visits_per_move"] > 0
    assert "nodes32: 2 of 4 games played; 2 to go" in capsys.readouterr().err
    (tmp_path / "nodes32.games.jsonl").rename(tmp_path / "nodes33.games.jsonl")
    with pytest.raises(SystemExit, match="other settings"):
        reuse.main(["nodes", "--games", "2", "--nodes", "33", *common])


def test_the_background_reroot_compile_is_joined_at_exit_not_abandoned(engine):
    """The re-root program compiles in a thread after the first search. A daemon thread still
    inside XLA's compile when the process ended aborted it ("FATAL: exception not rethrown",
    exit 134, or -11: 3 of 4 runs of `python -m mmc_jax.bench.compile engine-search` with XLA's
    default flags, a race too rare under the tests' flags to reproduce here), so the thread is
    one Python joins before it finalises."""
    fresh = fresh_engine(engine, reuse_tree=True)
    fresh.search(fresh.position("gardner"), NODES)
    thread = fresh._reroot_compile
    assert thread is not None and not thread.daemon
    thread.join()
