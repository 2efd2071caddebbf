"""Matches of sensing variants (`mmc_jax.evaluation.sensing_match`): the colour-balanced
schedule, whose results are scored, and the one learned model a batch of the recon arena holds.
(The games themselves: tests/commands/test_evaluate.py plays them through the command.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mmc_jax.evaluation import players, sensing_match

RECON = players.Context(variant="recon")


def test_a_colour_balanced_schedule_gives_the_first_player_white_in_the_first_half():
    white, black = sensing_match.colour_balanced("a", "b", 4)
    assert white == ["a", "a", "b", "b"] and black == ["b", "b", "a", "a"]
    rewards = np.array([[1, -1], [0, 0], [1, -1], [-1, 1]], np.float32)  # White's, Black's
    np.testing.assert_array_equal(sensing_match.first_rewards(rewards), [1, 0, -1, 1])
    with pytest.raises(ValueError, match="games must be a positive even number, got 3"):
        sensing_match.colour_balanced("a", "b", 3)


def test_the_learned_agents_of_two_models_are_refused_in_one_line():
    learned = players.ReconAgent("learned", *players.recon_kinds("learned"), model="m1")
    one = dataclasses.replace(learned, params={"w": 1}, search="search")
    other = dataclasses.replace(one, model="m2")
    random = players.build("random", RECON)
    assert sensing_match.learned_model([random, random]) == (None, None)
    assert sensing_match.learned_model([one, random, one]) == ({"w": 1}, "search")
    with pytest.raises(ValueError, match="the learned agents of two models") as error:
        sensing_match.learned_model([one, other])
    assert "\n" not in str(error.value) and "m1, m2" in str(error.value)
    with pytest.raises(ValueError, match="the learned agent needs its model"):
        sensing_match.learned_model([learned])


def test_a_schedule_is_refused_outside_sensing_variants():
    random = players.build("random", RECON)
    with pytest.raises(ValueError, match="gardner is not a sensing variant"):
        sensing_match.play_schedule("gardner", [random], [random], None)
