"""Params-only models (`mmc_jax.export`, `checkpoint.load_model` on exported folders)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from mmc_jax import export
from mmc_jax.infra import checkpoint

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "gardner_smoke"
OBS26 = Path(__file__).resolve().parents[1] / "fixtures" / "obs26" / "gardner_smoke"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run") / "gardner_smoke"
    shutil.copytree(LEGACY, workdir)
    out = tmp_path_factory.mktemp("export") / "model"
    assert export.main(["--checkpoint", str(workdir), "--out", str(out), "--command", "x"]) == 0
    return workdir, out


def test_exported_params_equal_the_checkpoint(exported):
    workdir, out = exported
    _, from_checkpoint, _ = checkpoint.load_model(workdir)
    network, params, config = checkpoint.load_model(out)
    assert config.variant == "gardner" and hasattr(network, "apply")
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(from_checkpoint), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    record = json.loads((out / checkpoint.EXPORT_FILE).read_text())
    assert record["command"] == "x" and record["step"] == 1
    assert record["observation_layout"] == checkpoint.board_model_kind(config).obs_layout
    assert (out / checkpoint.EXPORT_PARAMS).stat().st_size < 100_000  # no optimizer, no replay


def test_a_model_of_another_observation_layout_is_refused(exported, tmp_path):
    _, out = exported
    other = tmp_path / "other"
    shutil.copytree(out, other)
    record = json.loads((other / checkpoint.EXPORT_FILE).read_text())
    record["observation_layout"] = "obs[5, 5, 3]"
    (other / checkpoint.EXPORT_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="re-export it"):
        checkpoint.load_model(other)


def test_export_refuses_a_bad_output_before_reading(exported, tmp_path, capsys):
    workdir, _ = exported
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit):
        export.main(["--checkpoint", str(workdir), "--out", str(blocker)])
    assert "is a file, not a folder" in capsys.readouterr().err


def test_shipped_models_load():
    for name in checkpoint.shipped_models():
        network, params, config = checkpoint.load_model(name)
        assert config.network.channels > 0 and jax.tree.leaves(params)


def test_a_checkpoint_of_the_old_observation_layout_is_refused():
    with pytest.raises(ValueError, match="observation layout"):
        checkpoint.load_model(OBS26)


def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, capsys):
    """A truncated or deleted file in the latest step: `load_model` warns and uses the step
    before; asked for that step explicitly, it says which step to try instead."""
    from mmc_jax.infra import checkpoint as ckpt_lib

    workdir = tmp_path / "run"
    shutil.copytree(LEGACY, workdir)
    steps = workdir / "checkpoints"
    shutil.copytree(steps / "1", steps / "2")  # a second step, then damage it
    for path in (steps / "2" / "state" / "d").rglob("*"):  # the array data: deleted
        if path.is_file():
            path.unlink()
    meta = json.loads((steps / "2" / "meta" / "metadata").read_text())
    meta["step"] = 2
    (steps / "2" / "meta" / "metadata").write_text(json.dumps(meta))
    _, params, _ = ckpt_lib.load_model(workdir)
    _, intact, _ = ckpt_lib.load_model(workdir, step=1)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(intact), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert "is damaged" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is damaged .* try --step 1"):
        ckpt_lib.load_model(workdir, step=2)
