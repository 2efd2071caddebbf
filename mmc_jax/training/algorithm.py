"""The Algorithm contract: a way to learn as the one run loop (`runloop.run`) sees it.

An `Algorithm` owns everything about its state: how to validate its config, which config field
is its batch (split over the devices, and filled to the device's memory when 0), how to build,
describe and compile one jitted iteration, what a checkpoint of its state holds and how a
restored checkpoint becomes a state again, and, between compiled iterations, any host-side data
the next iteration takes (games an engine played, a dataset streamed from disk). The loop names
no state field but `params` (what evaluation, export and `init_params` read): a new learner is
one subclass and one registry entry (`mmc_jax.algorithms.REGISTRY`), and the loop does not
change.

`SelfPlayAlgorithm` is the shared base of the learners whose state is self-play's (`params`,
`opt_state`, `game_state` and a replay ring, `replay`): AlphaZero and JOAT. Its checkpoint
holds the first three and, with `checkpoint.save_replay`, the ring (read back in either layout
it was ever written in; a checkpoint without it resumes with an empty ring and says so).
`ReplicatedAlgorithm` is the base of the learners without a replay ring whose state every
device holds whole (`ReplicatedState`: TD(λ), supervised, recon): a subclass makes a fresh
state, the base places, templates and checkpoints it. An algorithm's instance declares its
name, batch field and config check (`Algorithm.__init__`).

What a new learner must write is `Algorithm`'s seven abstract methods (`setup`, `init_state`,
`abstract_state`, `checkpoint_contents`, `describe`, `compile`, `evaluate`; five under
`ReplicatedAlgorithm`, whose `fresh_state` stands for three). Everything else has a default,
grouped by purpose in the classes `Algorithm` is made of: `HostData` (host-side data and run
files), `CheckpointLayout` (restore, finiteness, probe), `MemoryFit` (working bytes, fill
cap), `CommandText` (progress fields, the next command) and `ModelExport` (the model's kind
and card line).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from mmc_jax.infra import checkpoint, sharding
from mmc_jax.training import learner, memory


@dataclasses.dataclass(frozen=True)
class CompiledStep:
    """One compiled iteration: `fn(state, data, key, iteration) -> (state, record)`, where
    `record` is a flat dict of host scalars whose neutral core every learner fills and the
    progress line reads: `selfplay/frames` (positions this iteration consumed: played, or
    read), `selfplay/games` only where it plays games, and its own losses as
    `train/NAME_loss` (e.g. `train/value_loss` alone for TD(λ)); anything else is its own."""

    fn: Callable[..., tuple[Any, dict[str, Any]]]
    # The XLA executable `fn` runs (`jax.stages.Compiled`), for `bench compile`'s program size.
    compiled: Any = None

    def __call__(self, state, data, key, iteration):
        return self.fn(state, data, key, iteration)


@dataclasses.dataclass(frozen=True)
class Restored:
    """A checkpoint made a state again: the state, lines for the log, and fields for the first
    record after the resume (what the run should know about how it resumed)."""

    state: Any
    notes: tuple[str, ...] = ()
    record: dict[str, Any] = dataclasses.field(default_factory=dict)


class HostData:
    """Defaults of the contract for what the host does around the compiled iterations: the
    data a run is made with, the data each iteration takes, the files a run's workdir holds
    beside its checkpoints."""

    def load_data(self, config, mesh, workdir, log: Callable[[str], None]) -> Any:
        """The run's data argument, made with the workdir at hand: an algorithm whose data is
        host-side (a dataset it writes into and reads from `workdir`) makes or finishes it
        here, saying what it does through `log`. Default: `setup(config, mesh)`."""
        del workdir, log
        return self.setup(config, mesh)

    def host_data(self, config, mesh, data, iteration: int) -> Any:
        """The data argument of iteration `iteration` (0-based), called on the host before
        each compiled iteration: an algorithm that learns from host-side data (an engine's
        games, a dataset on disk) returns the next batch of it here, shaped as the compiled
        step expects. Default: `data` unchanged."""
        del config, mesh, iteration
        return data

    def write_run_files(self, config, workdir: str) -> None:
        """Writes what a run's workdir holds beside its checkpoints and metrics, at every start
        (the chief process's): JOAT's task list. Default: nothing."""
        del config, workdir


class CheckpointLayout:
    """Defaults of the contract for how a state is checked, restored and refused: what a
    restore reads, how it becomes a state again, what must be finite, the probe of a restored
    state, the check of a fresh one, and the error of a checkpoint that does not fit."""

    def restore_template(self, abstract, metadata: dict[str, Any]) -> dict[str, Any]:
        """What to restore a saved step into, given its sidecar `metadata` (the shapes it
        holds): by default the full contents of `abstract`."""
        del metadata
        return self.checkpoint_contents(abstract, save_replay=True)

    def from_checkpoint(self, abstract, saved: dict[str, Any], metadata: dict[str, Any]):
        """The `Restored` state of a checkpoint's contents (`saved`, as `restore_template`
        shaped it for `metadata`): by default `abstract` with each saved field replaced."""
        del metadata
        return Restored(abstract.replace(**saved))

    def finite_parts(self, state) -> dict[str, Any]:
        """The parts of `state` that must be finite to be saved or resumed from."""
        return {"params": state.params, "opt_state": state.opt_state}

    def probe(self, config, state) -> str | None:
        """Why `state` (restored, finite) is no start, or None: parameters can explode and stay
        finite (a learning rate of 1e30), so an algorithm runs one probe batch through them
        here and names a non-finite loss. Default: None (nothing to probe)."""
        del config, state
        return None

    def restore_error(self, error: ValueError, config) -> ValueError:
        """A clearer error for a checkpoint that does not fit `config`."""
        return error

    def check_start(self, config, state) -> None:
        """Raises ValueError when the fresh state cannot be played (no legal move)."""
        del config, state


class MemoryFit:
    """Defaults of the contract for memory: what an iteration needs beside its state, and the
    most its batch may be when the config asks to fill the device."""

    def working_bytes(self, config, mesh) -> tuple[int, int]:
        """(self-play, learner) bytes per device an iteration needs beside its state
        (`memory`'s formulas); (0, 0) when unknown."""
        del config, mesh
        return 0, 0

    def fill_max(self, config) -> int:
        """The most `batch_field` may be set to when it is 0 ("fill the device"): the games a
        device plays at once are capped at `memory.FILL_MAX` (beyond it a card is busy and the
        iteration only gets longer)."""
        del config
        return memory.FILL_MAX


class CommandText:
    """Defaults of the contract for what the commands print: the progress line's own fields
    and the command a user runs next."""

    def progress_fields(self, record: dict[str, Any]) -> list[str]:
        """Algorithm-specific parts of the progress line."""
        return []

    def next_command(self, config, workdir: str) -> str:
        """The command a user runs next on a finished run (printed after `next:`)."""
        return (
            f"python -m mmc_jax.evaluate --checkpoint {workdir} "
            f"--variant {config.variant} --opponent greedy --games 400"
        )


class ModelExport:
    """Defaults of the contract for the model: what an export writes and every command loads
    (`mmc_jax.algorithms.open_model`)."""

    def model_kind(self, config) -> checkpoint.ModelKind:
        """What this algorithm's parameters are for a saved `config` (their template, what a
        player needs beside them, the observation layout): by default the board network's
        (`checkpoint.board_model_kind`). ValueError when `config` cannot have a model."""
        return checkpoint.board_model_kind(config)

    def describe_model(self, config, step: int | None) -> str:
        """The one-line description an export's card gives its model."""
        network = config.network
        return (
            f"{config.get('variant') or 'meta-training'}: "
            f"{network.num_blocks}x{network.channels} net, step {step}"
        )


class Algorithm(HostData, CheckpointLayout, MemoryFit, CommandText, ModelExport, abc.ABC):
    """A training method as `runloop.run` sees it (module doc). Its state is a pytree with a
    `params` field; everything else in it is the algorithm's own."""

    name: str = "algorithm"
    batch_field: str  # the dotted config field split over the devices (0: fill the device)
    section: str | None  # the config section only it reads (names it in an old config)

    def __init__(
        self,
        name: str,
        batch_field: str,
        prepare: Callable[[ml_collections.ConfigDict], ml_collections.ConfigDict],
        section: str | None = None,
    ):
        """An algorithm declares its name (`config.algorithm`), its batch field, its config
        check (`prepare`: a validated, locked copy of a config) and the config section no
        other algorithm reads, if it has one (a config saved before `config.algorithm`
        existed is its algorithm's by that section), where its instance is made."""
        self.name, self.batch_field, self._prepare = name, batch_field, prepare
        self.section = section

    def prepare_config(self, config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
        """A validated, locked copy of `config` (ValueError naming the problem)."""
        return self._prepare(config)

    def make_mesh(self, config: ml_collections.ConfigDict, devices=None) -> Mesh:
        """The run's device mesh (default: one `data` axis over `devices`, default all)."""
        del config
        return sharding.make_mesh(devices)

    @abc.abstractmethod
    def setup(self, config, mesh) -> Any:
        """The iteration's data arguments (rules of the games, a dataset's reader), placed on
        `mesh` where they are arrays."""

    @abc.abstractmethod
    def init_state(self, config, mesh, data, key: jax.Array) -> Any:
        """A fresh state (parameters from `key`) placed on `mesh`."""

    @abc.abstractmethod
    def abstract_state(self, config, mesh) -> Any:
        """The state as `ShapeDtypeStruct`s with their shardings (the restore template)."""

    @abc.abstractmethod
    def checkpoint_contents(self, state, save_replay: bool) -> dict[str, Any]:
        """The pytree a checkpoint holds of `state` (or of the abstract state: the restore
        template). `save_replay`: the config's `checkpoint.save_replay` (algorithms without
        a replay memory ignore it)."""

    @abc.abstractmethod
    def describe(self, config, mesh, state) -> str:
        """The start-up line: what is trained, on what, at which size."""

    @abc.abstractmethod
    def compile(self, config, mesh, state, data, start: int) -> CompiledStep:
        """The jitted iteration, compiled ahead of time for `state` and `data`."""

    @abc.abstractmethod
    def evaluate(self, config, params, key: jax.Array) -> dict[str, Any]:
        """`eval/*` metrics of `params` (games against `config.eval.opponents`)."""


@functools.lru_cache(maxsize=16)
def jit_per_config(iteration: Callable, config: Any) -> Callable:
    """`iteration` jitted with its (hashable) `config` bound and its first argument, the state,
    donated; one per (function, config) in a process, so JAX keeps what `.lower(...).compile()`
    on it made and a second run of the config (a resume) traces, lowers and compiles nothing."""
    return jax.jit(functools.partial(iteration, config=config), donate_argnums=0)


def compile_step(
    iteration: Callable,
    config: Any,
    state: Any,
    data: Any,
    to_record: Callable[[dict[str, float]], dict[str, Any]],
    arguments: Callable[[Any, Any, jax.Array], tuple] | None = None,
) -> CompiledStep:
    """`jit_per_config(iteration, config)` compiled ahead of time on the example `state` and
    `data`, as a `CompiledStep` whose record is `to_record` of the iteration's metrics (host
    floats). `arguments(state, data, key)` is what the iteration is called with (default
    `(state, data, key)`), for an iteration that takes other inputs than the loop's."""
    arguments = arguments or (lambda state, data, key: (state, data, key))
    jitted = jit_per_config(iteration, config)
    compiled = jitted.lower(*arguments(state, data, jax.random.key(0))).compile()

    def step(state, data, key, iteration_index):
        del iteration_index
        state, metrics = compiled(*arguments(state, data, key))
        return state, to_record({k: float(v) for k, v in jax.device_get(metrics).items()})

    return CompiledStep(step, compiled)


def check_at_least_one(config: ml_collections.ConfigDict, fields: tuple[str, ...]) -> None:
    """ValueError naming the first dotted config field in `fields` below 1."""
    for field in fields:
        section, _, name = field.rpartition(".")
        value = config[section][name] if section else config[name]
        if int(value) < 1:
            raise ValueError(f"config.{field} must be at least 1, got {value}")


def check_ranges(config: ml_collections.ConfigDict, ranges) -> None:
    """ValueError naming the first (dotted field, low, high) of `ranges` whose value is not a
    finite number in [low, high]."""
    for field, low, high in ranges:
        section, name = field.split(".")
        value = float(config[section][name])
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"config.{field}={value} must be a finite number in [{low}, {high}]")


def replicated_abstract(make_state: Callable[[], Any], mesh: Mesh) -> Any:
    """The abstract state `make_state()` builds (shapes only, nothing computed), replicated on
    `mesh`: the restore template of a state that every device holds whole."""
    abstract = jax.eval_shape(make_state)
    host = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), abstract)
    return sharding.abstract_with_shardings(abstract, sharding.replicated(host, mesh))


