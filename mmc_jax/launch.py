"""Run mmc_jax on Google Cloud with Google's own tools: TPU VM slices, Cloud Batch, GKE.

    python -m mmc_jax.launch tpu --name joat --zone us-central2-b --accelerator-type v4-32 \\
        -- python -m mmc_jax.train --config configs/joat.py --workdir gs://BUCKET/runs/joat
    python -m mmc_jax.launch batch --name adapt-dark --location us-central1 --image IMAGE \\
        --seeds 0 1 2 3 -- python -m mmc_jax.adapt --variant dark --seed {seed} \\
        --workdir gs://BUCKET/adapt/dark/seed{seed}
    python -m mmc_jax.launch gke --name joat --image IMAGE --tpu-type v5litepod-16 \\
        --out joat.yaml -- python -m mmc_jax.train --config configs/joat.py --workdir gs://...

`tpu`: creates a TPU VM slice through a queued resource (`gcloud compute tpus queued-resources
create`, `--spot` optional), waits until it is ACTIVE, copies this checkout (`git archive
HEAD`) to every worker and installs it with `jax[tpu]`, starts the same command on all workers
(`gcloud compute tpus tpu-vm ssh --worker=all`; each calls `mmc_jax.infra.distributed.initialize`,
which finds the slice's workers through the TPU metadata), streams worker 0's log until the
command ends, and deletes the queued resource and its slice (kept with `--keep`). Ctrl-C or a
failure also deletes it.

`batch`: writes a Cloud Batch job spec (JSON; one task per seed, run in parallel, each with
`$SEED` set; `{seed}` in the command stands for it) and submits it with `gcloud batch jobs
submit` (`--no-submit`: only write it).

`gke`: renders a JobSet manifest (YAML) for a GKE TPU slice node pool (`--tpu-type`) or GPU
nodes (`--gpu-type`), with the environment JAX's cluster detection needs; `--apply` runs
`kubectl apply -f`.

`local`: N processes of the command on this machine, joined through 127.0.0.1 (JAX's CPU
collectives, gloo), each with its own fake CPU devices: the multi-host code paths (per-process
data, the stop consensus, checkpoints written by every process) on one laptop. Process 0's
output is streamed, the others' go to `--log-dir`; SIGTERM and Ctrl-C are passed on to every
process.

    python -m mmc_jax.launch local --processes 2 --devices-per-process 1 \
        -- python -m mmc_jax.train --config configs/gardner.py:smoke --workdir runs/two

`--dry-run` prints every `gcloud`/`kubectl` command instead of running it (and writes the spec
files). Nothing here has run against Google Cloud from this repository's CI: see docs/cloud.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REMOTE_DIR = "mmc_jax"  # in the home directory of every TPU worker
RUN_LOG = "mmc_run.log"
RUN_STATUS = "mmc_run.status"
RUN_PID = "mmc_run.pid"
COORDINATOR_PORT = 1234
PROJECT_ROOT = str(Path(__file__).resolve().parents[1])

# TPU VM software versions per TPU generation (`--runtime-version` overrides).
RUNTIME_VERSIONS = {
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}
# GKE node labels of the TPU generations (cloud.google.com/gke-tpu-accelerator).
GKE_TPU_ACCELERATORS = {
    "v4": "tpu-v4-podslice",
    "v5litepod": "tpu-v5-lite-podslice",
    "v5p": "tpu-v5p-slice",
    "v6e": "tpu-v6e-slice",
}
# Two-dimensional topologies of v5e / v6e slices by chip count.
TOPOLOGY_2D = {
    1: "1x1",
    4: "2x2",
    8: "2x4",
    16: "4x4",
    32: "4x8",
    64: "8x8",
    128: "8x16",
    256: "16x16",
}


class LaunchError(RuntimeError):
    """A launch failed; the message is one line."""


# ---------------------------------------------------------------------------------------------
# TPU slices


def tpu_slice(accelerator_type: str, topology: str | None = None) -> dict[str, Any]:
    """What a TPU accelerator type is: generation, chips, hosts, chips per host, topology,
    runtime version and GKE label. v4/v5p types count TensorCores (2 per chip), v5e/v6e chips.

    >>> tpu_slice("v5litepod-16")["hosts"]
    4
    """
    generation, sep, count = accelerator_type.rpartition("-")
    if not sep or generation not in RUNTIME_VERSIONS or not count.isdigit() or int(count) < 1:
        raise LaunchError(
            f"unknown TPU accelerator type {accelerator_type!r}: expected e.g. v4-32, "
            "v5litepod-16, v5p-16 or v6e-16"
        )
    if generation in ("v4", "v5p"):
        if int(count) % 2:
            raise LaunchError(f"{accelerator_type}: v4/v5p sizes count TensorCores, 2 per chip")
        chips = int(count) // 2
        if topology is None:
            topology = _cube_topology(chips)
    else:
        chips = int(count)
        if topology is None:
            if chips not in TOPOLOGY_2D:
                raise LaunchError(
                    f"{accelerator_type}: no standard topology for {chips} chips; pass "
                    f"--tpu-topology (sizes: {', '.join(map(str, TOPOLOGY_2D))})"
                )
            topology = TOPOLOGY_2D[chips]
    dims = topology.split("x")
    if not all(d.isdigit() and int(d) > 0 for d in dims) or math.prod(map(int, dims)) != chips:
        raise LaunchError(f"topology {topology!r} does not have {chips} chips")
    single_host = chips <= (8 if generation in ("v5litepod", "v6e") else 4)
    per_host = chips if single_host else 4
    return {
        "generation": generation,
        "chips": chips,
        "hosts": chips // per_host,
        "chips_per_host": per_host,
        "topology": topology,
        "runtime_version": RUNTIME_VERSIONS[generation],
        "gke_accelerator": GKE_TPU_ACCELERATORS[generation],
    }


def _cube_topology(chips: int) -> str:
    """The smallest-surface AxBxC (A <= B <= C) with A*B*C = chips (v4/v5p slices)."""
    best = None
    for a in range(1, chips + 1):
        for b in range(a, chips + 1):
            if chips % (a * b) == 0 and chips // (a * b) >= b:
                c = chips // (a * b)
                key = (a * b + b * c + a * c, c)
                if best is None or key < best[0]:
                    best = (key, f"{a}x{b}x{c}")
    return best[1]


class Commands:
    """Runs external commands, or only prints them (`dry_run`); `history` keeps every argv."""

    def __init__(self, dry_run: bool, out=None):
        self.dry_run = dry_run
        self.out = out or sys.stdout
        self.history: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, capture: bool = False, check: bool = True) -> str:
        argv = [str(a) for a in argv]
        self.history.append(argv)
        if self.dry_run:
            print(shlex.join(argv), file=self.out, flush=True)
            return ""
        if shutil.which(argv[0]) is None:
            raise LaunchError(
                f"{argv[0]} is not installed: install the Google Cloud CLI "
                "(https://cloud.google.com/sdk/docs/install) or use --dry-run"
            )
        done = subprocess.run(argv, capture_output=capture, text=True)
        if check and done.returncode != 0:
            detail = (done.stderr or "").strip().splitlines()[-1:] if capture else []
            raise LaunchError(
                f"`{shlex.join(argv[:6])} ...` exited {done.returncode}"
                + (f": {detail[0]}" if detail else "")
            )
        return (done.stdout or "") if capture else ""


def _scope(args) -> list[str]:
    flags = [f"--zone={args.zone}"]
    if args.project:
        flags.append(f"--project={args.project}")
    return flags


def remote_install_command(extra: str = "tpu", python: str = "3.11") -> str:
    """The shell command that unpacks and installs the checkout on a worker. TPU VM images run
    Ubuntu 22.04 (Python 3.10, the project needs 3.11): uv fetches a standalone Python."""
    return (
        f"set -e; rm -rf ~/{REMOTE_DIR}; mkdir -p ~/{REMOTE_DIR}; "
        f"tar xzf ~/{REMOTE_DIR}.tar.gz -C ~/{REMOTE_DIR}; cd ~/{REMOTE_DIR}; "
        "python3 -m pip install -q --user uv; "
        f"~/.local/bin/uv venv -q --python {python} .venv; . .venv/bin/activate; "
        f"~/.local/bin/uv pip install -q -e . 'jax[{extra}]'"
    )


def remote_run_command(command: Sequence[str], env: dict[str, str]) -> str:
    """The shell command that starts `command` in the background on a worker (log, pid and
    exit status in the home directory), so that ssh returns at once on every worker."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    inner = f"{shlex.join(command)}; echo $? > ~/{RUN_STATUS}"
    return (
        f"cd ~/{REMOTE_DIR} && . .venv/bin/activate && rm -f ~/{RUN_STATUS} && "
        f"export {exports} && "
        f"(setsid nohup bash -c {shlex.quote(inner)} > ~/{RUN_LOG} 2>&1 < /dev/null & "
        f"echo $! > ~/{RUN_PID})"
    )


