"""Where the suite's time goes, test by test: a pytest plugin (loaded by tests/conftest.py) and its
summary.

With `MMC_TEST_COMPILE_REPORT=DIR` set, every test process (each pytest-xdist worker) appends one
JSON line per test to `DIR/<worker>.jsonl`: its wall seconds by phase (setup, call, teardown),
the seconds JAX spent tracing, lowering and in XLA's compile in this process meanwhile
(`mmc_jax.infra.compile_log.Tally`, summed over every thread), how many programs XLA compiled and
how many the persistent cache gave, and the XLA seconds of each compiled function by name.
Commands a test starts as children are not in it: their time shows as wall seconds with little
compile. Without the variable the plugin does nothing.

    MMC_TEST_COMPILE_REPORT=/tmp/report python -m pytest -q -n 2
    python tests/compile_report.py /tmp/report          # the summary (--top N)

The summary: the wall and compile seconds of the whole run and of each worker, the slowest tests,
and the functions by XLA seconds summed over the tests that compiled them (a function compiled
by many tests at many shapes is where sharing one shape saves most).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import pytest

from mmc_jax.infra import compile_log

REPORT_ENV = "MMC_TEST_COMPILE_REPORT"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


class _Recorder:
    """The compile events of one test, from its setup to its teardown."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.seconds = {"trace_s": 0.0, "lower_s": 0.0, "xla_s": 0.0}
            self.programs = 0
            self.cache_hits = 0
            self.by_function: collections.Counter[str] = collections.Counter()

    def duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        stage = {
            compile_log.TRACE_EVENT: "trace_s",
            compile_log.LOWER_EVENT: "lower_s",
            compile_log.XLA_EVENT: "xla_s",
        }.get(event)
        if stage is None:
            return
        with self.lock:
            self.seconds[stage] += float(seconds)
            if stage == "xla_s":
                self.programs += 1
                self.by_function[str(kwargs.get("fun_name", "?"))] += float(seconds)

    def event(self, event: str, **kwargs: Any) -> None:
        if event == CACHE_HIT_EVENT:
            with self.lock:
                self.cache_hits += 1

    def record(self) -> dict[str, Any]:
        with self.lock:
            out: dict[str, Any] = {k: round(v, 3) for k, v in self.seconds.items()}
            out["programs"] = self.programs
            out["cache_hits"] = self.cache_hits
            out["functions"] = {
                name: round(s, 3) for name, s in self.by_function.most_common() if s >= 0.05
            }
        return out


class ReportPlugin:
    """Writes one JSON line per test to `directory/<worker>.jsonl`."""

    def __init__(self, directory: Path, worker: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{worker}.jsonl"
        self.worker = worker
        self.recorder = _Recorder()
        self.phases: dict[str, float] = {}
        jax.monitoring.register_event_duration_secs_listener(self.recorder.duration)
        jax.monitoring.register_event_listener(self.recorder.event)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.recorder.reset()
        self.phases = {}
        start = time.perf_counter()
        yield
        line = {"test": item.nodeid, "worker": self.worker, **self.phases}
        line["wall_s"] = round(time.perf_counter() - start, 3)
        line.update(self.recorder.record())
        with self.path.open("a") as handle:
            handle.write(json.dumps(line) + "\n")

    def pytest_runtest_logreport(self, report):
        self.phases[f"{report.when}_s"] = round(report.duration, 3)


def pytest_configure(config):
    directory = os.environ.get(REPORT_ENV, "").strip()
    if directory:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        config.pluginmanager.register(ReportPlugin(Path(directory), worker), "compile-report")


def load(directory: Path) -> list[dict[str, Any]]:
    """Every test's line of a report folder."""
    lines = []
    for path in sorted(directory.glob("*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def summary(lines: list[dict[str, Any]], top: int = 25) -> str:
    """The report as text (see the module doc)."""
    if not lines:
        return "no tests in the report"
    out = []

    def compile_of(line):
        return line["trace_s"] + line["lower_s"] + line["xla_s"]

    workers = collections.defaultdict(list)
    for line in lines:
        workers[line["worker"]].append(line)
    wall = sum(line["wall_s"] for line in lines)
    compiled = sum(compile_of(line) for line in lines)
    out.append(
        f"{len(lines)} tests, {wall:.0f} s of test wall clock, {compiled:.0f} s of it compiling "
        f"in the test processes ({100 * compiled / wall:.0f}%: trace "
        f"{sum(x['trace_s'] for x in lines):.0f}, lower {sum(x['lower_s'] for x in lines):.0f}, "
        f"XLA {sum(x['xla_s'] for x in lines):.0f}); "
        f"{sum(x['programs'] for x in lines)} programs compiled, "
        f"{sum(x['cache_hits'] for x in lines)} from the cache"
    )
    for worker, its in sorted(workers.items()):
        out.append(
            f"  {worker}: {len(its)} tests, {sum(x['wall_s'] for x in its):.0f} s, "
            f"{sum(compile_of(x) for x in its):.0f} s compiling"
        )
    out.append(f"\nthe {top} slowest tests (wall s, compile s, programs):")
    for line in sorted(lines, key=lambda x: -x["wall_s"])[:top]:
        out.append(
            f"  {line['wall_s']:7.1f} {compile_of(line):7.1f} {line['programs']:5d}  {line['test']}"
        )
    seconds: collections.Counter[str] = collections.Counter()
    tests: collections.Counter[str] = collections.Counter()
    for line in lines:
        for name, s in line["functions"].items():
            seconds[name] += s
            tests[name] += 1
    out.append(f"\nthe {top} functions by XLA seconds over all tests (s, tests that compiled it):")
    for name, s in seconds.most_common(top):
        out.append(f"  {s:7.1f} {tests[name]:5d}  {name}")
    by_module: collections.Counter[str] = collections.Counter()
    for line in lines:
        by_module[line["test"].split("::")[0]] += line["wall_s"]
    out.append(f"\nthe {top} test files by wall seconds:")
    for name, s in by_module.most_common(top):
        out.append(f"  {s:7.1f}  {name}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help=f"the folder {REPORT_ENV} named")
    parser.add_argument("--top", type=int, default=25, help="rows of each table (default 25)")
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        print(f"error: {args.directory} is not a folder of a compile report", file=sys.stderr)
        return 2
    print(summary(load(args.directory), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