@struct.dataclass(kw_only=True)
class ReplicatedState:
    """The state of a `ReplicatedAlgorithm` (TD(λ), supervised, recon): the network's parameters
    and the optimizer's state, nothing else."""

    params: Any
    opt_state: Any


class ReplicatedAlgorithm(Algorithm):
    """An algorithm whose state every device holds whole and which keeps no replay memory
    (`params` and `opt_state`, as the supervised learner's and recon's are): a
    subclass says how a fresh state is made (`fresh_state`), this class places it, gives its
    restore template and checkpoints it."""

    @abc.abstractmethod
    def fresh_state(self, config, key: jax.Array) -> Any:
        """A fresh state on the host, parameters from `key` (or from the config's own seed)."""

    def init_state(self, config, mesh, data, key: jax.Array) -> Any:
        """`fresh_state(config, key)` replicated on `mesh`."""
        del data
        return sharding.put_replicated(jax.device_get(self.fresh_state(config, key)), mesh)

    def abstract_state(self, config, mesh) -> Any:
        """The replicated abstract state of `fresh_state` (`replicated_abstract`)."""
        return replicated_abstract(lambda: self.fresh_state(config, jax.random.key(0)), mesh)

    def checkpoint_contents(self, state, save_replay: bool) -> dict[str, Any]:
        """`params` and `opt_state`; `save_replay` is moot (no replay: every iteration learns
        from its own games or from a dataset on disk)."""
        del save_replay
        return {"params": state.params, "opt_state": state.opt_state}

    def restore_template(self, abstract, metadata):
        """The full contents, or for a checkpoint written before the learner built its
        optimizer through `learner.make_optimizer` (TD(λ) and recon before 2026-12-07:
        `optax.adamw` with a constant learning rate, which keeps no schedule step count) the
        contents with the optimizer state of that layout (`from_checkpoint` adds the count)."""
        contents = self.checkpoint_contents(abstract, save_replay=True)
        if _lacks_schedule_count(contents["opt_state"], metadata):
            contents["opt_state"] = _without_schedule_count(contents["opt_state"])
        return contents

    def from_checkpoint(self, abstract, saved, metadata):
        """`abstract` with the saved fields; an optimizer state of the layout before
        `make_optimizer` gets its schedule step count, which is Adam's own step count (every
        update stepped both), so the resumed run continues exactly."""
        if _lacks_schedule_count(abstract.opt_state, metadata):
            adam = saved["opt_state"][0]
            count = optax.ScaleByScheduleState(count=jnp.copy(adam.count))  # its own buffer
            saved = {**saved, "opt_state": (*saved["opt_state"][:-1], count)}
        return Restored(abstract.replace(**saved))


