"""`match.play_match(mixed_opponents=True)`: one compiled arena plays a model against the
built-in players and against a network (adapt's evaluation at every point), and its games are
the ones the two separate arenas play."""

import jax
import pytest
from network_support import random_params, tiny_network

from mmc_jax.evaluation import match


@pytest.fixture(scope="module")
def sides():
    net = tiny_network()
    return net, random_params(net, 0), random_params(net, 1)


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
