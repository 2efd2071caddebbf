"""The compacting arena (`play_match(compact=N)`): once the opening is over and few games of
each half are still running, they go on in a buffer a quarter the size, so a ply costs what
the games still running cost. Deterministic players play exactly the full arena's games (the
shrinking changes no game, only where it is computed); a sampled match is a valid match of
the same players; bad settings are refused in one line."""

import jax
import pytest
from network_support import random_params, tiny_network

from mmc_jax.evaluation import match


def _match(net, params, opponent_params, compact, **settings):
    games = []
    result = match.play_match(
        net,
        params,
        "atomic",
        "checkpoint",
        32,
        2,
        jax.random.key(1),
        opponent_network=net,
        opponent_params=opponent_params,
        opening_plies=2,
        max_plies=60,
        games_out=games,
        compact=compact,
        **settings,
    )
    return result, games


def test_deterministic_players_play_the_full_arenas_games_in_shrinking_buffers():
    net = tiny_network()
    params, other = random_params(net, 0), random_params(net, 1)
    full, full_games = _match(net, params, other, 0)
    stages = match._arena_stage._cache_size()
    shrunk, shrunk_games = _match(net, params, other, 4)
    assert match._arena_stage._cache_size() == stages + 2  # 32 games, then a buffer of 8
    plies = sorted(len(g["moves"]) for g in full_games)
    assert plies[len(plies) // 2] < plies[-1]  # games of different lengths: the batch shrank
    assert shrunk_games == full_games
    for field in ("wins", "draws", "losses", "score", "mean_plies", "illegal_moves"):
        assert shrunk[field] == full[field]


def test_a_sampled_compacting_match_is_a_whole_match_of_legal_games():
    net = tiny_network()
    params, other = random_params(net, 0), random_params(net, 1)
    result, games = _match(net, params, other, 4, opening="policy", sampled=True)
    assert result["num_games"] == len(games) == 32
    assert result["wins"] + result["draws"] + result["losses"] == 32
    assert result["illegal_moves"] == {"model": 0, "opponent": 0}
    assert all(g["result"] in ("1-0", "0-1", "1/2-1/2") for g in games)
    assert all(len(g["moves"]) <= 60 for g in games)


@pytest.mark.parametrize(
    "variant, compact, message",
    [
        ("atomic", -1, "compact must be a non-negative number of games"),
        ("atomic", True, "compact must be a non-negative number of games"),
        ("dark", 8, "the fair fog arena does not shrink its batch"),
    ],
)
def test_a_bad_compact_setting_is_refused_in_one_line(variant, compact, message):
    net = tiny_network()
    with pytest.raises(ValueError, match=message) as error:
        match.play_match(net, random_params(net, 0), variant, "random", 8, 0,
                         jax.random.key(0), compact=compact)  # fmt: skip
    assert "\n" not in str(error.value)