def source_archive(dest: str, root: str | None = None) -> str:
    """`git archive HEAD` of the checkout (what is committed, nothing else) as a .tar.gz."""
    root = root or PROJECT_ROOT
    path = os.path.join(dest, f"{REMOTE_DIR}.tar.gz")
    done = subprocess.run(
        ["git", "-C", root, "archive", "--format=tar.gz", "-o", path, "HEAD"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise LaunchError(
            f"git archive failed in {root}: {(done.stderr or '').strip()[:200]} "
            "(launch from a git checkout, or pass --source-archive)"
        )
    return path


def launch_tpu(args, run: Commands) -> int:
    """The `tpu` subcommand (see the module docstring); returns the command's exit status."""
    info = tpu_slice(args.accelerator_type)
    runtime = args.runtime_version or info["runtime_version"]
    queued = f"{args.name}-qr"
    scope = _scope(args)
    create = ["gcloud", "compute", "tpus", "queued-resources", "create", queued]
    create += [f"--node-id={args.name}", *scope, f"--accelerator-type={args.accelerator_type}"]
    create += [f"--runtime-version={runtime}"]
    if args.spot:
        create.append("--spot")
    if args.valid_until_duration:
        create.append(f"--valid-until-duration={args.valid_until_duration}")
    env = {"MMC_DISTRIBUTED": "1", **dict(args.env)}
    ssh = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", args.name, *scope]
    status = 1
    with contextlib.ExitStack() as cleanup:
        run(create)
        if not args.keep:
            cleanup.callback(
                run,
                ["gcloud", "compute", "tpus", "queued-resources", "delete", queued, *scope]
                + ["--force", "--quiet"],
                check=False,
            )
        _wait_active(run, queued, scope, args.timeout_minutes)
        archive = args.source_archive
        if archive is None and run.dry_run:
            archive = f"{REMOTE_DIR}.tar.gz"
            run(["git", "-C", PROJECT_ROOT, "archive", "--format=tar.gz", "-o", archive, "HEAD"])
        elif archive is None:
            tmp = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="mmc-launch-"))
            archive = source_archive(tmp)
        elif not os.path.isfile(archive):
            raise LaunchError(f"no source archive at {archive!r}")
        run(
            ["gcloud", "compute", "tpus", "tpu-vm", "scp", archive]
            + [f"{args.name}:~/{REMOTE_DIR}.tar.gz", "--worker=all", *scope]
        )
        run([*ssh, "--worker=all", f"--command={remote_install_command()}"])
        run([*ssh, "--worker=all", f"--command={remote_run_command(args.command, env)}"])
        # Worker 0's log until its command ends, then its exit status.
        follow = f"tail -n +1 --pid=$(cat ~/{RUN_PID}) -F ~/{RUN_LOG}"
        run([*ssh, "--worker=0", f"--command={follow}"], check=False)
        text = run([*ssh, "--worker=0", f"--command=cat ~/{RUN_STATUS}"], capture=True)
        status = int(text.strip()) if text.strip().isdigit() else (0 if run.dry_run else 1)
        if args.keep:
            print(
                f"kept {args.name} (queued resource {queued}); delete it with: "
                + shlex.join(
                    ["gcloud", "compute", "tpus", "queued-resources", "delete", queued, *scope]
                    + ["--force", "--quiet"]
                ),
                file=run.out,
            )
    return status


