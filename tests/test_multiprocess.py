"""Multi-process training on 127.0.0.1 (JAX's CPU collectives, gloo): several processes with
two CPU devices each run the same jitted iteration over one global mesh.

- 2 processes give the parameters of one process with the same global batch (the `train`
  smoke over a data mesh, and the `joat` smoke with its tasks split over the processes: a
  (task, data) = (2, 2) mesh), identical on every process, and one metrics file.
- A checkpoint written by N processes restores in one process, and one written by one process
  restores in N (bit for bit).
- SIGTERM to one process of a 2-process `python -m mmc_jax.train`: every process stops after
  the same iteration, exits 0, and the relaunch resumes from that checkpoint.

Each process compiles the smoke iterations itself (minutes on 2 cores), so these are the
slowest tests of the suite per assertion; they run once per module. A 4-process run of both
smokes took 12 of this module's 25 minutes on a 2-core CI machine, so it is not run: the
same programs on a (task, data) = (2, 2) mesh of 4 fake devices are checked against one device
in tests/test_runloop.py. What only it checked: gloo among 4 processes, and JOAT's data axis
spanning processes inside a task split.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from configs import gardner, joat
from mmc_jax import alphazero, launch, meta, metrics, runloop

DEVICES_PER_PROCESS = 2
PROCESS_COUNTS = (2,)
TIMEOUT = 1500  # seconds for one multi-process run (processes compiling on 2 cores)

WORKER = """
import json, sys
import numpy as np
from mmc_jax import distributed

root, one_process = sys.argv[1:]
info = distributed.initialize()  # the coordinator from the environment (launch.start_local)
num_processes, process_id = info.num_processes, info.process_id

import jax
sys.path.insert(0, "tests")  # the run's settings are this test module's
from test_multiprocess import ALGORITHMS, config_of
from mmc_jax import runloop

assert jax.process_count() == int(num_processes), jax.process_count()


def local(params):
    return [np.asarray(x.addressable_data(0)).tolist() for x in jax.tree.leaves(params)]


out = {}
for name in ALGORITHMS:
    algorithm, module = ALGORITHMS[name]
    # JOAT splits its tasks over the processes: a (task, data) = (2, 2) mesh.
    config = config_of(module, task_parallel=2)
    trained = runloop.run(algorithm, config, f"{root}/{name}", stream=None, handle_signals=False)
    # `one_process` holds a copy of a finished one-process run: this only restores it.
    restored = runloop.run(
        algorithm, config, f"{one_process}/{name}", stream=None, handle_signals=False
    )
    out[name] = {
        "trained": local(trained.params),
        "restored": local(restored.params),
        "restored_from": restored.start_iteration,
        "devices": jax.device_count(),
    }
with open(f"{root}/result_{process_id}.json", "w") as f:
    json.dump(out, f)
"""

ALGORITHMS = {"alphazero": (alphazero.ALGORITHM, gardner), "joat": (meta.ALGORITHM, joat)}


def config_of(module, task_parallel: int = 1):
    """The smoke config for one iteration, with a batch that splits over 8 devices."""
    config = module.get_config("smoke")
    config.num_iterations = 1
    if module is joat:
        config.meta.games_per_task = 8
        config.meta.task_parallel = task_parallel
    return config


def run_processes(command, num_processes: int, log_dir: Path, timeout: float = TIMEOUT):
    """Runs `command` as a local `num_processes`-process run; returns the logs (all exit 0)."""
    processes = launch.start_local(command, num_processes, DEVICES_PER_PROCESS, log_dir)
    codes = launch.wait_local(processes, timeout)
    logs = [(log_dir / f"process_{i}.log").read_text() for i in range(num_processes)]
    for i, code in enumerate(codes):
        assert code == 0, f"process {i} exited {code}:\n{logs[i][-3000:]}"
    return logs


def leaves(params) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(params))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One iteration of both smokes in this process (1 device), then with 2 and 4 processes x
    2 devices; each multi-process run also restores a copy of the one-process workdirs."""
    one = tmp_path_factory.mktemp("one_process")
    reference = {
        name: runloop.run(algorithm, config_of(module), one / name, stream=None)
        for name, (algorithm, module) in ALGORITHMS.items()
    }
    results = {}
    for num_processes in PROCESS_COUNTS:
        root = tmp_path_factory.mktemp(f"{num_processes}_processes")
        copy = tmp_path_factory.mktemp(f"one_process_for_{num_processes}")
        shutil.copytree(one, copy, dirs_exist_ok=True)
        run_processes([sys.executable, "-c", WORKER, str(root), str(copy)], num_processes, root)
        results[num_processes] = (
            root,
            [json.loads((root / f"result_{i}.json").read_text()) for i in range(num_processes)],
        )
    return one, reference, results


