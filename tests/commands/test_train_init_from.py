"""`train --init_from` (issue 48): a fresh run starts from a model's parameters (a supervised
run's result into AlphaZero or JOAT), a network of another shape is refused naming the flag
that fixes it, and a resumed run says it ignores the model."""

from __future__ import annotations

import io
import subprocess
import sys

import chex
import pytest
from runs_support import ROOT, copy_run, smoke

from configs import gardner, joat
from mmc_jax import train
from mmc_jax.algorithms import alphazero
from mmc_jax.infra import checkpoint as checkpoint_lib
from mmc_jax.training import runloop


def test_init_from_gives_the_models_parameters_and_names_it():
    params, label = train.start_from("gardner-cpu", gardner.get_config("cpu"))
    _, shipped, _ = checkpoint_lib.load_model("gardner-cpu")
    chex.assert_trees_all_equal(params, shipped)
    assert label == "--init_from gardner-cpu"


def test_init_from_a_network_of_another_shape_names_the_fields_and_the_flags():
    # JOAT's networks are not told the rules; the shipped Gardner model is.
    with pytest.raises(ValueError) as error:
        train.start_from("gardner-cpu", joat.get_config("cpu"))
    message = str(error.value)
    assert "\n" not in message
    assert "rule_planes (descriptor, the config's none)" in message
    assert "--config.network.rule_planes=descriptor" in message
    with pytest.raises(ValueError, match=r"num_blocks \(2, the config's 1\), channels \(32"):
        train.start_from("gardner-cpu", gardner.get_config("smoke"))


def test_train_refuses_init_from_a_missing_model_in_one_line(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmc_jax.train",
            f"--config={ROOT / 'configs' / 'gardner.py'}:smoke",
            f"--workdir={tmp_path / 'run'}",
            f"--init_from={tmp_path / 'nothing'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert completed.returncode == 2, completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: --init_from {tmp_path / 'nothing'}: no such checkpoint directory"]
    assert not (tmp_path / "run").exists()  # refused before the workdir is made


def test_a_fresh_run_says_it_starts_from_the_model_and_a_resume_ignores_it(runs, tmp_path):
    params = runs["alphazero"].result.state.params
    log = io.StringIO()
    fresh = runloop.run(
        alphazero.ALGORITHM,
        smoke("alphazero", 1),
        tmp_path / "fresh",
        init_params=params,
        init_label="--init_from M",
        stream=log,
    )
    assert "starting from --init_from M: its parameters, fresh optimizer state" in log.getvalue()
    assert fresh.record["iteration"] == 1
    log = io.StringIO()
    workdir = copy_run(runs["alphazero"], tmp_path / "finished")
    runloop.run(
        alphazero.ALGORITHM,
        smoke("alphazero", 2),
        workdir,
        init_params=params,
        init_label="--init_from M",
        stream=log,
    )
    assert "note: --init_from M not used: a run goes on from its own checkpoint" in log.getvalue()
