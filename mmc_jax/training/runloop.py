"""The one training loop: every algorithm (AlphaZero, JOAT) and `adapt` run through `run`.

    result = run(alphazero.ALGORITHM, config, workdir)           # train, or resume
    result = run(meta.ALGORITHM, config, workdir)                # meta-train, or resume
    result = run(alphazero.ALGORITHM, config, workdir, init_params=params, on_eval=hook)

An `Algorithm` (`mmc_jax.training.algorithm`, the contract) is the pure part of a training
method seen from the loop: how to validate its config, build its data (the rules of the games it
plays; host-side data between iterations), initialise and describe its state, what a checkpoint
of it holds, compile its one jitted iteration, name its progress and evaluate parameters. `run`
is the short Python loop around it, the same for every algorithm, and it names no state field
but `params`:

1. Start-up: a state that cannot fit in memory is refused before anything is built, with its
   estimated size (`check_memory`). Then, holding the workdir's lock for the whole run (one
   writer per workdir: a second run there is refused, naming the first; `workdir_lock`), in
   big_vision's order: resume from the latest checkpoint in `workdir`, else start from
   `init_params` (fresh optimizer state and games), else from scratch. A resume restores into
   an abstract template (nothing is compiled to refuse a mismatching checkpoint) and falls back
   to the newest intact checkpoint when the latest is damaged, with a warning (the damaged
   steps move to `<workdir>/checkpoints_damaged/`, kept for inspection). What a checkpoint
   holds and how it becomes a state again is the algorithm's (`training.algorithm`: a
   self-play algorithm's replay ring, or none); the loop adds its counters, logs the notes of
   the restore, and puts its fields in the first record after it.
2. Compile the iteration ahead of time, then for each iteration `i`: call it with the key
   `fold_in(run_key, i)` (a resumed run replays the same random stream), stop on a non-finite
   `train/*` metric before anything of that iteration is saved (a step trained with another
   config, the one a resume with a new learning rate started from, was good when saved and
   stays: the divergence is the new config's; a step of this run's config is good only if a
   finite iteration ran from it; if not, it moves to `<workdir>/checkpoints_diverged/`, so that
   a re-run resumes from a good one), write the metrics
   (`metrics.jsonl`, TensorBoard), evaluate when it is time (`eval.every`, and after the last
   iteration), call `on_eval`, print a progress line with an ETA, redraw the plots (at most
   once a minute, at evaluations and at the end) and checkpoint when it is time
   (`checkpoint.every`, and after the last iteration; orbax writes in the background), never
   a state with a non-finite parameter or optimizer value (nor resumes from one).
3. SIGTERM (a preempted VM, a Kubernetes eviction) or Ctrl-C stops the run after the iteration
   in progress: that iteration is checkpointed, the loop says how to resume and returns. A
   second Ctrl-C stops at once: the line names the newest committed checkpoint and the
   process ends with 130 from the signal handler (`cli.exit_at_once`; with
   `handle_signals=False`, a KeyboardInterrupt raises `Interrupted` once said). A signal during
   start-up (restore, compilation) stops the run before its first iteration, and it says so.

`run` returns a `RunResult` with the final state (its parameters on the mesh), the last record
and where the run started, so callers never read parameters back from disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh

from mmc_jax.infra import checkpoint as checkpoint_lib
from mmc_jax.infra import cli, compile_log, sharding, storage
from mmc_jax.infra import metrics as metrics_lib
from mmc_jax.training import memory
from mmc_jax.training.algorithm import Algorithm

PLOT_INTERVAL_SECONDS = 60.0


class Stopped(RuntimeError):
    """A run that a signal (SIGTERM, Ctrl-C) ended before its last iteration: its checkpoint is
    kept and the same call resumes it. Raised by callers that would otherwise take the
    stopped run for a finished one (export it, score it, mark it done)."""


@dataclasses.dataclass
class RunResult:
    """What `run` returns.

    state: the final state (on the mesh). record: the last metrics record (as written to
    `metrics.jsonl`) plus `iteration`, `start_iteration`, `compile_seconds` and `stopped`.
    start_iteration: where this call started (0, or the resumed iteration). stopped: True when
    a signal ended the run early.
    """

    state: Any
    record: dict[str, Any]
    start_iteration: int
    stopped: bool = False

    @property
    def params(self) -> Any:
        return self.state.params


def itstime(step: int, every: int, total: int) -> bool:
    """Whether something done every `every` steps (0: never) is due after `step` of `total`:
    at multiples of `every` and after the last step."""
    return bool(every) and (step % every == 0 or step == total)


def checkpoint_state(
    algorithm: Algorithm, state, iteration: int, frames: int, games: int, save_replay: bool
) -> dict:
    """What a checkpoint holds: what the algorithm keeps of its state
    (`algorithm.checkpoint_contents`) and the loop's counters."""
    return {
        **algorithm.checkpoint_contents(state, save_replay),
        **counters(iteration, frames, games),
    }


