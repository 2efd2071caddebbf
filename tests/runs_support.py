"""Smoke runs of every algorithm, shared by the tests of the run loop, of several devices and
processes, of self-play and of meta-training (a pytest plugin, loaded by tests/conftest.py).

Compile time dominates on 2 CPU cores, so each algorithm's smoke iteration compiles once in the
pytest process (`smoke`: configs/gardner.py:smoke with back-filled outcomes, as the `cpu`
preset trains, and configs/joat.py:smoke) and every run of it reuses that program: `runs` trains
each algorithm for two iterations, `first_iterations` for one, and a test that changes a run's
workdir (resumes it, damages it) works on a copy (`copy_run`).

The same iteration on 4 fake CPU devices compiles in a child (`four_devices`, the script
`FOUR_DEVICES_SCRIPT`), started as soon as the tests are collected when a selected test needs
it, so that its compile overlaps this process's work.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
import pytest

from configs import gardner, joat
from mmc_jax.algorithms import alphazero, meta
from mmc_jax.training import runloop

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = {"alphazero": (alphazero.ALGORITHM, gardner), "joat": (meta.ALGORITHM, joat)}
NAMES = list(ALGORITHMS)


def smoke(name: str, iterations: int = 2, task_parallel: int = 1) -> ml_collections.ConfigDict:
    """The tests' smoke config of algorithm `name` for `iterations` iterations."""
    config = ALGORITHMS[name][1].get_config("smoke")
    config.num_iterations = iterations
    if name == "alphazero":
        # Games cut off by a scan get their result later, as in the `cpu` and `full` presets
        # (off in `smoke` itself, for the workdirs of tests/fixtures written before it).
        config.replay.backfill_outcomes = True
    else:
        config.meta.task_parallel = task_parallel
    return config


@contextlib.contextmanager
def traced_functions():
    """The names of the functions JAX traces for jit inside the block (a list, filled as it
    runs; from `jax.monitoring`'s trace events)."""
    names: list[str] = []

    def listen(event: str, duration: float, **kwargs) -> None:
        if event == "/jax/core/compile/jaxpr_trace_duration":
            names.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def leaves(params) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(params))]


class Run(NamedTuple):
    """A finished run: its workdir (never changed by a test), result, `on_eval` calls
    [(iteration, frames)] and progress log."""

    workdir: Path
    result: runloop.RunResult
    calls: list[tuple[int, int]]
    log: str


def train(name: str, iterations: int, workdir: Path, **kwargs) -> Run:
    """Runs algorithm `name`'s smoke config in `workdir`, recording `on_eval` and the log."""
    calls = []

    def hook(iteration, state, record):
        calls.append((iteration, int(record["frames"])))
        return {"hook/iteration": iteration}

    stream = io.StringIO()
    algorithm = ALGORITHMS[name][0]
    config = smoke(name, iterations)
    result = runloop.run(algorithm, config, workdir, on_eval=hook, stream=stream, **kwargs)
    return Run(Path(workdir), result, calls, stream.getvalue())


def copy_run(run: Run, destination: Path) -> Path:
    """A copy of a run's workdir, for a test that resumes or damages it."""
    shutil.copytree(run.workdir, destination)
    return destination


_TEMPORARY: dict[str, Path] = {}


def temporary(name: str) -> Path:
    """A directory of this session, removed at exit (known before any test runs: a child
    started at collection waits for a run written there)."""
    if name not in _TEMPORARY:
        _TEMPORARY[name] = Path(tempfile.mkdtemp(prefix=f"mmc_jax_test_{name}_"))
        atexit.register(shutil.rmtree, _TEMPORARY[name], ignore_errors=True)
    return _TEMPORARY[name]


@pytest.fixture(scope="session")
def runs() -> dict[str, Run]:
    """Two iterations of every algorithm in one call each (in `temporary("runs") / name`)."""
    for name in sorted(_NEEDED):  # under pytest-xdist: this worker runs the tests needing them
        start_child(name)
    return {name: train(name, 2, temporary("runs") / name) for name in NAMES}


