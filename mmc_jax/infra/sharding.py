"""Meshes and placement: the game batch along a `data` axis, parameters replicated.

Every training algorithm runs its jitted iteration over a `Mesh` of the devices with one axis,
`data`: games, their rules, replay rings and self-play state are sharded along it (`P('data')`
on their leading axis), parameters and optimizer state are replicated, and XLA inserts the
gradient all-reduce. The same code runs on one CPU, several GPUs or a TPU slice.

Self-play is the exception (`map_games`): it runs under `shard_map`, each device playing and
searching its own games with its own loops. Under the partitioner the search's batch-wide
loop conditions (is any game still walking down its tree?) became an all-reduce on every
iteration of every loop, so each device waited on the others every simulation step. Its random
draws go through `draw_for_games` and `categorical`, which draw for the whole batch and keep
this device's rows, so the games are the same on any number of devices.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
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


def _game_axes_in_scope() -> tuple[str, ...]:
    """The game-batch mesh axes (`task`, `data`) that the code being traced is mapped over by
    `shard_map` (major first); () outside `map_games`."""
    manual = jax.sharding.get_abstract_mesh().manual_axes
    return tuple(axis for axis in (TASK_AXIS, DATA_AXIS) if axis in manual)


def draw_for_games(draw, key: jax.Array, batch: int) -> jax.Array:
    """`draw(key, batch)`, random values whose leading axis is the game batch (an array or a
    pytree of them), with the same values on any number of devices.

    Outside `map_games` it is `draw(key, batch)`. Inside, `batch` is this device's share: the
    draw is made for the whole batch (every device makes the same one) and this device's rows
    are kept. Draws are per ply or per simulation step and small next to the search, so
    drawing them whole costs little and keeps a run's games independent of the device count.
    """
    axes = _game_axes_in_scope()
    if not axes:
        return draw(key, batch)
    index, count = 0, 1
    for axis in axes:
        size = jax.lax.axis_size(axis)
        index, count = index * size + jax.lax.axis_index(axis), count * size
    whole = draw(key, batch * count)
    return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, index * batch, batch), whole)


def gumbel(key: jax.Array, shape: tuple[int, ...], dtype) -> jax.Array:
    """`jax.random.gumbel(key, shape, dtype)` for a game batch [shape[0], ...], drawn with
    `draw_for_games`."""
    return draw_for_games(lambda k, b: jax.random.gumbel(k, (b, *shape[1:]), dtype), key, shape[0])


def categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """`jax.random.categorical(key, logits)` over the last axis of logits [B, n] (equal values:
    the argmax of logits plus Gumbel noise), drawn with `draw_for_games`."""
    return jnp.argmax(gumbel(key, logits.shape, logits.dtype) + logits, axis=-1)


def map_games(fn, mesh: Mesh | None, in_axes: tuple, out_axes: tuple):
    """`fn` run under `shard_map` on `mesh`: every device calls it on its own games.

    `in_axes[i]` / `out_axes[i]`: the game axis of every leaf of argument / output i, or None
    for a replicated one (parameters, keys). An argument's leaves without that axis (scalars)
    are replicated. `fn` must not mix games (no reduction over the batch) and must draw its
    randomness over games with `draw_for_games` / `categorical`; then its results equal
    `fn`'s on the whole batch. Without a mesh, `fn` itself.
    """
    if mesh is None:
        return fn
    games = batch_spec(mesh)[0]

    def spec(axis, ndim):
        return P() if axis is None or ndim <= axis else P(*(None,) * axis, games)

    def mapped(*args):
        in_specs = tuple(
            jax.tree.map(lambda x, a=axis: spec(a, np.ndim(x)), arg)
            for arg, axis in zip(args, in_axes, strict=True)
        )
        out_specs = tuple(spec(axis, axis + 1 if axis is not None else 0) for axis in out_axes)
        return jax.shard_map(
            fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )(*args)

    return mapped


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
