"""Checkpoints: the only module that touches orbax.

A checkpoint is one step directory `<workdir>/checkpoints/<step>/` written atomically by an orbax
`CheckpointManager` (written under a temporary name and renamed on commit, so a run killed
mid-save leaves the previous checkpoint intact). It holds two items:

  state  any pytree, typically {"params", "opt_state", "iteration", ...}
  meta   a JSON sidecar (`meta/metadata`): the run config, library versions, the step, and the
         shape of every leaf of `state`

Restoring checks the sidecar before reading any array: a state template whose leaves have other
shapes (another network size, another observation width), or a config whose shape-determining
fields differ (`DEFAULT_SHAPE_KEYS`: network size, observation channels, whether the network
reads the variant planes, variant list), raises `ValueError` naming every mismatch instead of
an orbax error deep in the tree.

The workdir may be a bucket (`gs://BUCKET/run`): the path goes to orbax unchanged (tensorstore
writes the arrays to GCS, epath the rest), and every listing here goes through `etils.epath`
(`mmc_jax.infra.storage`).

Typical use from a training loop:

    ckpt = Checkpointer(workdir, max_to_keep=3)
    state = ckpt.restore_or_none(template, config=config) or template
    ...
    ckpt.save(iteration, state, config=config)
    ...
    ckpt.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

import mmc_jax
from mmc_jax import rules as R
from mmc_jax.infra import storage
from mmc_jax.model import network as network_lib

CHECKPOINT_SUBDIR = "checkpoints"
SIDECAR = "meta/metadata"  # in a step's folder: the JSON sidecar
DAMAGED_SUFFIX = "_damaged"  # <workdir>/checkpoints_damaged: steps a resume could not read
# <workdir>/checkpoints_diverged: steps that an iteration with non-finite losses started from
DIVERGED_SUFFIX = "_diverged"

# Dotted config paths that must agree between the saved run and the restoring one. A key is
# compared only when both configs have it; the per-leaf shape check catches everything else.
DEFAULT_SHAPE_KEYS = (
    "network.num_blocks",
    "network.channels",
    "network.policy_head",
    "network.policy_channels",
    "network.value_channels",
    "network.value_hidden",
    "network.layer_norm",
    "network.num_actions",
    "network.variant_planes",
    "network.rule_planes",
    "obs_channels",
    "variants",
)


def library_versions() -> dict[str, str]:
    """Versions recorded in every checkpoint sidecar."""
    return {
        "mmc_jax": mmc_jax.__version__,
        "jax": jax.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "orbax_checkpoint": getattr(ocp, "__version__", "unknown"),
        "numpy": np.__version__,
    }


def _jsonable(value: Any) -> Any:
    """Recursively converts a config value to plain JSON types (tuples become lists)."""
    if isinstance(value, ml_collections.ConfigDict | ml_collections.FrozenConfigDict):
        value = value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, np.generic | np.ndarray | jax.Array):
        return np.asarray(value).tolist()
    return repr(value)


def leaf_shapes(tree: Any) -> dict[str, list[int]]:
    """{"['params']['Conv_0']['kernel']": [3, 3, C, F], ...} for every leaf of a pytree."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path): list(np.shape(leaf)) for path, leaf in flat}


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"learner.learning_rate": 0.001, ...} of a JSON-able config tree."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def config_changes(
    saved: Mapping | None, config: Any, ignore: tuple[str, ...] = ()
) -> list[tuple[str, Any, Any]]:
    """[(dotted field, value in `saved`, value in `config`)] of every field where `saved` (the
    config a checkpoint was saved with: its sidecar's `config`) and `config` differ, sorted; a
    field under a dotted prefix of `ignore` is left out, and one that only one of them has is
    compared with None. [] when `saved` is None (not known)."""
    if saved is None:
        return []
    old, new = _flatten(_jsonable(saved)), _flatten(_jsonable(config))

    def ignored(key: str) -> bool:
        return any(key == prefix or key.startswith(prefix + ".") for prefix in ignore)

    return [
        (key, old.get(key), new.get(key))
        for key in sorted(set(old) | set(new))
        if not ignored(key) and old.get(key) != new.get(key)
    ]


def _lookup(config: Mapping, dotted: str) -> tuple[bool, Any]:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _check_compatible(
    meta: Mapping,
    target_template: Any,
    config: Any | None,
    shape_keys: Sequence[str],
    where: str,
) -> None:
    """Raises ValueError listing every config-field and leaf-shape mismatch; first of all, a
    checkpoint of another observation layout (`network.check_obs_layout` says why)."""
    if config is not None and "network" in config:
        try:
            network_lib.check_obs_layout(meta.get("obs_layout"), _as_config(config).network)
        except ValueError as error:
            raise CheckpointMismatch(str(error)) from None
    problems = []
    if config is not None and meta.get("config") is not None:
        new_config = _jsonable(config)
        for key in shape_keys:
            saved_has, saved = _lookup(meta["config"], key)
            new_has, new = _lookup(new_config, key)
            if saved_has and new_has and saved != new:
                problems.append(
                    f"config field {key!r}: checkpoint has {saved!r}, config has {new!r}"
                )
    saved_shapes = meta.get("shapes", {})
    new_shapes = leaf_shapes(target_template)
    # Parameters first: they name the network mismatch; optimizer moments only repeat it.
    paths = sorted(set(saved_shapes) | set(new_shapes), key=lambda p: ("params" not in p, p))
    for path in paths:
        if path not in new_shapes:
            problems.append(f"leaf {path}: in the checkpoint but not in the template")
        elif path not in saved_shapes:
            problems.append(f"leaf {path}: in the template but not in the checkpoint")
        elif list(saved_shapes[path]) != list(new_shapes[path]):
            problems.append(
                f"leaf {path}: checkpoint shape {tuple(saved_shapes[path])}, "
                f"template shape {tuple(new_shapes[path])}"
            )
    if problems:
        shown = problems[:12] + (
            [f"... and {len(problems) - 12} more"] if len(problems) > 12 else []
        )
        raise CheckpointMismatch(
            f"checkpoint {where} does not match the model being restored "
            f"({len(problems)} mismatches):\n  " + "\n  ".join(shown)
        )