@pytest.mark.parametrize("num_processes", PROCESS_COUNTS)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_n_processes_give_the_parameters_of_one_process(runs, name, num_processes):
    _, reference, results = runs
    root, outs = results[num_processes]
    assert [out[name]["devices"] for out in outs] == [DEVICES_PER_PROCESS * num_processes] * len(
        outs
    )
    chief = outs[0][name]["trained"]
    for out in outs[1:]:  # every process holds the same parameters, bit for bit
        for a, b in zip(out[name]["trained"], chief, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(chief, leaves(reference[name].params), strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-4, atol=2e-5)
    # Only process 0 writes metrics: one file, one record for the one iteration.
    assert [r["step"] for r in metrics.read_metrics(root / name)] == [1]
    assert sorted(p.name for p in root.glob(f"{name}/*.jsonl")) == ["metrics.jsonl"]


@pytest.mark.parametrize("num_processes", PROCESS_COUNTS)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_checkpoint_restores_across_process_counts(runs, name, num_processes):
    _, reference, results = runs
    root, outs = results[num_processes]
    # Written by one process, restored by N: the one-process parameters on every process.
    for out in outs:
        assert out[name]["restored_from"] == 1
        for a, b in zip(out[name]["restored"], leaves(reference[name].params), strict=True):
            np.testing.assert_array_equal(np.asarray(a), b)
    # Written by N processes, restored by one.
    algorithm, module = ALGORITHMS[name]
    restored = runloop.run(algorithm, config_of(module), root / name, stream=None)
    assert restored.start_iteration == 1
    for a, b in zip(leaves(restored.params), outs[0][name]["trained"], strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))


def train_command(workdir: Path, iterations: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mmc_jax.train",
        "--config",
        "configs/gardner.py:smoke",
        f"--config.num_iterations={iterations}",
        "--workdir",
        str(workdir),
    ]


def test_sigterm_to_one_process_stops_all_and_the_relaunch_resumes(tmp_path):
    workdir = tmp_path / "run"
    processes = launch.start_local(
        train_command(workdir, 100_000), 2, DEVICES_PER_PROCESS, tmp_path / "first"
    )
    deadline = time.time() + TIMEOUT
    try:
        while not (workdir / "metrics.jsonl").exists() or not metrics.read_metrics(workdir):
            assert all(p.poll() is None for p in processes), "a process ended early"
            assert time.time() < deadline, "no iteration finished"
            time.sleep(0.5)
        # A preempted worker: only process 1 gets the signal; process 0 learns of it through
        # the stop consensus after the iteration in progress.
        processes[1].send_signal(signal.SIGTERM)
        codes = launch.wait_local(processes, timeout=300)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    first = (tmp_path / "first" / "process_0.log").read_text()
    assert codes == [0, 0], first[-3000:]
    stopped_at = metrics.read_metrics(workdir)[-1]["step"]
    assert 1 <= stopped_at < 100_000
    assert f"stopped by a signal to another process after iteration {stopped_at}" in first
    second = run_processes(train_command(workdir, stopped_at + 1), 2, tmp_path / "second")
    assert f"resumed from {workdir}/checkpoints/{stopped_at}" in second[0], second[0][-2000:]
    assert [r["step"] for r in metrics.read_metrics(workdir)] == list(range(1, stopped_at + 2))
