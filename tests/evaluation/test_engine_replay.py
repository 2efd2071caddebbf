"""The engine's replay of a game generates moves once per ply: a game's first position gets its
legal planes once (`_legal`), each move's `_advance` steps with the planes it is given and
returns the next position's, and the search starts from the position's planes
(`_grow_start` generates none)."""

import collections
import functools

import jax
import jax.numpy as jnp
from network_support import tiny_network

from mmc_jax import rules as R
from mmc_jax.evaluation import model_engine
from mmc_jax.model import network as network_lib


class _Counting:
    """The board contract with its move-generating calls counted."""

    def __init__(self, board):
        self.board, self.calls = board, collections.Counter()

    def __getattr__(self, name):
        method = getattr(self.board, name)
        if name not in ("legal_planes", "step_with_planes"):
            return method

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


def _fresh(fn):
    """A new function object around `fn`, which no trace cache has seen."""
    return lambda *args: fn(*args)


def test_a_replayed_move_and_a_search_start_generate_moves_once_at_most(monkeypatch):
    board = _Counting(model_engine.BOARD)
    monkeypatch.setattr(model_engine, "BOARD", board)
    rules = R.stack([R.get("gardner")])
    state = jax.tree.map(lambda x: jnp.asarray(x)[None], R.from_fen(R.start_fen("gardner")))
    planes = jax.ShapeDtypeStruct((1, 49), jnp.uint32)

    # Traced from the undecorated functions, each in a new closure: jax caches a trace per
    # function object, so an earlier test's `_legal` of the same shapes would hide the calls.
    jax.eval_shape(_fresh(model_engine._legal.__wrapped__), rules, state)
    assert board.calls == {"legal_planes": 1}
    board.calls.clear()
    advance = functools.partial(model_engine._advance.__wrapped__, fog=False)
    move = jnp.zeros(1, jnp.int32)
    jax.eval_shape(_fresh(advance), rules, state, None, jnp.zeros(1), move, planes)
    assert board.calls == {"step_with_planes": 1}  # the planes it stepped from were given
    board.calls.clear()
    net = tiny_network()
    params = jax.eval_shape(
        lambda k: network_lib.init_params(net, k, R.OBS_SHAPE), jax.random.key(0)
    )
    start = functools.partial(model_engine._grow_start.__wrapped__, network=net, capacity=8)
    jax.eval_shape(_fresh(start), params, rules, state, planes, jax.random.key(0))
    assert not board.calls  # the search's root planes come with the position