def _raise_if_structure_mismatch(error: ValueError, where: str) -> None:
    """Raises CheckpointMismatch when orbax refused `error` for a tree structure that differs
    from the saved one (same leaves and shapes, other containers or `None` entries: a state
    class that gained or lost an optional field), not for damaged files. Orbax compares the
    structures before it reads any array and names the differing entries; a damaged
    checkpoint fails later with other errors."""
    text = str(error)
    if "tree structures do not match" not in text:
        return
    lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    entries = [line.rstrip(":") for line in lines if line.endswith(":")][:6]
    raise CheckpointMismatch(
        f"checkpoint {where} does not match the model being restored: its state has another "
        "tree structure (same arrays, other containers or None entries"
        + (f"; entries that differ: {', '.join(entries)}" if entries else "")
        + "); it was written by another version of this code or another config"
    ) from None


def nonfinite_leaves(tree: Any) -> list[str]:
    """Key paths (`['params']['Conv_0']['kernel']`) of the floating-point leaves of `tree` that
    hold a NaN or an infinity: what a checkpoint must never hold. One reduction per leaf, on
    the device (a multi-process tree included)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    floats = [(p, x) for p, x in flat if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    if not floats:
        return []
    finite = jax.device_get(_all_finite([x for _, x in floats]))
    return [jax.tree_util.keystr(p) for (p, _), ok in zip(floats, finite, strict=True) if not ok]


@jax.jit
def _all_finite(leaves: list[Any]) -> list[jax.Array]:
    return [jnp.all(jnp.isfinite(x)) for x in leaves]


def largest_magnitude(tree: Any) -> float:
    """The largest |value| over the floating-point leaves of `tree` (0.0 for none)."""
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    return max((float(jnp.max(jnp.abs(x))) for x in leaves if np.size(x)), default=0.0)


# Healthy networks of this project keep every |parameter| below about 10 (the shipped models:
# 0.6-9.1); a step beyond this bound exploded (a learning rate of 1e30 leaves them ~1e30 and
# finite, which a finiteness check passes).
EXPLODED_MAGNITUDE = 1e6


def exploded(params: Any) -> str | None:
    """Why `params` exploded (their largest |value| is beyond `EXPLODED_MAGNITUDE`), or None."""
    size = largest_magnitude(params)
    if size > EXPLODED_MAGNITUDE:
        return f"its parameters exploded (largest |parameter| {size:.2g})"
    return None


class CheckpointDamaged(ValueError):
    """A checkpoint step whose files cannot be read (missing, truncated, a corrupt sidecar) or
    whose values are not finite."""


class CheckpointMismatch(ValueError):
    """A checkpoint that does not fit what restores it (config fields, observation layout or
    leaf shapes): refused before any array is read. Any other error while restoring means
    damaged files."""


def _as_config(config: Any) -> ml_collections.ConfigDict:
    if isinstance(config, ml_collections.ConfigDict):
        return config
    return ml_collections.ConfigDict(_jsonable(config))


def _layout_of(config: Any | None) -> str | None:
    """The observation layout of the run's network (None for a config without one)."""
    if config is None or "network" not in config:
        return None
    return network_lib.obs_layout(_as_config(config).network)


