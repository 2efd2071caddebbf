"""Tests for deploy/: the JobSet manifests and the Cloud Batch spec are parsed and checked field
by field, and each checked-in file is exactly what `python -m mmc_jax.launch` renders from the
command in docs/cloud.md (so the files and the launcher cannot drift apart)."""

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml  # PyYAML, installed with flax
from packaging.requirements import Requirement  # installed with matplotlib
from packaging.utils import canonicalize_name

from mmc_jax import launch
from mmc_jax.infra import distributed

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "REGION-docker.pkg.dev/PROJECT/REPOSITORY/mmc_jax:TAG"
# The commands that made the files in deploy/ (also given in docs/cloud.md).
RENDERED = {
    "deploy/jobset-tpu.yaml": [
        "gke", "--name", "mmc-joat-tpu", "--image", IMAGE, "--tpu-type", "v5litepod-16",
        "--service-account", "mmc-runner", "--",
        "python", "-m", "mmc_jax.train", "--config", "configs/joat.py",
        "--workdir", "gs://BUCKET/runs/joat",
    ],
    "deploy/jobset-gpu.yaml": [
        "gke", "--name", "mmc-joat-gpu", "--image", IMAGE, "--gpu-type", "nvidia-l4",
        "--nodes", "2", "--gpus-per-node", "1", "--service-account", "mmc-runner", "--",
        "python", "-m", "mmc_jax.train", "--config", "configs/joat.py",
        "--workdir", "gs://BUCKET/runs/joat-gpu",
    ],
    "deploy/batch-adapt-seeds.json": [
        "batch", "--name", "mmc-adapt-dark", "--location", "us-central1", "--image", IMAGE,
        "--seeds", "0", "1", "2", "3", "--spot", "--no-submit", "--",
        "python", "-m", "mmc_jax.adapt", "--variant", "dark", "--init_from",
        "gs://BUCKET/runs/joat", "--iterations", "4", "--seed", "{seed}",
        "--workdir", "gs://BUCKET/adapt/dark/seed{seed}",
    ],
}  # fmt: skip


@pytest.mark.parametrize("path", sorted(RENDERED))
def test_checked_in_files_are_what_the_launcher_renders(path, tmp_path, capsys):
    out = tmp_path / Path(path).name
    argv = RENDERED[path]
    split = argv.index("--")
    assert launch.main([*argv[:split], "--out", str(out), *argv[split:]]) == 0
    assert out.read_text() == (ROOT / path).read_text(), f"re-render {path} (docs/cloud.md)"


def pod_of(manifest):
    [job] = manifest["spec"]["replicatedJobs"]
    return job, job["template"]["spec"], job["template"]["spec"]["template"]["spec"]


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_tpu_jobset():
    manifest = yaml.safe_load((ROOT / "deploy/jobset-tpu.yaml").read_text())
    assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert manifest["kind"] == "JobSet"
    assert manifest["metadata"]["name"] == "mmc-joat-tpu"
    annotations = manifest["metadata"]["annotations"]
    assert annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    assert manifest["spec"]["failurePolicy"] == {"maxRestarts": 0}
    assert manifest["spec"]["network"] == {"enableDNSHostnames": True}
    job, job_spec, pod = pod_of(manifest)
    assert job["name"] == "workers" and job["replicas"] == 1
    # v5litepod-16 = 16 chips in a 4x4 slice: 4 hosts of 4 chips, one pod per host.
    assert job_spec["parallelism"] == job_spec["completions"] == 4
    assert job_spec["completionMode"] == "Indexed" and job_spec["backoffLimit"] == 0
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "mmc-runner"
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    [container] = pod["containers"]
    assert container["image"] == IMAGE
    assert container["resources"] == {"limits": {"google.com/tpu": 4}}
    assert container["command"][:2] == ["bash", "-c"]
    assert shlex.split(container["command"][2]) == RENDERED["deploy/jobset-tpu.yaml"][-7:]
    env = env_of(container)
    assert env == {"PYTHONUNBUFFERED": "1", "MMC_DISTRIBUTED": "1"}
    # GKE adds TPU_WORKER_HOSTNAMES / TPU_WORKER_ID to the pods: JAX's GKE TPU detection.
    pod_env = {**env, "TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3", "TPU_WORKER_ID": "0"}
    assert distributed.detect_cluster(pod_env) == "gketpu"