def _wait_active(run: Commands, queued: str, scope: list[str], timeout_minutes: float) -> None:
    describe = ["gcloud", "compute", "tpus", "queued-resources", "describe", queued, *scope]
    describe.append("--format=value(state.state)")
    deadline = time.monotonic() + 60 * timeout_minutes
    while True:
        state = run(describe, capture=True).strip()
        if run.dry_run or state == "ACTIVE":
            return
        if state in ("FAILED", "SUSPENDED"):
            raise LaunchError(f"queued resource {queued} is {state}")
        if time.monotonic() > deadline:
            raise LaunchError(f"queued resource {queued} not ACTIVE after {timeout_minutes} min")
        time.sleep(30)


# ---------------------------------------------------------------------------------------------
# Cloud Batch


def batch_job(
    *,
    image: str,
    command: Sequence[str],
    seeds: Sequence[int],
    machine_type: str = "g2-standard-8",
    accelerator: str | None = "nvidia-l4",
    accelerator_count: int = 1,
    spot: bool = False,
    env: dict[str, str] | None = None,
    max_run_hours: float = 24.0,
    retries: int = 1,
) -> dict[str, Any]:
    """A Cloud Batch job (the JSON body of `gcloud batch jobs submit --config`): one task per
    seed, all in parallel, each with $SEED set; `{seed}` in the command becomes "$SEED"."""
    if not seeds:
        raise LaunchError("--seeds needs at least one seed")
    script = " ".join(_with_seed(word) for word in command)
    policy: dict[str, Any] = {"machineType": machine_type}
    if spot:
        policy["provisioningModel"] = "SPOT"
    instance: dict[str, Any] = {"policy": policy}
    if accelerator:
        policy["accelerators"] = [{"type": accelerator, "count": accelerator_count}]
        instance["installGpuDrivers"] = True
    return {
        "taskGroups": [
            {
                "taskCount": len(seeds),
                "parallelism": len(seeds),
                "taskEnvironments": [{"variables": {"SEED": str(s)}} for s in seeds],
                "taskSpec": {
                    "runnables": [
                        {
                            "container": {
                                "imageUri": image,
                                "entrypoint": "/bin/bash",
                                "commands": ["-c", script],
                            }
                        }
                    ],
                    "environment": {"variables": {"PYTHONUNBUFFERED": "1", **(env or {})}},
                    "maxRetryCount": retries,
                    "maxRunDuration": f"{int(max_run_hours * 3600)}s",
                },
            }
        ],
        "allocationPolicy": {"instances": [instance]},
        "labels": {"app": "mmc-jax"},
        "logsPolicy": {"destination": "CLOUD_LOGGING"},
    }