class Checkpointer:
    """Saves and restores `state` pytrees under `<workdir>/checkpoints`.

    Args:
      workdir: run directory (created if needed): a local path or a `gs://` one.
      max_to_keep: how many of the latest checkpoints to keep (None: all).
      keep_period: also keep, beyond `max_to_keep`, every checkpoint whose step is a multiple
        of it (None or 0: none), e.g. for a tournament over training
        (`python -m mmc_jax.evaluate tournament --run WORKDIR`).
      async_save: write in a background thread (`save` returns at once; `wait`/`close` block).

    Raises:
      storage.MissingPackage: a `gs://` workdir without the `gcs` extra installed.
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        max_to_keep: int | None = 3,
        keep_period: int | None = None,
        async_save: bool = True,
    ):
        storage.require_packages(workdir)
        _quiet_closed_loop_reports()
        self.directory = storage.join(storage.absolute(workdir), CHECKPOINT_SUBDIR)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            keep_period=keep_period or None,
            create=True,
            enable_async_checkpointing=async_save,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """The newest committed step, or None when there is none."""
        return self._manager.latest_step()

    def committed_step(self, wait_seconds: float = 5.0) -> int | None:
        """The newest step committed on disk, read from the folder without waiting on orbax's
        threads (a signal handler calls it while the main thread may be inside a save): a step
        being written (orbax's `*.orbax-checkpoint-tmp*`) is given up to `wait_seconds` to
        commit."""
        folder = storage.to_path(self.directory)
        if not folder.exists():
            return None
        deadline = time.time() + wait_seconds
        while time.time() < deadline and any(
            ocp.utils.is_tmp_checkpoint(path) for path in folder.iterdir()
        ):
            time.sleep(0.1)
        steps = [
            int(path.name)
            for path in folder.iterdir()
            if path.name.isdigit() and ocp.utils.is_checkpoint_finalized(path)
        ]
        return max(steps, default=None)

    def all_steps(self) -> list[int]:
        """All committed steps, ascending."""
        return sorted(self._manager.all_steps())

    def save(
        self,
        step: int,
        state: Any,
        *,
        config: Any | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Saves `state` as checkpoint `step` with its JSON sidecar.

        Args:
          step: the step number (usually the iteration); must exceed earlier saved steps.
          state: pytree of arrays / Python scalars.
          config: run config (ConfigDict or dict), stored for compatibility checks and humans.
          extra: more JSON-able metadata to store (e.g. frames seen, wall time).
        """
        meta = {
            "step": int(step),
            "time": time.time(),
            "versions": library_versions(),
            "config": None if config is None else _jsonable(config),
            "obs_layout": _layout_of(config),
            "shapes": leaf_shapes(state),
            "extra": _jsonable(dict(extra or {})),
        }
        with self._naming_a_full_disk():
            self._manager.save(
                int(step),
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
                ),
                force=True,
            )

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        """The JSON sidecar of `step` (default: latest).

        Raises:
          FileNotFoundError: no checkpoint (or not that step).
          CheckpointDamaged: a file of the step is missing, or its sidecar is not JSON
            (`check_files`).
        """
        step = self._resolve_step(step)
        self.check_files(step)
        restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored["meta"])

    def check_files(self, step: int) -> None:
        """Raises CheckpointDamaged naming the first file of step `step` that is missing, or a
        sidecar that is not JSON, before orbax reads anything (whose errors name neither the
        file nor the step, and whose reads in flight outlive a failure)."""
        folder = storage.to_path(storage.join(self.directory, str(int(step))))
        state = folder / "state"
        for name in (SIDECAR, "state/_METADATA"):
            if not (folder / name).exists():
                raise CheckpointDamaged(f"{name} is missing")
        try:
            json.loads((folder / SIDECAR).read_bytes())
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            raise CheckpointDamaged(f"its sidecar {SIDECAR} is not valid JSON ({error})") from None
        try:
            layout = json.loads((state / "_METADATA").read_bytes())
        except ValueError as error:
            raise CheckpointDamaged(f"state/_METADATA is not valid JSON ({error})") from None
        if isinstance(layout, dict) and layout.get("use_ocdbt"):  # the store's manifests
            writers = sorted(p.name for p in state.glob("array_metadatas/process_*"))
            required = ["state/manifest.ocdbt"]
            required += [f"state/ocdbt.{name}/manifest.ocdbt" for name in writers]
            for name in required:
                if not (folder / name).exists():
                    raise CheckpointDamaged(f"{name} is missing")

    def restore(
        self,
        target_template: Any,
        *,
        step: int | None = None,
        config: Any | None = None,
        shape_keys: Sequence[str] = DEFAULT_SHAPE_KEYS,
    ) -> Any:
        """Restores checkpoint `step` (default: latest) into the structure of `target_template`.

        Args:
          target_template: pytree with the structure, shapes and dtypes to restore into (arrays
            or `jax.ShapeDtypeStruct`s), e.g. a freshly initialised state.
          step: which step; None for the latest.
          config: the current run config; its `shape_keys` fields must match the saved config.
          shape_keys: dotted config fields to compare.

        Raises:
          FileNotFoundError: no checkpoint (or not that step).
          ValueError: config fields or leaf shapes differ from the checkpoint.
        """
        self._manager.wait_until_finished()
        step = self._resolve_step(step)
        meta = self.metadata(step)
        where = f"{self.directory}/{step}"
        _check_compatible(meta, target_template, config, shape_keys, where)
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target_template))
            )
        except ValueError as error:
            _raise_if_structure_mismatch(error, where)
            raise
        return restored["state"]

    def restore_or_none(
        self,
        target_template: Any,
        *,
        config: Any | None = None,
        shape_keys: Sequence[str] = DEFAULT_SHAPE_KEYS,
    ) -> Any | None:
        """`restore` of the latest step, or None when the directory has no checkpoint."""
        if self.latest_step() is None:
            return None
        return self.restore(target_template, config=config, shape_keys=shape_keys)

    def restore_subtree(self, key: str, target_template: Any, *, step: int | None = None) -> Any:
        """Restores only `state[key]` (e.g. "params") of checkpoint `step` (default: latest).

        Nothing else of the saved state is read, and no template is needed for it: evaluation
        and adaptation restore the network weights of a run whatever else its training loop
        saved (optimizer moments, counters, buffers). The leaf shapes under `key` are checked
        against the sidecar like `restore` does.

        Raises:
          FileNotFoundError: no checkpoint (or not that step).
          ValueError: the saved state has no `key`, or its leaf shapes differ from the template.
        """
        self._manager.wait_until_finished()
        step = self._resolve_step(step)
        meta = self.metadata(step)
        where = f"{self.directory}/{step}"
        prefix = f"[{key!r}]"
        saved = {p: s for p, s in meta.get("shapes", {}).items() if p.startswith(prefix)}
        if not saved:
            raise CheckpointMismatch(f"checkpoint {where} has no {key!r} entry in its saved state")
        _check_compatible(dict(meta, shapes=saved), {key: target_template}, None, (), where)
        template = {key: target_template}
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.PyTreeRestore(
                    item=template,
                    restore_args=ocp.checkpoint_utils.construct_restore_args(template),
                    partial_restore=True,
                )
            ),
        )
        return restored["state"][key]

    def set_aside(self, step: int, suffix: str = DAMAGED_SUFFIX) -> str:
        """Moves the folder of `step` (a damaged one; with `DIVERGED_SUFFIX`, one that an
        iteration with non-finite losses started from) out of the way of new saves, into
        `<workdir>/checkpoints_damaged/` (`checkpoints<suffix>/`), and returns where it went.
        Nothing is deleted: the files stay for a human to inspect, and the step can be saved
        again."""
        self._manager.wait_until_finished()
        aside = storage.to_path(self.directory + suffix)
        target = aside / str(int(step))
        if jax.process_index() == 0:  # one process moves it; all wait, then re-list the steps
            aside.mkdir(parents=True, exist_ok=True)
            n = 1
            while target.exists():
                target, n = aside / f"{int(step)}.{n}", n + 1
            storage.to_path(storage.join(self.directory, str(int(step)))).rename(target)
        multihost_utils.sync_global_devices(f"mmc_jax set_aside {int(step)}")
        self._manager.reload()
        return str(target)

    def wait(self) -> None:
        """Blocks until pending asynchronous saves are committed (DiskFull: the disk is)."""
        with self._naming_a_full_disk():
            self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases the manager."""
        with self._naming_a_full_disk():
            self._manager.wait_until_finished()
        self._manager.close()

    @contextlib.contextmanager
    def _naming_a_full_disk(self):
        """Re-raises a full disk (or quota), however orbax wraps it, as one `DiskFull` line
        that names the folder, its free space and the step a re-run resumes from."""
        try:
            yield
        except Exception as error:
            if not disk_full(error):
                raise
            try:
                free = shutil.disk_usage(storage.to_path(self.directory)).free
                free = f"{free / 2**20:.1f} MiB free"
            except OSError:
                free = "free space unknown"
            steps = self.all_steps()
            resume = f"it resumes from step {steps[-1]}" if steps else "it starts afresh"
            raise DiskFull(
                f"the disk is full: a checkpoint could not be written to {self.directory} "
                f"({free}); free some space (or use another --workdir) and run the same "
                f"command again: {resume}"
            ) from None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _resolve_step(self, step: int | None) -> int:
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise FileNotFoundError(f"no checkpoint in {self.directory}")
            return steps[-1]
        if int(step) not in steps:
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}: {steps}")
        return int(step)


# ---------------------------------------------------------------------------------------------
# One-shot helpers (open a manager, act, close).


def save_checkpoint(
    workdir: str | os.PathLike,
    step: int,
    state: Any,
    *,
    config: Any | None = None,
    extra: Mapping[str, Any] | None = None,
    max_to_keep: int = 3,
) -> None:
    """Saves `state` as step `step` under `<workdir>/checkpoints` and waits for the commit."""
    with Checkpointer(workdir, max_to_keep=max_to_keep, async_save=False) as ckpt:
        ckpt.save(step, state, config=config, extra=extra)


def latest_step(workdir: str | os.PathLike) -> int | None:
    """The newest committed checkpoint step under `workdir`, or None."""
    if not storage.to_path(storage.join(workdir, CHECKPOINT_SUBDIR)).is_dir():
        return None
    with Checkpointer(workdir, max_to_keep=None, async_save=False) as ckpt:
        return ckpt.latest_step()


def _require_checkpoints(workdir: str | os.PathLike) -> None:
    # Reading helpers must not create an empty checkpoint directory as a side effect.
    if latest_step(workdir) is None:
        raise FileNotFoundError(f"no checkpoint under {os.fspath(workdir)}/{CHECKPOINT_SUBDIR}")


def load_metadata(workdir: str | os.PathLike, step: int | None = None) -> dict[str, Any]:
    """The JSON sidecar (config, versions, step, shapes, extra) of `step` (default: the newest
    step whose sidecar reads).

    Raises:
      FileNotFoundError: no checkpoint (or not that step).
      CheckpointDamaged: that step's sidecar (or every step's) cannot be read.
    """
    _require_checkpoints(workdir)
    with Checkpointer(workdir, max_to_keep=None, async_save=False) as ckpt:
        return restore_newest_intact(ckpt, ckpt.metadata, step=step)[1]


def restore_checkpoint(
    workdir: str | os.PathLike,
    target_template: Any,
    *,
    step: int | None = None,
    config: Any | None = None,
    shape_keys: Sequence[str] = DEFAULT_SHAPE_KEYS,
) -> Any:
    """Restores step `step` (default: latest); see `Checkpointer.restore`."""
    _require_checkpoints(workdir)
    with Checkpointer(workdir, max_to_keep=None, async_save=False) as ckpt:
        return ckpt.restore(target_template, step=step, config=config, shape_keys=shape_keys)


def restore_or_none(
    workdir: str | os.PathLike,
    target_template: Any,
    *,
    config: Any | None = None,
    shape_keys: Sequence[str] = DEFAULT_SHAPE_KEYS,
) -> Any | None:
    """Restores the latest checkpoint into `target_template`'s structure, or None if none.

    Raises ValueError when the checkpoint's leaf shapes or shape-determining config fields differ.
    """
    if latest_step(workdir) is None:
        return None
    return restore_checkpoint(workdir, target_template, config=config, shape_keys=shape_keys)


def restore_subtree(
    workdir: str | os.PathLike, key: str, target_template: Any, *, step: int | None = None
) -> Any:
    """Restores only `state[key]` of step `step` (default: latest); see
    `Checkpointer.restore_subtree`. Typical: `restore_subtree(workdir, "params", template)`."""
    _require_checkpoints(workdir)
    with Checkpointer(workdir, max_to_keep=None, async_save=False) as ckpt:
        return ckpt.restore_subtree(key, target_template, step=step)


# ---------------------------------------------------------------------------------------------
# Loading models


def split_checkpoint_path(path: str | os.PathLike, step: int | None) -> tuple[str, int | None]:
    """`<workdir>`, `<workdir>/checkpoints` or `<workdir>/checkpoints/<step>` -> (workdir, step)."""
    path = storage.absolute(path)
    name, parent = os.path.basename(path), os.path.dirname(path)
    if name.isdigit() and os.path.basename(parent) == CHECKPOINT_SUBDIR:
        if step is not None and int(step) != int(name):
            raise ValueError(f"step {step} given for the checkpoint path {path} of step {name}")
        return os.path.dirname(parent), int(name)
    if name == CHECKPOINT_SUBDIR:
        return parent, step
    return path, step


T = TypeVar("T")


def damage_reason(error: BaseException) -> str:
    """What is wrong with a checkpoint step, in a few words: the missing file or broken sidecar
    (`CheckpointDamaged`), else the first line of orbax's error (without tensorstore's spec)."""
    if isinstance(error, CheckpointDamaged):
        return str(error)
    lines = str(error).strip().splitlines()
    line = lines[0].split(" [tensorstore_spec")[0].strip() if lines else ""
    array = re.match(r'([A-Z_]+): .*?"([^"/]+)/\.z(?:array|metadata)"', line)
    if array:  # tensorstore: `NOT_FOUND: Error opening ... "params.Conv_0.bias/.zarray" ...`
        return f"the array {array.group(2)} cannot be read: {array.group(1)}"
    if len(line) > 200:
        line = line[:200] + "..."
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A checkpoint could not be written because its disk (or quota) is full."""


