"""`mmc_jax.faces.pettingzoo_env`: every variant as a PettingZoo AEC environment. PettingZoo's
own `api_test` on a board variant, a fog variant and a sensing variant; random games to their
end with zero-sum rewards; the waiting agent's mask is empty and its view is its own;
sensing's two steps by one agent; an illegal action and a misspelt spec refused in one line."""

import numpy as np
import pytest

pettingzoo_test = pytest.importorskip("pettingzoo.test")

from mmc_jax.faces import pettingzoo_env as aec  # noqa: E402  (after the skip: an optional extra)


@pytest.mark.parametrize("spec", ["gardner", "dark", "goal=king,fog=sense:3"])
# (Its two warnings are about dict observations with an action mask, as its own chess has.)
@pytest.mark.filterwarnings("ignore:Observation:UserWarning")
def test_pettingzoo_api_test_passes(spec):
    pettingzoo_test.api_test(aec.env(spec), num_cycles=60)


def _play(env, seed: int, plies: int = 400):
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    steps = []
    env.final = {}
    for agent in env.agent_iter(max_iter=plies):
        observation, reward, termination, truncation, _ = env.last()
        other = next(a for a in env.possible_agents if a != agent)
        if termination or truncation:
            env.final[agent] = reward
            env.step(None)
            continue
        assert not env.observe(other)["action_mask"].any()  # only the mover has actions
        legal = np.flatnonzero(observation["action_mask"])
        steps.append((agent, env.sense_phase))
        env.step(int(rng.choice(legal)))
    return steps


def test_random_games_end_with_zero_sum_rewards():
    env = aec.env("goal=king")
    decisive = 0
    for seed in range(6):
        _play(env, seed)
        assert not env.agents  # every agent was stepped out after the end
        totals = env.final  # what each agent was told at its end
        assert set(totals) == set(env.possible_agents) and sum(totals.values()) == 0.0
        decisive += any(totals.values())
    assert decisive >= 2, "too few decisive games: the check would be empty"


def test_a_sensing_turn_is_two_steps_by_the_same_agent():
    env = aec.env("goal=king,fog=sense:3")
    steps = _play(env, 0, plies=40)
    for (agent, sensing), (following, _) in zip(steps, steps[1:], strict=False):
        assert (following == agent) == sensing  # a sense is followed by the same agent


def test_the_waiting_agents_view_is_its_own():
    """What the waiting agent observes is the contract's `observe_waiting`, not the mover's."""
    env = aec.env("dark")
    env.reset()
    env.step(int(np.flatnonzero(env.observe("player_0")["action_mask"])[0]))
    white, black = env.observe("player_0"), env.observe("player_1")
    assert not np.array_equal(white["observation"], black["observation"])
    waiting = env.game.observe_waiting(env._rules, env._state)[0]
    np.testing.assert_array_equal(white["observation"], np.asarray(waiting))


def test_bad_input_is_refused_in_one_line():
    env = aec.env("gardner")
    env.reset()
    illegal = int(np.flatnonzero(env.observe("player_0")["action_mask"] == 0)[0])
    with pytest.raises(ValueError, match="is not legal for player_0") as error:
        env.step(illegal)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="did you mean"):
        aec.env("gardnr")
    with pytest.raises(ValueError, match="no legal move in its start position"):
        aec.env("monochromatic")
