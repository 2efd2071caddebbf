"""What every test process shares: one compilation cache for the children, the XLA flags, the
repository root on `sys.path`, the Fairy-Stockfish engine; and the plugins with the rules fixtures
(tests/rules_support.py) and the smoke runs (tests/runs_support.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import chex
import jax
import pytest
import xla_flags

from mmc_jax.infra import startup

# The rules tests' engine, oracles and rollout; the smoke runs of every algorithm and the
# children that compile on other device counts.
pytest_plugins = ("rules_support", "runs_support")

# The commands the tests start (in this process or as children) share one compilation cache
# (`mmc_jax.infra.cache`), fresh for the session: the user's cache is neither read nor written, and
# a relaunched or resumed command loads what an earlier test compiled.
if "MMC_COMPILE_CACHE" not in os.environ:
    os.environ["MMC_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="mmc_jax_test_xla_")
    atexit.register(shutil.rmtree, os.environ["MMC_COMPILE_CACHE"], ignore_errors=True)
# The tests compile with the XLA flags the commands use (`mmc_jax.infra.startup`), so a result
# computed here and one from a command started as a child agree.
startup.apply_xla_flags()
# ... plus the tests' own (tests/xla_flags.py): no LLVM optimisation, a third less compile time.
os.environ["XLA_FLAGS"] = xla_flags.with_test_flags(os.environ.get("XLA_FLAGS", ""))
# This process never writes the compilation cache: a command called in-process (`train.train`,
# a CLI's `main`) would turn it on mid-session, and JAX 0.10.2 then crashed the whole run twice
# in CI (a segfault inside `compilation_cache.put_executable_and_time`, 2026-11-26). Programs
# compiled here are shared through jit's in-memory caches; children use the directory above.
jax.config.update("jax_enable_compilation_cache", False)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`-n N` (pytest-xdist) schedules by group unless `--dist` says otherwise: the tests of the
    shared smoke runs (tests/runs_support.py) then run in one worker, which compiles them once."""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Tells each pytest-xdist worker how the tests are scheduled (it parses the command line
    again, where `-n` alone does not say "loadgroup")."""
    node.workerinput["dist"] = node.config.option.dist


# One pytest process compiles thousands of XLA programs, and every executable jit keeps maps a
# few regions of memory: the whole suite passed Linux's default of 65,530 mappings per process
# (`vm.max_map_count`) around its 400th test, after which XLA segfaulted in whatever it did next
# (a compile, a cache write: CI on 2026-11-26). Between tests, past this many mappings, jit's
# caches are dropped (`jax.clear_caches`), which unmaps them; a program needed again compiles again
# (and chex's trace counts, which `chex.assert_max_traces` tests read, start again).
MAX_MAPPINGS = 20_000
MAPS = Path("/proc/self/maps")


def mappings() -> int:
    """Memory mappings of this process (0 where /proc does not say)."""
    try:
        with MAPS.open("rb") as handle:
            return sum(1 for _ in handle)
    except OSError:
        return 0


@pytest.fixture(autouse=True)
def release_compiled_programs():
    yield
    if mappings() > MAX_MAPPINGS:
        jax.clear_caches()
        chex.clear_trace_counter()  # a function traced again after this is no test's fault


ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `from configs import gardner` in tests and their subprocesses
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def fairy_stockfish():
    """Fairy-Stockfish for engine tests: $MMC_ENGINE, or the cached build of pyffish's sources
    (built on first use, about a minute: `python -m mmc_jax.uci build`)."""
    from mmc_jax import uci

    return uci.ensure_engine()
