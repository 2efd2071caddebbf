"""Meshes and placement: the game batch along a `data` axis, parameters replicated.

Every training algorithm runs its jitted iteration over a `Mesh` of the devices with one axis,
`data`: games, their rules, replay rings and self-play state are sharded along it (`P('data')`
on their leading axis), parameters and optimizer state are replicated, and XLA inserts the
gradient all-reduce. The same code runs on one CPU, several GPUs or a TPU slice.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA_AXIS = "data"
TASK_AXIS = "task"


def make_mesh(devices=None, task_parallel: int = 1) -> Mesh:
    """A one-axis (`data`) mesh over `devices` (default: all devices); with `task_parallel`
    > 1 a (`task`, `data`) mesh of shape (task_parallel, devices / task_parallel), for
    meta-training that runs groups of tasks on groups of devices."""
    devices = np.asarray(jax.devices() if devices is None else devices)
    if task_parallel == 1:
        return Mesh(devices, (DATA_AXIS,))
    if task_parallel < 1 or devices.size % task_parallel:
        raise ValueError(
            f"task_parallel={task_parallel} does not divide the {devices.size} devices; use a "
            f"divisor of {devices.size}"
        )
    return Mesh(devices.reshape(task_parallel, -1), (TASK_AXIS, DATA_AXIS))


def batch_spec(mesh: Mesh) -> P:
    """The spec of a game batch's leading axis: split over every device of `mesh` (`data`, or
    (`task`, `data`) on a 2-D mesh)."""
    names = tuple(mesh.axis_names)
    return P(names[0]) if len(names) == 1 else P(names)


def check_batch_divisible(batch_size: int, num_devices: int, field: str) -> None:
    """Raises ValueError unless `batch_size` (config field `field`) splits over the devices."""
    if batch_size % num_devices:
        raise ValueError(
            f"config.{field}={batch_size} is not divisible by the {num_devices} devices of the "
            f"data mesh; use a multiple of {num_devices}"
        )


def sharded_leaves(tree: Any, mesh: Mesh) -> Any:
    """NamedShardings: leading axis over every device (`batch_spec`) for arrays with one,
    replicated scalars."""
    spec = batch_spec(mesh)
    return jax.tree.map(lambda x: NamedSharding(mesh, spec if np.ndim(x) else P()), tree)


def replicated(tree: Any, mesh: Mesh) -> Any:
    """A replicated NamedSharding for every leaf of `tree`."""
    return jax.tree.map(lambda _: NamedSharding(mesh, P()), tree)


def constrain(tree: Any, mesh: Mesh | None, spec: P) -> Any:
    """`with_sharding_constraint(tree, spec)` inside a jitted function on `mesh` (no-op
    without a mesh)."""
    if mesh is None:
        return tree
    return jax.lax.with_sharding_constraint(tree, NamedSharding(mesh, spec))


def constrain_batch(tree: Any, mesh: Mesh | None) -> Any:
    """`constrain(tree, mesh, batch_spec(mesh))`: a game batch split over every device."""
    return tree if mesh is None else constrain(tree, mesh, batch_spec(mesh))


def abstract_with_shardings(abstract: Any, shardings: Any) -> Any:
    """`ShapeDtypeStruct`s of `abstract` (shapes) carrying `shardings`: a restore template."""
    return jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        abstract,
        shardings,
    )


def put_sharded(tree: Any, mesh: Mesh) -> Any:
    """Host arrays [N, ...] (the same global value on every process) placed along `data`.

    One process: `device_put`. Several (`jax.distributed`): each process hands over only its
    own rows (`make_array_from_process_local_data`), so no process moves another's data.
    """
    shardings = sharded_leaves(tree, mesh)
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def local(x, sharding):
        x = np.asarray(x)
        if not x.ndim:
            return jax.make_array_from_process_local_data(sharding, x)
        rows = sorted(
            {
                index[0].indices(x.shape[0])[:2]
                for index in sharding.addressable_devices_indices_map(x.shape).values()
            }
        )
        start, stop = rows[0][0], rows[-1][1]
        return jax.make_array_from_process_local_data(sharding, x[start:stop], x.shape)

    return jax.tree.map(local, tree, shardings)


def put_replicated(tree: Any, mesh: Mesh) -> Any:
    """Host values (the same on every process) replicated over `mesh`."""
    shardings = replicated(tree, mesh)
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)
    return jax.tree.map(
        lambda x, s: jax.make_array_from_callback(
            np.shape(x), s, lambda index: np.asarray(x)[index]
        ),
        tree,
        shardings,
    )


def to_host(tree: Any) -> Any:
    """The global value of (possibly sharded, multi-process) arrays as numpy on every process."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def any_process(flag: bool) -> bool:
    """Whether `flag` is set on any process (every process gets the same answer, so all stop
    after the same iteration; one process: `flag`)."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray(flag, np.int32))))


def put_key(key: jax.Array, mesh: Mesh) -> jax.Array:
    """A PRNG key (the same on every process) as replicated raw key data (uint32), the form a
    multi-process jit argument can take; `as_key` turns it back inside the jitted function."""
    return put_replicated(np.asarray(jax.random.key_data(key)), mesh)


def as_key(key: jax.Array) -> jax.Array:
    """A typed PRNG key from a typed key or its raw key data (`put_key`)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)
