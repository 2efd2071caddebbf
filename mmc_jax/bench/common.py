"""What every benchmark shares: its result written row by row (`Rows`), the round-robin timers,
and the command-line pieces (output flags, list and round flags, argparse types).

Rows as they are measured (so a time limit never costs a finished row): each row is printed as
soon as it is measured; with `--json`, stdout gets the whole result so far as one JSON line
after every row (the last line is the most complete; `complete` is true once the run finished),
and `--json-out PATH` is rewritten with it after every row. `--time-limit SECONDS` starts no
new row once that many seconds have passed since the command started: the first row always
runs, and one note on stderr names the rows skipped (the JSON's `skipped`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import jax
import numpy as np

from mmc_jax.infra import cli


class Rows:
    """A benchmark's result, written out row by row so that a kill keeps every finished row.

    After each row (`record`): with `--json`, stdout gets the whole result so far as one JSON
    line (so the last line is always the most complete), and `--json-out PATH` is rewritten
    with it (atomically: a reader never sees half a file). With `--time-limit SECONDS`, a row
    may start (`may_start`) only while fewer than that many seconds have passed since the
    command started; the first row always runs, and `finish` names the rows left out in one
    note on stderr. The result carries `complete` (false until `finish`) and `skipped`.
    """

    def __init__(self, args, result: dict):
        self.result = result
        self.json_lines = bool(getattr(args, "json", False))
        self.json_out = getattr(args, "json_out", None)
        self.time_limit = getattr(args, "time_limit", None)
        self.started = getattr(args, "started", None) or time.monotonic()
        self.rows_started = 0
        result["complete"] = False
        result["skipped"] = []

    def may_start(self, row: str) -> bool:
        """Whether row `row` may start now; if not, it is recorded as skipped."""
        late = (
            self.time_limit is not None
            and self.rows_started > 0
            and time.monotonic() - self.started >= self.time_limit
        )
        if late or self.result["skipped"]:  # once one is skipped, so is every later row
            self.result["skipped"].append(row)
            return False
        self.rows_started += 1
        return True

    def record(self) -> None:
        """A row is done: print the result so far (with `--json`) and rewrite `--json-out`."""
        if self.json_lines:
            print(json.dumps(self.result), flush=True)
        if self.json_out:
            write_json(self.json_out, self.result)

    def finish(self) -> dict:
        """The run is over: the result marked complete, recorded, and a note of skipped rows."""
        self.result["complete"] = True
        self.record()
        if self.result["skipped"]:
            print(
                f"note: --time-limit {self.time_limit:g} s reached; skipped "
                + ", ".join(self.result["skipped"]),
                file=sys.stderr,
                flush=True,
            )
        return self.result


def write_json(path: str, data: dict) -> None:
    """`data` as JSON into `path`, through a temporary file beside it and a rename."""
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        json.dump(data, handle)
        handle.write("\n")
    os.replace(temporary, path)


def machine() -> dict:
    """The `device` and `platform` fields every result starts with."""
    return {"device": str(jax.devices()[0].device_kind), "platform": jax.default_backend()}


def tree_bytes(tree) -> int:
    """Bytes of the arrays (or `ShapeDtypeStruct`s) of `tree`."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def say(args, line: str) -> None:
    """Prints `line` unless the benchmark prints JSON (`--json`)."""
    if not getattr(args, "json", False):
        print(line, flush=True)


# ----------------------------------------------------------------------------- timers


def time_scans_interleaved(arms: dict, rounds: int, verbose: bool) -> dict:
    """Each arm `name: (run, state)` (a jitted `run(state, key) -> state`) compiled and warmed
    up, then timed one scan per arm per round, round-robin for `rounds` rounds, each arm
    carrying its own games on: `{name: {"compile_s": s, "seconds": [per-round scan seconds]}}`.

    Round-robin, so that a slow moment of a shared machine slows one round of every arm
    rather than one arm's whole measurement (the ratio of two arms timed one after the other
    moved by 1.28x between back-to-back runs).
    """
    compiled, states, out = {}, {}, {}
    for name, (run, state) in arms.items():
        start = time.perf_counter()
        compiled[name] = run.lower(state, jax.random.key(0)).compile()
        out[name] = {"compile_s": time.perf_counter() - start, "seconds": []}
        states[name] = jax.block_until_ready(compiled[name](state, jax.random.key(0)))  # warm-up
        if verbose and len(arms) > 1:
            print(f"  {name}: compiled in {out[name]['compile_s']:.1f} s", flush=True)
    for i in range(rounds):
        for name in arms:
            start = time.perf_counter()
            states[name] = jax.block_until_ready(
                compiled[name](states[name], jax.random.key(i + 1))
            )
            out[name]["seconds"].append(time.perf_counter() - start)
    return out


