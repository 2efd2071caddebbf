"""Metrics logging: the only module that touches log files.

`MetricsWriter(workdir)` appends one JSON object per `write` to `<workdir>/metrics.jsonl`, writes
the same scalars to TensorBoard (`<workdir>/tensorboard`, via tensorboardX) and prints a compact
progress line. `read_metrics` reads the JSON lines back, tolerating a truncated last line (a run
SIGKILLed mid-write); `plot_metrics` draws PNGs into `<workdir>/plots`.

Key conventions (flat dicts, `/`-separated names), which the plots rely on:

  frames                              environment steps so far (x axis of the plots)
  .../policy_loss, .../value_loss     e.g. `train/policy_loss`, `train/gardner/value_loss`
  .../score_vs_<baseline>             e.g. `eval/gardner/score_vs_random` (score = W + D/2)

Every record also gets `step` (the value passed to `write`) and `time` (Unix seconds).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_SUBDIR = "tensorboard"
PLOTS_SUBDIR = "plots"

_SCORE_KEY = re.compile(r"^(?:(?P<prefix>.*)/)?score_vs_(?P<baseline>[^/]+)$")


def _to_python(value: Any) -> Any:
    """Converts JAX / NumPy scalars to Python numbers; other values pass through."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        array = np.asarray(value)
        if array.size == 1:
            value = array.reshape(()).item()
        else:
            return array.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _parse_lines(text: str) -> tuple[list[dict[str, Any]], int]:
    """Parses JSON lines; returns (records, number of lines skipped as unreadable)."""
    records, skipped = [], 0
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            if index < len(lines) - 1 and any(rest.strip() for rest in lines[index + 1 :]):
                warnings.warn(f"{METRICS_FILE}: skipping unreadable line {index + 1}", stacklevel=3)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of `<workdir>/metrics.jsonl` in file order ([] if the file does not exist).

    A truncated or otherwise unreadable line (typically the last one, cut by a SIGKILL) is
    skipped rather than raising.
    """
    path = os.path.join(os.fspath(workdir), METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        records, _ = _parse_lines(f.read())
    return records


def _rewrite_atomically(path: str, records: Sequence[Mapping[str, Any]]) -> None:
    tmp_path = path + ".tmp"
    with open(tmp_path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp_path, path)


class MetricsWriter:
    """Appends metrics to `metrics.jsonl`, TensorBoard and stdout.

    Args:
      workdir: run directory (created if needed).
      resume_step: when resuming from a checkpoint at this step, records with a larger step
        (written after that checkpoint by the killed run) are dropped from `metrics.jsonl` and
        purged from TensorBoard, so the resumed run does not log them twice.
      tensorboard: also write TensorBoard event files.
      print_keys: keys shown on the progress line; by default every key with at most one `/`
        (aggregates; per-variant keys such as `train/gardner/policy_loss` go only to files).
      enabled: False turns every method into a no-op (use `jax.process_index() == 0`).
      stream: where the progress line goes (default stdout); None for no printing.
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        resume_step: int | None = None,
        tensorboard: bool = True,
        print_keys: Sequence[str] | None = None,
        enabled: bool = True,
        stream: Any = sys.stdout,
    ):
        self.workdir = os.fspath(workdir)
        self.path = os.path.join(self.workdir, METRICS_FILE)
        self.enabled = enabled
        self.print_keys = None if print_keys is None else list(print_keys)
        self.stream = stream
        self._start_time = time.time()
        self._file = None
        self._tb_writer = None
        if not enabled:
            return
        os.makedirs(self.workdir, exist_ok=True)
        self._repair(resume_step)
        self._file = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            from tensorboardX import SummaryWriter

            purge_step = None if resume_step is None else int(resume_step) + 1
            self._tb_writer = SummaryWriter(
                os.path.join(self.workdir, TENSORBOARD_SUBDIR), purge_step=purge_step
            )

    def _repair(self, resume_step: int | None) -> None:
        """Drops an unreadable tail (and records after `resume_step`) before appending."""
        if not os.path.exists(self.path):
            return
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        records, skipped = _parse_lines(text)
        kept = records
        if resume_step is not None:
            kept = [r for r in records if r.get("step", -math.inf) <= resume_step]
        # A partial last line without its newline would otherwise glue onto the next record.
        if skipped or len(kept) != len(records) or (text and not text.endswith("\n")):
            _rewrite_atomically(self.path, kept)

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Logs one record of scalars at `step`; returns the record as written to JSON.

        Values may be Python, NumPy or JAX scalars (non-scalar arrays are stored as lists in JSON
        and not sent to TensorBoard).
        """
        record = {"step": int(step), "time": time.time()}
        record.update({str(k): _to_python(v) for k, v in metrics.items()})
        if not self.enabled:
            return record
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb_writer is not None:
            for key, value in record.items():
                if key in ("step", "time") or isinstance(value, bool):
                    continue
                if isinstance(value, int | float):
                    self._tb_writer.add_scalar(key, value, int(step))
            self._tb_writer.flush()
        if self.stream is not None:
            print(self.format_line(record), file=self.stream, flush=True)
        return record

    def format_line(self, record: Mapping[str, Any]) -> str:
        """The compact progress line for a record."""
        parts = [f"step {record['step']}"]
        if "frames" in record:
            parts.append(f"frames {compact_number(record['frames'])}")
        for key, value in record.items():
            if key in ("step", "time", "frames"):
                continue
            if self.print_keys is not None:
                if key not in self.print_keys:
                    continue
            elif key.count("/") > 1:
                continue
            if isinstance(value, float):
                parts.append(f"{key} {value:.4g}")
            elif isinstance(value, int | str):
                parts.append(f"{key} {value}")
        parts.append(f"[{time.time() - self._start_time:.0f}s]")
        return " | ".join(parts)

    def close(self) -> None:
        """Flushes and closes the files."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb_writer is not None:
            self._tb_writer.close()
            self._tb_writer = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def compact_number(value: Any) -> str:
    """A count for a progress line: `1234` -> `1.2k`, `2500000` -> `2.5M`."""
    if not isinstance(value, int | float):
        return str(value)
    for threshold, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _series(
    records: Sequence[Mapping[str, Any]], key: str, x_key: str
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for record in records:
        value = record.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            xs.append(record.get(x_key, record.get("step", len(xs))))
            ys.append(value)
    return xs, ys


def plot_metrics(workdir: str | os.PathLike, *, x_key: str = "frames") -> list[str]:
    """Draws the run's curves from `metrics.jsonl` into `<workdir>/plots`; returns PNG paths.

    Writes `policy_loss.png` and `value_loss.png` (every key ending in that name) and one
    `score_vs_<baseline>.png` per baseline (one line per key `<prefix>/score_vs_<baseline>`),
    all against `x_key` (falling back to `step` for records without it). Figures without data are
    skipped.
    """
    # Object-oriented matplotlib with the Agg canvas: no pyplot, no global backend switch.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = read_metrics(workdir)
    keys = sorted({k for r in records for k in r})
    x_label = x_key if any(x_key in r for r in records) else "step"
    figures: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for name in ("policy_loss", "value_loss"):
        matching = [k for k in keys if k == name or k.endswith("/" + name)]
        figures[name] = (name.replace("_", " "), [(k, k) for k in matching])
    for key in keys:
        match = _SCORE_KEY.match(key)
        if match:
            baseline = match.group("baseline")
            title, lines = figures.setdefault(
                f"score_vs_{baseline}", (f"score (W + D/2) vs {baseline}", [])
            )
            lines.append((key, match.group("prefix") or key))

    plots_dir = os.path.join(os.fspath(workdir), PLOTS_SUBDIR)
    written = []
    for name, (title, lines) in figures.items():
        if not lines:
            continue
        figure = Figure(figsize=(7, 4.5), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        for key, label in lines:
            xs, ys = _series(records, key, x_key)
            if xs:
                axes.plot(xs, ys, label=label, marker="." if len(xs) < 30 else None)
        if name.startswith("score_vs_"):
            axes.set_ylim(-0.02, 1.02)
            axes.axhline(0.5, color="grey", linewidth=0.5, linestyle="--")
        axes.set_xlabel(x_label)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if len(lines) > 1:
            axes.legend(fontsize="small")
        figure.tight_layout()
        os.makedirs(plots_dir, exist_ok=True)
        path = os.path.join(plots_dir, f"{name}.png")
        figure.savefig(path)
        written.append(path)
    return written


def latest_eval(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The `eval/*` entries of the last record that has them, with its `iteration` (its step)."""
    for record in reversed(records):
        found = {k: v for k, v in record.items() if k.startswith("eval/")}
        if found:
            return dict(found, iteration=record.get("step"))
    return {}