def counters(iteration: int, frames: int, games: int) -> dict[str, np.ndarray]:
    """The loop's own part of every checkpoint."""
    return {
        "iteration": np.asarray(iteration, np.int64),
        "frames": np.asarray(frames, np.int64),
        "games": np.asarray(games, np.int64),
    }


DIVERGENCE_HINT = "Lower learner.learning_rate or set learner.max_grad_norm."


def nonfinite_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """The `train/*` metrics of `record` that are NaN or infinite."""
    return {
        k: v
        for k, v in record.items()
        if k.startswith("train/") and isinstance(v, int | float) and not math.isfinite(float(v))
    }


def check_finite(record: dict[str, Any], iteration: int, checkpoint_note: str) -> None:
    """Raises FloatingPointError naming the non-finite `train/*` metrics, if any."""
    bad = nonfinite_metrics(record)
    if bad:
        raise FloatingPointError(
            f"non-finite training metrics at iteration {iteration}: {bad}. Stopping; nothing "
            f"of this iteration was saved ({checkpoint_note}). {DIVERGENCE_HINT}"
        )


def format_duration(seconds: float) -> str:
    """`1h02m`, `3m05s` or `42s`."""
    seconds = max(0, int(round(seconds)))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def eval_summary(latest_eval: dict[str, Any]) -> str:
    """`eval@<it> <opponent> <score> [<low>,<high>] ...` of the latest `eval/*` metrics."""
    scores = []
    for key, score in latest_eval.items():
        if "/score_vs_" not in key:
            continue
        low = latest_eval.get(key.replace("/score_vs_", "/score_low_vs_"), score)
        high = latest_eval.get(key.replace("/score_vs_", "/score_high_vs_"), score)
        where = key[len("eval/") : key.index("score_vs_")].strip("/")
        label = key.split("/score_vs_")[1]
        label = f"{where}:{label}" if where else label
        scores.append(f"{label} {score:.2f} [{low:.2f},{high:.2f}]")
    return f"eval@{latest_eval.get('iteration')} " + " ".join(scores) if scores else ""


FRAMES_KEY, GAMES_KEY = "selfplay/frames", "selfplay/games"  # the record's counters
_LOSS_NAMES = {"policy": "pi", "value": "v"}  # the progress line's short names


def loss_text(record: dict[str, Any]) -> str:
    """ "loss pi 1.234 v 0.567" of the learner's own losses in `record` (each `train/NAME_loss`,
    in record order; per-task losses such as `train/gardner/policy_loss` are not shown)."""
    losses = [
        f"{_LOSS_NAMES.get(key[6:-5], key[6:-5])} {record[key]:.3f}"
        for key in record
        if key.startswith("train/") and key.endswith("_loss") and key.count("/") == 1
    ]
    return "loss " + " ".join(losses) if losses else ""


def progress_line(
    algorithm: Algorithm,
    done: int,
    total: int,
    record: dict[str, Any],
    seconds: float,
    eta_seconds: float | None,
    latest_eval: dict[str, Any],
) -> str:
    """One line per iteration from the record's neutral core (`CompiledStep`): counters, speed
    (games only for a learner that plays them), the learner's own losses, its fields, ETA,
    eval."""
    plays = GAMES_KEY in record
    speed = f"{record[GAMES_KEY] / seconds:.2f} games/s " if plays else ""
    parts = [
        f"it {done}/{total}",
        f"frames {metrics_lib.compact_number(record['frames'])}",
        *([f"games {record['games']}"] if plays else []),
        f"{speed}{record[FRAMES_KEY] / seconds:.0f} frames/s ({seconds:.1f} s)",
        *([losses] if (losses := loss_text(record)) else []),
        *algorithm.progress_fields(record),
    ]
    if eta_seconds is not None:
        parts.append(f"ETA {format_duration(eta_seconds)}")
    summary = eval_summary(latest_eval) if latest_eval else ""
    if summary:
        parts.append(summary)
    return " | ".join(parts)


class Interrupted(KeyboardInterrupt):
    """A second Ctrl-C stopped the run within an iteration, after its last checkpoint was
    committed and said. The iteration may still be running in XLA's threads, which Python's
    shutdown would crash into (a segmentation fault): a command ends with `cli.exit_at_once`."""


class _StopRequest:
    """SIGTERM / SIGINT handlers (main thread only) that ask the loop to stop after the
    iteration in progress. A second SIGINT while iterating calls `at_once` inside the handler,
    which names the last committed checkpoint and ends the process (it does not return); during
    start-up it raises KeyboardInterrupt. Raising from the handler while iterating would land
    wherever the main thread happens to be: in a weakref finalizer Python prints the
    KeyboardInterrupt and goes on, inside orbax's wait it logs a traceback (both seen in CI)."""

    def __init__(self, log: Callable[[str], None], at_once: Callable[[], None] | None = None):
        self.requested: str | None = None
        self.looping = False  # False during start-up (restore, compile): no iteration to finish
        self._log = log
        self._at_once = at_once
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        del frame
        name = signal.Signals(signum).name
        if self.requested and signum == signal.SIGINT:
            if self.looping and self._at_once is not None:
                self._at_once()
            raise KeyboardInterrupt
        self.requested = name
        self._log(
            (
                f"{name}: stopping after the iteration in progress and checkpointing it"
                if self.looping
                else f"{name}: stopping when start-up (restore, compilation) ends"
            )
            + (" (Ctrl-C again to stop at once)" if signum == signal.SIGINT else "")
        )

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


