"""What every test process shares: one compilation cache, the XLA flags, the repository root on
`sys.path`, the Fairy-Stockfish engine; and the plugins with the rules fixtures
(tests/rules_support.py) and the smoke runs (tests/runs_support.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from mmc_jax import cache, startup

# The rules tests' engine, oracles and rollout; the smoke runs of every algorithm and the
# children that compile on other device counts.
pytest_plugins = ("rules_support", "runs_support")

# The commands the tests start (in this process or as children) share one compilation cache
# (`mmc_jax.cache`), fresh for the session: the user's cache is neither read nor written, and a
# relaunched or resumed command loads what an earlier test compiled.
if "MMC_COMPILE_CACHE" not in os.environ:
    os.environ["MMC_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="mmc_jax_test_xla_")
    atexit.register(shutil.rmtree, os.environ["MMC_COMPILE_CACHE"], ignore_errors=True)
# ... but this process never writes it: a command called in-process (`train.train`, a CLI's
# `main`) would turn it on mid-session, and JAX 0.10.2 then crashed the whole run twice in CI
# (a segfault inside `compilation_cache.put_executable_and_time`, 2026-11-26). Programs compiled
# here are shared through jit's in-memory caches; children still use the directory above.
jax.config.update("jax_enable_compilation_cache", False)
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


ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `from configs import gardner` in tests and their subprocesses
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def fairy_stockfish():
    """Fairy-Stockfish for engine tests: $MMC_ENGINE, or the cached build of pyffish's sources
    (built on first use, about a minute: `python -m mmc_jax.uci build`)."""
    from mmc_jax import uci

    return uci.ensure_engine()
