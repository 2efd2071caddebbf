"""What JAX and XLA spend compiling, read from JAX's own compile events (`jax.monitoring`).

`Tally` sums, while it is open, the seconds of the three stages of every compile in the process:
tracing the Python function to a jaxpr, lowering it to a StableHLO module, and XLA's compile of
that module (the backend compile, which the persistent cache skips when it holds the program);
`programs` counts the backend compiles. `python -m mmc_jax.bench compile` reports them per
program.

`announce_slow_compiles()` (every command calls it at start-up, `startup.start`) makes a compile
that runs past 5 s say what it compiles, and then how long it took, on stderr.
"""

from __future__ import annotations

import sys
import threading
import time
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


class Announcer:
    """Prints `compiling NAME ...` once an XLA compile has run `threshold` seconds, and
    `compiled NAME in S s` when it ends, so that no command waits in silence. JAX reports the
    start of each compile stage as a scalar event (its start time) and its end as a duration."""

    def __init__(self, threshold: float, stream) -> None:
        self.threshold = threshold
        self.stream = stream
        self.running: dict[int, tuple[float, str, bool]] = {}  # thread -> (start, name, said)
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.watcher = threading.Thread(target=self._watch, daemon=True, name="compile-announcer")
        self.watcher.start()

    def install(self) -> Announcer:
        """Listen to JAX's compile events from now on."""
        jax.monitoring.register_scalar_listener(self.started)
        jax.monitoring.register_event_duration_secs_listener(self.finished)
        return self

    def uninstall(self) -> None:
        """Stop listening (compiles running now are not announced when they end)."""
        jax.monitoring.unregister_scalar_listener(self.started)
        jax.monitoring.unregister_event_duration_listener(self.finished)

    def _print(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed stream: nothing to tell
            pass

    def started(self, event: str, value: float, **kwargs: Any) -> None:
        if event != XLA_EVENT or getattr(_SAID, "depth", 0):
            return
        with self.lock:
            name = describe(str(kwargs.get("fun_name", "a program")))
            self.running[threading.get_ident()] = (time.monotonic(), name, False)
        self.wake.set()

    def finished(self, event: str, duration: float, **kwargs: Any) -> None:
        if event != XLA_EVENT:
            return
        with self.lock:
            _, name, said = self.running.pop(threading.get_ident(), (0.0, "", False))
        if said or (name and duration >= self.threshold):  # also when it ended between polls
            self._print(f"compiled {name} in {duration:.1f} s")

    def _watch(self) -> None:
        while True:
            self.wake.wait()
            time.sleep(0.25)
            now = time.monotonic()
            with self.lock:
                due = []
                for thread, (start, name, said) in self.running.items():
                    if not said and now - start >= self.threshold:
                        self.running[thread] = (start, name, True)
                        due.append(name)
                if not self.running:
                    self.wake.clear()
            for name in due:
                self._print(
                    f"compiling {name} (XLA, {self.threshold:.0f} s so far; the compile cache "
                    "keeps it for the next start) ..."
                )


_ANNOUNCER: list[Announcer] = []  # the process's one announcer, once installed
_SAID = threading.local()  # depth of `said_by_caller` scopes in this thread


class said_by_caller:
    """A scope whose compiles the caller announces itself (the run loop's "compiling the
    iteration"): the announcer keeps quiet about them in this thread."""

    def __enter__(self) -> said_by_caller:
        _SAID.depth = getattr(_SAID, "depth", 0) + 1
        return self

    def __exit__(self, *exc_info) -> None:
        _SAID.depth -= 1


# What announcements call the programs of the package's jitted functions (by function name);
# others are called by JAX's name for them.
PROGRAM_NAMES = {
    "_arena": "the match arena",
    "_arena_start": "the match arena's start positions",
    "_play_until": "the match arena at one buffer size",
    "_fog_arena": "the match arena under fog",
    "_grow": "the engine's search",
    "_grow_result": "the engine's search result",
    "_grow_start": "the engine's search start",
    "_reroot": "the engine's tree reuse",
    "_search": "the engine's search",
    "_advance": "the engine's replay of the game",
    "_legal": "the engine's move generation of a game's first position",
    "_start_beliefs": "the engine's beliefs at a fog game's start",
    "iteration": "the training iteration",
    "iteration_step": "the training iteration",
    "meta_step": "the meta-training iteration",
}


def describe(fun_name: str) -> str:
    """What announcements call the program JAX names `fun_name` (e.g. `jit(_grow)`)."""
    bare = fun_name[4:-1] if fun_name.startswith("jit(") and fun_name.endswith(")") else fun_name
    return PROGRAM_NAMES.get(bare, f"the program {fun_name}")


def announce_slow_compiles(threshold: float = 5.0, stream=None) -> None:
    """From now on, every XLA compile of this process that takes over `threshold` seconds is
    announced on `stream` (default stderr: stdout may be a protocol, as the engine's UCI) when
    it passes the threshold, and followed by its seconds. Idempotent."""
    if _ANNOUNCER:
        return
    _ANNOUNCER.append(Announcer(threshold, sys.stderr if stream is None else stream).install())