# Values of a saved config's `algorithm` field that name no algorithm: runs of older versions
# named their search there (tests/fixtures/legacy), and they resume as before.
NOT_ALGORITHMS = frozenset({"gumbel_muzero"})


def _refuse_another_algorithm(config, ckpt) -> None:
    """ValueError, in one line, when the workdir's newest readable step was trained by another
    algorithm than `config.algorithm` (its checkpoint could never fit: not a leaf-by-leaf
    mismatch list, but what the workdir holds)."""
    wanted = config.get("algorithm")
    for step in reversed(ckpt.all_steps()):
        try:
            saved = (ckpt.metadata(step).get("config") or {}).get("algorithm")
        except (OSError, ValueError):
            continue  # a damaged sidecar: the restore names it
        if wanted and saved and saved not in NOT_ALGORITHMS and saved != wanted:
            raise ValueError(
                f"{os.path.dirname(str(ckpt.directory))} holds a run of {saved} (step {step}); "
                f"this config trains {wanted}: use another --workdir, or resume it with a config "
                f"of {saved}"
            )
        return


def _restore(algorithm, config, mesh, ckpt, log):
    """(counters, `Restored`) of the latest intact checkpoint, restored into the template the
    algorithm makes for it (`restore_template`, `from_checkpoint`), or None when there is
    none: `checkpoint.restore_newest_intact`, the loading path of every command. A damaged step
    (missing or truncated files, a broken sidecar, non-finite values) is skipped with a
    warning; a checkpoint that does not fit the config raises ValueError (from
    `algorithm.restore_error`)."""
    if not ckpt.all_steps():
        return None
    _refuse_another_algorithm(config, ckpt)
    abstract = algorithm.abstract_state(config, mesh)

    def read(step: int):
        metadata = ckpt.metadata(step)
        template = {**algorithm.restore_template(abstract, metadata), **counters(0, 0, 0)}
        saved = ckpt.restore(template, step=step, config=config)
        loop = {name: saved.pop(name) for name in counters(0, 0, 0)}
        # A checkpoint that is not finite (older code saved whatever it had) is no start.
        restored = algorithm.from_checkpoint(abstract, saved, metadata)
        bad = checkpoint_lib.nonfinite_leaves(algorithm.finite_parts(restored.state))
        if bad:
            raise checkpoint_lib.CheckpointDamaged(f"non-finite values in {', '.join(bad)}")
        # Finite is not enough: exploded parameters (|p| ~ 1e30) stay finite.
        parts = algorithm.finite_parts(restored.state)
        reason = checkpoint_lib.exploded(parts["params"]) if "params" in parts else None
        reason = reason or algorithm.probe(config, restored.state)
        if reason:
            raise checkpoint_lib.CheckpointDamaged(reason)
        return loop, restored

    try:
        step, state, damaged = checkpoint_lib.restore_newest_intact(ckpt, read, warn=log)
    except checkpoint_lib.CheckpointMismatch as error:
        raise algorithm.restore_error(error, config) from None
    # The run goes on from `step` and will save the later steps again: their damaged folders
    # move aside (kept, not deleted), or the first save would find them there.
    for later in sorted(damaged):
        log(f"warning: damaged checkpoint {later} moved to {ckpt.set_aside(later)}")
    return state


# Config fields that say how long a run trains and how often it saves and evaluates, not how its
# state evolves: a step saved under other values of them was trained with the same config.
SCHEDULE_FIELDS = ("num_iterations", "checkpoint", "eval")


def _config_change(session: _Session, step: int) -> str:
    """How this run's config differs from the one step `step` was trained with (its sidecar),
    beyond `SCHEDULE_FIELDS`: `learner.learning_rate=1e+30, step 2 had 0.001`; "" when it is
    the same or not known."""
    try:
        saved = session.ckpt.metadata(step).get("config")
    except Exception:  # an unreadable sidecar: nothing known, judged as a step of this config
        return ""
    changes = checkpoint_lib.config_changes(saved, session.config, SCHEDULE_FIELDS)
    shown = [f"{key}={new!r}, step {step} had {old!r}" for key, old, new in changes[:4]]
    more = f"; and {len(changes) - 4} more fields" if len(changes) > 4 else ""
    return "; ".join(shown) + more


