"""Openings of matches between two networks (`match.play_match(opening=...)`): sampled from
each side's own search policy, paired across colours, deterministic given the key, and the
share of games they decide reported."""

import jax
import pytest
from network_support import random_params, tiny_network

from mmc_jax.evaluation import match


@pytest.fixture(scope="module")
def players():
    net = tiny_network()
    return net, random_params(net, 0), random_params(net, 1)


def _play(players, key, opening="policy", plies=4, games=8):
    net, model, opponent = players
    records = []
    result = match.play_match(
        net,
        model,
        "gardner",
        "checkpoint",
        games,
        2,
        key,
        opponent_network=net,
        opponent_params=opponent,
        max_plies=24,
        opening_plies=plies,
        opening=opening,
        games_out=records,
    )
    return result, [r["moves"] for r in records]


def test_policy_openings_are_paired_across_colours_and_deterministic(players):
    result, moves = _play(players, jax.random.key(3))
    half = len(moves) // 2
    for i in range(half):
        length = min(4, len(moves[i]), len(moves[i + half]))
        assert moves[i][:length] == moves[i + half][:length]  # one opening, either colour
    assert len({tuple(m[:4]) for m in moves[:half]}) > 1  # sampled, not one line
    assert result["illegal_moves"] == {"model": 0, "opponent": 0}
    assert result["opening"] == "policy" and 0.0 <= result["opening_decided"] <= 1.0
    again, moves_again = _play(players, jax.random.key(3))
    assert moves_again == moves and again["score"] == result["score"]
    _, other = _play(players, jax.random.key(4))
    assert other != moves


def test_opening_decided_counts_games_over_inside_the_opening(players):
    # A 24-ply cap and 24 opening plies: every game ends inside the opening. (Policy openings,
    # as the test above: the arena it compiled; the count does not depend on the opening's kind.)
    result, _ = _play(players, jax.random.key(0), plies=24)
    assert result["opening_decided"] == 1.0
    result, _ = _play(players, jax.random.key(0), plies=2)
    assert result["opening_decided"] == 0.0  # no game of gardner ends in two plies


def test_an_unknown_opening_is_refused(players):
    with pytest.raises(ValueError, match="opening must be one of"):
        _play(players, jax.random.key(0), opening="book")


@pytest.mark.slow
def test_sampled_matches_differ_after_the_opening_and_repeat_with_the_key(players):
    net, model, opponent = players

    def play(key, sampled):
        records = []
        result = match.play_match(
            net, model, "gardner", "checkpoint", 8, 2, key,
            opponent_network=net, opponent_params=opponent, max_plies=24,
            opening_plies=1, opening="policy", games_out=records, sampled=sampled,
        )  # fmt: skip
        return result, [tuple(r["moves"]) for r in records]

    def lines_and_openings(moves):  # the model's White games (the first half)
        first = moves[: len(moves) // 2]
        return len(set(first)), len({m[:1] for m in first})

    plain, plain_moves = play(jax.random.key(3), False)
    result, moves = play(jax.random.key(3), True)
    assert result["sampled"] and not plain["sampled"]
    half = len(moves) // 2
    assert [m[:1] for m in moves[:half]] == [m[:1] for m in moves[half:]]  # paired opening
    # Deterministic play is one line per opening; sampled play is not. (8 games and 2
    # simulations, as `_play`: the deterministic arena is the one the other tests compiled.)
    lines, openings = lines_and_openings(plain_moves)
    assert lines == openings < half
    lines, openings = lines_and_openings(moves)
    assert lines > openings
    assert play(jax.random.key(3), True)[1] == moves  # deterministic given the key
    assert play(jax.random.key(4), True)[1] != moves


def test_sampled_matches_refuse_fog(players):
    net, model, opponent = players
    with pytest.raises(ValueError, match="fog-free"):
        match.play_match(
            net, model, "dark", "checkpoint", 4, 0, jax.random.key(0),
            opponent_network=net, opponent_params=opponent, opening_plies=2, sampled=True,
        )  # fmt: skip