DISK_FULL_TEXTS = tuple(os.strerror(code) for code in DISK_FULL_ERRNOS)


def disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or an error it was raised from, is a full disk or quota: an OSError
    of Python's, or tensorstore's ValueError (RESOURCE_EXHAUSTED) that quotes the system's."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if isinstance(error, ValueError) and any(t in str(error) for t in DISK_FULL_TEXTS):
            return True
        error = error.__cause__ or error.__context__
    return False


class _DiskFullReports(logging.Filter):
    """Orbax logs a full disk from each of its save threads with a traceback (three of them,
    about 190 lines); `Checkpointer` raises it once as one line (`DiskFull`), so these go."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and disk_full(record.exc_info[1]))


def _quiet_closed_loop_reports() -> None:
    # Orbax's reads still in flight when a damaged step fails report to its event loop, closed
    # by then, from tensorstore's threads: tracebacks on stderr that say nothing. Silenced.
    previous = sys.unraisablehook
    if getattr(previous, "mmc_jax_quiet", False):
        return

    def hook(unraisable):
        error = unraisable.exc_value
        if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
            return
        previous(unraisable)

    hook.mmc_jax_quiet = True
    sys.unraisablehook = hook
    logging.getLogger("absl").addFilter(_DiskFullReports())


def restore_newest_intact(
    ckpt: Checkpointer,
    read: Callable[[int], T],
    *,
    step: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[int, T, dict[int, str]]:
    """The one loading path of every command (train's resume, evaluate, export, adapt, play,
    analyse): `read(step)` of step `step`, or else of the newest step it succeeds on.

    A step that fails for any reason but a mismatch (`CheckpointMismatch`: another model) is
    damaged: without `step`, it is skipped with a warning through `warn` naming the step and
    the damage (`damage_reason`) and the step before is tried. Returns (step, what `read`
    returned, {damaged step: reason}).

    Raises:
      FileNotFoundError: no checkpoint, or no step `step`.
      CheckpointMismatch: from `read`.
      CheckpointDamaged: step `step` is damaged (the message names an older step to try),
        or every step is.
    """
    steps = ckpt.all_steps()
    if step is not None and int(step) not in steps:
        raise FileNotFoundError(f"no checkpoint for step {step} in {ckpt.directory}: {steps}")
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {ckpt.directory}")
    reasons: dict[int, str] = {}
    for candidate in [int(step)] if step is not None else steps[::-1]:
        try:
            return candidate, read(candidate), reasons
        except CheckpointMismatch:
            raise
        except Exception as error:  # orbax raises many types for damaged files
            reasons[candidate] = damage_reason(error)
            if step is None and warn is not None:
                warn(
                    f"warning: checkpoint {ckpt.directory}/{candidate} is damaged "
                    f"({reasons[candidate]}); trying the one before"
                )
    if step is not None:
        older = [s for s in steps if s < int(step)]
        raise CheckpointDamaged(
            f"checkpoint {ckpt.directory}/{step} is damaged ({reasons[int(step)]}); "
            + (
                f"try --step {older[-1]} (or the path {ckpt.directory}/{older[-1]})"
                if older
                else "there is no older step"
            )
        )
    # Nothing is deleted or overwritten: files that no step of this code can read may still be
    # readable by the code that wrote them.
    raise CheckpointDamaged(
        f"no checkpoint in {ckpt.directory} could be restored (steps {steps}; the latest failed "
        f"with: {reasons[steps[-1]]}); nothing there was changed (if another version of mmc_jax "
        "wrote them, that version may read them)"
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class ModelKind:
    """What the parameters of a saved config are, as loading and exporting them needs it: its
    algorithm says (`Algorithm.model_kind`; `board_model_kind` for the board-game learners).

    network: what a player needs beside the parameters (the board network's flax module; a
      sensing agent's search sizes). template: the parameters' `ShapeDtypeStruct`s.
    obs_layout: the observation layout they read (an export's card records it, and a card of
      another layout is refused). check: refuses a checkpoint's recorded layout (its sidecar's
      `obs_layout`) with the reason (ValueError), or None for no check. sensing: whether the
      model plays sensing variants' two-phase turns (`fog=sense:W`) rather than board games.
    """

    network: Any
    template: Any
    obs_layout: str
    check: Callable[[str | None], None] | None = None
    sensing: bool = False


def board_model_kind(config: Mapping | ml_collections.ConfigDict) -> ModelKind:
    """The `ModelKind` of a board-game learner's config: `PolicyValueNet` of `config.network`.

    Raises:
      ValueError: the config is a sensing variant's (its model plays another kind of game).
    """
    config = _as_config(config)
    variant = config.get("variant")
    if variant and R.is_sense(variant):
        raise ValueError(
            f"its config is for the sensing variant {variant!r}, whose two-phase turns only "
            "the players of sensing variants play (python -m mmc_jax.evaluate --variant "
            f"{variant} --checkpoint <model>; docs/play.md)"
        )
    network = network_lib.make_network(config.network)
    template = jax.eval_shape(
        lambda k: network_lib.init_params(network, k, R.OBS_SHAPE), jax.random.key(0)
    )

    def check(saved: str | None) -> None:
        network_lib.check_obs_layout(saved, config.network)

    return ModelKind(network, template, network_lib.obs_layout(config.network), check)


@dataclasses.dataclass(frozen=True)
class Model:
    """A model as every command loads it (`open_model`).

    network, params, config: the network rebuilt from the saved config, its parameters (on the
    first device) and that config. source: the run's workdir, or the exported model's folder
    (a shipped model's name). step: the checkpoint step the parameters are (an export: the step
    it recorded). record: that step's sidecar (`extra` holds frames and games), or the export's
    `model.json`. exported: whether it is an exported model.
    """

    network: Any
    params: Any
    config: ml_collections.ConfigDict
    source: str
    step: int | None
    record: dict[str, Any]
    exported: bool = False
    sensing: bool = False  # a sensing variant's model (`ModelKind.sensing`)


def load_model(path: str | os.PathLike, step: int | None = None):
    """(network, params, config) of `open_model(path, step)`."""
    model = open_model(path, step)
    return model.network, model.params, model.config


def open_model(
    path: str | os.PathLike,
    step: int | None = None,
    *,
    warn: Callable[[str], None] = _stderr,
    kind_of: Callable[[ml_collections.ConfigDict], ModelKind] = board_model_kind,
) -> Model:
    """The model at `path`: the network is rebuilt from the saved config; only the parameters
    are read, in the layout `kind_of(saved config)` gives (default: the board network's; every
    learner's: `mmc_jax.algorithms.open_model`).

    `path` is a run's workdir, its `checkpoints` folder, one step's folder in it, an exported
    model folder (`python -m mmc_jax.export`) or the name of a shipped model
    (`shipped_models()`); `step` defaults to the latest (or to the step folder given). A
    damaged latest step (missing or truncated files, a broken sidecar, non-finite parameters)
    falls back to the newest intact one with a warning through `warn`
    (`restore_newest_intact`). A run's workdir that also holds an exported `model.json` (an
    export into it by an older version) loads its checkpoints, with a note.

    Raises:
      FileNotFoundError: no such directory, or no checkpoint (or not that step) in it.
      ValueError: the checkpoint has no network config, or its parameters do not fit it
        (`CheckpointMismatch`); that step, or every step, is damaged (`CheckpointDamaged`).
    """
    if step is None and is_exported(path):
        return _open_exported(path, kind_of)
    workdir, step = split_checkpoint_path(path, step)
    if not storage.to_path(workdir).is_dir():
        hint = shipped_hint(path)  # a bare name: perhaps a shipped model, misspelt
        raise FileNotFoundError(f"no such checkpoint directory: {path if hint else workdir}{hint}")
    if storage.to_path(storage.join(workdir, EXPORT_FILE)).is_file():
        warn(
            f"note: {workdir} holds an exported model besides its checkpoints (an export into "
            "the run's workdir); loading the checkpoints"
        )
    _require_checkpoints(workdir)
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def read(candidate: int):
        meta = ckpt.metadata(candidate)
        saved = meta.get("config")
        if not isinstance(saved, dict) or not isinstance(saved.get("network"), dict):
            raise CheckpointMismatch(
                f"checkpoint under {workdir} (step {candidate}) has no network config in its "
                "sidecar; cannot rebuild the network"
            )
        config = ml_collections.ConfigDict(saved)
        try:
            kind = kind_of(config)
            if kind.check is not None:
                kind.check(meta.get("obs_layout"))
        except ValueError as error:
            raise CheckpointMismatch(f"the run in {workdir}: {error}") from None
        template = jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), kind.template
        )
        params = ckpt.restore_subtree("params", template, step=candidate)
        bad = nonfinite_leaves(params)
        if bad:
            raise CheckpointDamaged(f"non-finite values in {', '.join(bad)}")
        reason = exploded(params)  # (finite, but no model to play or export)
        if reason:
            raise CheckpointDamaged(reason)
        return meta, kind, params, config

    with Checkpointer(workdir, max_to_keep=None, async_save=False) as ckpt:
        found, (meta, kind, params, config), _ = restore_newest_intact(
            ckpt, read, step=step, warn=warn
        )
    source = storage.absolute(workdir)
    return Model(kind.network, params, config, source, found, meta, sensing=kind.sensing)


def run_workdir_of(path: str | os.PathLike) -> str | None:
    """The run workdir that `path` is (a folder with `checkpoints/`, `metrics.jsonl` or a
    workdir lock) or lies in the checkpoints of (`<workdir>/checkpoints[_damaged|_diverged]/
    ...`), or None: where an export must not go (it would shadow the run's checkpoints)."""
    folder = storage.to_path(storage.absolute(path))
    markers = (CHECKPOINT_SUBDIR, "metrics.jsonl", storage.LOCK_FILE)
    if any((folder / marker).exists() for marker in markers):
        return os.fspath(folder)
    asides = {CHECKPOINT_SUBDIR + suffix for suffix in ("", DAMAGED_SUFFIX, DIVERGED_SUFFIX)}
    for ancestor in (folder, *folder.parents):
        if ancestor.name in asides:
            return os.fspath(ancestor.parent)
    return None


# ---------------------------------------------------------------------------------------------
# Exported models: parameters only, small enough to ship inside the package

EXPORT_FILE = "model.json"
EXPORT_PARAMS = "params.msgpack"
SHIPPED_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models"
)


