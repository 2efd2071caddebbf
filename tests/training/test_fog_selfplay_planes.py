"""The fog self-play generates moves as often as it must: its scan carries the legal planes
that each ply's step hands on (as `selfplay.selfplay` does), so a ply's body holds the step's
move generation and the world sampling's consistency check, not a third for the position it
already stepped to; the search's tree holds its own. The games are those of a ply that
generated them again (the previous program's trajectories, reproduced bit for bit)."""

import collections

import jax
import ml_collections
import numpy as np
from jaxpr_support import subjaxprs
from network_support import random_params, tiny_network

from mmc_jax import rules as R
from mmc_jax.training import fog as fog_lib

CONFIG = {
    "num_simulations": 4,
    "num_worlds": 2,
    "num_candidates": 8,
    "gumbel_scale": 1.0,
    "max_num_considered_actions": 4,
}


def _move_generations(jaxpr, loops=()) -> collections.Counter:
    """How many move generations (`analyse` calls) `jaxpr` holds, by the loops they sit in."""
    found = collections.Counter()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("jit", "pjit") and eqn.params.get("name") == "analyse":
            found[loops] += 1
            continue
        inner = loops + ((eqn.primitive.name,) if eqn.primitive.name in ("scan", "while") else ())
        for sub in subjaxprs(eqn, "cpu"):
            found.update(_move_generations(sub, inner))
    return found


def _play(games, key, plies, temperature_plies, rules, params, net):
    config = ml_collections.ConfigDict(
        {"selfplay": {**CONFIG, "num_plies": plies, "temperature_plies": temperature_plies}}
    )
    return fog_lib.fog_selfplay(net, params, rules, games, key, config)


def test_a_fog_ply_generates_moves_once_besides_the_world_check_and_the_tree():
    net = tiny_network()
    params = random_params(net, 0)
    rules = R.batch("dark", 2)
    games = fog_lib.start_games(R.init(rules))
    program = jax.make_jaxpr(lambda g, k: _play(g, k, 3, 1, rules, params, net))
    found = _move_generations(program(games, jax.random.key(0)).jaxpr)
    assert found[()] == 1  # the first position's and the start position's, together
    assert found[("scan",)] == 2  # the ply's step and the sampled worlds' consistency check
    assert found[("scan", "scan")] == 1  # the tree's, in the simulation loop
    assert sum(found.values()) == 4


def test_carried_planes_replay_games_that_end_and_restart():
    """Plies after a game's end start from the start position's carried planes: with many
    random plies some of the four games end and restart, and every recorded move was legal in
    the position its step came from (the mask the carried planes gave)."""
    net = tiny_network()
    params = random_params(net, 0)
    variants = ["dark", "baby,goal=king,fog=on", "capture=atomic,goal=king,fog=on"]
    rules = R.stack([R.get(v) for v in [*variants, "goal=extinction,fog=on"]])
    games = fog_lib.start_games(R.init(rules))
    run = jax.jit(lambda g, k: _play(g, k, 60, 60, rules, params, net))
    games, trajectory = run(games, jax.random.key(3))
    ended = np.asarray(trajectory.terminated)
    assert ended.sum() >= 4  # games ended and restarted within the scan
    t, b = np.nonzero(ended[:-1])
    assert (np.asarray(trajectory.ply)[t + 1, b] == 0).all()  # a restart is a start position
    start_mask = np.asarray(R.legal_action_mask(rules, R.init(rules)))
    np.testing.assert_array_equal(np.asarray(trajectory.legal_action_mask)[t + 1, b], start_mask[b])
    legal = np.asarray(trajectory.legal_action_mask)
    taken = np.take_along_axis(legal, np.asarray(trajectory.action)[..., None], -1)
    assert taken.all()