_SCHEDULE_COUNT = "['opt_state'][2].count"  # the schedule's step count in an Adam(W) chain


def _lacks_schedule_count(opt_state, metadata) -> bool:
    """Whether the checkpoint of `metadata` holds an Adam(W) chain's state without the step
    count of a schedule that `opt_state` (the optimizer's state today) has."""
    shapes = metadata.get("shapes", {})
    return (
        isinstance(opt_state, tuple)
        and len(opt_state) == 3
        and isinstance(opt_state[2], optax.ScaleByScheduleState)
        and any(path.startswith("['opt_state']") for path in shapes)
        and _SCHEDULE_COUNT not in shapes
    )


def _without_schedule_count(opt_state):
    return (*opt_state[:-1], optax.EmptyState())


# ----------------------------------------------------------------------------- self-play state

REPLAY_PREFIX = "['replay']"


def saved_replay_layout(meta: dict[str, Any]) -> str | None:
    """How the checkpoint with sidecar `meta` holds the replay ring: "packed" (the
    `learner.PackedBatch` layout, since 2026-11-26), "dense" (`learner.Batch`, 8.8 kB a sample:
    checkpoints written before), or None (saved without it: `checkpoint.save_replay` off)."""
    paths = [p for p in meta.get("shapes", {}) if p.startswith(REPLAY_PREFIX)]
    if not paths:
        return None
    return "dense" if any(p.endswith(".legal_action_mask") for p in paths) else "packed"


