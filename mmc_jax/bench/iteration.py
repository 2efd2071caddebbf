"""`python -m mmc_jax.bench iteration`: seconds per training iteration of any learner, timed
through its compiled step, arms of config overrides side by side.

For each `--configs` spec (a row each; default `configs/gardner.py:cpu configs/joat.py:quick`)
every arm is made as `train` makes a run (`mmc_jax.bench.contract`: the algorithm the config
names prepares it, makes its mesh and data, a fresh state, and compiles its iteration, the
`CompiledStep` the run loop calls), runs `--warmup` iterations untimed (a replay ring fills,
games get under way), then `--repeats` rounds, round-robin over the arms, each carrying its own
state on: one iteration (the host's data, `Algorithm.host_data`, and the compiled step, as the
run loop's `perf/iteration_seconds` counts it) and one synchronous checkpoint save of what a
checkpoint of the run holds (`runloop.checkpoint_state`, the config's `checkpoint.save_replay`).
Each arm gets the median seconds per iteration and per checkpoint, its compile seconds, frames
per second from the iteration's record (`selfplay/frames`; games per second where it plays
games) and, after the first arm, `vs_first`: the median over the rounds of its iteration
seconds over the first arm's (above 1: slower than the first). Every arm plays from the same
keys (`config.seed`, folded with the iteration), so two arms whose configs agree on the games
play the same ones.

An arm is `--arm NAME:OVERRIDES`, OVERRIDES `--config.FIELD=VALUE` words as `train` takes them
(quoted as one argument; none: the config as it is); without `--arm` a config is timed as it
is. Every arm's config is read before any work, so a misspelt field fails at once. No learner
is special: what used to be one learner's own before/after comparison is a pair of arms, e.g.

    python -m mmc_jax.bench iteration --configs configs/gardner.py:cpu \\
        --arm 'adam:' --arm 'sgd:--config.learner.optimizer=sgd'

or, for a config that has these fields, a minibatch sampler (`--arm
'gumbel:--config.learner.sampler=gumbel'` beside `--arm 'inverse_cdf:'`), refilled self-play
slots (`--arm 'refill:--config.selfplay.refill=True'`), a deeper replay (`--arm
'replay4:--config.replay.iterations=4'`). `--init-from MODEL` starts every arm from a trained
model's parameters (games as long as a trained run's). A comparison that is no config field
is no arm: XLA's own convolution gradient (`network.xla_conv_grad`, the "before" of issue 10)
is the learner benchmark's.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, NamedTuple

import jax
import numpy as np

from mmc_jax.bench import common, contract
from mmc_jax.infra import checkpoint
from mmc_jax.training import runloop

NAME = "iteration"
HELP = "seconds per training iteration of any learner through its compiled step, arms side by side"
ROWS = "config"
DEFAULT_CONFIGS = ["configs/gardner.py:cpu", "configs/joat.py:quick"]
FRAMES, GAMES = runloop.FRAMES_KEY, runloop.GAMES_KEY


def add_flags(p) -> None:
    """The `iteration` subcommand's flags."""
    common.add_list(
        p,
        "--configs",
        DEFAULT_CONFIGS,
        f"the configs timed, one row each: {contract.SPEC_HELP} "
        f"(default {' '.join(DEFAULT_CONFIGS)})",
        metavar="SPEC",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME:OVERRIDES",
        help="an arm: the config with these --config.FIELD=VALUE overrides (one quoted "
        "argument, e.g. 'gumbel:--config.learner.sampler=gumbel'); repeat for more arms, timed "
        "round-robin, ratios to the first (default: one arm, the config as it is)",
    )
    p.add_argument(
        "--warmup",
        type=common.NON_NEGATIVE,
        default=2,
        help="untimed iterations of every arm before the timed rounds (default 2)",
    )
    p.add_argument(
        "--init-from",
        default="",
        metavar="MODEL",
        help="start every arm from this model's parameters (a run, an export or a shipped "
        "name, as train --init_from; default fresh parameters)",
    )
    common.add_rounds(p, 3, "timed rounds, one iteration of every arm each, round-robin")


