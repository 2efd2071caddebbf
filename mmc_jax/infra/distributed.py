"""Multi-process start-up: `jax.distributed` on clusters, nothing at all for one process.

    from mmc_jax.infra import distributed
    distributed.define_flags()                     # --coordinator_address/--num_processes/...
    ...
    info = distributed.initialize_from_flags()     # first thing in main(), before any JAX op
    if info.is_main: ...                           # only process 0 logs and writes

`initialize()` calls `jax.distributed.initialize` when

- the command line names a coordinator (`--coordinator_address host:port` with
  `--num_processes N` and `--process_id I`; N = 1 means one process: nothing to do), or
- `$JAX_COORDINATOR_ADDRESS` is set (JAX reads it; the Kubernetes manifests in deploy/ set it
  with `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`), or
- it runs on a cluster that JAX detects by itself (jax/_src/clusters), with more than one
  process: Open MPI (`OMPI_MCA_orte_hnp_uri`, `OMPI_COMM_WORLD_SIZE` > 1), Slurm (`SLURM_JOB_ID`,
  `SLURM_STEP_NODELIST`, `SLURM_NTASKS` > 1, `SLURM_PROCID`, `SLURM_LOCALID`,
  `SLURM_STEP_NUM_NODES`), a multi-host TPU slice on GKE (`TPU_WORKER_HOSTNAMES` or
  `TPU_PROCESS_ADDRESSES` listing several hosts, `TPU_WORKER_ID`), a Kubernetes indexed Job
  (`KUBERNETES_SERVICE_HOST` and `JOB_COMPLETION_INDEX`; JAX then needs the `kubernetes`
  package and the right to read its pod), or
- `$MMC_DISTRIBUTED=1`: a Cloud TPU VM slice, where JAX finds the workers through the metadata
  server (`python -m mmc_jax.launch tpu` sets it on every worker). `MMC_DISTRIBUTED=0` turns
  all of this off.

Otherwise it does nothing (no coordination service, no ports): one process sees its local
devices. Per-process data: each process makes its share of a global batch and
`global_batch` assembles the global `jax.Array` (`jax.make_array_from_process_local_data`);
`process_key` gives each process its own random stream from one seed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# Environment variables of the clusters JAX detects (jax/_src/clusters), in JAX's order.
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_STEP_NUM_NODES",
)
CLUSTERS = ("env", "ompi", "slurm", "gketpu", "k8s", "forced")


class DistributedInfo(NamedTuple):
    """Where this process stands: `process_id` of `num_processes`, and how it got there
    (`how`: "single" for one process, else the detected cluster or "flags")."""

    process_id: int
    num_processes: int
    how: str

    @property
    def is_main(self) -> bool:
        """Process 0: the one that logs, evaluates and writes files."""
        return self.process_id == 0


def _int(environ: Mapping[str, str], name: str, default: int = 0) -> int:
    try:
        return int(environ.get(name, default))
    except ValueError:
        return default


def detect_cluster(environ: Mapping[str, str] | None = None) -> str | None:
    """The multi-process environment this process runs in, from its environment variables
    alone (no network): "env" (JAX_COORDINATOR_ADDRESS), "ompi", "slurm", "gketpu", "k8s",
    "forced" (MMC_DISTRIBUTED=1); None for a single process or MMC_DISTRIBUTED=0."""
    environ = os.environ if environ is None else environ
    mode = environ.get("MMC_DISTRIBUTED", "").strip().lower()
    if mode in ("0", "false", "off", "no"):
        return None
    if environ.get("JAX_COORDINATOR_ADDRESS"):
        if _int(environ, "JAX_NUM_PROCESSES", 2) > 1:
            return "env"
        return None
    if "OMPI_MCA_orte_hnp_uri" in environ and _int(environ, "OMPI_COMM_WORLD_SIZE", 1) > 1:
        return "ompi"
    if all(v in environ for v in SLURM_VARS) and _int(environ, "SLURM_NTASKS", 1) > 1:
        return "slurm"
    hosts = environ.get("TPU_PROCESS_ADDRESSES") or environ.get("TPU_WORKER_HOSTNAMES") or ""
    if len([h for h in hosts.split(",") if h.strip()]) > 1:
        return "gketpu"
    if "KUBERNETES_SERVICE_HOST" in environ and "JOB_COMPLETION_INDEX" in environ:
        return "k8s"
    if mode in ("1", "true", "on", "yes"):
        return "forced"
    return None


def _env_count(environ: Mapping[str, str], variable: str) -> int | None:
    text = environ.get(variable, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"${variable} must be a non-negative integer, got {text!r}")
    return int(text)


def _check_address(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"coordinator address must be host:port (e.g. 10.0.0.2:1234), got {address!r}"
        )


def _enable_cpu_collectives() -> None:
    # Multi-process CPU runs need a collectives implementation (gloo is the default in
    # current JAX, absent in old ones); it does not affect GPU or TPU.
    try:
        if jax.config.jax_cpu_collectives_implementation in (None, "none"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except AttributeError:
        pass


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> DistributedInfo:
    """Start JAX's distributed runtime where there are several processes (see the module
    docstring); do nothing for one. Call it before any other JAX operation.

    Args:
      coordinator_address: "host:port" of process 0 (from the command line); with it,
        num_processes and process_id are required unless a detected cluster supplies them.
      num_processes, process_id: this run's process count and this process's index.
      environ: the environment to read (tests); default `os.environ`.
      **kwargs: passed to `jax.distributed.initialize` (e.g. `initialization_timeout`).

    Returns DistributedInfo. Raises ValueError (one line) for inconsistent arguments.
    Idempotent: a second call returns the current state.
    """
    environ = os.environ if environ is None else environ
    if jax.distributed.is_initialized():
        return DistributedInfo(jax.process_index(), jax.process_count(), "initialized")
    # JAX reads JAX_COORDINATOR_ADDRESS itself but not these two (the manifests set them).
    if num_processes is None:
        num_processes = _env_count(environ, "JAX_NUM_PROCESSES")
    if process_id is None:
        process_id = _env_count(environ, "JAX_PROCESS_ID")
    for name, value in (("num_processes", num_processes), ("process_id", process_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    if process_id is not None and process_id < 0:
        raise ValueError(f"process_id must be non-negative, got {process_id}")
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        raise ValueError(
            f"process_id must be below num_processes, got {process_id} of {num_processes}"
        )
    cluster = detect_cluster(environ)
    how = "flags" if coordinator_address else cluster
    if cluster == "env" and not coordinator_address:
        coordinator_address = environ["JAX_COORDINATOR_ADDRESS"]
    if coordinator_address:
        _check_address(coordinator_address)
        if num_processes == 1:
            return DistributedInfo(0, 1, "single")
        if cluster in (None, "env") and (num_processes is None or process_id is None):
            raise ValueError(
                "a coordinator address needs --num_processes and --process_id (or "
                "$JAX_NUM_PROCESSES and $JAX_PROCESS_ID) outside a detected cluster"
            )
    elif num_processes is not None and num_processes > 1 and cluster is None:
        raise ValueError(
            f"num_processes={num_processes} needs --coordinator_address (host:port of process "
            "0) outside a cluster environment"
        )
    elif cluster is None or num_processes == 1:
        return DistributedInfo(0, 1, "single")
    _enable_cpu_collectives()
    jax.distributed.initialize(
        coordinator_address=coordinator_address or None,
        num_processes=num_processes,
        process_id=process_id,
        **kwargs,
    )
    return DistributedInfo(jax.process_index(), jax.process_count(), how)


# ------------------------------------------------------------------------------------- flags


def define_flags(flag_values=None) -> None:
    """Define --coordinator_address, --num_processes, --process_id (absl; skipped where
    already defined, so train and adapt may both call it)."""
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    defined = set(flag_values)
    if "coordinator_address" not in defined:
        flags.DEFINE_string(
            "coordinator_address",
            None,
            "host:port of process 0 for a multi-process run outside a detected cluster "
            "(with --num_processes and --process_id); unset on one machine, Cloud TPU, Slurm, "
            "Open MPI and GKE, where JAX finds it",
            flag_values=flag_values,
        )
    if "num_processes" not in defined:
        flags.DEFINE_integer(
            "num_processes",
            None,
            "number of processes of a multi-process run",
            lower_bound=1,
            flag_values=flag_values,
        )
    if "process_id" not in defined:
        flags.DEFINE_integer(
            "process_id",
            None,
            "index of this process (0 = the one that logs)",
            lower_bound=0,
            flag_values=flag_values,
        )


def initialize_from_flags(flag_values=None, **kwargs: Any) -> DistributedInfo:
    """`initialize` with the values of the flags of `define_flags`."""
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    return initialize(
        flag_values["coordinator_address"].value,
        flag_values["num_processes"].value,
        flag_values["process_id"].value,
        **kwargs,
    )


# ------------------------------------------------------------------------------ per-process data


def data_mesh(axis: str = "data") -> Mesh:
    """A 1-D mesh over every device of every process (the game-batch axis)."""
    return Mesh(np.asarray(jax.devices()), (axis,))


def local_batch_size(global_batch_size: int) -> int:
    """This process's share of a global batch (which must divide evenly over the devices)."""
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
        raise ValueError(f"the global batch must be a positive integer, got {global_batch_size!r}")
    if global_batch_size < 1:
        raise ValueError(f"the global batch must be a positive integer, got {global_batch_size}")
    devices = jax.device_count()
    if global_batch_size % devices:
        raise ValueError(
            f"the global batch {global_batch_size} does not divide over {devices} devices"
        )
    return global_batch_size // jax.process_count()


def global_batch(local_data, mesh: Mesh | None = None, spec: PartitionSpec | None = None):
    """The global `jax.Array`s (a pytree) whose rows are the concatenation, in process order,
    of every process's `local_data` [B_local, ...]: sharded over `mesh` by `spec` (default:
    the first axis over the mesh's first axis)."""
    mesh = data_mesh() if mesh is None else mesh
    spec = PartitionSpec(mesh.axis_names[0]) if spec is None else spec
    sharding = NamedSharding(mesh, spec)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local_data
    )


def process_key(key: jax.Array, process_id: int | None = None) -> jax.Array:
    """This process's own key: `fold_in(key, process_index)` (the same seed gives every process
    a different, reproducible stream)."""
    return jax.random.fold_in(key, jax.process_index() if process_id is None else process_id)
