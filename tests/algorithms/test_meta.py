"""Tests for mmc_jax.algorithms.meta (JOAT / Reptile), mmc_jax.adapt and configs/joat.py (tiny
configs).

Compile time dominates on a 2-core CPU, so the pure pieces (inner loop, outer update, the k = 1
path) are tested on a tiny net with synthetic task data, each with one small compile; the smoke
meta-training is the run loop's (tests/runs_support.py: its properties, for every algorithm,
are in tests/training/test_runloop.py), and its adaptation to the held-out variant runs in a
child that compiles the adaptation while this process works (`adaptation`, runs_support.py).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from runs_support import HELD_OUT

from configs import joat as joat_config
from mmc_jax import algorithms
from mmc_jax import rules as R
from mmc_jax.algorithms import meta
from mmc_jax.infra import checkpoint, sharding
from mmc_jax.model import network
from mmc_jax.training import learner

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = ROOT / "configs" / "joat.py"


def load_config(preset: str | None = None):
    return joat_config.get_config(preset)


# ---------------------------------------------------------------------------------------------
# Pure pieces on a tiny net with synthetic task data


def tiny_config(inner_steps: int = 3, optimizer: str = "adam", fresh: bool = False):
    """The smoke config on synthetic rings; `fresh`: Reptile's inner procedure (a fresh
    `inner` optimizer per task), else the first JOAT's k steps of the shared state S."""
    config = load_config("smoke")
    config.meta.fresh_inner_state = fresh
    config.inner.steps = inner_steps
    config.inner.batch_size = 4
    config.meta.inner_steps = inner_steps
    config.meta.num_tasks = 3
    config.learner.batch_size = 4
    config.learner.optimizer = optimizer
    if optimizer == "sgd":  # linear in the gradient: no clipping
        config.learner.max_grad_norm = 0.0
        config.learner.learning_rate = 0.1
    return config


def synthetic_rings(num_tasks: int, capacity: int = 16) -> learner.ReplayBuffer:
    """[n] replay rings of random but valid samples, a different distribution per task."""

    def one(key, bias):
        obs_key, policy_key, value_key = jax.random.split(key, 3)
        obs = (jax.random.uniform(obs_key, (capacity, *R.OBS_SHAPE)) < 0.2).astype(jnp.float32)
        legal = jax.random.uniform(policy_key, (capacity, R.NUM_ACTIONS)) < 0.02
        legal = legal.at[:, 0].set(True)
        logits = jax.random.normal(policy_key, (capacity, R.NUM_ACTIONS)) + bias
        policy = jax.nn.softmax(jnp.where(legal, logits, -jnp.inf))
        value = jnp.tanh(jax.random.normal(value_key, (capacity,)) + bias)
        batch = learner.Batch(obs, legal, policy, value, jnp.ones(capacity, bool))
        ring = learner.replay_init(batch, capacity)
        return learner.replay_add(ring, batch)

    keys = jax.random.split(jax.random.key(3), num_tasks)
    return jax.jit(jax.vmap(one))(keys, jnp.linspace(-1.0, 1.0, num_tasks))


@pytest.fixture(scope="module")
def tiny():
    config = tiny_config()
    net = network.make_network(config.network)
    params = jax.jit(lambda key: network.init_params(net, key, R.OBS_SHAPE))(jax.random.key(0))
    opt_state = jax.jit(learner.make_optimizer(config.learner).init)(params)
    rings = synthetic_rings(3)
    keys = jax.random.split(jax.random.key(5), 3)
    return config, params, opt_state, rings, keys


