"""Supervised learning from engine games (`algorithms/supervised.py`): labels, the engine's
MultiPV parsing, a dataset made once and resumed, a bit-identical resume of the learner, and the
held-out games' loss."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from runs_support import traced_functions

from configs import supervised as supervised_config
from mmc_jax import uci
from mmc_jax.algorithms import supervised
from mmc_jax.infra import metrics
from mmc_jax.model import network as network_lib
from mmc_jax.training import learner, runloop

_spec = importlib.util.spec_from_file_location(
    "learners_heldout",
    Path(__file__).resolve().parents[2] / "experiments" / "learners" / "heldout.py",
)
heldout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heldout)


def test_policy_targets_are_a_softmax_of_score_differences():
    p = supervised.policy_from_scores([50.0, 50.0, -10.0], temperature_cp=60.0)
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-6)
    assert p[0] == p[1] and p[2] == pytest.approx(p[0] * math.exp(-1.0), rel=1e-5)
    mate = supervised.policy_from_scores([uci.MATE_CP - 1, 0.0], temperature_cp=60.0)
    assert mate[0] > 0.999 and np.isfinite(mate).all()


def test_value_targets_mix_the_result_and_the_engine_score():
    assert supervised.value_target(1.0, 0.0, 0.5, 300.0) == pytest.approx(0.5)
    assert supervised.value_target(-1.0, 300.0, 0.0, 300.0) == pytest.approx(math.tanh(1.0))
    assert supervised.value_target(0.0, uci.MATE_CP, 0.0, 300.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "line, parsed",
    [
        ("info depth 7 multipv 2 score cp -31 nodes 400 pv e2e3 b4b3", (7, 2, "e2e3", -31.0)),
        ("info depth 3 multipv 1 score mate 2 pv a2a3", (3, 1, "a2a3", uci.MATE_CP - 2)),
        ("info depth 3 multipv 1 score mate -1 pv a2a3", (3, 1, "a2a3", -(uci.MATE_CP - 1))),
        ("info depth 5 score cp 10 pv d2d3", (5, 1, "d2d3", 10.0)),
        ("info depth 5 multipv 1 score cp 10 lowerbound pv d2d3", None),
        ("info string NNUE evaluation", None),
        ("info depth 5 multipv x score cp 10 pv d2d3", None),
    ],
)  # fmt: skip
def test_uci_info_lines_parse_to_depth_rank_move_and_score(line, parsed):
    assert uci.parse_info_line(line) == parsed


def test_a_dataset_worker_waits_a_minute_for_its_engine_to_start(monkeypatch):
    """The first `uciok` is awaited for the shorter of `uci_timeout` and `handshake_timeout`:
    a worker beside other work once gave up after the default 10 s."""
    opened = {}

    class Recorder:
        def __init__(self, variant, engine, **kwargs):
            opened.update(kwargs)
            raise RuntimeError("recorded")

    monkeypatch.setattr(uci, "UciEngine", Recorder)
    with pytest.raises(RuntimeError, match="recorded"):
        supervised.play_shard(supervised._settings(smoke(1)), 0)
    timeouts = [opened.get(k, d) for k, d in (("uci_timeout", uci.DEFAULT_UCI_TIMEOUT),
                ("handshake_timeout", uci.DEFAULT_HANDSHAKE_TIMEOUT))]  # fmt: skip
    assert min(timeouts) >= 60.0


def test_a_shard_whose_engine_times_out_is_played_again_from_its_start(monkeypatch):
    """A worker's engine that stops answering (it did once at nice 19 beside a test suite) costs
    the shard's games, not the run: the shard is played again, up to SHARD_ATTEMPTS times."""
    calls = []

    def flaky(settings, index, engine=None):
        calls.append(index)
        if len(calls) < supervised.SHARD_ATTEMPTS:
            raise uci.EngineTimeout("engine gave no answer")
        return {"value": np.zeros(3, np.float32)}

    monkeypatch.setattr(supervised, "play_shard", flaky)
    assert len(supervised.play_shard_retrying({}, 7)["value"]) == 3
    assert calls == [7] * supervised.SHARD_ATTEMPTS
    calls.clear()
    monkeypatch.setattr(supervised, "SHARD_ATTEMPTS", 2)  # every attempt fails: the error shows

    def dead(settings, index, engine=None):
        calls.append(index)
        raise uci.EngineTimeout("engine gave no answer")

    monkeypatch.setattr(supervised, "play_shard", dead)
    with pytest.raises(uci.EngineTimeout):
        supervised.play_shard_retrying({}, 7)
    assert calls == [7, 7]


def smoke(iterations: int):
    config = supervised_config.get_config("smoke").copy_and_resolve_references()
    config.unlock()
    config.num_iterations = iterations
    config.data.processes = 1
    return config