def _with_seed(word: str) -> str:
    """`word` quoted for bash, with each `{seed}` replaced by "$SEED"."""
    return '"$SEED"'.join(shlex.quote(part) if part else "" for part in word.split("{seed}"))


def launch_batch(args, run: Commands) -> int:
    job = batch_job(
        image=args.image,
        command=args.command,
        seeds=args.seeds,
        machine_type=args.machine_type,
        accelerator=None if args.accelerator in ("", "none") else args.accelerator,
        accelerator_count=args.accelerator_count,
        spot=args.spot,
        env=dict(args.env),
        max_run_hours=args.max_run_hours,
    )
    out = args.out or f"{args.name}.batch.json"
    Path(out).write_text(json.dumps(job, indent=2) + "\n")
    print(f"wrote {out}", file=run.out)
    if args.no_submit:
        return 0
    submit = ["gcloud", "batch", "jobs", "submit", args.name, f"--location={args.location}"]
    if args.project:
        submit.append(f"--project={args.project}")
    run([*submit, f"--config={out}"])
    return 0


# ---------------------------------------------------------------------------------------------
# GKE JobSet


def _tpu_workers(
    container: dict[str, Any],
    variables: dict[str, str],
    tpu_type: str,
    tpu_topology: str | None,
    slices: int,
) -> tuple[int, dict[str, str]]:
    """(hosts per slice, node selector) of a TPU JobSet; sets the container's ports and TPU
    chips, and MMC_DISTRIBUTED when there is more than one host."""
    info = tpu_slice(tpu_type, tpu_topology)
    hosts = info["hosts"]
    if hosts * slices > 1:
        variables["MMC_DISTRIBUTED"] = "1"
    container["ports"] = [{"containerPort": 8471}, {"containerPort": 8080}]
    container["resources"] = {"limits": {"google.com/tpu": info["chips_per_host"]}}
    return hosts, {
        "cloud.google.com/gke-tpu-accelerator": info["gke_accelerator"],
        "cloud.google.com/gke-tpu-topology": info["topology"],
    }


