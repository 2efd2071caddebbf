"""`match.play_match(mixed_opponents=True)`: one compiled arena plays a model against the
built-in players and against a network (adapt's evaluation at every point), and its games are
the ones the two separate arenas play."""

import jax
import ml_collections
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.evaluation import match
from mmc_jax.model import network

TINY = dict(
    num_blocks=1, channels=8, policy_channels=4, value_channels=2, value_hidden=8,
    policy_head="conv", layer_norm=False, dtype="float32", rule_planes="none",
)  # fmt: skip


def _random_params(net, seed):
    # Random values of the right shapes: `init_params` would compile for seconds.
    shapes = jax.eval_shape(lambda k: network.init_params(net, k, R.OBS_SHAPE), jax.random.key(0))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: 0.3 * rng.standard_normal(s.shape).astype(s.dtype), shapes)


@pytest.fixture(scope="module")
def sides():
    net = network.make_network(ml_collections.ConfigDict(TINY))
    return net, _random_params(net, 0), _random_params(net, 1)


def _play(sides, opponent, mixed, key=3):
    # 8 games, 2 simulations, 24 plies and 4 policy-opening plies: the plain network match is
    # the arena test_match_openings compiles.
    net, model, other = sides
    records = []
    result = match.play_match(
        net, model, "gardner", opponent, 8, 2, jax.random.key(key),
        opponent_network=net if mixed or opponent == "checkpoint" else None,
        opponent_params=other if mixed or opponent == "checkpoint" else None,
        max_plies=24, opening_plies=4, opening="policy", games_out=records,
        mixed_opponents=mixed,
    )  # fmt: skip
    return result, [r["moves"] for r in records]


def test_one_arena_plays_the_builtin_players_and_the_network_as_the_two_arenas_do(sides):
    compiled = match._arena._cache_size()
    mixed = {o: _play(sides, o, True) for o in ("random", "greedy", "checkpoint")}
    assert match._arena._cache_size() == compiled + 1  # one program for the three matches
    for opponent, (result, moves) in mixed.items():
        plain, plain_moves = _play(sides, opponent, False)
        assert moves == plain_moves, opponent
        assert result == plain, opponent
    assert mixed["random"][0]["opponent_simulations"] is None
    assert mixed["checkpoint"][0]["opponent_simulations"] == 2


def test_mixed_opponents_need_the_network_and_a_named_opponent(sides):
    net, model, _ = sides
    with pytest.raises(ValueError, match="mixed_opponents needs a network and its params"):
        match.play_match(
            net, model, "gardner", "random", 4, 2, jax.random.key(0), mixed_opponents=True
        )
    with pytest.raises(ValueError, match="mixed_opponents needs a built-in opponent"):
        match.play_match(
            net, model, "gardner", lambda key, rules, state: state.ply, 4, 2, jax.random.key(0),
            opponent_network=net, opponent_params=model, mixed_opponents=True,
        )  # fmt: skip