def dense_ring_template(abstract_ring: learner.ReplayBuffer) -> learner.ReplayBuffer:
    """The abstract ring (`ShapeDtypeStruct`s with shardings) of `abstract_ring`'s shape in the
    dense layout of checkpoints written before 2026-11-26 (any leading axes: JOAT's rings
    have a variant axis)."""
    data = abstract_ring.data
    lead = data.value_target.shape
    sharding_ = data.obs.sharding

    def dense(example):
        return jax.ShapeDtypeStruct((*lead, *example.shape[1:]), example.dtype, sharding=sharding_)

    dense_data = jax.tree.map(dense, learner.example_batch())
    return abstract_ring.replace(data=dense_data)


def pack_ring(ring: learner.ReplayBuffer, abstract_ring: learner.ReplayBuffer):
    """A restored dense ring in the packed layout, placed like `abstract_ring` (exact: the
    samples unpack to the dense ones bit for bit, `learner.pack`)."""
    shardings = jax.tree.map(lambda x: x.sharding, abstract_ring)
    return jax.jit(lambda r: r.replace(data=learner.pack(r.data)), out_shardings=shardings)(ring)


def zeros_like(abstract: Any) -> Any:
    """Zeros shaped, typed and placed like the `ShapeDtypeStruct`s of `abstract`."""
    return jax.tree.map(lambda x: jax.device_put(jnp.zeros(x.shape, x.dtype), x.sharding), abstract)