def test_vmapped_inner_loop_equals_a_python_loop(tiny):
    config, params, opt_state, rings, keys = tiny
    vmapped = jax.jit(functools.partial(meta.adapt_tasks, config=config))
    thetas, states, task_metrics = vmapped(params, opt_state, rings, keys)
    single = jax.jit(functools.partial(meta.inner_loop, config=config))
    chex.assert_shape(task_metrics["total"], (3, config.meta.inner_steps))
    for task in range(3):
        ring = jax.tree.map(lambda x, t=task: x[t], rings)
        theta, state, task_metric = single(params, opt_state, ring, keys[task])
        chex.assert_trees_all_close(
            jax.tree.map(lambda x, t=task: x[t], thetas), theta, rtol=1e-5, atol=1e-6
        )
        chex.assert_trees_all_close(
            jax.tree.map(lambda x, t=task: x[t], states), state, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(task_metrics["total"][task], task_metric["total"], rtol=1e-5)
    # The tasks adapted differently (distinct data), and away from phi.
    first = jax.tree.leaves(thetas)[0]
    assert not np.allclose(first[0], first[1])
    assert not np.allclose(first[0], jax.tree.leaves(params)[0])


def test_outer_update_endpoints_are_exact(tiny):
    _, params, _, _, _ = tiny

    rng = np.random.default_rng(0)
    params = jax.device_get(params)
    thetas = jax.tree.map(lambda p: p + rng.normal(size=(4, *p.shape)).astype(p.dtype), params)
    mean = jax.device_get(jax.jit(lambda t: jax.tree.map(lambda x: jnp.mean(x, axis=0), t))(thetas))
    update = jax.jit(meta.outer_update)
    jax.tree.map(np.testing.assert_array_equal, update(params, thetas, 1.0), mean)
    jax.tree.map(np.testing.assert_array_equal, update(params, thetas, 0.0), params)
    half = update(params, thetas, 0.5)
    expected = jax.tree.map(lambda p, m: 0.5 * (np.asarray(p) + m), params, mean)
    chex.assert_trees_all_close(half, expected, rtol=1e-5, atol=1e-6)
    # The optimizer state average keeps integer step counts.
    states = {"count": jnp.full((4,), 7, jnp.int32), "mu": jnp.arange(4.0)}
    averaged = meta.average_opt_states(states)
    assert averaged["count"] == 7 and averaged["mu"] == 1.5


@pytest.mark.slow
def test_k1_is_joint_training_and_equals_averaged_one_step_adaptation(tiny):
    # With SGD (linear in the gradient) the k = 1 joint step equals averaging n one-step
    # adapted parameter sets; both equal one SGD step on the mean of the task losses.
    _, params, _, rings, keys = tiny
    config = tiny_config(inner_steps=1, optimizer="sgd")
    opt_state = learner.make_optimizer(config.learner).init(params)
    joint, _, joint_metrics = jax.jit(functools.partial(meta.meta_update, eps=1.0, config=config))(
        params, opt_state, rings, keys
    )
    thetas, _, _ = jax.jit(functools.partial(meta.adapt_tasks, config=config))(
        params, opt_state, rings, keys
    )
    averaged = meta.outer_update(params, thetas, 1.0)
    chex.assert_trees_all_close(joint, averaged, rtol=1e-4, atol=1e-6)
    chex.assert_shape(joint_metrics["policy_loss"], (3,))
    assert float(joint_metrics["update_norm"]) > 0


def test_sample_tasks_distinct_and_weighted():
    weights = jnp.asarray([1.0, 0.0, 1.0, 1.0])
    tasks = jax.vmap(lambda k: meta.sample_tasks(k, weights, 3))(
        jax.random.split(jax.random.key(0), 50)
    )
    tasks = np.asarray(tasks)
    assert (np.sort(tasks, axis=1) == [0, 2, 3]).all()  # distinct, never the zero weight


def test_outer_lr_schedules():
    config = load_config("smoke")
    config.num_iterations = 10
    config.meta.outer_lr = 1.0
    assert meta.outer_lr(config, 7) == 1.0
    config.meta.outer_lr_schedule = "linear"
    config.meta.outer_lr_end = 0.0
    assert meta.outer_lr(config, 0) == 1.0
    assert meta.outer_lr(config, 5) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------
# Config


def test_config_presets_holdout_and_validation():
    for preset in (None, "full", "cpu", "quick", "smoke"):
        config = meta.prepare_meta_config(load_config(preset))
        assert "monochromatic" not in config.variants
        assert algorithms.name_of(config) == meta.ALGORITHM.name
        # Tasks come from the rule space, never a held-out or evaluation point.
        held_out = set(meta.parse_variants(config.holdout, "holdout"))
        assert len(held_out) == 8 and not held_out & set(config.variants)
        assert config.inner.steps == config.meta.inner_steps == config.adapt.learner.steps
        assert config.adapt.learner.fresh_state and config.replay.iterations == 1
    # Per component by default: the cpu preset's 64 tasks are mostly named starts, not the
    # 63-of-64 shuffled starts of uniform-per-point sampling; a bad sampling is one clear error.
    config = load_config("cpu")
    assert config.task_space.sampling == "component"
    shuffled = sum("shuffle" in v for v in meta.prepare_meta_config(config).variants)
    assert shuffled < 32
    config.task_space.sampling = "point"
    assert sum("shuffle" in v for v in meta.prepare_meta_config(config).variants) > 60
    config.task_space.sampling = "uniform"
    with pytest.raises(ValueError, match="task_space.sampling must be one of"):
        meta.prepare_meta_config(config)
    # The registry distribution of the first JOAT (task_space.size = 0) is still available.
    config = load_config("smoke")
    config.task_space.size = 0
    config.holdout = "dark"
    assert meta.prepare_meta_config(config).variants == (
        "gardner", "baby", "mallet", "rifle", "atomic", "extinction", "bichromatic"
    )  # fmt: skip
    config.holdout = "extinction, dark,atomic"
    prepared = meta.prepare_meta_config(config)
    assert prepared.holdout == "atomic,dark,extinction"
    assert "dark" not in prepared.variants and "atomic" not in prepared.variants
    config.eval.variants = ""
    assert meta.eval_variants(meta.prepare_meta_config(config))[-3:] == (
        "atomic", "dark", "extinction"
    )  # fmt: skip
    config.holdout = "chess960"
    with pytest.raises(ValueError, match="holdout: unknown variant 'chess960'"):
        meta.prepare_meta_config(config)
    config = load_config("smoke")
    config.holdout = "dark;capture=atomic,goal=king,fog=on"  # composed specs, ";"-separated
    assert meta.parse_variants(config.holdout, "holdout") == (
        "dark", "capture=atomic,goal=king,fog=on"
    )  # fmt: skip
    config = load_config("smoke")
    config.meta.num_tasks = 9
    with pytest.raises(ValueError, match="exceeds the 8 training variants"):
        meta.prepare_meta_config(config)
    config = load_config("smoke")
    config.meta.outer_lr_schedule = "cosine"
    with pytest.raises(ValueError, match="outer_lr_schedule"):
        meta.prepare_meta_config(config)
    config = load_config("smoke")
    config.replay.iterations = 2
    with pytest.raises(ValueError, match="replay.iterations=1"):
        meta.prepare_meta_config(config)
    config = load_config("smoke")
    config.meta.task_parallel = 3  # 2 tasks do not split over 3 device groups
    with pytest.raises(ValueError, match="num_tasks=2 does not split over .*task_parallel=3"):
        meta.prepare_meta_config(config)
    with pytest.raises(ValueError, match="task_parallel=2 does not divide the 1 devices"):
        sharding.make_mesh(jax.devices()[:1], task_parallel=2)
    config = load_config("smoke")
    config.task_space.size = 0
    config.task_weights.monochromatic = 1.0
    config.meta.num_tasks = 1
    config.holdout = "gardner,baby,mallet,rifle,atomic,dark,extinction,bichromatic"
    assert meta.prepare_meta_config(config).variants == ("monochromatic",)


def one_draw_rings(num_tasks: int) -> learner.ReplayBuffer:
    """Rings holding exactly one draw each (replay.iterations = 1, as Reptile runs)."""
    return synthetic_rings(num_tasks, capacity=16)


def test_meta_training_and_adapt_run_one_inner_procedure(tiny):
    """Reptile's per-task adaptation in meta-training (`meta.adapt_tasks`) and the learner of
    an adaptation iteration (`learner.inner_procedure`, what `alphazero` runs with
    `learner.fresh_state`) give identical parameters on the same data and key."""
    _, params, opt_state, _, keys = tiny
    config = tiny_config(fresh=True)
    rings = one_draw_rings(3)
    thetas, _, _ = jax.jit(functools.partial(meta.adapt_tasks, config=config))(
        params, opt_state, rings, keys
    )
    procedure = jax.jit(learner.inner_procedure, static_argnums=(3, 4))
    frozen = ml_collections.FrozenConfigDict
    for task in range(3):
        batch, _ = learner.replay_contents(jax.tree.map(lambda x, t=task: x[t], rings))
        theta, metrics = procedure(
            params, batch, keys[task], frozen(config.network), frozen(config.inner)
        )
        chex.assert_shape(metrics["total"], (config.inner.steps,))
        chex.assert_trees_all_equal(jax.tree.map(lambda x, t=task: x[t], thetas), theta)
    first = jax.tree.leaves(thetas)[0]
    assert not np.allclose(first[0], jax.tree.leaves(params)[0])  # adapted away from phi


@pytest.mark.slow
def test_reptile_inner_optimizer_state_is_reset_per_task(tiny):
    """With momentum (b1 = 0.9) a carried state would move the parameters: the thetas do not
    depend on the optimizer state handed in, and the meta-update leaves it untouched."""
    _, params, opt_state, _, keys = tiny
    config = tiny_config(fresh=True)
    config.inner.b1 = 0.9
    rings = one_draw_rings(3)
    adapt = jax.jit(functools.partial(meta.adapt_tasks, config=config))
    # A state with large first moments, as after many steps on another task.
    warm = jax.tree.map(
        lambda x: x + 0.5 if jnp.issubdtype(x.dtype, jnp.floating) else x, opt_state
    )
    cold_thetas, _, _ = adapt(params, opt_state, rings, keys)
    warm_thetas, _, _ = adapt(params, warm, rings, keys)
    chex.assert_trees_all_equal(cold_thetas, warm_thetas)
    # One task alone equals the same task adapted after two others (no carry between tasks).
    last = jax.tree.map(lambda x: x[2:], rings)
    alone, _, _ = adapt(params, opt_state, last, keys[2:])
    chex.assert_trees_all_equal(
        jax.tree.map(lambda x: x[2], cold_thetas), jax.tree.map(lambda x: x[0], alone)
    )
    new_params, new_state, _ = jax.jit(functools.partial(meta.meta_update, eps=1.0, config=config))(
        params, warm, rings, keys
    )
    chex.assert_trees_all_equal(new_state, warm)
    assert not np.allclose(jax.tree.leaves(new_params)[0], jax.tree.leaves(params)[0])


def test_cli_errors_list_the_variants(tmp_path):
    train_cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmc_jax.train",
            f"--config={CONFIG_PATH}:smoke",
            "--config.holdout=chess960",
            f"--workdir={tmp_path / 'w'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    adapt_cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmc_jax.adapt",
            "--variant=chess960",
            f"--init_from={tmp_path}",
            f"--workdir={tmp_path / 'a'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert adapt_cli.returncode != 0
    assert "unknown variant 'chess960'; valid variants: gardner, baby" in adapt_cli.stderr
    _, stderr = train_cli.communicate(timeout=300)
    assert train_cli.returncode != 0
    assert "holdout: unknown variant 'chess960'" in stderr


# ---------------------------------------------------------------------------------------------
# Adaptation of the smoke meta-training


@pytest.mark.slow  # an adapt child process on the smoke meta-training: 3-4 minutes
def test_adapts_to_a_held_out_variant(runs, adaptation):
    results, adapt_workdir = adaptation
    assert results["variant"] == HELD_OUT
    assert [p["iteration"] for p in results["points"]] == [0, 1]
    config = load_config("smoke")
    assert results["points"][1]["frames"] == (
        config.adapt.selfplay.batch_size * config.adapt.selfplay.num_plies
    )
    for point in results["points"]:
        for opponent in ("random", "greedy"):
            match = point["matches"][opponent]
            assert match["num_games"] == 4 and 0.0 <= match["score"] <= 1.0
            assert match["score_ci95"][0] <= match["score"] <= match["score_ci95"][1]
    table = (adapt_workdir / "adaptation.md").read_text()
    assert "| 1 | 16 |" in table and "vs greedy" in table
    assert (adapt_workdir / "plots" / "adaptation.png").stat().st_size > 0
    saved = checkpoint.load_metadata(adapt_workdir)["config"]
    assert saved["variant"] == HELD_OUT and saved["network"]["rule_planes"] == "none"

    from mmc_jax import adapt

    # Another variant in the same workdir, and missing checkpoints, are refused clearly.
    with pytest.raises(ValueError, match="another variant 'dark'"):
        adapt.run_adaptation(
            "atomic", str(runs["joat"].workdir / "checkpoints" / "2"), adapt_workdir, stream=None
        )
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        adapt.run_adaptation("atomic", str(adapt_workdir / "nothing"), adapt_workdir, stream=None)
    misspelt = r"unknown variant 'darkish' \(did you mean 'dark'\?\); valid variants"
    with pytest.raises(ValueError, match=misspelt):
        adapt.run_adaptation("darkish", "scratch", adapt_workdir, stream=None)


def test_scratch_initialisation_seed_is_separate_from_the_adaptation_seed(monkeypatch, tmp_path):
    """`init_seed` varies a scratch start (the study's pretraining seeds) while `seed` keeps the
    adaptation's self-play and evaluation keys (paired across starts)."""
    from mmc_jax import adapt

    config = load_config("smoke")
    first = adapt.load_start("scratch", config, 0)[1]
    second = adapt.load_start("scratch", config, 1)[1]
    assert not all(jax.tree.leaves(jax.tree.map(np.array_equal, first, second)))
    seen = []

    def fake_start(init_from, config, seed):
        seen.append(seed)
        raise RuntimeError("stop here")

    monkeypatch.setattr(adapt, "load_start", fake_start)
    for kwargs in ({"seed": 3}, {"seed": 3, "init_seed": 5}):
        with pytest.raises(RuntimeError, match="stop here"):
            adapt.run_adaptation(
                "atomic", "scratch", tmp_path, config=config, stream=None, **kwargs
            )
    assert seen == [3, 5]


def test_the_start_up_description_is_short_lines_whatever_the_task_list():
    """The README's job meta-trains on 64 variants with 8 held out: its start-up lines stay
    under 200 characters (a task list once made one of 535) and still say where the list is."""
    import types

    config = meta.ALGORITHM.prepare_config(joat_config.get_config("quick"))
    assert len(config.variants) > 10 and config.holdout
    params = network.init_params(
        network.make_network(config.network), jax.random.key(0), R.OBS_SHAPE
    )
    mesh = meta.ALGORITHM.make_mesh(config)
    text = meta.ALGORITHM.describe(config, mesh, types.SimpleNamespace(params=params))
    lines = text.splitlines()
    assert all(len(line) < 200 for line in lines), [len(line) for line in lines]
    assert f"meta-training on {len(config.variants)} variants" in lines[0]
    assert "<workdir>/tasks.txt" in lines[0] and lines[1].startswith("held out: ")
