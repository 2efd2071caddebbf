"""The persistent compilation cache (`mmc_jax.infra.cache`): where it goes, how it is turned off,
and that a second process loads what the first compiled instead of compiling it again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

from mmc_jax.infra import cache

ROOT = Path(__file__).resolve().parents[2]


def test_compilation_cache_dir_follows_the_environment(tmp_path):
    assert cache.compilation_cache_dir({"MMC_CACHE": str(tmp_path)}) == str(tmp_path / "xla")
    assert cache.compilation_cache_dir({"XDG_CACHE_HOME": "/x"}) == "/x/mmc_jax/xla"
    assert cache.compilation_cache_dir({"MMC_COMPILE_CACHE": str(tmp_path / "c")}) == str(
        tmp_path / "c"
    )
    for off in ("off", "0", "False", "no"):
        assert cache.compilation_cache_dir({"MMC_COMPILE_CACHE": off}) is None
    # JAX's own variable wins: the project leaves the choice to JAX.
    assert cache.compilation_cache_dir({"JAX_COMPILATION_CACHE_DIR": "/j"}) is None


def test_an_unwritable_cache_dir_leaves_the_cache_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert cache.enable_compilation_cache({"MMC_COMPILE_CACHE": str(blocker / "xla")}) is None


def test_a_multi_process_run_leaves_the_cache_off(tmp_path, monkeypatch):
    import jax

    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    assert cache.enable_compilation_cache({"MMC_COMPILE_CACHE": str(tmp_path / "xla")}) is None
    assert not (tmp_path / "xla").exists()


_PROGRAM = """
import jax, jax.numpy as jnp
from mmc_jax.infra import cache
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
assert cache.enable_compilation_cache() is not None
f = jax.jit(lambda x: jnp.tanh(x) @ x.T + 1.0)
print(float(f(jnp.ones((16, 16))).sum()))
hits = sum(e.endswith("/cache_hits") for e in events)
print(hits, sum(e.endswith("/cache_misses") for e in events))
"""


def _run(directory: Path, off: bool = False) -> tuple[str, int, int]:
    env = dict(
        os.environ,
        MMC_COMPILE_CACHE="off" if off else str(directory),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(ROOT),
    )
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    program = _PROGRAM.replace("is not None", "is None") if off else _PROGRAM
    out = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    hits, misses = map(int, out[1].split())
    return out[0], hits, misses


def test_a_second_process_loads_the_compiled_program_from_the_cache(tmp_path):
    directory = tmp_path / "xla"
    value, hits, misses = _run(directory)
    assert hits == 0 and misses >= 1
    entries = sorted(os.listdir(directory))
    assert entries
    again, hits, misses = _run(directory)
    assert again == value
    assert hits >= 1 and misses == 0
    assert sorted(os.listdir(directory)) == entries
    # Turned off: nothing is read or written.
    _, hits, misses = _run(directory, off=True)
    assert hits == misses == 0


@pytest.mark.skipif(not conftest.MAPS.exists(), reason="no /proc/self/maps")
def test_dropping_jits_caches_unmaps_their_programs():
    # What keeps the whole suite in one process under vm.max_map_count (tests/conftest.py).
    import jax
    import jax.numpy as jnp

    jax.clear_caches()
    before = conftest.mappings()
    functions = [jax.jit(lambda x, i=i: jnp.tanh(x * i) + i) for i in range(60)]
    for function in functions:
        function(jnp.ones(4)).block_until_ready()
    compiled = conftest.mappings()
    assert compiled > before + 60  # each executable maps memory of its own
    jax.clear_caches()
    assert conftest.mappings() < before + (compiled - before) // 2  # most of them released


def test_the_cache_folder_is_named_on_first_use_only(tmp_path, capsys, monkeypatch):
    import jax

    directory = tmp_path / "fresh"
    before = jax.config.jax_compilation_cache_dir
    monkeypatch.setattr(jax.config, "update", lambda *args: None)  # leave the session's cache
    assert cache.enable_compilation_cache({"MMC_COMPILE_CACHE": str(directory)}) == str(directory)
    err = capsys.readouterr().err
    assert f"compiled programs are kept in {directory}" in err and "MMC_COMPILE_CACHE=off" in err
    assert cache.enable_compilation_cache({"MMC_COMPILE_CACHE": str(directory)}) == str(directory)
    assert capsys.readouterr().err == ""
    assert jax.config.jax_compilation_cache_dir == before
