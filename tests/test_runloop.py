"""The one run loop (`mmc_jax.runloop.run`), run on both algorithms with their smoke configs.

For AlphaZero (configs/gardner.py:smoke) and JOAT (configs/joat.py:smoke): a run stopped after
one iteration and resumed gives bit-identically the parameters of an unbroken two-iteration
run; 4 fake CPU devices give the parameters of 1 device (JOAT also with its tasks split over
a (task, data) mesh); a workdir written by the code before
the run loop existed (tests/fixtures/legacy, made by tests/fixtures/make_legacy_workdirs.py)
resumes; `on_eval` sees every iteration and `init_params` is the start of a fresh run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import start_on_fake_devices, stop_process

from configs import gardner, joat
from mmc_jax import alphazero, checkpoint, meta, metrics, runloop

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "legacy"
ALGORITHMS = {
    "alphazero": (alphazero.ALGORITHM, gardner, "gardner_smoke"),
    "joat": (meta.ALGORITHM, joat, "joat_smoke"),
}

FOUR_DEVICES_SCRIPT = """
import json, sys
import jax
import numpy as np
from configs import gardner, joat
from mmc_jax import alphazero, meta, runloop

assert jax.device_count() == 4, jax.devices()
out = {}
for name, algorithm, module in (
    ("alphazero", alphazero.ALGORITHM, gardner),
    ("joat", meta.ALGORITHM, joat),
    ("joat_task_parallel", meta.ALGORITHM, joat),
):
    config = module.get_config("smoke")
    config.num_iterations = 1
    if name == "joat_task_parallel":  # a (task, data) = (2, 2) mesh: one task per device pair
        config.meta.task_parallel = 2
    result = runloop.run(algorithm, config, sys.argv[1] + "/" + name, stream=None)
    out[name] = [np.asarray(x).tolist() for x in jax.tree.leaves(jax.device_get(result.params))]
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    """Both smoke configs' first iteration on 4 fake devices (a subprocess, started first)."""
    process = start_on_fake_devices(FOUR_DEVICES_SCRIPT, 4, tmp_path_factory.mktemp("four"))
    yield process
    stop_process(process)


def smoke(module, iterations: int):
    config = module.get_config("smoke")
    config.num_iterations = iterations
    return config


def leaves(params) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(params))]


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, four_devices):
    """Two iterations in one call per algorithm, with an `on_eval` hook recording its calls."""
    del four_devices  # started first: its compile overlaps ours
    out = {}
    for name, (algorithm, module, _) in ALGORITHMS.items():
        calls = []

        def hook(iteration, state, record, calls=calls):
            calls.append((iteration, int(record["frames"])))
            return {"hook/iteration": iteration}

        workdir = tmp_path_factory.mktemp(name)
        result = runloop.run(algorithm, smoke(module, 2), workdir, on_eval=hook, stream=None)
        out[name] = (workdir, result, calls)
    return out


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_run_calls_on_eval_and_returns_the_final_state(unbroken, name):
    workdir, result, calls = unbroken[name]
    assert result.start_iteration == 0 and result.record["iteration"] == 2
    assert [c[0] for c in calls] == [1, 2] and calls[0][1] < calls[1][1]
    records = metrics.read_metrics(workdir)
    assert [r["hook/iteration"] for r in records] == [1, 2]
    saved = checkpoint.restore_subtree(
        workdir, "params", jax.tree.map(np.asarray, jax.device_get(result.params)), step=2
    )
    for a, b in zip(leaves(saved), leaves(result.params), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_resume_is_bit_identical(unbroken, tmp_path, name):
    algorithm, module, _ = ALGORITHMS[name]
    first = runloop.run(algorithm, smoke(module, 1), tmp_path, stream=None)
    assert first.record["iteration"] == 1
    resumed = runloop.run(algorithm, smoke(module, 2), tmp_path, stream=None)
    assert resumed.start_iteration == 1
    for a, b in zip(leaves(resumed.params), leaves(unbroken[name][1].params), strict=True):
        np.testing.assert_array_equal(a, b)
    again = runloop.run(algorithm, smoke(module, 2), tmp_path, stream=None)
    assert again.start_iteration == 2 and again.record["iteration"] == 2  # already finished


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_workdir_written_before_the_run_loop_resumes(unbroken, tmp_path, name):
    algorithm, module, fixture = ALGORITHMS[name]
    workdir = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, workdir)
    resumed = runloop.run(algorithm, smoke(module, 2), workdir, stream=None)
    assert resumed.start_iteration == 1 and resumed.record["iteration"] == 2
    assert [r["step"] for r in metrics.read_metrics(workdir)] == [1, 2]
    # Behaviour kept: the old code's iteration 1 continued by today's iteration 2 is the
    # unbroken run of today's code. Not bit for bit: the fixture was written under XLA:CPU's
    # YNNPACK convolutions, which `mmc_jax.startup` now turns off, and the two kernels round
    # differently (measured: at most 4.2e-7 apart after two iterations, while one iteration
    # moves parameters by up to 2.4e-3; any change of behaviour moves them by that much).
    for a, b in zip(leaves(resumed.params), leaves(unbroken[name][1].params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=5e-6)


def test_a_damaged_latest_checkpoint_resumes_from_the_one_before_and_an_unreadable_workdir_is_kept(
    unbroken, tmp_path
):
    algorithm, module, _ = ALGORITHMS["alphazero"]
    workdir = tmp_path / "run"
    shutil.copytree(unbroken["alphazero"][0], workdir)
    steps = workdir / "checkpoints"

    def damage(step):  # lost files: the arrays of the state are gone, the sidecar is not
        for path in (steps / str(step) / "state").iterdir():
            if "ocdbt" in path.name or path.name == "d":
                shutil.rmtree(path) if path.is_dir() else path.unlink()

    damage(2)
    log = io.StringIO()
    resumed = runloop.run(algorithm, smoke(module, 2), workdir, stream=log)
    assert f"checkpoint {steps}/2 is damaged" in log.getvalue()
    assert (workdir / "checkpoints_damaged" / "2" / "state").is_dir()  # kept, out of the way
    assert resumed.start_iteration == 1 and resumed.record["iteration"] == 2
    for a, b in zip(leaves(resumed.params), leaves(unbroken["alphazero"][1].params), strict=True):
        np.testing.assert_array_equal(a, b)  # iteration 2 replayed exactly from step 1

    for step in (1, 2):
        damage(step)
    before = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))
    with pytest.raises(ValueError, match=r"no checkpoint in .* could be restored .* nothing there"):
        runloop.run(algorithm, smoke(module, 2), workdir, stream=None)
    assert sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*")) == before


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_init_params_start_a_fresh_run(unbroken, tmp_path, name):
    algorithm, module, _ = ALGORITHMS[name]
    start = unbroken[name][1].params
    result = runloop.run(algorithm, smoke(module, 1), tmp_path, init_params=start, stream=None)
    first = runloop.run(algorithm, smoke(module, 1), tmp_path / "scratch", stream=None)
    moved = [np.abs(a - b).max() for a, b in zip(leaves(result.params), leaves(start), strict=True)]
    assert max(moved) > 0  # trained from the given parameters ...
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(leaves(result.params), leaves(first.params), strict=True)
    )  # ... not from scratch


