"""Metrics logging: the only module that touches log files.

`MetricsWriter(workdir)` appends one JSON object per `write` to `<workdir>/metrics.jsonl`, writes
the same scalars to TensorBoard (`<workdir>/tensorboard`, via tensorboardX) and prints a compact
progress line. `read_metrics` reads the JSON lines back, tolerating a truncated last line (a run
SIGKILLed mid-write); `plot_metrics` draws PNGs into `<workdir>/plots`.

The workdir may be a bucket (`gs://BUCKET/run`, see `mmc_jax.infra.storage`). An object in a bucket
cannot be appended to, so there `metrics.jsonl` is re-uploaded whole, at most every
`bucket_flush_seconds`, at `MetricsWriter.flush` (the run loop calls it before every checkpoint,
so a resumed run finds every record up to its checkpoint) and at `close`; tensorboardX writes its
event files to the bucket itself (through `google-cloud-storage`) and is flushed at the same
times. A local workdir is written line by line, as always.

Key conventions (flat dicts, `/`-separated names), which the plots rely on:

  frames                              environment steps so far (x axis of the plots)
  .../policy_loss, .../value_loss     e.g. `train/policy_loss`, `train/gardner/value_loss`
  .../score_vs_<baseline>             e.g. `eval/gardner/score_vs_random` (score = W + D/2)

Every record also gets `step` (the value passed to `write`) and `time` (Unix seconds).
"""

from __future__ import annotations

import functools
import io
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

from mmc_jax.infra import storage

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
    text = storage.read_text(storage.join(workdir, METRICS_FILE))
    if text is None:
        return []
    records, _ = _parse_lines(text)
    return records


def _repaired_text(text: str, resume_step: int | None) -> str | None:
    """The content `metrics.jsonl` must get before appending, or None when `text` is fine.

    Drops unreadable lines (a truncated tail) and, when resuming from a checkpoint at
    `resume_step`, the records of later steps.
    """
    records, skipped = _parse_lines(text)
    kept = records
    if resume_step is not None:
        kept = [r for r in records if r.get("step", -math.inf) <= resume_step]
    # A partial last line without its newline would otherwise glue onto the next record.
    if skipped or len(kept) != len(records) or (text and not text.endswith("\n")):
        return "".join(json.dumps(record) + "\n" for record in kept)
    return None


class _LocalLog:
    """`metrics.jsonl` on a local disk: appended to and flushed line by line."""

    flush_seconds = 0.0

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8")

    def append(self, line: str) -> None:
        self._file.write(line)
        self._file.flush()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._file.close()


class _BucketLog:
    """`metrics.jsonl` in a bucket, whose objects cannot be appended to: the whole text is kept
    and uploaded again at `flush` (when a line came since the last upload) and `close`."""

    def __init__(self, path: str, text: str, flush_seconds: float):
        self.flush_seconds = flush_seconds
        self._path = path
        self._chunks = [text]
        self._pending = False

    def append(self, line: str) -> None:
        self._chunks.append(line)
        self._pending = True

    def flush(self) -> None:
        if self._pending:
            storage.write_atomically(self._path, "".join(self._chunks))
            self._pending = False

    def close(self) -> None:
        self.flush()


