"""Report helpers of the studies: timestamped log lines, intervals and paired differences as
text, and matplotlib figures drawn without pyplot (no global state, any thread)."""

from __future__ import annotations

import time
from pathlib import Path

from experiments.lab import stats


def clock(line: str) -> None:
    """`line` on stdout after the wall-clock time, `[HH:MM:SS] line` (the runners' log)."""
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


class Log:
    """Lines stamped with the minutes since the start, on stdout and appended to `path`; also a
    stream (`write`, `flush`) for the run loop's progress lines (each training run prints its
    own ETA)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.started = time.time()

    def __call__(self, line: str) -> None:
        stamp = f"[{(time.time() - self.started) / 60:6.1f} min] "
        print(stamp + line, flush=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(stamp + line + "\n")

    def write(self, text: str) -> None:
        if text.strip():
            self(text.rstrip())

    def flush(self) -> None:
        pass


def interval(mean: float, half: float, form: str = "+.3f") -> str:
    """`mean [mean - half, mean + half]`, each number formatted with `form`."""
    return f"{mean:{form}} [{mean - half:{form}}, {mean + half:{form}}]"


def difference_text(diffs: list[float]) -> str:
    """Paired differences as `mean [95% t interval] (n=N, MDE m)` ("-" for none; no MDE below
    3 units)."""
    if not diffs:
        return "-"
    mean, half = stats.t_interval(diffs)
    mde = stats.minimum_detectable(diffs)
    return f"{interval(mean, half)} (n={len(diffs)}" + (
        f", MDE {mde:.3f})" if mde is not None else ")"
    )


def figure(width: float, height: float, dpi: int = 90):
    """A matplotlib `Figure` of `width` x `height` inches on an Agg canvas (`savefig` writes
    PNG), made without pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(out)
    return out
