"""What JAX and XLA spend compiling, read from JAX's own compile events (`jax.monitoring`).

`Tally` sums, while it is open, the seconds of the three stages of every compile in the process:
tracing the Python function to a jaxpr, lowering it to a StableHLO module, and XLA's compile of
that module (the backend compile, which the persistent cache skips when it holds the program);
`programs` counts the backend compiles. `python -m mmc_jax.bench compile` reports them per
program.
"""

from __future__ import annotations

import threading
from typing import Any

import jax

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
XLA_EVENT = "/jax/core/compile/backend_compile_duration"
_STAGES = {TRACE_EVENT: "trace_s", LOWER_EVENT: "lower_s", XLA_EVENT: "xla_s"}


class Tally:
    """A context that sums compile seconds by stage (`summary()`), across threads."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(_STAGES.values(), 0.0)
        self.programs = 0
        self.largest: list[tuple[float, str]] = []  # (XLA seconds, function name)
        self._lock = threading.Lock()

    def _listen(self, event: str, duration: float, **kwargs: Any) -> None:
        stage = _STAGES.get(event)
        if stage is None:
            return
        with self._lock:
            self.seconds[stage] += float(duration)
            if event == XLA_EVENT:
                self.programs += 1
                self.largest.append((float(duration), str(kwargs.get("fun_name", "?"))))

    def __enter__(self) -> Tally:
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(self, *exc_info) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)

    def summary(self, top: int = 3) -> dict[str, Any]:
        """Seconds by stage, their sum `compile_s`, `programs`, and the `top` slowest XLA
        compiles as `[name, seconds]`."""
        with self._lock:
            out: dict[str, Any] = {k: round(v, 3) for k, v in self.seconds.items()}
            out["compile_s"] = round(sum(self.seconds.values()), 3)
            out["programs"] = self.programs
            slowest = sorted(self.largest, reverse=True)[:top]
            out["slowest"] = [[name, round(seconds, 2)] for seconds, name in slowest]
        return out