def export_model(
    out: str | os.PathLike,
    config: Mapping | ml_collections.ConfigDict,
    params: Any,
    info: dict,
    kind: ModelKind | None = None,
) -> str:
    """Writes `params` (flax msgpack) and `model.json` (the run config, the observation layout
    of its `kind` (default: `board_model_kind(config)`), `info`: where it came from and the
    command that trained it) into the folder `out` (a local path or `gs://`)."""
    out = os.fspath(out)
    kind = kind or board_model_kind(config)
    storage.to_path(out).mkdir(parents=True, exist_ok=True)
    host = jax.tree.map(np.asarray, jax.device_get(params))
    params_bytes = flax.serialization.to_bytes(host)
    storage.to_path(storage.join(out, EXPORT_PARAMS)).write_bytes(params_bytes)
    record = {
        "format": 1,
        "observation_layout": kind.obs_layout,
        "config": _jsonable(config),
        "shapes": leaf_shapes(host),
        "num_params": int(sum(x.size for x in jax.tree.leaves(host))),
        "versions": library_versions(),
        **_jsonable(dict(info)),
    }
    storage.to_path(storage.join(out, EXPORT_FILE)).write_text(json.dumps(record, indent=1))
    return out


def shipped_models() -> dict[str, str]:
    """{name: folder} of the models shipped inside the package (`mmc_jax/data/models`)."""
    if not os.path.isdir(SHIPPED_DIR):
        return {}
    return {
        name: os.path.join(SHIPPED_DIR, name)
        for name in sorted(os.listdir(SHIPPED_DIR))
        if os.path.isfile(os.path.join(SHIPPED_DIR, name, EXPORT_FILE))
    }


