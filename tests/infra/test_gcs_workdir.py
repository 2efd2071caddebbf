"""`gs://` workdirs (mmc_jax.infra.storage, metrics, checkpoint, cli) against a fake bucket.

No network here: `etils.epath.testing.mock_epath` maps every `gs://BUCKET/...` path that epath
sees onto `<tmp>/gcs/BUCKET/...`, and the storage packages' presence check is patched (the `gcs`
extra is not installed in the test environment). Two backends stay outside epath and are faked
at their own seams: orbax (its arrays go through tensorstore's GCS driver and its step listing
asks `google-cloud-storage`), whose `CheckpointManager` is given the `gs://` directory and runs
on the mapped local folder; and tensorboardX, whose `gs` record-writer factory is replaced by one
writing to the mapped folder. The real GCS clients are never exercised (docs/cloud.md).

Every test runs in an empty current directory and checks that no `gs:` folder appeared in it
(what `os.path.abspath("gs://b/x")` or `open("gs://b/x")` would create).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from etils.epath import testing as epath_testing
from tensorboardX import record_writer

from mmc_jax.infra import checkpoint, cli, metrics, storage

ROOT = Path(__file__).resolve().parents[2]
LEGACY = ROOT / "tests" / "fixtures" / "legacy" / "gardner_smoke"
RUN = "gs://bucket/runs/joat"


class Bucket:
    """A fake `gs://` namespace: `local("gs://b/x")` is `<root>/b/x`."""

    def __init__(self, root: Path):
        self.root = root

    def local(self, path) -> str:
        path = os.fspath(path)
        return os.path.join(self.root, path[len("gs://") :]) if path.startswith("gs://") else path

    def remote(self, path) -> str:
        path = os.fspath(path)
        root = os.fspath(self.root) + os.sep
        return "gs://" + path[len(root) :] if path.startswith(root) else path

    @contextlib.contextmanager
    def mocked_epath(self):
        def one(original, path, *args, **kwargs):
            return original(self.local(path), *args, **kwargs)

        def open_(original, path, mode):
            if "r" not in mode:  # a bucket has no folders: any object name can be written
                os.makedirs(os.path.dirname(self.local(path)), exist_ok=True)
            return original(self.local(path), mode)

        def two(original, path, dst, *args, **kwargs):
            return original(self.local(path), self.local(dst), *args, **kwargs)

        def glob(original, pattern):
            found = original(self.local(pattern))
            return [self.remote(p) for p in found] if storage.is_remote(pattern) else found

        def walk(original, top, **kwargs):
            for folder, folders, files in original(self.local(top), **kwargs):
                yield self.remote(folder) if storage.is_remote(top) else folder, folders, files

        single = ("exists", "isdir", "listdir", "makedirs", "mkdir", "remove", "rmtree")
        fakes = {name: one for name in (*single, "stat")}
        fakes.update(open=open_, rename=two, replace=two, copy=two, glob=glob, walk=walk)
        with epath_testing.mock_epath(**fakes):
            yield


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """The fake bucket, with the `gcs` extra reported installed and an empty current directory
    that must stay free of `gs:` folders."""
    fake = Bucket(tmp_path / "gcs")
    fake.root.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(storage, "missing_packages", lambda path: [])
    with fake.mocked_epath():
        yield fake
    assert not (cwd / "gs:").exists() and not list(cwd.iterdir())


@pytest.fixture
def orbax_on_bucket(bucket, monkeypatch):
    """orbax's CheckpointManager, handed the `gs://` directory unchanged, run on its local
    image; returns the directories it was given."""
    given = []
    real = ocp.CheckpointManager

    def manager(directory, *args, **kwargs):
        given.append(directory)
        return real(bucket.local(directory), *args, **kwargs)

    monkeypatch.setattr(ocp, "CheckpointManager", manager)
    return given


# ---------------------------------------------------------------------------------------------
# Paths


def test_paths_stay_uris():
    assert storage.is_remote(RUN) and not storage.is_remote("runs/joat")
    assert storage.absolute(RUN + "/") == RUN
    assert storage.absolute("runs/joat") == os.path.abspath("runs/joat")
    assert storage.join(RUN, "plots", "x.png") == RUN + "/plots/x.png"
    assert checkpoint.split_checkpoint_path(RUN + "/checkpoints/3", None) == (RUN, 3)
    assert checkpoint.split_checkpoint_path(RUN + "/checkpoints", 2) == (RUN, 2)
    assert checkpoint.split_checkpoint_path(RUN, None) == (RUN, None)


def test_atomic_text_in_a_bucket(bucket):
    path = f"{RUN}/adaptation.json"
    assert storage.read_text(path) is None
    storage.write_atomically(path, '{"a": 1}\n')
    storage.write_atomically(path, '{"a": 2}\n')
    assert storage.read_text(path) == '{"a": 2}\n'
    assert os.listdir(bucket.local(RUN)) == ["adaptation.json"]  # no temporary file left


# ---------------------------------------------------------------------------------------------
# Metrics


def test_metrics_round_trip_uploads_at_flush(bucket):
    writer = metrics.MetricsWriter(RUN, tensorboard=False, stream=None, bucket_flush_seconds=3600)
    for step in range(3):
        writer.write(step, {"frames": 100 * step, "train/policy_loss": 2.0 - step})
    assert metrics.read_metrics(RUN) == []  # a bucket's object is uploaded at intervals...
    writer.flush()  # ...or when asked (before every checkpoint)
    assert [r["step"] for r in metrics.read_metrics(RUN)] == [0, 1, 2]
    writer.write(3, {"frames": 300})
    writer.close()  # ...and at the end
    records = metrics.read_metrics(RUN)
    assert [r["frames"] for r in records] == [0, 100, 200, 300]
    assert records[1]["train/policy_loss"] == 1.0
    assert Path(bucket.local(RUN), metrics.METRICS_FILE).is_file()


def test_metrics_without_interval_upload_every_record(bucket):
    with metrics.MetricsWriter(RUN, tensorboard=False, stream=None, bucket_flush_seconds=0) as w:
        w.write(0, {"x": 1})
        assert [r["x"] for r in metrics.read_metrics(RUN)] == [1]


def test_metrics_resume_in_a_bucket_repairs_before_appending(bucket):
    with metrics.MetricsWriter(RUN, tensorboard=False, stream=None) as writer:
        for step in range(5):
            writer.write(step, {"x": step})
    with open(bucket.local(f"{RUN}/{metrics.METRICS_FILE}"), "a") as f:
        f.write('{"step": 5, "x": ')  # cut mid-record
    assert [r["step"] for r in metrics.read_metrics(RUN)] == [0, 1, 2, 3, 4]

    # Resuming from a checkpoint at step 2 drops steps 3-4 and the cut tail at once (uploaded
    # before any new record), so a reader never sees the killed run's later records.
    writer = metrics.MetricsWriter(RUN, resume_step=2, tensorboard=False, stream=None)
    assert [r["step"] for r in metrics.read_metrics(RUN)] == [0, 1, 2]
    writer.write(3, {"x": 30})
    writer.close()
    records = metrics.read_metrics(RUN)
    assert [(r["step"], r["x"]) for r in records] == [(0, 0), (1, 1), (2, 2), (3, 30)]
    text = Path(bucket.local(f"{RUN}/{metrics.METRICS_FILE}")).read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 4


def test_tensorboard_gets_the_gs_logdir(bucket, monkeypatch):
    """tensorboardX writes `gs://` event files with its own `gs` record writer (it needs
    `google-cloud-storage`); here that writer is faked onto the mapped folder."""
    factory = record_writer.REGISTERED_FACTORIES["gs"]
    assert isinstance(factory, record_writer.GCSRecordWriterFactory)
    opened = []

    class LocalFactory:
        def open(self, path):
            opened.append(path)
            return open(bucket.local(path), "wb")

        def directory_check(self, path):
            os.makedirs(bucket.local(path), exist_ok=True)

    monkeypatch.setitem(record_writer.REGISTERED_FACTORIES, "gs", LocalFactory())
    with metrics.MetricsWriter(RUN, stream=None) as writer:
        writer.write(1, {"train/policy_loss": 1.5})
    assert [os.path.dirname(p) for p in opened] == [f"{RUN}/{metrics.TENSORBOARD_SUBDIR}"]
    events = list(Path(bucket.local(RUN), metrics.TENSORBOARD_SUBDIR).iterdir())
    assert len(events) == 1 and events[0].stat().st_size > 0


def test_plots_in_a_bucket(bucket):
    with metrics.MetricsWriter(RUN, tensorboard=False, stream=None) as writer:
        for step in range(3):
            writer.write(
                step, {"frames": step, "train/policy_loss": 1.0, "eval/score_vs_random": 0.5}
            )
    written = metrics.plot_metrics(RUN)
    assert sorted(written) == [
        f"{RUN}/plots/policy_loss.png",
        f"{RUN}/plots/score_vs_random.png",
    ]
    for path in written:
        assert Path(bucket.local(path)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoints_in_a_bucket(bucket, orbax_on_bucket):
    assert checkpoint.latest_step(RUN) is None
    state = {"params": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, "iteration": 0}
    with checkpoint.Checkpointer(RUN, max_to_keep=2) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, dict(state, iteration=step), extra={"frames": step})
    assert orbax_on_bucket == [f"{RUN}/checkpoints"]  # handed to orbax as a gs:// path
    assert checkpoint.latest_step(RUN) == 3
    assert checkpoint.load_metadata(RUN)["extra"] == {"frames": 3}
    restored = checkpoint.restore_checkpoint(RUN, state)
    np.testing.assert_array_equal(restored["params"]["w"], state["params"]["w"])
    assert int(restored["iteration"]) == 3
    assert sorted(os.listdir(bucket.local(f"{RUN}/checkpoints"))) == ["2", "3"]


def test_load_model_from_a_bucket_falls_back_past_a_damaged_step(bucket, orbax_on_bucket, capsys):
    """`load_model` on a `gs://` workdir: the folder checks and the step listing of the
    fallback (`<workdir>/checkpoints/*`) go through epath."""
    steps = Path(bucket.local(RUN), "checkpoints")
    shutil.copytree(LEGACY, steps.parent)
    shutil.copytree(steps / "1", steps / "2")
    for path in (steps / "2" / "state" / "d").rglob("*"):  # damage step 2's arrays
        if path.is_file():
            path.unlink()
    meta = json.loads((steps / "2" / "meta" / "metadata").read_text())
    (steps / "2" / "meta" / "metadata").write_text(json.dumps(dict(meta, step=2)))
    _, params, config = checkpoint.load_model(RUN + "/checkpoints")
    assert "is damaged" in capsys.readouterr().err and config.network.channels > 0
    _, step1, _ = checkpoint.load_model(f"{RUN}/checkpoints/1")
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(step1), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        checkpoint.load_model("gs://bucket/none")


def test_export_into_a_bucket_and_back_for_a_board_and_a_sensing_model(bucket, capsys):
    """`python -m mmc_jax.export --out gs://...` writes any learner's model through epath, and
    `algorithms.open_model` reads it back from the bucket with the same parameters: a board
    model (shipped gardner-cpu) and a sensing variant's (the committed recon agent)."""
    from mmc_jax import algorithms, export

    for source in ("gardner-cpu", os.fspath(ROOT / "experiments" / "recon" / "learned" / "model")):
        out = f"gs://bucket/models/{os.path.basename(source)}"
        assert export.main(["--checkpoint", source, "--out", out]) == 0
        assert f"wrote {out}" in capsys.readouterr().out
        assert Path(bucket.local(out), checkpoint.EXPORT_PARAMS).is_file()
        copied, original = algorithms.open_model(out), algorithms.open_model(source)
        assert copied.sensing == original.sensing and copied.network == original.network
        leaves = zip(jax.tree.leaves(copied.params), jax.tree.leaves(original.params), strict=True)
        for a, b in leaves:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------------------------------------