def test_gpu_jobset():
    manifest = yaml.safe_load((ROOT / "deploy/jobset-gpu.yaml").read_text())
    assert "annotations" not in manifest["metadata"]
    job, job_spec, pod = pod_of(manifest)
    assert job_spec["parallelism"] == job_spec["completions"] == 2
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    [container] = pod["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert container["ports"] == [{"containerPort": launch.COORDINATOR_PORT}]
    env = env_of(container)
    # The first pod of the JobSet's headless service: <jobset>-<job>-<job index>-<pod index>.
    assert env["JAX_COORDINATOR_ADDRESS"] == "mmc-joat-gpu-workers-0-0.mmc-joat-gpu:1234"
    assert env["JAX_NUM_PROCESSES"] == "2"
    assert env["JAX_PROCESS_ID"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }
    # What mmc_jax.infra.distributed makes of that environment in pod 1.
    pod_env = {k: v for k, v in env.items() if isinstance(v, str)} | {"JAX_PROCESS_ID": "1"}
    assert distributed.detect_cluster(pod_env) == "env"


def test_batch_spec():
    job = json.loads((ROOT / "deploy/batch-adapt-seeds.json").read_text())
    [group] = job["taskGroups"]
    assert group["taskCount"] == group["parallelism"] == 4
    assert group["taskEnvironments"] == [{"variables": {"SEED": str(s)}} for s in range(4)]
    spec = group["taskSpec"]
    [runnable] = spec["runnables"]
    container = runnable["container"]
    assert container["imageUri"] == IMAGE and container["entrypoint"] == "/bin/bash"
    assert container["commands"][0] == "-c"
    words = shlex.split(container["commands"][1])
    assert words[:4] == ["python", "-m", "mmc_jax.adapt", "--variant"]
    assert words[-4:] == ["--seed", "$SEED", "--workdir", "gs://BUCKET/adapt/dark/seed$SEED"]
    assert spec["environment"] == {"variables": {"PYTHONUNBUFFERED": "1"}}
    assert spec["maxRetryCount"] == 1 and spec["maxRunDuration"] == "86400s"
    [instance] = job["allocationPolicy"]["instances"]
    assert instance["installGpuDrivers"] is True
    assert instance["policy"] == {
        "machineType": "g2-standard-8",
        "provisioningModel": "SPOT",
        "accelerators": [{"type": "nvidia-l4", "count": 1}],
    }
    assert job["logsPolicy"] == {"destination": "CLOUD_LOGGING"}
    assert job["labels"] == {"app": "mmc-jax"}


def test_batch_without_gpu():
    job = launch.batch_job(image="i", command=["python", "-V"], seeds=[0], accelerator=None)
    [instance] = job["allocationPolicy"]["instances"]
    assert instance == {"policy": {"machineType": "g2-standard-8"}}


def test_multislice_tpu_and_single_host():
    manifest = launch.jobset_manifest(
        name="m", image="i", command=["python", "-V"], tpu_type="v4-16", slices=2
    )
    job, job_spec, pod = pod_of(manifest)
    assert job["replicas"] == 2 and job_spec["parallelism"] == 2
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x2"
    single = launch.jobset_manifest(
        name="s", image="i", command=["python", "-V"], tpu_type="v5litepod-8"
    )
    _, job_spec, pod = pod_of(single)
    assert job_spec["parallelism"] == 1
    assert "MMC_DISTRIBUTED" not in env_of(pod["containers"][0])  # one host: no coordinator


def test_docker_files():
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    assert "FROM python:3.11" in dockerfile and "python -m mmc_jax.uci build" in dockerfile
    assert 'pip install -c constraints.txt -e ".[test,gcs]" "jax[${JAX_EXTRA}]==' in dockerfile
    build = yaml.safe_load((ROOT / "deploy/cloudbuild.yaml").read_text())
    assert build["images"] == ["${_IMAGE}"]
    assert build["steps"][0]["args"][:3] == ["build", "-f", "deploy/Dockerfile"]


# ---------------------------------------------------------------------------------------------
# constraints.txt: the one place that names the tested versions; the Dockerfile pinned to them.


def pinned_versions() -> tuple[str, dict[str, str]]:
    """(Python version, {normalised package name: version}) from constraints.txt."""
    text = (ROOT / "constraints.txt").read_text()
    [python] = re.findall(r"^#\s+python (\d+\.\d+\.\d+)$", text, re.M)
    pins = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")  # only exact pins: a range names no tested version
            pins[canonicalize_name(name)] = version
    return python, pins


def test_constraints_pin_every_dependency_at_a_version_pyproject_allows():
    _, pins = pinned_versions()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # gcs is the one extra no test environment installs (constraints.txt says so).
    for spec in [*project["dependencies"], *extras["test"], *extras["dev"]]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"constraints.txt does not pin {requirement.name}"
        assert requirement.specifier.contains(pins[name]), (spec, pins[name])
    for name in ("jaxlib", "ml-dtypes"):  # the compiler and array types beneath jax
        assert name in pins
    assert pins["jaxlib"] == pins["jax"]


def test_dockerfile_is_pinned_to_the_pinned_versions():
    python, pins = pinned_versions()
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    [base] = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert base == f"python:{python}-slim"
    assert re.search(r"^COPY [^\n]*\bconstraints\.txt\b[^\n]* \./$", dockerfile, re.M)
    [install] = [line for line in dockerfile.splitlines() if line.startswith("RUN pip install")]
    assert "-c constraints.txt" in install
    # jax's accelerator extra names its version itself: the plugin and jaxlib follow it.
    [jax_pin] = re.findall(r'"jax\[\$\{JAX_EXTRA\}\]==([^"]+)"', install)
    assert jax_pin == pins["jax"]
    unpinned = re.findall(r'"jax\[[^"]*\]"', install)
    assert not unpinned, unpinned