# The shipped model of each variant (the strongest shipped model of that variant on the engine
# ladder; its model card says how it was chosen): `play`, `serve` and `engine` play a variant
# with its model unless told another (a variant without one: Gardner's).
DEFAULT_MODELS = {
    "gardner": "gardner-h200",
    "atomic": "atomic-supervised",
    "extinction": "extinction-supervised",
}


def default_model(variant: str) -> str | None:
    """The name of the shipped model the commands play `variant` with by default: the variant's
    entry in `DEFAULT_MODELS`, else a shipped `<variant>-cpu`, else None."""
    for name in (DEFAULT_MODELS.get(variant), f"{variant}-cpu"):
        if name is not None and name in shipped_models():
            return name
    return None


def own_default_models() -> dict[str, str]:
    """{variant: shipped model} of the variants (`rules.VARIANTS`) whose default model is not
    Gardner's: the ones `serve` and `engine` switch to when no model is named."""
    gardner = default_model("gardner")
    models = {variant: default_model(variant) for variant in R.VARIANTS}
    return {variant: name for variant, name in models.items() if name and name != gardner}


def shipped_hint(name: str | os.PathLike) -> str:
    """What to add to "no such checkpoint directory: NAME" for a bare name (no folder in it,
    so perhaps a misspelt shipped model: `gardnr-cpu`): "; did you mean gardner-cpu? (shipped
    models: ...)" with the nearest names by `difflib`, else "; nor a shipped model (...)";
    "" for a path, which names a missing run or export."""
    name = os.fspath(name)
    shipped = list(shipped_models())
    if os.sep in name or "/" in name or storage.is_remote(name) or not shipped:
        return ""
    close = difflib.get_close_matches(name, shipped, n=2, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(close)}? (shipped models: {', '.join(shipped)})"
    return f"; nor a shipped model ({', '.join(shipped)})"


