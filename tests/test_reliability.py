"""Nothing lost, nothing mislabelled (issue 39): one writer per workdir, a NaN guard that checks
what it saves, one loading path for every command, exports that never shadow a run, signals
during start-up, and (slow tier) a chaos test of training killed at random moments.

Most tests drive the run loop with `fake_algorithm.FakeAlgorithm` (seconds, not a compile);
checkpoints come from `tests/fixtures/legacy` (no training needed).
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import fake_algorithm
import jax
import numpy as np
import pytest
from fake_algorithm import FakeAlgorithm, fake_config

from mmc_jax import checkpoint as checkpoint_lib
from mmc_jax import metrics as metrics_lib
from mmc_jax import runloop

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def python(script: str, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -c script *args` from the repository root, `tests/` importable."""
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(TESTS)!r})\n" + script]
        + [str(a) for a in args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


# ---------------------------------------------------------------------------------------------
# Item 9: a signal during start-up


SIGTERM_DURING_COMPILE = """
import os, signal
from fake_algorithm import FakeAlgorithm, fake_config
from mmc_jax import runloop
algorithm = FakeAlgorithm(on_compile=lambda: os.kill(os.getpid(), signal.SIGTERM))
result = runloop.run(algorithm, fake_config(3), sys.argv[1])
print("RESULT", result.stopped, result.record["iteration"])
"""


def test_sigterm_during_compilation_says_nothing_was_lost(tmp_path):
    """A SIGTERM that arrives while the iteration compiles (a preempted VM during start-up) used
    to kill the run silently with status 143; now the run stops before its first iteration and
    says that nothing was lost and how to resume."""
    done = python(SIGTERM_DURING_COMPILE, tmp_path / "run")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "RESULT True 0" in done.stdout
    assert (
        "stopped by SIGTERM during start-up, before iteration 1: nothing was lost (no "
        "iteration had run). Run the same command to resume." in done.stdout
    ), done.stdout


# ---------------------------------------------------------------------------------------------
# Item 2: the NaN guard checks what it saves


def saved_params(workdir, step):
    return checkpoint_lib.restore_subtree(
        workdir, "params", fake_algorithm.PARAMS_TEMPLATE, step=step
    )


def test_a_checkpoint_an_explosion_started_from_is_not_called_good(tmp_path):
    """Parameters that explode in an iteration's last learner step leave its losses finite
    and its checkpoint at 7e29; the next iteration's losses are NaN. That checkpoint is not
    the "last good" one: the error names the step before it, the suspect step is moved aside
    (kept), and a re-run resumes from the good step and trains on."""
    workdir = tmp_path / "run"
    with pytest.raises(FloatingPointError) as error:
        runloop.run(FakeAlgorithm(explode_after=3), fake_config(5), workdir, stream=None)
    message = str(error.value)
    assert "non-finite training metrics at iteration 4" in message
    assert f"the last good checkpoint is step 2 in {workdir}/checkpoints" in message, message
    assert "largest |parameter| is 7.1e+29" in message, message
    assert f"moved to {workdir}/checkpoints_diverged/3" in message, message
    assert checkpoint_lib.Checkpointer(workdir).all_steps() == [1, 2]
    assert (workdir / "checkpoints_diverged" / "3" / "state").is_dir()  # kept for inspection
    for step in (1, 2):
        assert np.abs(saved_params(workdir, step)["w"]).max() < 1.0

    log = io.StringIO()
    resumed = runloop.run(FakeAlgorithm(), fake_config(5), workdir, stream=log)
    assert resumed.start_iteration == 2 and not resumed.stopped
    assert f"resumed from {workdir}/checkpoints/2" in log.getvalue()
    assert np.abs(np.asarray(resumed.params["w"])).max() < 1.0
    assert [r["step"] for r in metrics_lib.read_metrics(workdir)] == [1, 2, 3, 4, 5]


def test_a_non_finite_optimizer_state_is_never_saved(tmp_path):
    """An infinite optimizer moment with finite losses: the iteration is not checkpointed,
    and the error names the leaf and the last good step."""
    workdir = tmp_path / "run"
    with pytest.raises(FloatingPointError) as error:
        runloop.run(FakeAlgorithm(bad_opt_state_after=2), fake_config(4), workdir, stream=None)
    message = str(error.value)
    assert "non-finite values in the state after iteration 2: ['opt_state']['moment']" in message
    assert f"the last good checkpoint is step 1 in {workdir}/checkpoints" in message, message
    assert checkpoint_lib.Checkpointer(workdir).all_steps() == [1]


def test_a_resume_skips_a_checkpoint_with_non_finite_values(tmp_path):
    """A non-finite checkpoint (written by older code, or by hand) is not resumed from: it is
    set aside as damaged, naming the leaf, and the run resumes from the step before."""
    workdir = tmp_path / "run"
    config = fake_config(2)
    first = runloop.run(FakeAlgorithm(), config, workdir, stream=None)
    poisoned = jax.tree.map(np.asarray, jax.device_get(first.state))
    poisoned = poisoned.replace(params=dict(poisoned.params, w=np.full((2, 3), np.nan, np.float32)))
    checkpoint_lib.save_checkpoint(
        workdir,
        3,
        runloop.checkpoint_state(poisoned, 3, 30, 3, True),
        config=config,
        extra={"frames": 30, "games": 3},
    )
    log = io.StringIO()
    resumed = runloop.run(FakeAlgorithm(), fake_config(3), workdir, stream=log)
    assert "checkpoints/3 is damaged (non-finite values in ['params']['w'])" in log.getvalue()
    assert resumed.start_iteration == 2 and np.isfinite(np.asarray(resumed.params["w"])).all()
    assert (workdir / "checkpoints_damaged" / "3").is_dir()