def _gpu_workers(
    container: dict[str, Any],
    variables: dict[str, str],
    extra_env: list[dict[str, Any]],
    name: str,
    gpu_type: str,
    gpus_per_node: int,
    nodes: int,
) -> dict[str, str]:
    """The node selector of a GPU JobSet; sets the container's GPUs and, on several nodes, the
    JAX coordinator's address and port, the process count and each pod's process id (its Job
    completion index)."""
    container["resources"] = {"limits": {"nvidia.com/gpu": gpus_per_node}}
    if nodes > 1:
        variables["JAX_COORDINATOR_ADDRESS"] = f"{name}-workers-0-0.{name}:{COORDINATOR_PORT}"
        variables["JAX_NUM_PROCESSES"] = str(nodes)
        extra_env.append(
            {
                "name": "JAX_PROCESS_ID",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations"
                        "['batch.kubernetes.io/job-completion-index']"
                    }
                },
            }
        )
        container["ports"] = [{"containerPort": COORDINATOR_PORT}]
    return {"cloud.google.com/gke-accelerator": gpu_type}


def jobset_manifest(
    *,
    name: str,
    image: str,
    command: Sequence[str],
    tpu_type: str | None = None,
    tpu_topology: str | None = None,
    gpu_type: str | None = None,
    gpus_per_node: int = 1,
    nodes: int = 1,
    slices: int = 1,
    env: dict[str, str] | None = None,
    service_account: str | None = None,
) -> dict[str, Any]:
    """A JobSet (jobset.x-k8s.io/v1alpha2) running `command` on every host of a TPU slice
    (`tpu_type`, `slices` of them) or on `nodes` GPU nodes (`gpu_type`).

    TPU: GKE injects TPU_WORKER_HOSTNAMES / TPU_WORKER_ID into the pods, which JAX's GKE TPU
    detection reads. GPU: the pods get JAX_COORDINATOR_ADDRESS (the first pod's DNS name in
    the JobSet's headless service), JAX_NUM_PROCESSES and JAX_PROCESS_ID (the Job completion
    index), read by `mmc_jax.infra.distributed.initialize` (no `kubernetes` package or pod-reading
    RBAC needed)."""
    if (tpu_type is None) == (gpu_type is None):
        raise LaunchError("give exactly one of --tpu-type and --gpu-type")
    variables = {"PYTHONUNBUFFERED": "1", **(env or {})}
    container: dict[str, Any] = {
        "name": "mmc",
        "image": image,
        "command": ["bash", "-c", shlex.join(command)],
    }
    extra_env: list[dict[str, Any]] = []
    if tpu_type is not None:
        hosts, node_selector = _tpu_workers(container, variables, tpu_type, tpu_topology, slices)
    else:
        if slices != 1:
            raise LaunchError("--slices is for TPU slices; use --nodes for GPU nodes")
        hosts = nodes
        node_selector = _gpu_workers(
            container, variables, extra_env, name, gpu_type, gpus_per_node, nodes
        )
    container["env"] = [{"name": k, "value": v} for k, v in variables.items()] + extra_env
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": node_selector,
        "containers": [container],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    metadata: dict[str, Any] = {"name": name}
    if tpu_type is not None:  # one slice per node pool: the hosts of a slice stay together
        metadata["annotations"] = {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
        }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": slices,
                    "template": {
                        "spec": {
                            "parallelism": hosts,
                            "completions": hosts,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {"spec": pod_spec},
                        }
                    },
                }
            ],
        },
    }