def check(parser, args) -> None:
    """Refuses (one usage line) a spec or an arm that cannot be read; `args.arms` becomes
    [(name, overrides)]."""
    for spec in args.configs:
        try:
            contract.config_file(spec)
        except ValueError as error:
            parser.error(f"--configs {error}")
    args.arms = []
    for text in args.arm or [":"]:
        name, colon, words = text.partition(":")
        if not colon or (args.arm and not name.strip()):
            parser.error(f"--arm {text!r}: expected NAME:OVERRIDES, e.g. 'gumbel:--config.x=y'")
        try:
            overrides = contract.overrides_of(words)
        except ValueError as error:
            parser.error(f"--arm {text!r}: {error}")
        args.arms.append((name.strip() or "config", overrides))
    names = [name for name, _ in args.arms]
    if len(set(names)) < len(names):
        parser.error(f"--arm: two arms have the same name ({', '.join(names)})")
    for spec in args.configs:  # every arm's config read before minutes of work
        for name, overrides in args.arms:
            try:
                contract.load_config(spec, overrides)
            except ValueError as error:
                parser.error(f"--arm {name}: {error}" if overrides else f"--configs {error}")


class Arm(NamedTuple):
    """An arm made ready to time: the prepared config, its data, its compiled step."""

    prepared: contract.Prepared
    data: Any
    step: Any
    compile_s: float


def make_arm(args, spec: str, name: str, overrides: list[str]) -> tuple[Arm, Any]:
    """(the arm, its fresh state): prepared, data loaded, state made, iteration compiled."""
    prepared = contract.prepare(spec, overrides)
    data = contract.load_data(prepared, lambda line: common.say(args, f"  {name}: {line}"))
    state = contract.init_state(prepared, data, args.init_from)
    started = time.perf_counter()
    step = contract.compile_step(prepared, state, data)
    compile_s = time.perf_counter() - started
    described = prepared.algorithm.describe(prepared.config, prepared.mesh, state)
    common.say(args, f"  {name}: {described}")
    common.say(args, f"  {name}: compiled in {compile_s:.1f} s")
    return Arm(prepared, data, step, compile_s), state


def one_iteration(arm: Arm, state, iteration: int) -> tuple[Any, dict, float]:
    """(state, record, seconds) of iteration `iteration`: the host's data and the step."""
    algorithm, config, mesh = arm.prepared.algorithm, arm.prepared.config, arm.prepared.mesh
    started = time.perf_counter()
    data = algorithm.host_data(config, mesh, arm.data, iteration)
    state, record = arm.step(state, data, contract.iteration_key(config, iteration), iteration)
    jax.block_until_ready(state)
    return state, record, time.perf_counter() - started


def checkpoint_seconds(arm: Arm, state) -> float:
    """Seconds of a synchronous save of what a checkpoint of the run holds."""
    algorithm, config = arm.prepared.algorithm, arm.prepared.config
    saved = runloop.checkpoint_state(
        algorithm, state, 1, 1, 1, save_replay=bool(config.checkpoint.save_replay)
    )
    with tempfile.TemporaryDirectory(prefix="mmc_bench_checkpoint_") as workdir:
        started = time.perf_counter()
        checkpoint.save_checkpoint(workdir, 1, saved, max_to_keep=1)
        return time.perf_counter() - started


def time_arms(args, arms: dict[str, Arm], states: dict[str, Any]) -> dict[str, dict]:
    """The warm-up, then `args.repeats` rounds round-robin: {arm: its seconds, checkpoint
    seconds and records of every round}."""
    timed = {name: {"seconds": [], "checkpoint": [], "records": []} for name in arms}
    for name, arm in arms.items():
        for i in range(args.warmup):
            states[name], _, seconds = one_iteration(arm, states[name], i)
            common.say(args, f"  {name}: warm-up iteration {i + 1} {seconds:.2f} s")
    for round_ in range(args.repeats):
        for name, arm in arms.items():
            states[name], record, seconds = one_iteration(arm, states[name], args.warmup + round_)
            timed[name]["seconds"].append(seconds)
            timed[name]["records"].append(record)
            timed[name]["checkpoint"].append(checkpoint_seconds(arm, states[name]))
    return timed


