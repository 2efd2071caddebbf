"""Tests for mmc_jax.infra.distributed: cluster detection from environment variables, when
`jax.distributed.initialize` is (not) called and with what, the flags, per-process data and
keys; and one real 2-process run on 127.0.0.1 (CPU collectives) with a jitted global sum."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags

from mmc_jax import launch
from mmc_jax.infra import distributed as D

SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_NODELIST": "node[1-2]",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_STEP_NUM_NODES": "2",
}


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, None),
        ({"PATH": "/usr/bin", "HOME": "/root"}, None),
        (SLURM, "slurm"),
        ({**SLURM, "SLURM_NTASKS": "1"}, None),  # one task: a single process
        ({k: v for k, v in SLURM.items() if k != "SLURM_LOCALID"}, None),  # as JAX: all six
        ({"OMPI_MCA_orte_hnp_uri": "1.2.3.4:5", "OMPI_COMM_WORLD_SIZE": "4"}, "ompi"),
        ({"OMPI_MCA_orte_hnp_uri": "1.2.3.4:5", "OMPI_COMM_WORLD_SIZE": "1"}, None),
        ({"TPU_WORKER_HOSTNAMES": "w-0,w-1,w-2,w-3", "TPU_WORKER_ID": "2"}, "gketpu"),
        ({"TPU_PROCESS_ADDRESSES": "10.0.0.1:8476,10.0.0.2:8476"}, "gketpu"),
        ({"TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0"}, None),  # one host
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "JOB_COMPLETION_INDEX": "3"}, "k8s"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None),  # a pod, not an indexed job
        ({"JAX_COORDINATOR_ADDRESS": "h-0.svc:1234", "JAX_NUM_PROCESSES": "4"}, "env"),
        ({"JAX_COORDINATOR_ADDRESS": "h-0.svc:1234", "JAX_NUM_PROCESSES": "1"}, None),
        ({"MMC_DISTRIBUTED": "1"}, "forced"),
        ({**SLURM, "MMC_DISTRIBUTED": "0"}, None),
    ],
)
def test_detect_cluster(environ, expected):
    assert D.detect_cluster(environ) == expected


@pytest.fixture
def calls(monkeypatch):
    """Record jax.distributed.initialize calls instead of making them (and pretend that they
    made this process 0 of 1, which is what the one local process sees)."""
    recorded = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: recorded.append(kw))
    return recorded


def test_single_process_does_nothing(calls):
    assert D.initialize(environ={}) == D.DistributedInfo(0, 1, "single")
    assert D.initialize(None, 1, 0, environ={}).how == "single"
    assert D.initialize("127.0.0.1:1234", 1, 0, environ={}).how == "single"
    assert D.initialize(environ={**SLURM, "SLURM_NTASKS": "1"}).how == "single"
    assert calls == []
    assert D.initialize(environ={}).is_main


def test_coordinator_from_the_command_line(calls):
    info = D.initialize("10.0.0.2:1234", 4, 0, environ={}, initialization_timeout=30)
    assert calls == [
        dict(
            coordinator_address="10.0.0.2:1234",
            num_processes=4,
            process_id=0,
            initialization_timeout=30,
        )
    ]
    assert info.how == "flags"


def test_detected_clusters_let_jax_fill_in(calls):
    for environ, how in [(SLURM, "slurm"), ({"MMC_DISTRIBUTED": "1"}, "forced")]:
        calls.clear()
        assert D.initialize(environ=environ).how == how
        assert calls == [dict(coordinator_address=None, num_processes=None, process_id=None)]
    calls.clear()
    environ = {
        "JAX_COORDINATOR_ADDRESS": "mmc-workers-0-0.mmc:1234",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1",
    }
    assert D.initialize(environ=environ).how == "env"
    assert calls == [
        dict(coordinator_address="mmc-workers-0-0.mmc:1234", num_processes=2, process_id=1)
    ]


@pytest.mark.parametrize(
    "args, environ, message",
    [
        (("10.0.0.2:1234", None, None), {}, "needs --num_processes and --process_id"),
        (("10.0.0.2", 2, 0), {}, "must be host:port"),
        (("10.0.0.2:99999", 2, 0), {}, "must be host:port"),
        (("10.0.0.2:1234", 2, 2), {}, "process_id must be below num_processes"),
        ((None, 2, 0), {}, "needs --coordinator_address"),
        ((None, 0, None), {}, "num_processes must be at least 1"),
        ((None, None, -1), {}, "process_id must be non-negative"),
        ((None, None, None), {"JAX_NUM_PROCESSES": "two"}, "$JAX_NUM_PROCESSES must be"),
        ((None, None, None), {"JAX_COORDINATOR_ADDRESS": "h:1"}, "needs --num_processes"),
    ],
)
def test_bad_arguments_are_one_line_errors(calls, args, environ, message):
    with pytest.raises(ValueError) as error:
        D.initialize(*args, environ=environ)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert calls == []


def test_flags(calls):
    flag_values = flags.FlagValues()
    D.define_flags(flag_values)
    D.define_flags(flag_values)  # a second call (train and adapt both define them) is a no-op
    flag_values(["prog", "--coordinator_address=10.0.0.2:1234", "--num_processes=2"])
    flag_values(["prog", "--process_id=1"])
    assert flag_values.coordinator_address == "10.0.0.2:1234"
    D.initialize_from_flags(flag_values, environ={})
    assert calls == [dict(coordinator_address="10.0.0.2:1234", num_processes=2, process_id=1)]
    fresh = flags.FlagValues()
    D.define_flags(fresh)
    fresh(["prog"])
    assert D.initialize_from_flags(fresh, environ={}).how == "single"
    with pytest.raises(flags.IllegalFlagValueError):
        fresh(["prog", "--num_processes=0"])


def test_global_batch_and_keys_on_one_process():
    mesh = D.data_mesh()
    rows = 2 * jax.device_count()
    local = {"x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)}
    out = D.global_batch(local, mesh)
    assert out["x"].shape == (rows, 3)
    assert out["x"].sharding.spec == jax.sharding.PartitionSpec("data")
    np.testing.assert_array_equal(np.asarray(out["x"]), local["x"])
    assert D.local_batch_size(8 * jax.device_count()) == 8 * jax.device_count()
    with pytest.raises(ValueError, match="must be a positive integer"):
        D.local_batch_size(0)
    key = jax.random.key(0)
    k0, k1 = D.process_key(key), D.process_key(key, 1)
    data = jax.random.key_data
    assert jnp.array_equal(data(k0), data(jax.random.fold_in(key, 0)))
    assert not jnp.array_equal(data(k0), data(k1))


WORKER = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from mmc_jax.infra import distributed as D
    port, pid = sys.argv[1], int(sys.argv[2])
    info = D.initialize(f"127.0.0.1:{port}", 2, pid, initialization_timeout=60)
    assert (info.process_id, info.num_processes, info.how) == (pid, 2, "flags"), info
    assert jax.device_count() == 4 and jax.local_device_count() == 2
    mesh = D.data_mesh()
    # Process i holds rows 2i and 2i+1 of the global batch [4, 3].
    local = np.arange(6 * pid, 6 * pid + 6, dtype=np.float32).reshape(2, 3)
    batch = D.global_batch(local, mesh)
    assert batch.shape == (4, 3)
    assert D.local_batch_size(8) == 4
    try:
        D.local_batch_size(6)
        raise AssertionError("6 rows over 4 devices")
    except ValueError as error:
        assert "does not divide over 4 devices" in str(error)
    total = jax.jit(jnp.sum)(batch)           # a global reduction across both processes
    shard_sums = jax.jit(
        jax.shard_map(
            lambda x: jax.lax.psum(jnp.sum(x), "data")[None],
            mesh=mesh, in_specs=jax.sharding.PartitionSpec("data"),
            out_specs=jax.sharding.PartitionSpec("data"),
        )
    )(batch)
    local_psum = [float(s.data[0]) for s in shard_sums.addressable_shards]
    key = jax.random.key_data(D.process_key(jax.random.key(0)))
    print("RESULT", pid, float(total), local_psum, np.asarray(key).tolist(), flush=True)
    """
)


@pytest.mark.slow
def test_two_processes_on_localhost(tmp_path):
    """Two processes x 2 CPU devices each: a global array made of per-process rows, its sum
    (jit) and a psum (shard_map) over all 4 devices agree on both processes (0+...+11 = 66)."""
    port = launch.free_port()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(D.__file__)))]
            + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    }
    for name in ("JAX_COORDINATOR_ADDRESS", "MMC_DISTRIBUTED", "SLURM_JOB_ID"):
        env.pop(name, None)
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for worker in workers:
            out, _ = worker.communicate(timeout=240)
            outputs.append(out)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, out in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, out[-3000:]
    results = [
        line.split(" ", 2)
        for out in outputs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]
    assert len(results) == 2, outputs
    keys = []
    for _, pid, rest in results:
        total, _, rest = rest.partition(" ")
        assert float(total) == 66.0, (pid, rest)
        assert rest.startswith("[66.0, 66.0]"), (pid, rest)
        keys.append(rest.split("] ", 1)[1])
    assert keys[0] != keys[1]  # each process has its own key
