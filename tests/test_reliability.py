"""Nothing lost, nothing mislabelled (issue 39): one writer per workdir, a NaN guard that checks
what it saves, one loading path for every command, exports that never shadow a run, signals
during start-up, and (slow tier) a chaos test of training killed at random moments.

Most tests drive the run loop with `fake_algorithm.FakeAlgorithm` (seconds, not a compile);
checkpoints come from `tests/fixtures/legacy` (no training needed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