def _last_good(session: _Session, started_from: int, vouched: bool) -> str:
    """Which checkpoint is the last good one, after the iteration that started from step
    `started_from` went non-finite (`vouched`: its losses were finite, only its end state was
    not), and whether that step is to blame:

    - trained with another config than this run's (a finished run resumed with a learning rate
      of 1e30): the divergence belongs to the new config, not to the step. Every step this run
      saves carries this run's config, so that step is the one the run resumed from, and it was
      good when saved: finite, and its parameters passed the algorithm's probe. It is kept, and
      a re-run resumes from it (with the same config, it diverges again the same way);
    - trained with this config: it is good only when a finite iteration ran from it
      (`vouched`): parameters that explode in an iteration's last learner step leave that
      iteration's losses finite and its checkpoint poisoned, so it moves to
      `<workdir>/checkpoints_diverged/` (kept) when an older step remains to resume from."""
    algorithm, config, mesh = session.algorithm, session.config, session.mesh
    ckpt = session.ckpt
    latest = ckpt.latest_step()
    if latest is None:
        return "no checkpoint was saved yet"
    if latest != started_from:
        return f"the last good checkpoint is step {latest} in {ckpt.directory}"
    change = _config_change(session, latest)
    if change:
        return (
            f"iteration {latest + 1} diverged from step {latest} under this run's config, which "
            f"differs from the one step {latest} was trained with ({change}): step {latest} in "
            f"{ckpt.directory} is kept, and a re-run resumes from it"
        )
    if vouched:
        return f"the last good checkpoint is step {latest} in {ckpt.directory}"
    try:
        template = algorithm.abstract_state(config, mesh).params
        ckpt.wait()  # (a manager that saved cannot read a subtree: a fresh one reads it)
        params = checkpoint_lib.restore_subtree(session.workdir, "params", template, step=latest)
        size = f" (its largest |parameter| is {checkpoint_lib.largest_magnitude(params):.2g})"
    except Exception:  # only a detail of the message
        size = ""
    older = [step for step in ckpt.all_steps() if step < latest]
    if not older:
        return (
            f"step {latest} in {ckpt.directory}, where this iteration started, is the only "
            f"checkpoint and no finite iteration vouches for it{size}; a re-run resumes from "
            "it: to start afresh, pass another --workdir"
        )
    moved = ckpt.set_aside(latest, checkpoint_lib.DIVERGED_SUFFIX)
    return (
        f"step {latest}, where this iteration started, is not vouched for by a finite "
        f"iteration{size} and was moved to {moved}; the last good checkpoint is step "
        f"{older[-1]} in {ckpt.directory}, which a re-run resumes from"
    )


def _start_params(template: Any, params: Any, mesh) -> Any:
    """`params` checked against the shapes of `template` and replicated on `mesh`."""
    want, got = checkpoint_lib.leaf_shapes(template), checkpoint_lib.leaf_shapes(params)
    if want != got:
        differ = sorted(p for p in set(want) | set(got) if want.get(p) != got.get(p))
        raise ValueError(
            "init_params do not fit config.network: "
            + "; ".join(f"{p}: expected {want.get(p)}, got {got.get(p)}" for p in differ[:6])
        )
    params = jax.tree.map(lambda t, p: jnp.asarray(p, t.dtype), template, params)
    return sharding.put_replicated(jax.device_get(params), mesh)


def batch_size(config, field: str) -> int:
    """The value of the config field `field` (dotted), as an int."""
    node = config
    for part in field.split("."):
        node = node[part]
    return int(node)


# Above this batch size the state's size is extrapolated: building its abstract state tiles
# the rules of every game in Python (ten million games: minutes before anything fails).
EXACT_STATE_BATCH = 4096


def _state_bytes(abstract: Any) -> int:
    return sum(
        math.prod(leaf.sharding.shard_shape(leaf.shape)) * np.dtype(leaf.dtype).itemsize
        for leaf in jax.tree.leaves(abstract)
    )


def state_bytes_per_device(algorithm: Algorithm, config, mesh: Mesh, extrapolate=None) -> int:
    """Bytes per device of the training state (parameters, optimizer state, games in progress,
    replay ring), from `algorithm.abstract_state` (shapes only, nothing allocated): exact up to
    `EXACT_STATE_BATCH` games, else (or with `extrapolate`) from two small batch sizes, as the
    state is affine in the batch size."""
    field = algorithm.batch_field
    batch = batch_size(config, field)
    if extrapolate is None:
        extrapolate = batch > EXACT_STATE_BATCH
    if not extrapolate:
        return _state_bytes(algorithm.abstract_state(config, mesh))
    sizes = (mesh.size, 2 * mesh.size)  # divisible by the devices
    measured = [
        _state_bytes(algorithm.abstract_state(with_batch(algorithm, config, size), mesh))
        for size in sizes
    ]
    per_game = (measured[1] - measured[0]) // (sizes[1] - sizes[0])
    return measured[0] + per_game * (batch - sizes[0])


def _memory_limit(mesh: Mesh) -> tuple[int, int, str]:
    """(bytes, devices sharing them, what) of the mesh's devices (`memory.device_limit`)."""
    return memory.device_limit(mesh.devices.flat)


