"""Multi-process training on 127.0.0.1 (JAX's CPU collectives, gloo): 2 processes with two CPU
devices each run the same jitted iteration over one global mesh.

One launch of 2 processes (`WORKER`) checks every property, for every algorithm (the smoke
iterations of tests/runs_support.py; JOAT with its tasks split over the processes: a
(task, data) = (2, 2) mesh):

- 2 processes give the parameters of one process with the same global batch, identical on
  every process, and one metrics file;
- a checkpoint written by one process restores in 2, and one written by 2 restores in one (bit
  for bit);
- SIGTERM to one process (a preempted worker): every process stops after the same iteration,
  and a second run resumes from that checkpoint.

Each process compiles the smoke iterations itself (the processes run without the compilation
cache: mmc_jax/infra/cache.py), so this is the slowest test of the suite per assertion. A 4-process
run is not made: the same programs on a (task, data) = (2, 2) mesh of 4 fake devices are
checked against one device in tests/training/test_runloop.py. What only it would check: gloo among 4
processes, and JOAT's data axis spanning processes inside a task split.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import numpy as np
import pytest
from runs_support import ALGORITHMS, NAMES, copy_run, leaves, smoke

from mmc_jax import launch
from mmc_jax.infra import metrics
from mmc_jax.training import runloop

pytestmark = pytest.mark.slow

NUM_PROCESSES = 2
DEVICES_PER_PROCESS = 2
TIMEOUT = 1500  # seconds for the multi-process run (processes compiling on 2 cores)

WORKER = """
import json, sys
import numpy as np
from mmc_jax.infra import distributed

root, one_process = sys.argv[1:]
info = distributed.initialize()  # the coordinator from the environment (launch.start_local)

import jax
sys.path.insert(0, "tests")
from runs_support import ALGORITHMS, NAMES, smoke
from mmc_jax.training import runloop

assert jax.process_count() == info.num_processes, jax.process_count()


def local(params):
    return [np.asarray(x.addressable_data(0)).tolist() for x in jax.tree.leaves(params)]


def run(name, iterations, workdir, **kwargs):
    # JOAT splits its tasks over the processes: a (task, data) = (2, 2) mesh.
    config = smoke(name, iterations, task_parallel=2)
    return runloop.run(ALGORITHMS[name][0], config, workdir, **kwargs)


out = {}
for name in NAMES:
    trained = run(name, 1, f"{root}/{name}", stream=None, handle_signals=False)
    # `one_process` holds a copy of a finished one-process run: this only restores it.
    restored = run(name, 1, f"{one_process}/{name}", stream=None, handle_signals=False)
    out[name] = {
        "trained": local(trained.params),
        "restored": local(restored.params),
        "restored_from": restored.start_iteration,
        "devices": jax.device_count(),
    }
# A long run that the pytest process stops by sending SIGTERM to process 1 once an iteration is
# written (a preempted worker; process 0 learns of it through the stop consensus), then resumed.
stopped = run("alphazero", 100_000, f"{root}/stopped", stream=sys.stdout)
at = stopped.record["iteration"]
resumed = run("alphazero", at + 1, f"{root}/stopped", stream=sys.stdout)
out["stopped"] = [stopped.stopped, at, resumed.start_iteration, resumed.record["iteration"]]
with open(f"{root}/result_{info.process_id}.json", "w") as f:
    json.dump(out, f)
"""


@pytest.fixture(scope="module")
def processes(first_iterations, tmp_path_factory):
    """The 2-process run; returns its root, every process's results and logs."""
    root = tmp_path_factory.mktemp("processes")
    one = tmp_path_factory.mktemp("one_process")
    for name in NAMES:
        copy_run(first_iterations[name], one / name)
    command = [sys.executable, "-c", WORKER, str(root), str(one)]
    started = launch.start_local(command, NUM_PROCESSES, DEVICES_PER_PROCESS, root)
    deadline = time.time() + TIMEOUT
    try:
        stopped = root / "stopped"
        while not (stopped / "metrics.jsonl").exists() or not metrics.read_metrics(stopped):
            assert all(p.poll() is None for p in started), "a process ended early"
            assert time.time() < deadline, "no iteration of the long run finished"
            time.sleep(0.5)
        started[1].send_signal(signal.SIGTERM)
        codes = launch.wait_local(started, timeout=max(deadline - time.time(), 60))
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
    logs = [(root / f"process_{i}.log").read_text() for i in range(NUM_PROCESSES)]
    for i, code in enumerate(codes):
        assert code == 0, f"process {i} exited {code}:\n{logs[i][-3000:]}"
    outs = [json.loads((root / f"result_{i}.json").read_text()) for i in range(NUM_PROCESSES)]
    return root, outs, logs


@pytest.mark.parametrize("name", NAMES)
def test_n_processes_give_the_parameters_of_one_process(processes, first_iterations, name):
    root, outs, _ = processes
    devices = NUM_PROCESSES * DEVICES_PER_PROCESS
    assert [out[name]["devices"] for out in outs] == [devices] * NUM_PROCESSES
    chief = outs[0][name]["trained"]
    for out in outs[1:]:  # every process holds the same parameters, bit for bit
        for a, b in zip(out[name]["trained"], chief, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(chief, leaves(first_iterations[name].result.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-4, atol=2e-5)
    # Only process 0 writes metrics: one file, one record for the one iteration.
    assert [r["step"] for r in metrics.read_metrics(root / name)] == [1]
    assert sorted(p.name for p in root.glob(f"{name}/*.jsonl")) == ["metrics.jsonl"]


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_restores_across_process_counts(processes, first_iterations, name):
    root, outs, _ = processes
    # Written by one process, restored by N: the one-process parameters on every process.
    for out in outs:
        assert out[name]["restored_from"] == 1
        one = leaves(first_iterations[name].result.params)
        for a, b in zip(out[name]["restored"], one, strict=True):
            np.testing.assert_array_equal(np.asarray(a), b)
    # Written by N processes, restored by one.
    restored = runloop.run(ALGORITHMS[name][0], smoke(name, 1), root / name, stream=None)
    assert restored.start_iteration == 1
    for a, b in zip(leaves(restored.params), outs[0][name]["trained"], strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))


def test_sigterm_to_one_process_stops_all_and_a_second_run_resumes(processes):
    root, outs, logs = processes
    stopped, at, resumed_from, resumed_to = outs[0]["stopped"]
    assert outs[1]["stopped"] == outs[0]["stopped"]  # every process stopped after iteration `at`
    assert stopped and 1 <= at < 100_000
    assert f"stopped by a signal to another process after iteration {at}" in logs[0], logs[0]
    workdir = root / "stopped"
    assert f"resumed from {workdir}/checkpoints/{at}" in logs[0], logs[0][-2000:]
    assert (resumed_from, resumed_to) == (at, at + 1)
    assert [r["step"] for r in metrics.read_metrics(workdir)] == list(range(1, at + 2))