@pytest.fixture(scope="session")
def first_iterations(runs, tmp_path_factory) -> dict[str, Run]:
    """One iteration of every algorithm (a run stopped there; `runs` compiled the program)."""
    del runs
    root = tmp_path_factory.mktemp("first_iterations")
    return {name: train(name, 1, root / name) for name in NAMES}


# ---------------------------------------------------------------------------------------------
# 4 fake CPU devices, in a child started when the tests are collected

FOUR_DEVICES_SCRIPT = r"""
import argparse, json, re, sys
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, "tests")
from runs_support import ALGORITHMS, leaves, smoke
from mmc_jax import train
from mmc_jax.bench import selfplay as bench_selfplay
from mmc_jax.algorithms import alphazero, meta
from mmc_jax.infra import sharding
from mmc_jax.model import network
from mmc_jax.training import games as games_lib
from mmc_jax.training import learner, runloop
from mmc_jax import rules as R

workdir = sys.argv[1]
assert jax.device_count() == 4, jax.devices()
out = {}

# A batch that does not split over the devices is refused before anything compiles.
bad = smoke("alphazero", 1)
bad.selfplay.batch_size = 6
try:
    train.train(bad, workdir + "/bad", stream=None)
except ValueError as error:
    out["error"] = str(error)

# The first iteration of every algorithm (JOAT also on a (task, data) = (2, 2) mesh: one task
# per device pair).
for name, base, task_parallel in (
    ("alphazero", "alphazero", 1), ("joat", "joat", 1), ("joat_task_parallel", "joat", 2)
):
    config = smoke(base, 1, task_parallel)
    result = runloop.run(ALGORITHMS[base][0], config, f"{workdir}/{name}", stream=None)
    out[name] = {
        "params": [x.tolist() for x in leaves(result.params)],
        "record": {k: v for k, v in result.record.items() if isinstance(v, (int, float, str))},
    }

# The sharded AlphaZero state and its compiled iteration (the program just run).
config = alphazero.prepare_config(smoke("alphazero", 1))
mesh = sharding.make_mesh()
rules_b = R.batch(list(config.variants), config.selfplay.batch_size)
rules_b = jax.device_put(rules_b, sharding.sharded_leaves(rules_b, mesh))
state = alphazero.init_train_state(config, rules_b, jax.random.key(0), mesh)
turn = state.game_state.turn
out["game_devices"] = len(turn.sharding.device_set)
out["game_shard_shape"] = list(turn.addressable_shards[0].data.shape)
out["param_devices"] = len(jax.tree.leaves(state.params)[0].sharding.device_set)
iteration = alphazero.make_iteration(config, mesh)
hlo = iteration.lower(state, rules_b, sharding.put_key(jax.random.key(1), mesh)).compile()
# Its loops must not gather the sharded game batch onto every device (the search's tree once
# did, every simulation).
out["gathers_in_loops"] = [
    line.strip()[:160]
    for line in hlo.as_text().splitlines()
    if " all-gather(" in line and "/while/" in line
]
# The batch of every 3x3 convolution a device runs (self-play's and the learner's): 8 games and
# a learner batch of 8 over 4 devices are 2 each; the learner once ran its whole minibatch on
# every device.
conv = re.compile(r"= f32\[(\d+),5,5,\d+\]\S* convolution\(.*size=3x3")
out["conv_batches"] = sorted({int(m) for m in conv.findall(hlo.as_text())})

# Self-play under shard_map (each device its own games, games_lib.play_games on the mesh) plays
# the games that the partitioned whole batch plays.
net = network.make_network(config.network)
def play(on_mesh):
    fn = lambda p, r, g, k: games_lib.play_games(net, p, r, g, k, config, False, on_mesh)
    return jax.device_get(jax.jit(fn)(state.params, rules_b, state.game_state, jax.random.key(5)))
whole, mapped = play(None), play(mesh)
out["selfplay_equal"] = [
    jax.tree_util.keystr(path)
    for (path, a), b in zip(jax.tree.leaves_with_path(whole), jax.tree.leaves(mapped))
    if a.dtype.kind != "f" and not np.array_equal(a, b)
]
out["selfplay_float_diff"] = max(
    float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(mapped))
    if a.dtype.kind == "f"
)

# A draw for 8 games on a (task, data) = (2, 2) mesh equals the draw for the whole batch.
grid = sharding.make_mesh(task_parallel=2)
draw = lambda k, b: (jax.random.uniform(k, (b, 3)), jax.random.split(k, b))
def local(key, x):
    noise, keys = sharding.draw_for_games(draw, key, x.shape[0])
    return noise, jax.random.key_data(keys), sharding.categorical(key, noise)
mapped = jax.jit(sharding.map_games(local, grid, (None, 0), (0, 0, 0)))
mapped = mapped(jax.random.key(2), np.zeros(8))
noise, keys = draw(jax.random.key(2), 8)
whole = (noise, jax.random.key_data(keys), jax.random.categorical(jax.random.key(2), noise))
out["draw_equal"] = [bool(np.array_equal(a, b)) for a, b in zip(whole, mapped)]

# JOAT's inner loop with the tasks in sequence (the CPU default) splits every minibatch over the
# devices: each 3x3 convolution's batch is inner.batch_size / 4 = 2 (it once ran all 8 on every
# device). Compiled from shapes alone.
config = smoke("joat", 1)
net = network.make_network(config.network)
params = jax.eval_shape(lambda k: network.init_params(net, k, R.OBS_SHAPE), jax.random.key(0))
opt_state = jax.eval_shape(learner.make_optimizer(config.learner).init, params)
def rings(n=16):
    batch = learner.Batch(
        jnp.zeros((n, *R.OBS_SHAPE)), jnp.ones((n, R.NUM_ACTIONS), bool),
        jnp.zeros((n, R.NUM_ACTIONS)), jnp.zeros(n), jnp.ones(n, bool),
    )
    ring = learner.replay_add(learner.replay_init(batch, n), batch)
    return jax.tree.map(lambda x: jnp.stack([x, x]), ring)
adapt = lambda *args: meta.adapt_tasks(
    *args, config=config, mesh=sharding.make_mesh(), sequential=True
)
inner = jax.jit(adapt).lower(
    params, opt_state, jax.eval_shape(rings), jax.random.split(jax.random.key(0), 2)
).compile().as_text()
out["inner_conv_batches"] = sorted({int(m) for m in conv.findall(inner)})

# `bench selfplay` on several devices: batches that do not split and --breakdown are refused.
out["bench_errors"] = []
for fields in (dict(batch=6), dict(memory_batch=6), dict(breakdown=True)):
    args = argparse.Namespace(**{**dict(batch=64, memory_batch=0, breakdown=False), **fields})
    try:
        bench_selfplay.selfplay_mesh(args)
    except SystemExit as error:
        out["bench_errors"].append(str(error))
out["bench_mesh_devices"] = bench_selfplay.selfplay_mesh(
    argparse.Namespace(batch=64, memory_batch=0, breakdown=False)
).size
print("RESULT " + json.dumps(out))
"""

