"""What every test process shares: one compilation cache, the XLA flags, the repository root on
`sys.path`, the rules fixtures (tests/rules_support.py), the Fairy-Stockfish engine, and helpers
to start children on fake devices."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mmc_jax import cache, startup

pytest_plugins = ("rules_support",)  # the engine, fsf and rollout fixtures of the rules tests

# The commands the tests start (in this process or as children) share one compilation cache
# (`mmc_jax.cache`), fresh for the session: the user's cache is neither read nor written, and a
# relaunched or resumed command loads what an earlier test compiled.
if "MMC_COMPILE_CACHE" not in os.environ:
    os.environ["MMC_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="mmc_jax_test_xla_")
    atexit.register(shutil.rmtree, os.environ["MMC_COMPILE_CACHE"], ignore_errors=True)
# The tests compile with the XLA flags the commands use (`mmc_jax.startup`), so a result computed
# here and one from a command started as a child agree.
startup.apply_xla_flags()
# ... plus two that make XLA:CPU compile faster: no LLVM optimisation of the generated code. The
# tests' programs are compiled once and run briefly, so optimising them costs more than it saves
# (the smoke iterations, each compiled in a fresh process on the 2-core CPU: 23 s of CPU time
# instead of 35 for AlphaZero's, 28 instead of 45 for JOAT's). They change the rounding of some
# floats (last bits), so every process of a test must have them: the children inherit XLA_FLAGS
# (a command's `startup` keeps the flags it finds, and so does `launch.start_local`). A flag
# already in XLA_FLAGS wins (`XLA_FLAGS=--xla_backend_optimization_level=2 pytest ...`).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
_flags = os.environ.get("XLA_FLAGS", "")
_present = {flag.split("=")[0] for flag in _flags.split()}
os.environ["XLA_FLAGS"] = " ".join(
    [_flags, *(flag for flag in TEST_XLA_FLAGS if flag.split("=")[0] not in _present)]
).strip()
# This process uses the session's compilation cache too: a program compiled again (another jit of
# the same function, another test's run of the same config) is loaded instead.
cache.enable_compilation_cache()


# ------------------------------------------------------------------ subprocesses on fake devices

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `from configs import gardner` in tests and their subprocesses
    sys.path.insert(0, str(ROOT))


def start_on_fake_devices(script: str, num_devices: int, *args) -> subprocess.Popen:
    """Starts `python -c script *args` in the repository root with `num_devices` fake CPU
    devices (XLA_FLAGS); stdout/stderr piped. Started early, its compile overlaps the tests'."""
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
    """Kills `process` if it is still running (fixture teardown)."""
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="session")
def fairy_stockfish():
    """Fairy-Stockfish for engine tests: $MMC_ENGINE, or the cached build of pyffish's sources
    (built on first use, about a minute: `python -m mmc_jax.uci build`)."""
    from mmc_jax import uci

    return uci.ensure_engine()