def test_four_devices_match_one_device(unbroken, four_devices, tmp_path):
    stdout, stderr = four_devices.communicate(timeout=1200)
    assert four_devices.returncode == 0, stderr[-4000:]
    (line,) = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
    four = json.loads(line[len("RESULT ") :])
    for name, (algorithm, module, _) in ALGORITHMS.items():
        one = runloop.run(algorithm, smoke(module, 1), tmp_path / name, stream=None)
        for four_name in [name] + (["joat_task_parallel"] if name == "joat" else []):
            for a, b in zip(four[four_name], leaves(one.params), strict=True):
                np.testing.assert_allclose(np.asarray(a), b, rtol=2e-4, atol=2e-5)


def test_itstime_and_progress_helpers():
    assert [s for s in range(1, 8) if runloop.itstime(s, 3, 7)] == [3, 6, 7]
    assert not any(runloop.itstime(s, 0, 7) for s in range(1, 8))
    assert runloop.format_duration(42) == "42s"
    assert runloop.format_duration(185) == "3m05s"
    assert runloop.format_duration(3720) == "1h02m"
    summary = runloop.eval_summary(
        {
            "eval/dark/score_vs_greedy": 0.75,
            "eval/dark/score_low_vs_greedy": 0.6,
            "eval/dark/score_high_vs_greedy": 0.9,
            "iteration": 4,
        }
    )
    assert summary == "eval@4 dark:greedy 0.75 [0.60,0.90]"
    with pytest.raises(FloatingPointError, match="train/total"):
        runloop.check_finite({"train/total": float("nan")}, 3, "note")


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_workdir_of_the_old_observation_layout_is_refused(tmp_path, name):
    algorithm, module, fixture = ALGORITHMS[name]
    workdir = tmp_path / fixture
    shutil.copytree(FIXTURES.parent / "obs26" / fixture, workdir)
    with pytest.raises(ValueError, match="observation layout .* differs .* rules descriptor"):
        runloop.run(algorithm, smoke(module, 2), workdir, stream=None)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_iteration_in_progress_and_resume_continues(tmp_path, signum):
    """SIGTERM (a preempted VM) or Ctrl-C during iteration 1 of 3: the iteration finishes and
    is checkpointed, `run` returns `stopped`; the same call resumes from it."""
    algorithm, module, _ = ALGORITHMS["alphazero"]

    def hook(iteration, state, record):
        if iteration == 1:
            os.kill(os.getpid(), signum)

    stream = io.StringIO()
    stopped = runloop.run(algorithm, smoke(module, 3), tmp_path, on_eval=hook, stream=stream)
    assert stopped.stopped and stopped.record["iteration"] == 1
    assert checkpoint.latest_step(tmp_path) == 1
    assert f"stopped by {signal.Signals(signum).name} after iteration 1" in stream.getvalue()
    resumed = runloop.run(algorithm, smoke(module, 2), tmp_path, stream=None)
    assert resumed.start_iteration == 1 and not resumed.stopped
    assert resumed.record["iteration"] == 2