@functools.cache
def tensorboard_writer_class():
    """tensorboardX's `SummaryWriter`, or None (said once on stderr) when it is not installed:
    the run goes on with `metrics.jsonl` and the plots."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        print(
            "note: tensorboardX is not installed, so no TensorBoard events are written "
            "(metrics.jsonl and the plots are); pip install tensorboardX to get them",
            file=sys.stderr,
        )
        return None
    return SummaryWriter


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
      bucket_flush_seconds: for a `gs://` workdir, the longest time between two uploads of
        `metrics.jsonl` and the TensorBoard events (each upload rewrites the whole file).

    Raises:
      storage.MissingPackage: a `gs://` workdir without the `gcs` extra installed.
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
        bucket_flush_seconds: float = 60.0,
    ):
        self.workdir = os.fspath(workdir)
        self.path = storage.join(self.workdir, METRICS_FILE)
        self.enabled = enabled
        self.print_keys = None if print_keys is None else list(print_keys)
        self.stream = stream
        self._start_time = time.time()
        self._last_flush = time.time()
        self._log = None
        self._tb_writer = None
        if not enabled:
            return
        storage.to_path(self.workdir).mkdir(parents=True, exist_ok=True)
        text = storage.read_text(self.path) or ""
        repaired = _repaired_text(text, resume_step)
        if repaired is not None:
            storage.write_atomically(self.path, repaired)
            text = repaired
        if storage.is_remote(self.path):
            self._log = _BucketLog(self.path, text, bucket_flush_seconds)
        else:
            self._log = _LocalLog(self.path)
        summary_writer = tensorboard_writer_class() if tensorboard else None
        if summary_writer is not None:
            purge_step = None if resume_step is None else int(resume_step) + 1
            self._tb_writer = summary_writer(
                storage.join(self.workdir, TENSORBOARD_SUBDIR), purge_step=purge_step
            )

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Logs one record of scalars at `step`; returns the record as written to JSON.

        Values may be Python, NumPy or JAX scalars (non-scalar arrays are stored as lists in JSON
        and not sent to TensorBoard).
        """
        record = {"step": int(step), "time": time.time()}
        record.update({str(k): _to_python(v) for k, v in metrics.items()})
        if not self.enabled:
            return record
        self._log.append(json.dumps(record) + "\n")
        if self._tb_writer is not None:
            for key, value in record.items():
                if key in ("step", "time") or isinstance(value, bool):
                    continue
                if isinstance(value, int | float):
                    self._tb_writer.add_scalar(key, value, int(step))
        if time.time() - self._last_flush >= self._log.flush_seconds:
            self.flush()
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

    def flush(self) -> None:
        """Makes every record written so far reach the files (for a bucket: uploads them)."""
        if self._log is not None:
            self._log.flush()
        if self._tb_writer is not None:
            self._tb_writer.flush()
        self._last_flush = time.time()

    def close(self) -> None:
        """Flushes and closes the files."""
        if self._log is not None:
            self._log.close()
            self._log = None
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

    written = []
    for name, (title, lines) in figures.items():
        if not lines:
            continue
        figure = Figure(figsize=(7, 4.5), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        # Many lines (a meta-run's losses per task): the tasks thin and grey behind the lines
        # of the whole run, one legend entry for all of them, so the legend stays readable.
        crowded = len(lines) > MAX_LEGEND_LINES
        per_task = sum(1 for key, _ in lines if key.count("/") > 1) if crowded else 0
        for key, label in lines:
            xs, ys = _series(records, key, x_key)
            if not xs:
                continue
            if crowded and key.count("/") > 1:
                grey = f"each task ({per_task} lines)" if per_task else "_nolegend_"
                per_task = 0  # the first grey line carries the legend entry
                axes.plot(xs, ys, color="grey", linewidth=0.5, alpha=0.3, label=grey)
            else:
                axes.plot(xs, ys, label=label, marker="." if len(xs) < 30 else None)
        if name.startswith("score_vs_"):
            axes.set_ylim(-0.02, 1.02)
            axes.axhline(0.5, color="grey", linewidth=0.5, linestyle="--")
        axes.set_xlabel(x_label)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if len(lines) > 1 and axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
        figure.tight_layout()
        written.append(save_figure(figure, storage.join(workdir, PLOTS_SUBDIR, f"{name}.png")))
    return written


MAX_LEGEND_LINES = 8  # more lines in one plot: the per-task ones go grey, one legend entry


def save_figure(figure: Any, path: str | os.PathLike) -> str:
    """Writes a matplotlib `Figure` as a PNG to `path` (a local path or a bucket's), creating its
    folder; returns the path."""
    target = storage.to_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    target.write_bytes(buffer.getvalue())
    return os.fspath(target)


def latest_eval(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The `eval/*` entries of the last record that has them, with its `iteration` (its step)."""
    for record in reversed(records):
        found = {k: v for k, v in record.items() if k.startswith("eval/")}
        if found:
            return dict(found, iteration=record.get("step"))
    return {}
