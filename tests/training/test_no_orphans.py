"""Issue 70, processes left behind: a trainer (or a labels build) killed (kill -9) or stopped
(SIGTERM) while its pool workers play engine games leaves no worker and no engine running;
SIGTERM says what it kept and exits 143; a shard written but not listed is adopted by the next
run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mmc_jax.algorithms import supervised

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    out, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - out
        out |= frontier
    return out


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.add(pid)
        except OSError:
            pass
    return alive


def _start(workdir: Path, engine: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable, "-m", "mmc_jax.train", "--config", "configs/supervised.py:smoke",
            f"--workdir={workdir}", "--config.data.games=40", "--config.data.processes=2",
            "--config.data.nodes=400", "--config.data.max_plies=60",
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "MMC_ENGINE": engine},
    )  # fmt: skip


def _wait_for_engines(process: subprocess.Popen, timeout: float = 120.0) -> set[int]:
    """The trainer's descendants once both workers run an engine (4 or more below it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        below = _children(process.pid)
        engines = [p for p in below if _comm(p).startswith("fairy")]
        if len(engines) >= 2:
            return below
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"no two engines started: {process.communicate()[0][-2000:]}")


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _gone_within(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids)


def _kill_once_engines_run(process: subprocess.Popen, how: str) -> str:
    """Kills `process` (kill -9 or SIGTERM) once two of its workers run an engine, asserts
    that none of its descendants is running 15 s later, and returns its output."""
    below = _wait_for_engines(process)
    os.kill(process.pid, signal.SIGKILL if how == "kill -9" else signal.SIGTERM)
    output = process.communicate(timeout=60)[0]
    left = _gone_within(below, 15.0)
    assert not left, f"still running after {how}: {[_comm(p) for p in left]}"
    return output


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_no_worker_or_engine_outlives_the_trainer(how, tmp_path, fairy_stockfish):
    process = _start(tmp_path / "run", fairy_stockfish)
    output = _kill_once_engines_run(process, how)
    if how == "SIGTERM":
        assert process.returncode == 143, output[-2000:]
        assert "SIGTERM: stopped making the dataset;" in output
        assert "the same command plays the rest" in output
        assert output.strip().splitlines()[-1] == (
            "interrupted before training started; nothing was lost"
        )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_no_worker_or_engine_outlives_a_labels_build(how, tmp_path, fairy_stockfish):
    """`python -m mmc_jax.labels build` with 2 processes: the same, and SIGTERM exits 143 (it
    exited 130, Ctrl-C's status) with the line that says the finished shards are kept."""
    process = subprocess.Popen(
        [
            sys.executable, "-m", "mmc_jax.labels", "build", str(tmp_path / "labels"),
            "--positions", "2000", "--nodes", "100", "--processes", "2",
            "--engine", fairy_stockfish,
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output = _kill_once_engines_run(process, how)
    if how == "SIGTERM":
        assert process.returncode == 143, output[-2000:]
        assert output.strip().splitlines()[-1] == (
            "interrupted: finished shards are kept; rerun the same command"
        )


def test_a_shard_written_but_not_listed_is_adopted(tmp_path, monkeypatch):
    """A killed run's last shard (written whole, then renamed) is listed, not played again."""
    config = supervised.prepare_config(_smoke())
    folder = tmp_path / "dataset"
    folder.mkdir()
    arrays = {
        "fen": np.asarray(["x"] * 3), "actions": np.zeros((3, 4), np.int32),
        "probs": np.zeros((3, 4), np.float32), "value": np.zeros(3, np.float32),
    }  # fmt: skip
    np.savez_compressed(folder / "shard-00001.npz", **arrays)
    played = []

    def job(item):
        played.append(item[1])
        np.savez_compressed(item[2], **arrays)
        return item[1], 3

    lines = []
    monkeypatch.setattr(supervised, "_shard_job", job)
    manifest = supervised.generate(config, str(tmp_path), lines.append)
    assert played == [0]
    assert [s["index"] for s in manifest["shards"]] == [0, 1]
    assert any("shard-00001.npz was written but not listed" in line for line in lines)


def _smoke():
    from configs import supervised as supervised_config

    config = supervised_config.get_config("smoke").copy_and_resolve_references()
    config.unlock()
    config.data.processes = 1
    return config


def _sigterm_to_another_thread() -> None:
    """A pool initializer: the real one (a Python SIGTERM handler), then another thread that
    takes SIGTERM while the main thread blocks it, so the handler waits for the main thread
    to run bytecode, as when the kernel hands SIGTERM to an engine's reader or a JAX thread
    while the main thread waits in C."""
    from mmc_jax.uci import workers

    workers.worker_init()
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _busy(marker: str) -> None:
    """A pool job that says it runs (writes its pid to `marker`) and then works for an hour."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(3600)


def test_a_busy_worker_that_cannot_answer_sigterm_is_killed_and_the_pool_ends(tmp_path):
    """`Pool.terminate` joins a worker deaf to SIGTERM until its job ends (forever for a job
    that waits; the end of a `bench memory` run with 2 label processes hung once);
    `workers.worker_pool` kills it after its grace."""
    from mmc_jax.uci import workers

    marker = tmp_path / "pid"
    started = time.monotonic()
    with workers.worker_pool(2, initializer=_sigterm_to_another_thread, grace=1.0) as pool:
        pool.apply_async(_busy, (str(marker),))
        while not marker.exists() and time.monotonic() - started < 120:
            time.sleep(0.1)
        pid = int(marker.read_text())
    assert time.monotonic() - started < 150
    assert not _gone_within({pid}, 10.0), "the busy worker outlived its pool"