def estimate_memory(algorithm: Algorithm, config, mesh: Mesh) -> memory.Estimate:
    """Bytes per device of one iteration (`memory.Estimate`): the state exactly (from its
    abstract shapes), the self-play and learner working sets from `memory`'s formulas."""
    selfplay_bytes, learner_bytes = algorithm.working_bytes(config, mesh)
    return memory.Estimate(
        state_bytes_per_device(algorithm, config, mesh), selfplay_bytes, learner_bytes
    )


def fill_batch(algorithm: Algorithm, config, mesh: Mesh):
    """`config` with its batch field (`algorithm.batch_field`) set where it is 0 ("fill the
    device"): the largest power of two up to `algorithm.fill_max` whose `estimate_memory` fits
    in `memory.FILL_FRACTION` of the device's memory (`memory.fill_batch`); unchanged otherwise.
    Returns (config, whether it was filled)."""
    field = algorithm.batch_field
    if batch_size(config, field) != 0:
        return config, False
    limit, sharing, _ = _memory_limit(mesh)

    def at(batch: int) -> memory.Estimate:
        return estimate_memory(algorithm, with_batch(algorithm, config, batch), mesh)

    batch = memory.fill_batch(at, limit // sharing, mesh.size, maximum=algorithm.fill_max(config))
    return with_batch(algorithm, config, batch), True


def with_batch(algorithm: Algorithm, config, batch: int):
    """A prepared copy of `config` with its batch field (`algorithm.batch_field`) = `batch`."""
    values = config.to_dict()
    node = values
    *sections, name = algorithm.batch_field.split(".")
    for part in sections:
        node = node[part]
    node[name] = batch
    return algorithm.prepare_config(ml_collections.ConfigDict(values))


def check_memory(algorithm: Algorithm, config, mesh: Mesh) -> memory.Estimate:
    """The iteration's `estimate_memory`, or ValueError (one line, with the estimate) when it
    cannot fit in memory: before anything is built or allocated."""
    field = algorithm.batch_field
    estimate = estimate_memory(algorithm, config, mesh)
    limit, sharing, what = _memory_limit(mesh)
    shared = f" x {sharing} devices" if sharing > 1 else ""
    if estimate.state * sharing > limit:
        raise ValueError(
            f"{field}={batch_size(config, field)}: the training state alone needs about "
            f"{memory.gib(estimate.state)} per device{shared} (parameters, optimizer state, "
            f"games in progress, replay ring), more than the {memory.gib(limit)} of {what}; "
            f"lower {field}"
        )
    if estimate.total * sharing > limit:
        raise ValueError(
            f"{field}={batch_size(config, field)}: one iteration needs "
            f"{estimate.describe()}{shared}, more than the {memory.gib(limit)} of {what}; "
            f"lower {field}, selfplay.num_plies, selfplay.num_simulations or learner.batch_size"
        )
    return estimate


def memory_line(estimate: memory.Estimate, mesh: Mesh, filled: str | None = None) -> str:
    """The start-up line with the estimate (and the batch `fill_batch` chose)."""
    limit, sharing, what = _memory_limit(mesh)
    line = (
        f"memory: one iteration needs {estimate.describe()} of the "
        f"{memory.gib(limit // sharing)} of {what}" + (" per device" if sharing > 1 else "")
    )
    return line + (f"; {filled}" if filled else "")


def run(
    algorithm: Algorithm,
    config: ml_collections.ConfigDict,
    workdir: str | os.PathLike,
    *,
    init_params: Any = None,
    init_label: str = "",
    on_eval: Callable[[int, Any, dict[str, Any]], dict[str, Any] | None] | None = None,
    devices=None,
    stream=sys.stdout,
    handle_signals: bool = True,
    lock: bool = True,
) -> RunResult:
    """Trains (or resumes) `algorithm` until `config.num_iterations` iterations are done.

    Args:
      algorithm: `alphazero.ALGORITHM` or `meta.ALGORITHM`.
      config: the run config (validated by `algorithm.prepare_config`).
      workdir: run directory (local or `gs://`): `checkpoints/`, `metrics.jsonl`, `tensorboard/`,
        `plots/`.
      init_params: parameters to start from when the workdir has no checkpoint (adaptation);
        the optimizer state and the games start fresh. A resumed run ignores them.
      init_label: where `init_params` come from (`train --init_from`): the start-up says it
        starts from them, or that a resume ignores them; "" says nothing (adaptation).
      on_eval: called after every iteration as `on_eval(iteration, state, record)`; a dict it
        returns is merged into that iteration's metrics.
      devices: devices of the data mesh (default: all).
      stream: where the progress lines go (None: silent); only process 0 prints.
      handle_signals: stop cleanly on SIGTERM / Ctrl-C (main thread only).
      lock: hold the workdir's lock (`workdir_lock`) while running; False when the caller
        holds it already (`adapt`).

    Returns:
      A `RunResult`.

    Raises:
      ValueError: invalid config, batch not divisible by the device count, an unplayable
        start, or a checkpoint that does not match the config.
      FloatingPointError: a non-finite loss (the last checkpoint stays the last good one).
      storage.WorkdirBusy: another run holds the workdir.
    """
    config = algorithm.prepare_config(config)
    mesh = algorithm.make_mesh(config, devices)
    config, filled = fill_batch(algorithm, config, mesh)
    field = algorithm.batch_field
    sharding.check_batch_divisible(batch_size(config, field), mesh.size, field)
    estimate = check_memory(algorithm, config, mesh)
    is_chief = jax.process_index() == 0

    def log(line: str) -> None:
        if is_chief and stream is not None:
            print(line, file=stream, flush=True)

    chosen = f"{field}={batch_size(config, field)} fills it" if filled else None
    with workdir_lock(workdir, log) if lock else contextlib.nullcontext():
        log(memory_line(estimate, mesh, chosen))
        init = (init_params, init_label)
        return _run(algorithm, config, mesh, workdir, log, init, on_eval, handle_signals)


@contextlib.contextmanager
def workdir_lock(workdir: str | os.PathLike, log: Callable[[str], None] = print) -> Iterator[None]:
    """One writer per workdir: `storage.workdir_lock`, taken by process 0 for every process of
    the run (they all share the workdir), before anything is read or written there. A lock left
    by a killed run is taken over with a note through `log`.

    Raises:
      storage.WorkdirBusy: another run holds it (on every process).
    """
    with contextlib.ExitStack() as held:
        busy, previous = None, None
        if jax.process_index() == 0:
            try:
                previous = held.enter_context(storage.workdir_lock(workdir))
            except storage.WorkdirBusy as error:
                busy = error
        if sharding.any_process(busy is not None):
            raise busy or storage.WorkdirBusy(
                f"workdir {workdir} is in use by another run (process 0 says whose)"
            )
        if previous:
            log(
                f"note: took over the lock of {workdir} from "
                f"{storage.describe_holder(previous)}, which ended without releasing it"
            )
        yield


@dataclasses.dataclass(frozen=True)
class _Session:
    """What every phase of `_run` reads, fixed for the whole run."""

    algorithm: Algorithm
    config: ml_collections.ConfigDict
    mesh: Mesh
    workdir: str | os.PathLike
    log: Callable[[str], None]
    ckpt: checkpoint_lib.Checkpointer
    stop: _StopRequest | None
    num_iterations: int
    is_chief: bool

    def stop_requested(self) -> bool:
        """Whether any process was asked to stop (every process gets the same answer)."""
        return sharding.any_process(self.stop is not None and self.stop.requested is not None)

    def stop_reason(self) -> str:
        """The signal that stopped the run, as the log names it."""
        return (self.stop and self.stop.requested) or "a signal to another process"


@dataclasses.dataclass(frozen=True)
class _Start:
    """Where a run starts: its state, the counters and (after a resume) the fields the first
    record gets about it (`Restored.record`; None on a fresh start)."""

    state: Any
    iteration: int
    frames: int
    games: int
    resume_record: dict[str, Any] | None


def _run(algorithm, config, mesh, workdir, log, init, on_eval, handle_signals):
    """`run` once the config, the mesh and the workdir's lock are settled; `init` is
    (init_params, init_label)."""
    data = algorithm.load_data(config, mesh, workdir, log)
    init_key, run_key, eval_key = jax.random.split(jax.random.key(int(config.seed)), 3)
    num_iterations = int(config.num_iterations)
    ckpt = checkpoint_lib.Checkpointer(
        workdir,
        max_to_keep=int(config.checkpoint.max_to_keep),
        keep_period=int(config.checkpoint.get("keep_period", 0)),
    )
    writer = None
    # Installed before start-up: a SIGTERM while restoring or compiling (Python runs handlers
    # once the compiler returns) stops the run before its first iteration, and says so.
    stop = _StopRequest(log, at_once=lambda: _exit_at_once(ckpt, log)) if handle_signals else None
    if stop is not None:
        stop.__enter__()
    session = _Session(
        algorithm=algorithm,
        config=config,
        mesh=mesh,
        workdir=workdir,
        log=log,
        ckpt=ckpt,
        stop=stop,
        num_iterations=num_iterations,
        is_chief=jax.process_index() == 0,
    )
    try:
        if session.is_chief:
            algorithm.write_run_files(config, workdir)
        begin = _start_state(session, data, init_key, *init)
        start, state = begin.iteration, begin.state
        writer = metrics_lib.MetricsWriter(
            workdir, resume_step=start, enabled=session.is_chief, stream=None
        )
        compile_seconds = 0.0
        record: dict[str, Any] = {}
        stopped = False
        if start < num_iterations and _stopped_during_start_up(session, start):
            stopped = True
        elif start < num_iterations:
            log(algorithm.describe(config, mesh, state))
            log("compiling the iteration (seconds when the compile cache has it) ...")
            started = time.time()
            with compile_log.said_by_caller():
                step_fn = algorithm.compile(config, mesh, state, data, start)
            compile_seconds = time.time() - started
            log(f"compiled the iteration in {compile_seconds:.1f} s")
            stopped = _stopped_during_start_up(session, start)
            end = start if stopped else num_iterations
            state, record, stopped_in_loop = _iterate(
                session, writer, begin, end, step_fn, data, (run_key, eval_key), on_eval
            )
            stopped = stopped or stopped_in_loop
        record = _final_record(session, record, start, stopped, compile_seconds)
        return RunResult(state=state, record=record, start_iteration=start, stopped=stopped)
    finally:
        if stop is not None:
            stop.__exit__(None, None, None)
        ckpt.close()
        if writer is not None:
            writer.close()


def _stopped_during_start_up(session: _Session, start: int) -> bool:
    """Whether a signal came during start-up (restore, compilation); if so, says so."""
    if not session.stop_requested():
        return False
    ckpt = session.ckpt
    kept = f"checkpoint {ckpt.directory}/{start} is kept" if start else "no iteration had run"
    session.log(
        f"stopped by {session.stop_reason()} during "
        f"start-up, before iteration {start + 1}: nothing was lost ({kept}). Run the same "
        "command to resume."
    )
    return True


def _start_state(
    session: _Session, data, init_key: jax.Array, init_params: Any, init_label: str = ""
) -> _Start:
    """The state the run starts from, in big_vision's order: the latest intact checkpoint in
    the workdir, else `init_params` (fresh optimizer state and games), else from scratch."""
    algorithm, config, mesh, log = session.algorithm, session.config, session.mesh, session.log
    ckpt, num_iterations = session.ckpt, session.num_iterations
    start, frames, games = 0, 0, 0
    restored = _restore(algorithm, config, mesh, ckpt, log)
    resume_record = None  # after a resume: what the first record says of it
    if restored is None:
        state = algorithm.init_state(config, mesh, data, init_key)
        algorithm.check_start(config, state)
        if init_params is not None:
            state = state.replace(params=_start_params(state.params, init_params, mesh))
            if init_label:
                log(f"starting from {init_label}: its parameters, fresh optimizer state and games")
    else:
        loop, resumed = restored
        start = int(loop["iteration"])
        frames, games = int(loop["frames"]), int(loop["games"])
        state, resume_record = resumed.state, dict(resumed.record)
        if start >= num_iterations:
            log(
                f"{session.workdir} is already finished: {start} of {num_iterations} iterations "
                f"done (checkpoint {ckpt.directory}/{start}); raise "
                "--config.num_iterations to train on"
            )
        else:
            log(f"resumed from {ckpt.directory}/{start}: {start} iterations, {frames} frames")
            for note in resumed.notes:
                log(note)
        if init_label:
            log(f"note: {init_label} not used: a run goes on from its own checkpoint")
    return _Start(
        state=state, iteration=start, frames=frames, games=games, resume_record=resume_record
    )


def _iterate(session: _Session, writer, begin: _Start, end: int, step_fn, data, keys, on_eval):
    """The iterations from `begin.iteration` to `end`: run, check, count, evaluate, write, log,
    plot and checkpoint each. Returns (state, last record, whether a signal stopped the run);
    a second Ctrl-C stops at once, keeping the last checkpoint."""
    run_key, eval_key = keys
    ckpt, log, num_iterations = session.ckpt, session.log, session.num_iterations
    state, start, frames, games = begin.state, begin.iteration, begin.frames, begin.games
    resume_record = begin.resume_record
    record: dict[str, Any] = {}
    stopped = False
    latest_eval = metrics_lib.latest_eval(metrics_lib.read_metrics(session.workdir))
    loop_started, last_plot = time.time(), 0.0
    if session.stop is not None:
        session.stop.looping = True
    try:
        for iteration in range(start, end):
            started = time.time()
            key = jax.random.fold_in(run_key, iteration)
            inputs = session.algorithm.host_data(session.config, session.mesh, data, iteration)
            state, record = step_fn(state, inputs, key, iteration)
            seconds = time.time() - started
            done = iteration + 1
            _check_iteration(session, state, record, iteration)
            frames += int(record[FRAMES_KEY])
            games += int(record.get(GAMES_KEY, 0))
            if resume_record is not None:  # the first iteration after a resume
                record.update(resume_record)
                resume_record = None
            record.update(
                frames=frames,
                games=games,
                iteration=done,
                **{
                    "perf/iteration_seconds": seconds,
                    **(
                        {"perf/games_per_s": record[GAMES_KEY] / seconds}
                        if GAMES_KEY in record
                        else {}
                    ),
                    "perf/frames_per_s": record[FRAMES_KEY] / seconds,
                },
            )
            evaluated = False
            if itstime(done, int(session.config.eval.every), num_iterations):
                latest_eval = _evaluate(session, state, record, iteration, eval_key)
                evaluated = True
            if on_eval is not None:
                extra = on_eval(done, state, record)
                if extra:
                    record.update(extra)
            record = writer.write(done, record)
            per_iteration = (time.time() - loop_started) / (done - start)
            eta = per_iteration * (num_iterations - done)
            log(
                progress_line(
                    session.algorithm, done, num_iterations, record, seconds, eta, latest_eval
                )
            )
            stopping = session.stop_requested()
            last = done == num_iterations or stopping
            if session.is_chief and (
                evaluated or last or time.time() - last_plot > PLOT_INTERVAL_SECONDS
            ):
                last_plot = _plot(session)
            if itstime(done, int(session.config.checkpoint.every), num_iterations) or stopping:
                _save(session, writer, state, done, frames, games)
            if stopping:
                ckpt.wait()
                log(
                    f"stopped by {session.stop_reason()} after iteration {done}; checkpoint "
                    f"{ckpt.directory}/{done} is kept. Run the same command to resume."
                )
                stopped = True
                break
    except KeyboardInterrupt:  # signals not handled here (handle_signals=False)
        log(_interrupted_line(ckpt))
        raise Interrupted from None
    return state, record, stopped


def _interrupted_line(ckpt: checkpoint_lib.Checkpointer) -> str:
    """The line a stop at once ends with: the newest step committed on disk, once a save in
    flight has had a few seconds to commit."""
    kept = ckpt.committed_step(wait_seconds=5.0)
    if kept is None:
        return "interrupted before the first checkpoint; the run starts afresh when run again."
    return (
        f"interrupted; the last checkpoint ({ckpt.directory}/{kept}) "
        "is kept. Run the same command to resume."
    )


def _exit_at_once(ckpt: checkpoint_lib.Checkpointer, log: Callable[[str], None]) -> None:
    """A second Ctrl-C while iterating: says what is kept and ends the process with 130 from
    the signal handler, without unwinding (an iteration may still run in XLA's threads, and
    Python's shutdown under it crashed with -11)."""
    log(_interrupted_line(ckpt))
    cli.exit_at_once(130)


def _check_iteration(session: _Session, state, record: dict[str, Any], iteration: int) -> None:
    """Raises FloatingPointError (naming the last good checkpoint) when iteration `iteration`
    (0-based) gave a non-finite `train/*` metric or a non-finite state, before anything of it
    is saved."""
    done = iteration + 1
    if nonfinite_metrics(record):
        check_finite(record, done, _last_good(session, iteration, vouched=False))
    # What may be saved must be finite: the losses were, but an explosion in
    # the last learner step shows only in the state.
    bad = checkpoint_lib.nonfinite_leaves(session.algorithm.finite_parts(state))
    if bad:
        note = _last_good(session, iteration, vouched=True)
        raise FloatingPointError(
            f"non-finite values in the state after iteration {done}: "
            f"{', '.join(bad[:6])}. Stopping; nothing of this iteration was "
            f"saved ({note}). {DIVERGENCE_HINT}"
        )


def _evaluate(session: _Session, state, record: dict[str, Any], iteration: int, eval_key):
    """Evaluates the parameters after iteration `iteration` (0-based), adds the `eval/*`
    metrics to `record` and returns them (with the iteration) as the latest evaluation."""
    eval_started = time.time()
    latest_eval = session.algorithm.evaluate(
        session.config, state.params, jax.random.fold_in(eval_key, iteration)
    )
    latest_eval["perf/eval_seconds"] = time.time() - eval_started
    record.update(latest_eval)
    latest_eval["iteration"] = iteration + 1
    return latest_eval


def _plot(session: _Session) -> float:
    """Redraws the plots of the workdir (a failure is logged, never raised); returns when."""
    try:
        metrics_lib.plot_metrics(session.workdir)
    except Exception as error:  # a plot must never stop a training run
        session.log(f"plotting failed: {error!r}")
    return time.time()


def _save(session: _Session, writer, state, done: int, frames: int, games: int) -> None:
    """Checkpoints the state after iteration `done` (orbax writes in the background)."""
    # A bucket's metrics file is uploaded at intervals: make it hold every
    # record up to this checkpoint, which a resumed run starts from.
    writer.flush()
    save_replay = bool(session.config.checkpoint.save_replay)
    session.ckpt.save(
        done,
        checkpoint_state(session.algorithm, state, done, frames, games, save_replay),
        config=session.config,
        extra={"frames": frames, "games": games},
    )


def _final_record(session: _Session, record, start: int, stopped: bool, compile_seconds: float):
    """The record `run` returns: the last one written (read back when this call wrote none)
    plus `iteration`, `start_iteration`, `compile_seconds` and `stopped` (a signal ended the
    call before `num_iterations`)."""
    if not record:
        records = metrics_lib.read_metrics(session.workdir)
        record = dict(records[-1]) if records else {}
    record.update(
        iteration=int(record.get("iteration", start))
        if stopped
        else max(start, session.num_iterations),
        start_iteration=start,
        compile_seconds=compile_seconds,
        stopped=stopped,
    )
    return record
