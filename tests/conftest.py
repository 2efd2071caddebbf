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

from mmc_jax.infra import cache, startup

# The rules tests' engine, oracles and rollout; the smoke runs of every algorithm and the
# children that compile on other device counts; the per-test compile report
# (`MMC_TEST_COMPILE_REPORT`, tests/compile_report.py).
pytest_plugins = ("rules_support", "runs_support", "compile_report")

# Every test process and the commands the tests start as children share one persistent
# compilation cache (`mmc_jax.infra.cache`), kept between runs: a second run of the suite, or of
# its fast tier after an edit, loads the programs the first compiled (only the changed ones
# compile again). It lives apart from the commands' own cache (the tests compile with other XLA
# flags, so nothing could be shared), in `$MMC_TEST_COMPILE_CACHE`, else `<cache root>/xla-tests`;
# `MMC_TEST_COMPILE_CACHE=off` gives a session a fresh directory for its children only, written
# by no test process (what every run did before: docs/internals.md has the times of both).
TEST_CACHE_ENV = "MMC_TEST_COMPILE_CACHE"
TEST_CACHE_BYTES = 4 << 30  # past this, the least recently written programs are deleted
MIN_COMPILE_SECONDS = "0.2"  # programs compiled faster than this are not worth a file


def prune(directory: Path, limit: int = TEST_CACHE_BYTES) -> None:
    """Delete the oldest files of a cache directory until it holds at most `limit` bytes."""
    files = [(f.stat().st_mtime, f.stat().st_size, f) for f in directory.iterdir() if f.is_file()]
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size


if "MMC_COMPILE_CACHE" not in os.environ:  # the first process of a session (not an xdist worker)
    setting = os.environ.get(TEST_CACHE_ENV, "").strip()
    if setting.lower() in cache.OFF_WORDS:
        os.environ["MMC_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="mmc_jax_test_xla_")
        atexit.register(shutil.rmtree, os.environ["MMC_COMPILE_CACHE"], ignore_errors=True)
        os.environ[TEST_CACHE_ENV] = "off"  # tells the workers
    else:
        directory = Path(setting).expanduser() if setting else cache.cache_root() / "xla-tests"
        directory.mkdir(parents=True, exist_ok=True)
        prune(directory)
        os.environ["MMC_COMPILE_CACHE"] = str(directory)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", MIN_COMPILE_SECONDS)
# The tests compile with the XLA flags the commands use (`mmc_jax.infra.startup`), so a result
# computed here and one from a command started as a child agree.
startup.apply_xla_flags()
# ... plus the tests' own (tests/xla_flags.py): no LLVM optimisation, a third less compile time.
os.environ["XLA_FLAGS"] = xla_flags.with_test_flags(os.environ.get("XLA_FLAGS", ""))
# This process writes the cache too, unless it is off. (It did not until the fourth sitting of
# 2026-11-26: two CI runs had segfaulted inside `compilation_cache.put_executable_and_time`,
# which was the exhaustion of memory mappings that `release_compiled_programs` below prevents.)
if os.environ.get(TEST_CACHE_ENV, "").strip().lower() in cache.OFF_WORDS:
    jax.config.update("jax_enable_compilation_cache", False)
else:
    jax.config.update("jax_compilation_cache_dir", os.environ["MMC_COMPILE_CACHE"])
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs",
        float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
    )


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