def rate(key: str, records: list[dict], seconds: list[float]) -> float:
    """The median over the rounds of the record's `key` per second."""
    return float(np.median([r[key] / s for r, s in zip(records, seconds, strict=True)]))


def summary(arm: Arm, timed: dict, first: dict | None, overrides: list[str]) -> dict:
    """One arm's part of a row: medians, rates, and its ratio to the first arm."""
    seconds, records = timed["seconds"], timed["records"]
    iteration_s = float(np.median(seconds))
    checkpoint_s = float(np.median(timed["checkpoint"]))
    out = {
        "overrides": overrides,
        "batch": arm.prepared.batch,
        "compile_s": arm.compile_s,
        "iteration_s": iteration_s,
        "seconds_per_round": seconds,
        "checkpoint_s": checkpoint_s,
        "iteration_with_checkpoint_s": iteration_s + checkpoint_s,
        "frames_per_iteration": float(np.median([r[FRAMES] for r in records])),
        "frames_per_s": rate(FRAMES, records, seconds),
    }
    if all(GAMES in r for r in records):
        out["games_per_s"] = rate(GAMES, records, seconds)
    if first is not None:
        ratios = [s / f for s, f in zip(seconds, first["seconds"], strict=True)]
        out["vs_first"] = float(np.median(ratios))
    return out


def time_config(args, spec: str) -> dict:
    """A row: every arm of `spec` made, warmed up and timed round-robin."""
    arms, states = {}, {}
    for name, overrides in args.arms:
        try:
            arms[name], states[name] = make_arm(args, spec, name, overrides)
        except ValueError as error:
            raise SystemExit(f"error: {f'arm {name}: ' if args.arm else ''}{error}") from None
    timed = time_arms(args, arms, states)
    first_name = next(iter(arms))
    algorithm = arms[first_name].prepared.algorithm
    return {
        "config": spec,
        "algorithm": algorithm.name,
        "arms": {
            name: summary(
                arm,
                timed[name],
                None if name == first_name else timed[first_name],
                dict(args.arms)[name],
            )
            for name, arm in arms.items()
        },
    }


def row_lines(row: dict) -> list[str]:
    """The text lines of a row: one per arm."""
    lines = []
    for name, arm in row["arms"].items():
        batch = ", ".join(f"{k}={v}" for k, v in arm["batch"].items())
        line = (
            f"{row['config']} [{name}] ({row['algorithm']}, {batch}): "
            f"{arm['iteration_s']:.2f} s per iteration, checkpoint {arm['checkpoint_s']:.2f} s, "
            f"{arm['frames_per_s']:,.0f} frames/s"
        )
        if "games_per_s" in arm:
            line += f", {arm['games_per_s']:,.1f} games/s"
        line += f" (compile {arm['compile_s']:.1f} s)"
        if "vs_first" in arm:
            line += f"; {arm['vs_first']:.2f}x the first arm's time"
        lines.append(line)
    return lines


def run(args) -> dict:
    """Seconds per iteration of every arm of every `--configs` spec (a row each)."""
    result = {
        "benchmark": "iteration",
        **common.machine(),
        "devices": jax.device_count(),
        "warmup": args.warmup,
        "repeats": args.repeats,
        "arms": {name: overrides for name, overrides in args.arms},
        "init_from": args.init_from or "fresh parameters",
        "runs": [],
    }
    rows = common.Rows(args, result)
    for spec in args.configs:
        if not rows.may_start(spec):
            continue
        result["runs"].append(time_config(args, spec))
        rows.record()
        if not args.json:
            print("\n".join(row_lines(result["runs"][-1])), flush=True)
    return rows.finish()