def held_out(config):
    config.data.holdout_shards = 1  # of the smoke dataset's 2 shards
    return config


@pytest.mark.slow
def test_the_dataset_is_made_once_and_the_learner_scores_held_out_games(tmp_path):
    """A resume reads the dataset its first run made (the resume itself is bit-identical:
    tests/training/test_algorithm_contract.py); the held-out loss is the final parameters'."""
    workdir = tmp_path / "run"
    runloop.run(supervised.ALGORITHM, held_out(smoke(1)), workdir, stream=None)
    shard = workdir / "dataset" / "shard-00000.npz"
    written = os.stat(shard).st_mtime_ns
    log = io.StringIO()
    with traced_functions() as traced:  # the same sizes, another length: nothing to compile
        resumed = runloop.run(supervised.ALGORITHM, held_out(smoke(2)), workdir, stream=log)
    assert "iteration" not in traced, traced
    assert "resumed from" in log.getvalue() and "to play" not in log.getvalue()
    assert os.stat(shard).st_mtime_ns == written  # read again, never regenerated
    with np.load(shard) as arrays:
        probs, actions, values = arrays["probs"], arrays["actions"], arrays["value"]
        assert len(arrays["fen"]) == len(values) > 0
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert (probs[actions < 0] == 0).all()  # padding carries no mass
    assert np.abs(values).max() <= 1.0
    # The held-out shard: only the first shard's positions are trained on, and the logged
    # held-out loss is the loss of the final parameters on the second shard's positions.
    config = supervised.prepare_config(held_out(smoke(2)))
    data = supervised.load_dataset(config, workdir)
    assert int(data["train_rows"]) == len(values) < len(data["value"])
    rows = np.arange(int(data["train_rows"]), len(data["value"]))
    batch = supervised.labelled_batch(data, rows)
    network = network_lib.make_network(config.network)
    _, expected = learner.loss_fn(resumed.state.params, network, batch, config.learner)
    record = metrics.read_metrics(workdir)[-1]
    assert record["valid/policy_loss"] == pytest.approx(float(expected["policy_loss"]), 1e-4)
    assert record["valid/value_loss"] == pytest.approx(float(expected["value_loss"]), 1e-4)
    np.testing.assert_allclose(batch.policy_target.sum(axis=-1), 1.0, rtol=1e-5)
    # experiments/learners/heldout.py on the run: fresh games under another seed, both scored.
    out = tmp_path / "heldout.json"
    assert (
        heldout.main(["--run", str(workdir), "--games", "2", "--seed", "3", "--out", str(out)]) == 0
    )
    scored = json.loads(out.read_text())
    assert scored["own"]["positions"] == len(data["value"]) and scored["fresh"]["positions"] > 0
    assert scored["own"]["policy_loss"] >= scored["own"]["target_entropy"] - 1e-4
    # The fresh games are kept.
    assert (tmp_path / "heldout" / "dataset" / "manifest.json").is_file()
    # Other settings in the same workdir: refused in one line, nothing overwritten.
    other = smoke(2)
    other.data.nodes = 31
    with pytest.raises(ValueError, match="made with other settings \\(nodes\\)"):
        runloop.run(supervised.ALGORITHM, other, workdir, stream=None)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("data__value_mix", 1.5, "config.data.value_mix=1.5 must be a finite number in [0.0, 1.0]"),
        ("data__multipv", 0, "config.data.multipv must be at least 1, got 0"),
        ("learner__learning_rate", float("nan"), "config.learner.learning_rate=nan must be"),
        ("data__holdout_shards", 2, "config.data.holdout_shards must be an integer from 0 to 1"),
    ],
)
def test_supervised_configs_refuse_bad_values_in_one_line(field, value, message):
    config = smoke(1)
    section, name = field.split("__")
    config[section][name] = value
    with pytest.raises(ValueError, match=message.replace("[", "\\[").replace("]", "\\]")):
        supervised.prepare_config(config)


def test_a_truncated_dataset_shard_is_named_in_one_line(tmp_path):
    """A shard cut short (a full disk, a killed copy) is a ValueError naming the file and the
    way out, not a zipfile traceback (issue 70)."""
    folder = tmp_path / "dataset"
    folder.mkdir()
    np.savez_compressed(folder / "shard-00000.npz", fen=np.asarray(["x"]), value=np.zeros(1))
    whole = (folder / "shard-00000.npz").read_bytes()
    (folder / "shard-00000.npz").write_bytes(whole[: len(whole) // 2])
    manifest = {"settings": {}, "shards": [{"index": 0, "file": "shard-00000.npz"}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="shard-00000.npz is damaged \\(BadZipFile\\); delete it"):
        supervised.load_dataset(smoke(1), tmp_path)