def to_yaml(document: dict[str, Any]) -> str:
    """YAML text of a manifest (PyYAML when installed; JSON, which YAML readers accept, when
    not)."""
    try:
        import yaml
    except ImportError:
        return json.dumps(document, indent=2) + "\n"
    return yaml.safe_dump(document, sort_keys=False, width=100)


def launch_gke(args, run: Commands) -> int:
    manifest = jobset_manifest(
        name=args.name,
        image=args.image,
        command=args.command,
        tpu_type=args.tpu_type,
        tpu_topology=args.tpu_topology,
        gpu_type=args.gpu_type,
        gpus_per_node=args.gpus_per_node,
        nodes=args.nodes,
        slices=args.slices,
        env=dict(args.env),
        service_account=args.service_account,
    )
    text = to_yaml(manifest)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=run.out)
    elif not args.apply:
        print(text, end="", file=run.out)
    if args.apply:
        path = args.out
        if path is None:
            path = os.path.join(tempfile.mkdtemp(prefix="mmc-launch-"), f"{args.name}.yaml")
            Path(path).write_text(text)
        run(["kubectl", "apply", "-f", path])
    return 0


# ---------------------------------------------------------------------------------------------
# Command line


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not key.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _name(text: str) -> str:
    ok = text and text[0].isalpha() and all(c.isalnum() or c == "-" for c in text)
    if not ok or text != text.lower() or len(text) > 40 or text.endswith("-"):
        raise argparse.ArgumentTypeError(
            f"names are lower-case letters, digits and '-', start with a letter, at most 40 "
            f"characters: got {text!r}"
        )
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def local_environment(
    process_id: int,
    num_processes: int,
    port: int,
    devices_per_process: int,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of process `process_id` of a local multi-process run: the coordinator
    variables `mmc_jax.infra.distributed.initialize` reads (`JAX_COORDINATOR_ADDRESS`,
    `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`) and `devices_per_process` fake CPU devices (added to
    the other flags of `XLA_FLAGS`, which every process keeps)."""
    env = dict(os.environ if base is None else base)
    kept = [
        flag
        for flag in env.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    for name in (
        "MMC_DISTRIBUTED",
        "SLURM_JOB_ID",
        "OMPI_MCA_orte_hnp_uri",
        "TPU_WORKER_HOSTNAMES",
    ):
        env.pop(name, None)  # nothing else may claim the run
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=" ".join(
            [*kept, f"--xla_force_host_platform_device_count={devices_per_process}"]
        ),
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        JAX_NUM_PROCESSES=str(num_processes),
        JAX_PROCESS_ID=str(process_id),
    )
    pythonpath = [PROJECT_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(pythonpath))
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local(
    command: Sequence[str],
    num_processes: int,
    devices_per_process: int,
    log_dir: str | os.PathLike,
    *,
    port: int | None = None,
    stream_first: bool = False,
) -> list[subprocess.Popen]:
    """Starts `command` as processes 0..N-1 of one run on this machine (`local_environment`),
    in the project's root. Output goes to `log_dir/process_<i>.log` (process 0's to this
    process's stdout when `stream_first`)."""
    port = free_port() if port is None else port
    os.makedirs(log_dir, exist_ok=True)
    processes = []
    for process_id in range(num_processes):
        env = local_environment(process_id, num_processes, port, devices_per_process)
        if stream_first and process_id == 0:
            out = None
        else:
            out = open(os.path.join(log_dir, f"process_{process_id}.log"), "w")  # noqa: SIM115
        try:
            processes.append(
                subprocess.Popen(
                    list(command), env=env, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT
                )
            )
        finally:
            if out is not None:
                out.close()
    return processes


def wait_local(processes: Sequence[subprocess.Popen], timeout: float | None = None) -> list[int]:
    """Waits for every process; once one fails (or the time is up) the others are killed, as
    they would wait for it forever. Returns the exit codes (the killed ones' negative)."""
    deadline = None if timeout is None else time.time() + timeout
    pending = list(processes)
    while pending:
        for process in list(pending):
            if process.poll() is not None:
                pending.remove(process)
                if process.returncode != 0:
                    for other in pending:
                        other.kill()
        if deadline is not None and time.time() > deadline:
            for other in pending:
                other.kill()
        time.sleep(0.1)
    return [process.wait() for process in processes]


def launch_local(args) -> int:
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="mmc_local_")
    if args.dry_run:
        port = COORDINATOR_PORT
        for process_id in range(args.processes):
            env = local_environment(process_id, args.processes, port, args.devices_per_process, {})
            print(
                shlex.join([f"{k}={v}" for k, v in env.items() if k != "PYTHONPATH"] + args.command)
            )
        return 0
    processes = start_local(
        args.command, args.processes, args.devices_per_process, log_dir, stream_first=True
    )
    print(f"{args.processes} processes; the others' logs: {log_dir}", file=sys.stderr, flush=True)

    def forward(signum, frame):
        del frame
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        codes = wait_local(processes)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # The processes killed after another failed report -9: the first other code is the cause.
    failures = [code for code in codes if code] or [0]
    return next((code for code in failures if code != -signal.SIGKILL), failures[0])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.launch",
        description="Run an mmc_jax command on Google Cloud: a TPU VM slice (queued resource), "
        "a Cloud Batch job (GPU seeds in parallel) or a GKE JobSet. Everything after `--` is "
        "the command, run from the project's root on every host.",
    )
    sub = parser.add_subparsers(dest="target", required=True, metavar="{tpu,batch,gke,local}")

    def common(p, *, zone: bool = False):
        p.add_argument("--name", type=_name, required=True, help="resource / job name")
        p.add_argument("--project", help="Google Cloud project (default: gcloud's)")
        if zone:
            p.add_argument("--zone", required=True, help="e.g. us-central2-b")
        p.add_argument(
            "--env",
            type=_key_value,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="environment variable for the command (repeatable)",
        )
        p.add_argument(
            "--dry-run", action="store_true", help="print the commands instead of running them"
        )
        p.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")

    tpu = sub.add_parser(
        "tpu",
        help="TPU VM slice: create, install, run on all workers, stream worker 0, delete",
        description="Create a TPU VM slice through a queued resource, install this checkout "
        "on every worker, run the command on all of them, stream worker 0's log, delete the "
        "slice (unless --keep).",
    )
    common(tpu, zone=True)
    tpu.add_argument("--accelerator-type", required=True, help="e.g. v4-32, v5litepod-16")
    tpu.add_argument("--runtime-version", help="TPU software version (default per generation)")
    tpu.add_argument("--spot", action="store_true", help="Spot capacity (may be preempted)")
    tpu.add_argument("--valid-until-duration", help="give up the request after, e.g. 6h")
    tpu.add_argument("--keep", action="store_true", help="do not delete the slice at the end")
    tpu.add_argument(
        "--timeout-minutes", type=float, default=120.0, help="wait for ACTIVE (default 120)"
    )
    tpu.add_argument("--source-archive", help="a .tar.gz of the project (default: git archive)")

    batch = sub.add_parser(
        "batch",
        help="Cloud Batch job: one task per seed, in parallel (GPU sweeps)",
        description="Write a Cloud Batch job spec (one task per seed, $SEED set in each; "
        "{seed} in the command stands for it) and submit it.",
    )
    common(batch)
    batch.add_argument("--location", required=True, help="region, e.g. us-central1")
    batch.add_argument("--image", required=True, help="container image with the project")
    batch.add_argument("--seeds", type=int, nargs="+", required=True, help="one task each")
    batch.add_argument("--machine-type", default="g2-standard-8")
    batch.add_argument("--accelerator", default="nvidia-l4", help="GPU type, or none")
    batch.add_argument("--accelerator-count", type=_positive, default=1)
    batch.add_argument("--spot", action="store_true", help="Spot VMs")
    batch.add_argument("--max-run-hours", type=float, default=24.0)
    batch.add_argument("--out", help="the spec file (default NAME.batch.json)")
    batch.add_argument("--no-submit", action="store_true", help="only write the spec")

    gke = sub.add_parser(
        "gke",
        help="GKE JobSet manifest for TPU slice or GPU node pools",
        description="Render a JobSet manifest for GKE (TPU slice node pool or GPU nodes) with "
        "the environment JAX's cluster detection needs; print it, write it (--out) or apply "
        "it (--apply).",
    )
    common(gke)
    gke.add_argument("--image", required=True, help="container image with the project")
    gke.add_argument("--tpu-type", help="TPU slice, e.g. v5litepod-16, v4-32")
    gke.add_argument("--tpu-topology", help="override the slice topology, e.g. 2x2x4")
    gke.add_argument("--slices", type=_positive, default=1, help="TPU slices (multislice)")
    gke.add_argument("--gpu-type", help="GPU node label, e.g. nvidia-l4, nvidia-h100-80gb")
    gke.add_argument("--gpus-per-node", type=_positive, default=1)
    gke.add_argument("--nodes", type=_positive, default=1, help="GPU nodes (processes)")
    gke.add_argument("--service-account", help="Kubernetes service account (GCS access)")
    gke.add_argument("--out", help="write the manifest here (default: print it)")
    gke.add_argument("--apply", action="store_true", help="kubectl apply -f the manifest")

    local = sub.add_parser(
        "local",
        help="N processes on this machine (127.0.0.1, fake CPU devices): multi-host code paths",
        description="Run the command as N processes of one JAX run on this machine, joined "
        "through 127.0.0.1 (gloo), each with its own fake CPU devices. Process 0's output is "
        "streamed; SIGTERM / Ctrl-C go to every process.",
    )
    local.add_argument("--processes", type=_positive, default=2, help="processes (default 2)")
    local.add_argument(
        "--devices-per-process", type=_positive, default=1, help="fake CPU devices each"
    )
    local.add_argument("--log-dir", help="where the other processes' logs go (default: a temp dir)")
    local.add_argument(
        "--dry-run", action="store_true", help="print each process's environment and command"
    )
    local.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("no command: put it after `--`, e.g. -- python -m mmc_jax.train ...")
    if command[0].startswith("-"):  # flags with no program: a job whose command is `--config`
        parser.error(
            f"the command must start with a program, got {command[0]!r}: e.g. -- python -m "
            f"mmc_jax.train {shlex.join(command)}"
        )
    args.command = command
    run = Commands(args.dry_run)
    try:
        if args.target == "tpu":
            return launch_tpu(args, run)
        if args.target == "batch":
            return launch_batch(args, run)
        if args.target == "local":
            return launch_local(args)
        return launch_gke(args, run)
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
