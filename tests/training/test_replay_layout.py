"""The replay ring's packed layout (`learner.PackedBatch`, issue 38): a sample is 949 bytes
instead of 8,830, and it unpacks to the dense `learner.Batch` bit for bit, so the loss is the
same function of the data; rings of checkpoints written in the dense layout are packed when a
run resumes from them (tests/fixtures/legacy); both iterations donate their state.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from runs_support import ALGORITHMS, NAMES, smoke

from mmc_jax import rules as R
from mmc_jax.algorithms import alphazero, meta
from mmc_jax.infra import checkpoint, sharding
from mmc_jax.model import network
from mmc_jax.training import algorithm as algorithm_lib
from mmc_jax.training import games as games_lib
from mmc_jax.training import learner, selfplay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
LEGACY = {"alphazero": "gardner_smoke", "joat": "joat_smoke"}
# Every capture mode, goal, colour rule and fog: the observation's channels all take values.
VARIANTS = ["gardner", "atomic", "dark", "rifle", "extinction", "monochromatic"]


def assert_trees_equal(a, b):
    for (path, x), y in zip(jax.tree.leaves_with_path(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(
            np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path)
        )


@pytest.fixture(scope="module")
def played():
    """Six plies of 12 games over `VARIANTS` with the smoke net (its weights perturbed, so the
    loss has gradients everywhere): the trajectory's `learner.Batch` and the parameters."""
    config = alphazero.prepare_config(smoke("alphazero"))
    net = network.make_network(config.network)
    params = network.init_params(net, jax.random.key(0), R.OBS_SHAPE)
    params = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.key(1), x.shape), params)
    with config.unlocked():
        config.selfplay.num_plies = 6
        config.selfplay.temperature_plies = 6  # sampled moves: varied positions
    rules_b = R.batch(VARIANTS, 12)

    @jax.jit
    def play(params, key):
        _, trajectory = selfplay.selfplay(net, params, rules_b, R.init(rules_b), key, config)
        return selfplay.compute_targets(trajectory)

    return play(params, jax.random.key(2)), params, config


def test_a_replay_sample_is_949_bytes_instead_of_8830():
    assert learner.sample_bytes(learner.example_batch()) == 8830
    assert learner.sample_bytes(games_lib.example_batch()) == 949 <= 2000


def test_packed_observations_and_legal_planes_give_back_the_dense_ones():
    rules_b = R.batch(VARIANTS, 24)

    @jax.jit
    def positions(key):
        def ply(state, key):
            planes = R.legal_planes(rules_b, state)
            obs = R.observe(rules_b, state, planes)
            action = R.random_legal_action(key, R.planes_to_mask(planes))
            return R.step(rules_b, state, action), (obs, planes)

        return jax.lax.scan(ply, R.init(rules_b), jax.random.split(key, 12))[1]

    obs, planes = positions(jax.random.key(3))
    packed = R.pack_observation(obs)
    assert packed.shape == (12, 24, R.OBS_CHANNELS) and packed.dtype == jnp.uint32
    np.testing.assert_array_equal(R.unpack_observation(packed), obs)
    np.testing.assert_array_equal(R.mask_to_planes(R.planes_to_mask(planes)), planes)
    assert float(jnp.max(obs[..., 14])) > 0 and float(jnp.max(obs[..., 12])) == 1.0  # clock, fog


def test_a_packed_self_play_batch_unpacks_to_it_bit_for_bit(played):
    batch, _, _ = played
    packed = jax.jit(learner.pack)(batch)
    assert packed.policy_target.shape == (batch.obs.shape[0], 160)
    assert_trees_equal(jax.jit(learner.unpack)(packed), batch)


def test_the_loss_and_gradients_from_the_packed_layout_equal_the_dense_ones(played):
    batch, params, config = played
    net = network.make_network(config.network)
    grad = jax.jit(
        jax.grad(
            functools.partial(learner.loss_fn, network=net, config=config.learner), has_aux=True
        )
    )
    dense_grads, dense_metrics = grad(params, batch=batch)
    packed_grads, packed_metrics = grad(params, batch=learner.pack(batch))
    assert float(dense_metrics["policy_loss"]) > 0 and float(dense_metrics["value_loss"]) > 0
    assert_trees_equal(packed_metrics, dense_metrics)
    assert_trees_equal(packed_grads, dense_grads)


@pytest.mark.parametrize("name", NAMES)
def test_a_ring_of_the_dense_layout_of_old_checkpoints_is_packed_on_restore(name):
    workdir = FIXTURES / LEGACY[name]
    algorithm, module = ALGORITHMS[name]
    config = algorithm.prepare_config(module.get_config("smoke"))
    mesh = algorithm.make_mesh(config)
    abstract = algorithm.abstract_state(config, mesh).replay
    ckpt = checkpoint.Checkpointer(workdir, max_to_keep=1)
    try:
        assert algorithm_lib.saved_replay_layout(ckpt.metadata(1)) == "dense"
        dense = ckpt.restore_subtree("replay", algorithm_lib.dense_ring_template(abstract), step=1)
    finally:
        ckpt.close()
    packed = algorithm_lib.pack_ring(dense, abstract)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), packed) == jax.tree.map(
        lambda x: (x.shape, x.dtype), abstract
    )
    assert int(np.sum(dense.size)) > 0
    assert_trees_equal(learner.unpack(packed.data), dense.data)
    assert_trees_equal(packed.replace(data=None), dense.replace(data=None))


@pytest.mark.parametrize("name", NAMES)
def test_the_iteration_donates_its_whole_state(name):
    algorithm = ALGORITHMS[name][0]
    config = algorithm.prepare_config(smoke(name))
    mesh = algorithm.make_mesh(config)
    state = algorithm.abstract_state(config, mesh)
    key = sharding.put_key(jax.random.key(0), mesh)
    if name == "alphazero":
        rules_b = jax.eval_shape(lambda: R.batch("gardner", int(config.selfplay.batch_size)))
        lowered = alphazero.make_iteration(config, mesh).lower(state, rules_b, key)
    else:
        table = jax.eval_shape(lambda: meta.rules_table(tuple(config.variants)))
        weights = jax.ShapeDtypeStruct((len(config.variants),), jnp.float32)
        eps = jax.ShapeDtypeStruct((), jnp.float32)
        lowered = meta.make_meta_step(config, mesh).lower(state, table, weights, key, eps)
    text = lowered.as_text()
    main = re.search(r"func\.func public @main\((.*?)\) ->", text, re.S).group(1)
    arguments = re.split(r", %arg", main)
    donated = [a for a in arguments if "tf.aliasing_output" in a or "jax.buffer_donor" in a]
    assert len(donated) == len(jax.tree.leaves(state)), (len(donated), len(arguments))
    # Every donated buffer is reused by an output (aliased, not merely freed).
    assert all("tf.aliasing_output" in a for a in donated)