def resolve_model_path(path: str | os.PathLike) -> str:
    """`path`, or the folder of the shipped model named `path` (e.g. "joat-cpu"). A local
    folder of that name shadows the shipped model only if it holds a model or a run (an
    exported `model.json` or a `checkpoints` folder): a folder of outputs does not."""
    path = os.fspath(path)
    if path in shipped_models() and not is_model_or_run(path):
        return shipped_models()[path]
    return path


def is_model_or_run(path: str | os.PathLike) -> bool:
    """Whether the folder `path` holds an exported model or a run's checkpoints."""
    return (
        storage.to_path(storage.join(path, EXPORT_FILE)).is_file()
        or storage.to_path(storage.join(path, CHECKPOINT_SUBDIR)).is_dir()
    )


def is_exported(path: str | os.PathLike) -> bool:
    """Whether `path` is an exported (params-only) model folder or a shipped model's name; a
    run's workdir never is, whatever it holds (an export there does not shadow it)."""
    folder = resolve_model_path(path)
    return (
        storage.to_path(storage.join(folder, EXPORT_FILE)).is_file()
        and not storage.to_path(storage.join(folder, CHECKPOINT_SUBDIR)).is_dir()
    )


def damaged_params_message(params_file: str, error: Exception) -> str:
    """The one line for an exported model whose parameter file cannot be read."""
    return (
        f"{params_file} is damaged ({error}): the model's parameters cannot be read; "
        "export it again from its run (`python -m mmc_jax.export --checkpoint <run> --out "
        "<folder>`) or use another model"
    )


