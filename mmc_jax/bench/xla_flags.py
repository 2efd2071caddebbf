"""`python -m mmc_jax.bench xla-flags`: the project's XLA flags (`mmc_jax.infra.startup`)
against XLA's defaults.

`selfplay` at each `--batch-sizes` and `learner`, each run as its own process
(`python -m mmc_jax.bench ... --json`) with XLA's defaults (`MMC_XLA_FLAGS=off`) and with the
project's flags, alternated `--rounds` times; it reports the medians and `speedup` (default time
/ flagged time, above 1: the flags help). A row per child run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from mmc_jax.bench import common
from mmc_jax.infra import startup

NAME = "xla-flags"
HELP = "self-play and learner with XLA's defaults vs the project's flags (processes)"
ROWS = "child run"
ARMS = ("xla defaults", "project flags")


def add_flags(p) -> None:
    """The `xla-flags` subcommand's flags."""
    common.add_list(
        p,
        "--batch-sizes",
        [64, 256],
        "self-play batches, one row each (default 64 256)",
        type=common.POSITIVE,
    )
    p.add_argument(
        "--rounds", type=common.POSITIVE, default=2, help="alternated runs per arm (default 2)"
    )


def child_json(argv: list[str], environ: dict) -> dict:
    """Runs `python -m mmc_jax.bench ARGV --json` in a child process; its JSON object."""
    done = subprocess.run(
        [sys.executable, "-m", "mmc_jax.bench", *argv, "--json"],
        env=environ,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: bench {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args) -> dict:
    """Self-play moves/s and learner seconds with XLA's defaults against the project's flags
    (`startup.XLA_CPU_FLAGS`), each a child process started from `args.environ` (this
    process's environment before `startup.apply_xla_flags`), alternated `args.rounds` times;
    each child run is a row."""
    environ = args.environ
    flagged = startup.xla_flags_value(environ)
    if flagged is None:
        raise SystemExit(
            "error: the project adds no XLA flags here (MMC_XLA_FLAGS is off, they are already "
            f"in XLA_FLAGS, or jaxlib {startup.jaxlib_version()} is not one of "
            f"{startup.XLA_CPU_FLAGS_JAXLIB}): nothing to compare"
        )
    envs = {
        ARMS[0]: {**environ, startup.XLA_FLAGS_ENV: "off"},
        ARMS[1]: {**environ, "XLA_FLAGS": flagged},
    }
    jobs = {f"selfplay B={b}": ["selfplay", "--batch", str(b)] for b in args.batch_sizes}
    jobs["learner"] = ["learner"]
    raw: dict[str, dict[str, list[dict]]] = {job: {arm: [] for arm in envs} for job in jobs}
    result = {
        "benchmark": "xla-flags",
        "flags": list(startup.XLA_CPU_FLAGS),
        "jaxlib": ".".join(map(str, startup.jaxlib_version() or ())),
        "rounds": args.rounds,
        "rows": {},
        "runs": raw,
    }
    rows = common.Rows(args, result)
    total = args.rounds * len(jobs) * len(envs)
    started, done = time.time(), 0
    for round_ in range(args.rounds):
        for job, argv in jobs.items():
            for arm, env in envs.items():
                if not rows.may_start(f"{job}, {arm} #{round_ + 1}"):
                    continue
                raw[job][arm].append(child_json(argv, env))
                done += 1
                result["rows"] = summary_rows(raw)
                result["load_average"] = os.getloadavg()
                rows.record()
                left = (time.time() - started) / done * (total - done)
                common.say(args, f"[{done}/{total}] {job}, {arm} (ETA {left:.0f} s)")
    common.say(args, f"flags: {' '.join(startup.XLA_CPU_FLAGS)}")
    for name, row in result["rows"].items():
        common.say(
            args,
            f"{name:>24}: {ARMS[0]} {row[ARMS[0]]:.4g}, "
            f"{ARMS[1]} {row[ARMS[1]]:.4g}: {row['speedup']:.2f}x",
        )
    return rows.finish()


def summary_rows(raw: dict) -> dict:
    """The medians of each job's runs under each arm and their speedup, for the jobs that have
    runs under both arms so far."""

    def median(runs, read):
        return float(np.median([read(r) for r in runs]))

    rows = {}
    for job, arms in raw.items():
        if not all(arms.get(arm) for arm in ARMS):
            continue
        if job == "learner":
            for part in ("learner", "inner_loop", "inner_loop_vmap"):
                seconds = {
                    arm: median(arms[arm], lambda r, p=part: r["seconds"][p]) for arm in ARMS
                }
                rows[f"{part} s"] = {**seconds, "speedup": seconds[ARMS[0]] / seconds[ARMS[1]]}
        else:
            rate = {arm: median(arms[arm], lambda r: r["moves_per_s"]) for arm in ARMS}
            rows[f"{job} moves/s"] = {**rate, "speedup": rate[ARMS[1]] / rate[ARMS[0]]}
    return rows
