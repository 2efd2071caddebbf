"""`python -m mmc_jax.bench processes`: the multi-process overhead on this machine.

`train` (default `configs/gardner.py:cpu`) as 2 processes x 1 CPU device joined by gloo over
127.0.0.1 (`launch.start_local`) against 1 process x 2 devices, the same global batch, the
median of the iteration times each run records, alternated `--repeats` times;
`two_processes_vs_one` is the time ratio. A row per training run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from mmc_jax import launch
from mmc_jax.bench import common
from mmc_jax.infra import cli, metrics

NAME = "processes"
HELP = "multi-process overhead: 2 processes x 1 device vs 1 process x 2 devices (gloo)"
ROWS = "training run"
LAYOUTS = (("1 process x 2 devices", 1, 2), ("2 processes x 1 device", 2, 1))


def add_flags(p) -> None:
    """The `processes` subcommand's flags."""
    p.add_argument(
        "--config",
        default="configs/gardner.py:cpu",
        help="train config (default configs/gardner.py:cpu)",
    )
    p.add_argument(
        "--iterations",
        type=cli.integer_arg("the value", 2),
        default=6,
        help="iterations per run (default 6)",
    )
    common.add_rounds(p, 2, "runs per layout")


def iteration_seconds(config: str, iterations: int, processes: int, devices: int) -> dict:
    """Runs `python -m mmc_jax.train --config CONFIG` for `iterations` iterations as
    `processes` local processes (`launch.start_local`) and reads the iteration times that the
    run itself recorded (`perf/iteration_seconds`; the first, with any lazy compile, is
    dropped)."""
    with tempfile.TemporaryDirectory(prefix="mmc_bench_processes_") as folder:
        workdir = os.path.join(folder, "run")
        command = [
            sys.executable,
            "-m",
            "mmc_jax.train",
            "--config",
            config,
            f"--config.num_iterations={iterations}",
            "--config.eval.every=0",
            f"--config.checkpoint.every={iterations}",
            "--workdir",
            workdir,
        ]
        started = time.time()
        codes = launch.wait_local(launch.start_local(command, processes, devices, folder))
        wall = time.time() - started
        if any(codes):
            with open(os.path.join(folder, "process_0.log")) as handle:
                log = handle.read()
            raise SystemExit(f"error: the {processes}-process run failed:\n{log[-2000:]}")
        seconds = [r["perf/iteration_seconds"] for r in metrics.read_metrics(workdir)][1:]
    return {
        "iteration_s": float(np.median(seconds)),
        "iterations_timed": len(seconds),
        "wall_s": wall,
    }


def run(args) -> dict:
    """Multi-process overhead on this machine: seconds per training iteration of 2 processes x
    1 CPU device (joined by gloo over 127.0.0.1) against 1 process x 2 devices, the same
    global batch, alternated `--repeats` times (each run a row)."""
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in LAYOUTS}
    (one_label, _, _), (two_label, _, _) = LAYOUTS
    result = {"benchmark": "processes", "config": args.config, "iteration_s": {}, "runs": runs}
    rows = common.Rows(args, result)
    for repeat in range(args.repeats):
        for label, processes, devices in LAYOUTS:
            if not rows.may_start(f"{label} #{repeat + 1}"):
                continue
            row = iteration_seconds(args.config, args.iterations, processes, devices)
            runs[label].append(row)
            # The summary of the runs so far, so that every record holds a usable result.
            result["iteration_s"] = {
                name: float(np.median([r["iteration_s"] for r in rs]))
                for name, rs in runs.items()
                if rs
            }
            medians = result["iteration_s"]
            if one_label in medians and two_label in medians:
                result["two_processes_vs_one"] = medians[two_label] / medians[one_label]
            result["load_average"] = os.getloadavg()
            rows.record()
            common.say(
                args,
                f"{label}: {row['iteration_s']:.2f} s per iteration (median of "
                f"{row['iterations_timed']}, run wall {row['wall_s']:.0f} s)",
            )
    if "two_processes_vs_one" in result:
        common.say(
            args,
            f"{two_label} / {one_label}: {result['two_processes_vs_one']:.2f}x the time per "
            f"iteration (load average {result['load_average'][0]:.1f})",
        )
    return rows.finish()
