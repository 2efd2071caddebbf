"""Tests for mmc_jax.launch: the exact gcloud command lines of `--dry-run`, the order of
create / install / run / stream / delete, and one-line errors. Nothing here reaches Google Cloud
(see docs/cloud.md for what was never run)."""

import shlex
import sys

import pytest

from mmc_jax import launch

TRAIN = ["python", "-m", "mmc_jax.train", "--config", "configs/joat.py"]
TRAIN += ["--workdir", "gs://b/runs/joat"]


def dry_run(capsys, argv: list[str]) -> tuple[int, list[list[str]]]:
    status = launch.main(argv)
    out = capsys.readouterr().out
    return status, [shlex.split(line) for line in out.splitlines() if line.strip()]


def test_tpu_dry_run_prints_every_command(capsys):
    argv = ["tpu", "--name", "joat", "--zone", "us-central2-b", "--accelerator-type", "v4-32"]
    argv += ["--project", "proj", "--spot", "--env", "XLA_FLAGS=--xla_dump_to=/tmp/d"]
    status, lines = dry_run(capsys, [*argv, "--dry-run", "--", *TRAIN])
    assert status == 0
    scope = ["--zone=us-central2-b", "--project=proj"]
    qr = ["gcloud", "compute", "tpus", "queued-resources"]
    ssh = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "joat", *scope]
    assert lines[0] == [*qr, "create", "joat-qr", "--node-id=joat", *scope] + [
        "--accelerator-type=v4-32",
        "--runtime-version=tpu-ubuntu2204-base",
        "--spot",
    ]
    assert lines[1] == [*qr, "describe", "joat-qr", *scope, "--format=value(state.state)"]
    assert lines[2][:4] == ["git", "-C", launch.PROJECT_ROOT, "archive"]
    assert lines[3] == ["gcloud", "compute", "tpus", "tpu-vm", "scp", "mmc_jax.tar.gz"] + [
        "joat:~/mmc_jax.tar.gz",
        "--worker=all",
        *scope,
    ]
    assert lines[4] == [*ssh, "--worker=all", "--command=" + launch.remote_install_command()]
    assert lines[5][:-1] == [*ssh, "--worker=all"]
    run = lines[5][-1]
    assert run.startswith("--command=cd ~/mmc_jax && . .venv/bin/activate")
    assert "export MMC_DISTRIBUTED=1 XLA_FLAGS=--xla_dump_to=/tmp/d" in run
    assert shlex.quote(shlex.join(TRAIN) + "; echo $? > ~/mmc_run.status") in run
    assert lines[6] == [*ssh, "--worker=0"] + [
        "--command=tail -n +1 --pid=$(cat ~/mmc_run.pid) -F ~/mmc_run.log"
    ]
    assert lines[7] == [*ssh, "--worker=0", "--command=cat ~/mmc_run.status"]
    assert lines[8] == [*qr, "delete", "joat-qr", *scope, "--force", "--quiet"]
    assert len(lines) == 9


def test_tpu_keep_and_runtime(capsys):
    argv = ["tpu", "--name", "t1", "--zone", "z", "--accelerator-type", "v5litepod-16"]
    argv += ["--keep", "--dry-run", "--source-archive", __file__, "--", "python", "-V"]
    status, lines = dry_run(capsys, argv)
    assert status == 0
    assert "--runtime-version=v2-alpha-tpuv5-lite" in lines[0] and "--spot" not in lines[0]
    assert not any(
        line[:5] == ["gcloud", "compute", "tpus", "queued-resources", "delete"]
        for line in lines[:-1]
    )
    assert lines[2][5] == __file__  # the given archive, no git archive
    assert lines[-1][:2] == ["kept", "t1"]  # how to delete it later