def empty_ring(abstract_ring: learner.ReplayBuffer) -> learner.ReplayBuffer:
    """An empty ring shaped and placed like `abstract_ring` (as `learner.replay_init` makes it:
    zeros, and no sample pending its result)."""
    ring = zeros_like(abstract_ring)
    if isinstance(ring, learner.PendingReplayBuffer):
        pending = abstract_ring.pending_mover
        ring = ring.replace(
            pending_mover=jax.device_put(
                jnp.full(pending.shape, -1, pending.dtype), pending.sharding
            )
        )
    return ring


NO_RING_NOTE = (
    "note: the checkpoint holds no replay ring (written with checkpoint.save_replay=False): the "
    "ring starts empty and refills as the run plays (a full ring in replay.iterations "
    "iterations); not bit-identical to an unbroken run (replay/restored = 0 in the next record)"
)


class SelfPlayAlgorithm(Algorithm):
    """An algorithm whose state is self-play's: `params`, `opt_state`, `game_state` (the games
    in progress) and `replay` (the ring), as AlphaZero's and JOAT's are (module doc)."""

    def checkpoint_contents(self, state, save_replay: bool) -> dict[str, Any]:
        saved = {
            "params": state.params,
            "opt_state": state.opt_state,
            "game_state": state.game_state,
        }
        if save_replay:
            saved["replay"] = state.replay
        return saved

    def restore_template(self, abstract, metadata):
        layout = saved_replay_layout(metadata)
        template = self.checkpoint_contents(abstract, save_replay=layout is not None)
        if layout == "dense":
            template["replay"] = dense_ring_template(abstract.replay)
        return template

    def from_checkpoint(self, abstract, saved, metadata):
        saved = dict(saved)
        layout = saved_replay_layout(metadata)
        if layout is None:
            saved["replay"] = empty_ring(abstract.replay)
            return Restored(abstract.replace(**saved), (NO_RING_NOTE,), {"replay/restored": 0})
        if layout == "dense":
            saved["replay"] = pack_ring(saved["replay"], abstract.replay)
        return Restored(abstract.replace(**saved), (), {"replay/restored": 1})