def round_ratios(timed: dict, peer: str, reference: str = "mmc_jax") -> list[float]:
    """The peer's seconds over the reference arm's, round by round (above 1: the reference is
    faster)."""
    return [p / m for p, m in zip(timed[peer]["seconds"], timed[reference]["seconds"], strict=True)]


def time_calls_interleaved(
    arms: dict[str, Callable[[], object]], repeats: int, verbose: bool
) -> tuple[dict, dict]:
    """(median seconds, first-call seconds) of each arm `name: fn` (a call that runs it once;
    its result is waited for); the first call of each compiles, then the arms run round-robin
    `repeats` times."""
    first, times = {}, {name: [] for name in arms}
    for name, fn in arms.items():
        start = time.perf_counter()
        jax.block_until_ready(fn())
        first[name] = time.perf_counter() - start
        if verbose:
            print(f"  {name}: first call (compile) {first[name]:.1f} s", flush=True)
    for _ in range(repeats):
        for name, fn in arms.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}, first


# ----------------------------------------------------------------------------- flags

# argparse types (argparse prefixes the flag to their one-line errors).
POSITIVE, NON_NEGATIVE = cli.integer_arg("the value", 1), cli.integer_arg("the value", 0)


def seconds_arg(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0, else a one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not np.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


seconds_arg.__name__ = "seconds"


def add_output_flags(parser, rows: str | None) -> None:
    """--json and --json-out on a subcommand; --time-limit too when it measures several `rows`
    (e.g. "batch size"), each printed and written out as soon as it is measured."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=(
            "print JSON instead of text: one line after every row, the whole result so far "
            "(the last line is the most complete; 'complete' says whether the run finished)"
        ),
    )
    parser.add_argument(
        "--json-out",
        metavar="PATH",
        help="also write the result as JSON to PATH, rewritten after every row",
    )
    if rows is not None:
        parser.add_argument(
            "--time-limit",
            type=seconds_arg,
            metavar="SECONDS",
            help=(
                f"start no new row (one per {rows}) once SECONDS have passed since the "
                "benchmark started; the first row always runs, finished rows are kept, and a "
                "note names the rows skipped (default: no limit)"
            ),
        )


def add_list(parser, flag: str, default: list, help: str, **kwargs) -> None:
    """A flag taking one or more values (one row or arm each), e.g. --batch-sizes 64 256."""
    parser.add_argument(flag, nargs="+", default=default, help=help, **kwargs)


def add_rounds(parser, default: int, what: str) -> None:
    """--repeats: how many timed rounds `what` (their median or fastest is reported)."""
    parser.add_argument(
        "--repeats", type=POSITIVE, default=default, help=f"{what} (default {default})"
    )


def add_network_flags(parser) -> None:
    """--blocks and --channels of the benchmarked network."""
    parser.add_argument("--blocks", type=POSITIVE, default=2, help="residual blocks (default 2)")
    parser.add_argument("--channels", type=POSITIVE, default=32, help="network width (default 32)")


def check_json_out(parser, path: str | None) -> None:
    """Refuses, in one line, a --json-out that cannot be written, before minutes of work."""
    if path is None:
        return
    if os.path.isdir(path):
        parser.error(f"--json-out {path}: is a folder; give a file path")
    try:
        write_json(path, {"complete": False})
    except OSError as error:
        parser.error(f"--json-out {path}: cannot write it ({error.strerror or error})")


def has_pgx() -> bool:
    """Whether pgx (a test and benchmark extra) can be imported."""
    try:
        import pgx  # noqa: F401
    except ImportError:
        return False
    return True