def test_remote_run_command_runs_the_command_in_bash():
    """The start-up line, executed by a local bash with HOME in a temp dir, writes the log and
    the exit status (the part of the TPU flow that can run here)."""
    import os
    import subprocess
    import tempfile
    import time

    with tempfile.TemporaryDirectory() as home:
        os.makedirs(os.path.join(home, "mmc_jax", ".venv", "bin"))
        open(os.path.join(home, "mmc_jax", ".venv", "bin", "activate"), "w").close()
        line = launch.remote_run_command(["sh", "-c", "echo hi $MMC_X; exit 3"], {"MMC_X": "a b"})
        subprocess.run(
            ["bash", "-c", line], env={"HOME": home, "PATH": os.environ["PATH"]}, check=True
        )
        status = os.path.join(home, "mmc_run.status")
        for _ in range(100):
            if os.path.exists(status) and open(status).read().strip():
                break
            time.sleep(0.05)
        assert open(status).read().strip() == "3"
        assert open(os.path.join(home, "mmc_run.log")).read() == "hi a b\n"
        assert open(os.path.join(home, "mmc_run.pid")).read().strip().isdigit()


@pytest.mark.parametrize(
    "accelerator, hosts, per_host, topology",
    [
        ("v5litepod-8", 1, 8, "2x4"),
        ("v5litepod-16", 4, 4, "4x4"),
        ("v5litepod-256", 64, 4, "16x16"),
        ("v6e-4", 1, 4, "2x2"),
        ("v4-8", 1, 4, "1x2x2"),
        ("v4-32", 4, 4, "2x2x4"),
        ("v5p-128", 16, 4, "4x4x4"),
    ],
)
def test_tpu_slices(accelerator, hosts, per_host, topology):
    info = launch.tpu_slice(accelerator)
    assert (info["hosts"], info["chips_per_host"], info["topology"]) == (hosts, per_host, topology)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tpu", "--name", "x", "--zone", "z", "--accelerator-type", "v9-8"], "unknown TPU"),
        (["tpu", "--name", "x", "--zone", "z", "--accelerator-type", "v4-7"], "2 per chip"),
        (
            ["tpu", "--name", "x", "--zone", "z", "--accelerator-type", "v5litepod-12"],
            "no standard topology",
        ),
        (
            [
                "tpu",
                "--name",
                "x",
                "--zone",
                "z",
                "--accelerator-type",
                "v4-8",
                "--source-archive",
                "/nonexistent.tar.gz",
            ],
            "no source archive",
        ),
        (["gke", "--name", "x", "--image", "i"], "exactly one of --tpu-type and --gpu-type"),
        (
            ["gke", "--name", "x", "--image", "i", "--tpu-type", "v4-8", "--gpu-type", "nvidia-l4"],
            "exactly one of",
        ),
        (
            ["gke", "--name", "x", "--image", "i", "--gpu-type", "nvidia-l4", "--slices", "2"],
            "--slices is for TPU",
        ),
        (
            ["gke", "--name", "x", "--image", "i", "--tpu-type", "v4-8", "--tpu-topology", "2x2x2"],
            "does not have 4 chips",
        ),
    ],
)
def test_bad_input_is_a_one_line_error(capsys, argv, message):
    assert launch.main([*argv, "--dry-run", "--", "python", "-V"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tpu", "--name", "x", "--zone", "z", "--accelerator-type", "v4-8"], "no command"),
        (
            ["tpu", "--name", "Bad_Name", "--zone", "z", "--accelerator-type", "v4-8", "--", "a"],
            "names are lower-case",
        ),
        (["tpu", "--name", "x", "--accelerator-type", "v4-8", "--", "a"], "--zone"),
        (["batch", "--name", "x", "--location", "l", "--image", "i", "--", "a"], "--seeds"),
        (["gke", "--name", "x", "--image", "i", "--env", "NOEQUALS", "--", "a"], "KEY=VALUE"),
        (["gke", "--name", "x", "--image", "i", "--nodes", "0", "--", "a"], "positive integer"),
        (["cloud"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_with_usage(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        launch.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_help_is_clear(capsys):
    for argv in (["--help"], ["tpu", "--help"], ["batch", "--help"], ["gke", "--help"]):
        with pytest.raises(SystemExit):
            launch.main(argv)
        out = capsys.readouterr().out
        assert out.startswith("usage: python -m mmc_jax.launch")
    with pytest.raises(SystemExit):
        launch.main(["tpu", "--help"])
    assert "--accelerator-type" in capsys.readouterr().out


def test_batch_writes_and_submits(capsys, tmp_path):
    out = tmp_path / "job.json"
    argv = ["batch", "--name", "adapt", "--location", "us-central1", "--image", "img"]
    argv += ["--project", "p", "--seeds", "1", "2", "--out", str(out), "--dry-run"]
    status, lines = dry_run(
        capsys, [*argv, "--", "python", "-m", "mmc_jax.adapt", "--seed", "{seed}"]
    )
    assert status == 0 and out.is_file()
    assert lines[0] == ["wrote", str(out)]
    assert lines[1] == ["gcloud", "batch", "jobs", "submit", "adapt", "--location=us-central1"] + [
        "--project=p",
        f"--config={out}",
    ]
    status, lines = dry_run(capsys, [*argv, "--no-submit", "--", "python", "-V"])
    assert lines == [["wrote", str(out)]]


def test_gke_apply(capsys, tmp_path):
    out = tmp_path / "m.yaml"
    argv = ["gke", "--name", "j", "--image", "i", "--tpu-type", "v5litepod-16", "--out", str(out)]
    status, lines = dry_run(capsys, [*argv, "--apply", "--dry-run", "--", "python", "-V"])
    assert status == 0
    assert lines == [["wrote", str(out)], ["kubectl", "apply", "-f", str(out)]]


def test_missing_gcloud_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    argv = ["tpu", "--name", "x", "--zone", "z", "--accelerator-type", "v4-8", "--", "a"]
    assert launch.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: gcloud is not installed") and err.count("\n") == 1


def test_local_dry_run_prints_each_process(capsys):
    assert launch.main(["local", "--processes", "3", "--dry-run", "--", "python", "-V"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines):
        words = shlex.split(line)
        assert f"JAX_PROCESS_ID={i}" in words and "JAX_NUM_PROCESSES=3" in words
        assert "XLA_FLAGS=--xla_force_host_platform_device_count=1" in words
        assert words[-2:] == ["python", "-V"]


LOCAL_PROBE = """
import sys
import jax
from mmc_jax.infra import distributed
info = distributed.initialize()
print("PROBE", info.process_id, info.num_processes, jax.device_count(), jax.local_device_count())
sys.exit(3 if info.process_id == int(sys.argv[1]) else 0)
"""


@pytest.mark.slow
def test_local_runs_one_jax_run_of_n_processes(tmp_path, capfd):
    """Two processes x 2 fake devices join into one run of 4 devices; process 0 streams, the
    other logs; a failing process makes the launcher fail with its exit code."""
    command = ["--", sys.executable, "-c", LOCAL_PROBE]
    args = ["local", "--processes", "2", "--devices-per-process", "2", "--log-dir"]
    assert launch.main([*args, str(tmp_path / "ok"), *command, "-1"]) == 0
    assert "PROBE 0 2 4 2" in capfd.readouterr().out
    assert "PROBE 1 2 4 2" in (tmp_path / "ok" / "process_1.log").read_text()
    assert launch.main([*args, str(tmp_path / "bad"), *command, "1"]) == 3


def test_local_processes_keep_the_other_xla_flags():
    base = {"XLA_FLAGS": "--xla_dump_to=/tmp/d --xla_force_host_platform_device_count=8 --x=1"}
    env = launch.local_environment(1, 2, 1234, 2, base)
    assert env["XLA_FLAGS"] == (
        "--xla_dump_to=/tmp/d --x=1 --xla_force_host_platform_device_count=2"
    )