# ---------------------------------------------------------------------------------------------
# The adaptation of the JOAT run to its held-out variant, in a child that compiles the
# adaptation's iteration and arena before the run it adapts exists

HELD_OUT = "dark"  # configs/joat.py:smoke's first held-out variant

ADAPT_SCRIPT = """
import json, os, sys, time
import jax
from mmc_jax import adapt, rules as R, train
from mmc_jax.evaluation import match
from mmc_jax.infra import checkpoint
from mmc_jax.model import network

from configs import joat as module
config = module.get_config("smoke")
meta_workdir, adapt_workdir, variant = sys.argv[1], sys.argv[2], sys.argv[3]

# Warm up with the smoke network (what the meta checkpoint will hold): the adaptation's
# training iteration (one iteration from scratch in a scratch workdir: the same code path, so
# the same compiled program) and the baseline arena, before the checkpoint exists.
warm = adapt.adaptation_config(variant, 1, config.network, config=config)
train.train(warm, adapt_workdir + "-warm-up", stream=None)
net = network.make_network(warm.network)
params = adapt.on_device(network.init_params(net, jax.random.key(0), R.OBS_SHAPE))
match.play_match(net, params, variant, "random", 4, 0, jax.random.key(0), max_plies=16)

# The pytest process writes the run when a test first needs it; it kills this child at exit.
while checkpoint.latest_step(meta_workdir) is None or checkpoint.latest_step(meta_workdir) < 2:
    time.sleep(1)
results = adapt.run_adaptation(
    variant,
    os.path.join(meta_workdir, "checkpoints", "2"),
    adapt_workdir,
    iterations=1,
    head_to_head=False,
    stream=sys.stderr,
)
print("RESULT " + json.dumps(results))
"""