def load_exported(path: str | os.PathLike):
    """(network, params, config) of an exported model folder (or a shipped model's name)."""
    model = _open_exported(path)
    return model.network, model.params, model.config


def _open_exported(
    path: str | os.PathLike,
    kind_of: Callable[[ml_collections.ConfigDict], ModelKind] = board_model_kind,
) -> Model:
    """The `Model` of an exported model folder (or a shipped model's name).

    Raises:
      ValueError: a model exported for another observation layout (re-export it from its
        checkpoint, or retrain), or parameters that do not fit the saved network config.
    """
    folder = resolve_model_path(path)
    try:
        record = json.loads(storage.to_path(storage.join(folder, EXPORT_FILE)).read_bytes())
        config = ml_collections.ConfigDict(record["config"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{storage.join(folder, EXPORT_FILE)} is not an exported model's card ({error!r})"
        ) from None
    if record.get("format") != 1:
        raise ValueError(
            f"{storage.join(folder, EXPORT_FILE)} is a card of the format "
            f"{record.get('format')!r}, which this version does not read; export the model "
            f"again from its run (`python -m mmc_jax.export`): {record.get('command', '')}"
        )
    try:
        kind = kind_of(config)
    except ValueError as error:
        raise ValueError(f"the model in {folder}: {error}") from None
    if record.get("observation_layout") != kind.obs_layout:
        raise ValueError(
            f"the model in {folder} was exported for the observation layout "
            f"{record.get('observation_layout')!r}, but this code observes "
            f"{kind.obs_layout!r}; re-export it from its checkpoint with "
            "`python -m mmc_jax.export` (or retrain it: "
            f"{record.get('command', 'its training command')})"
        )
    template = kind.template
    want, got = leaf_shapes(template), record.get("shapes", {})
    if want != got:
        raise ValueError(f"the parameters in {folder} do not fit its network config")
    params_file = storage.join(folder, EXPORT_PARAMS)
    try:
        params = flax.serialization.from_bytes(
            jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), template),
            storage.to_path(params_file).read_bytes(),
        )
    except (ValueError, KeyError, TypeError) as error:  # msgpack's errors are ValueErrors
        raise ValueError(damaged_params_message(params_file, error)) from None
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    params = jax.device_put(params, sharding)
    source = str(path) if str(path) in shipped_models() else storage.absolute(folder)
    step = record.get("step")
    return Model(
        kind.network, params, config, source, step, record, exported=True, sensing=kind.sensing
    )