# Workdir checks and missing packages


def test_workdir_checks_in_a_bucket(bucket, capsys):
    cli.check_workdir(RUN)  # absent: fine, created by make_workdir
    cli.make_workdir(RUN)
    assert os.listdir(bucket.local(RUN)) == []  # the write probe is deleted
    storage.write_atomically("gs://bucket/taken", "x")
    with pytest.raises(SystemExit) as exit_info:
        cli.check_workdir("gs://bucket/taken")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: --workdir gs://bucket/taken is a file, not a directory\n"


def test_an_unwritable_bucket_folder_is_named(bucket):
    storage.write_atomically(RUN, "an object where the run should be")
    reason = storage.unwritable_reason(RUN)  # its write probe fails
    assert reason.startswith("is not writable (")
    assert "\n" not in reason


def test_outputs_written_with_open_refuse_a_bucket(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser(prog="evaluate")
    for check, flag in ((cli.check_output_folder, "--out"), (cli.check_output_file, "--pgn")):
        with pytest.raises(SystemExit):
            check(parser, flag, f"{RUN}/ladder")
        assert f"{flag} {RUN}/ladder: only a local path is supported" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


needs_missing_extra = pytest.mark.skipif(
    not storage.missing_packages(RUN), reason="the gcs extra is installed here"
)


@needs_missing_extra
def test_missing_packages_are_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    message = "pip install 'mmc_jax[gcs]'"
    for make in (metrics.MetricsWriter, checkpoint.Checkpointer):
        with pytest.raises(storage.MissingPackage, match=message.replace("[", r"\[")):
            make(RUN)
    with pytest.raises(SystemExit):
        cli.check_workdir(RUN)
    err = capsys.readouterr().err
    assert err.startswith(f"error: --workdir {RUN}: gs:// paths need ") and err.count("\n") == 1
    assert message in err
    with pytest.raises(SystemExit):  # evaluate, play, export: reading a checkpoint
        cli.load_or_fail(argparse.ArgumentParser(prog="evaluate"), RUN, None, "--checkpoint")
    assert f"error: --checkpoint {RUN}: gs:// paths need " in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@needs_missing_extra
def test_train_cli_refuses_a_bucket_without_the_extra(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmc_jax.train",
            f"--config={ROOT / 'configs' / 'gardner.py'}:smoke",
            f"--workdir={RUN}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: --workdir {RUN}: gs:// paths need gcsfs")
    assert lines[-1].endswith("pip install 'mmc_jax[gcs]'")
    assert not list(tmp_path.iterdir())