# ---------------------------------------------------------------------------------------------
# Children started when the tests are collected


def start_on_fake_devices(script: str, num_devices: int, *args) -> subprocess.Popen:
    """Starts `python -c script *args` in the repository root with `num_devices` fake CPU
    devices (added to this process's XLA_FLAGS, which the child inherits with the rest of the
    environment); stdout/stderr piped."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={num_devices}"
    ).strip()
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def stop_process(process: subprocess.Popen) -> None:
    """Kills `process` if it is still running."""
    if process.poll() is None:
        process.kill()
        process.communicate()


# fixture name -> (script, fake devices, its arguments)
CHILDREN = {
    "four_devices": lambda: (FOUR_DEVICES_SCRIPT, 4, [temporary("four_devices")]),
    "adaptation": lambda: (
        ADAPT_SCRIPT,
        1,
        [temporary("runs") / "joat", temporary("adaptation") / "adapt", HELD_OUT],
    ),
}
_STARTED: dict[str, subprocess.Popen] = {}


def start_child(name: str) -> subprocess.Popen:
    """The child behind fixture `name`, started now unless it already was."""
    if name not in _STARTED:
        script, num_devices, args = CHILDREN[name]()
        _STARTED[name] = start_on_fake_devices(script, num_devices, *args)
        atexit.register(stop_process, _STARTED[name])
    return _STARTED[name]


def child_result(name: str, timeout: float = 1500) -> Any:
    """The JSON of the RESULT line the child behind fixture `name` printed (it must exit 0)."""
    process = start_child(name)
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-4000:]
    (line,) = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


_NEEDED: set[str] = set()  # the children the selected tests need


def pytest_collection_finish(session):
    """Starts the children the selected tests need: they compile while the tests run. Under
    pytest-xdist every worker collects every test, and the tests that need a child run in the
    worker that builds `runs` (one group): there `runs` starts them."""
    needed = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    _NEEDED.update(name for name in CHILDREN if name in needed)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for name in sorted(_NEEDED):
            start_child(name)


# The session fixtures that compile the smoke iterations: under pytest-xdist
# (`--dist loadgroup`) every test using one runs in the same worker, so each compiles once.
SHARED_RUN_FIXTURES = {"runs", "first_iterations", "four_devices", "adaptation"}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the marks into the node ids
def pytest_collection_modifyitems(config, items):
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # not a pytest-xdist worker
        return
    if workerinput.get("dist") == "loadgroup":  # (tests/conftest.py: pytest_configure_node)
        config.option.loadgroup = True  # a worker re-parses the command line, without it
    for item in items:
        if SHARED_RUN_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("runs"))


@pytest.fixture(scope="session")
def four_devices() -> dict[str, Any]:
    """What FOUR_DEVICES_SCRIPT found on 4 fake CPU devices."""
    return child_result("four_devices")


@pytest.fixture(scope="session")
def adaptation(runs) -> tuple[dict[str, Any], Path]:
    """`adapt.run_adaptation`'s results for the JOAT run's checkpoint 2 on `HELD_OUT` (one
    iteration) and the adaptation's workdir."""
    del runs  # writes the checkpoint the child waits for
    return child_result("adaptation"), temporary("adaptation") / "adapt"
