"""Action-value labels (mmc_jax/uci/labels.py) with the real Fairy-Stockfish: every legal move of
every position labelled, each position stored with its mirror, whole games held out, a rerun
makes only missing shards, other settings refused, a damaged shard named."""

import os

import numpy as np
import pytest

from mmc_jax import labels as labels_command
from mmc_jax import rules as R
from mmc_jax.uci import labels

SETTINGS = {
    "variant": "gardner",
    "seed": 3,
    "nodes": 50,
    "games": 2,  # (seed 3: the second game is held out)
    "max_plies": 10,
    "temperature_cp": 50.0,
    "perturb": 0.3,
    "holdout": 0.5,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory, fairy_stockfish):
    folder = str(tmp_path_factory.mktemp("labels"))
    labels.build(folder, SETTINGS, positions=20, processes=1, engine=fairy_stockfish, log=print)
    return folder


def test_every_legal_move_is_labelled_and_the_mirror_carries_the_same_scores(built):
    with np.load(os.path.join(built, "shard-00000.npz")) as shard:
        data = {k: shard[k] for k in shard.files}
    assert len(data["fen"]) >= 10
    for i, fen in enumerate(data["fen"]):
        ids = data["actions"][i][data["actions"][i] >= 0]
        moves = sorted(R.action_to_uci("gardner", str(fen), int(a)) for a in ids)
        assert moves == sorted(R.legal_moves("gardner", str(fen)))
        assert np.isfinite(data["scores"][i][: len(ids)]).all()
        assert np.isnan(data["scores"][i][len(ids) :]).all()
    mirrors = np.flatnonzero(data["source"] == labels.SOURCES.index("mirror"))
    assert len(mirrors)
    for i in mirrors:  # the row before a mirror is its original
        assert labels.mirror_fen(str(data["fen"][i - 1])) == str(data["fen"][i])
        np.testing.assert_array_equal(data["scores"][i], data["scores"][i - 1])


def test_a_rerun_makes_nothing_and_other_settings_are_refused(built, fairy_stockfish):
    path = os.path.join(built, "shard-00000.npz")
    before = os.stat(path).st_mtime_ns
    manifest = labels.build(built, SETTINGS, 20, 1, fairy_stockfish, log=print)
    assert os.stat(path).st_mtime_ns == before and len(manifest["shards"]) >= 1
    with pytest.raises(ValueError, match="other settings \\(nodes\\)"):
        labels.build(built, {**SETTINGS, "nodes": 99}, 20, 1, fairy_stockfish, log=print)


def test_load_deduplicates_and_holds_out_whole_games(built):
    data = labels.load(built)
    keys = [" ".join(f.split()[:2]) for f in data["fen"]]
    assert len(set(keys)) == len(keys)
    for game in set(data["game"].tolist()):
        assert len(set(data["held_out"][data["game"] == game].tolist())) == 1
    best = np.nanmax(data["scores"], axis=1)
    np.testing.assert_array_equal(data["value"], best)
    assert "unique positions" in labels.status(built)


def test_a_damaged_shard_is_named(tmp_path, built):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    (copy / "shard-00000.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="shard-00000.npz is damaged"):
        labels.load(str(copy))


def test_the_command_line_refuses_bad_input_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        labels_command.main(["build", str(tmp_path), "--nodes", "0"])
    assert "--nodes must be at least 1" in capsys.readouterr().err
    assert labels_command.main(["status", str(tmp_path)]) == 0
    assert "no labels yet" in capsys.readouterr().out


def _supervised_config(folder: str, positions: int):
    from configs import supervised as supervised_config

    config = supervised_config.get_config("smoke").copy_and_resolve_references()
    config.unlock()
    config.num_iterations = 1
    config.data.labels = folder
    config.data.positions = positions
    return config


def test_supervised_learns_from_the_first_positions_and_scores_the_held_out_games(built, tmp_path):
    """`configs/supervised.py` with `data.labels`: the first `positions` training positions in
    shard order, then every held-out one; the policy target is the softmax of every legal
    move's score (its mode the best move), the value tanh(best / cp_scale); the run logs the
    held-out losses; asking for more positions than there are, or another variant's labels,
    is refused in one line."""
    import io
    import math

    from mmc_jax.algorithms import supervised
    from mmc_jax.infra import metrics
    from mmc_jax.training import runloop

    rows = labels.load(built)
    train = np.flatnonzero(~rows["held_out"])
    assert len(train) >= 4 and rows["held_out"].any()
    config = supervised.prepare_config(_supervised_config(built, 3))
    data = supervised.load_labels(config)
    assert int(data["train_rows"]) == 3
    assert list(data["fen"][:3]) == list(rows["fen"][train[:3]])
    assert len(data["fen"]) == 3 + int(rows["held_out"].sum())
    np.testing.assert_allclose(data["probs"].sum(axis=1), 1.0, rtol=1e-5)
    assert (data["probs"][data["actions"] < 0] == 0).all()
    for i, fen in enumerate(data["fen"]):
        source = int(np.flatnonzero(rows["fen"] == fen)[0])
        best = int(np.nanargmax(rows["scores"][source]))
        assert data["actions"][i][np.argmax(data["probs"][i])] == rows["actions"][source][best]
        want = math.tanh(np.clip(rows["value"][source], -2000, 2000) / config.data.cp_scale)
        assert data["value"][i] == pytest.approx(want, abs=1e-6)
        legal = data["mask"][i][data["actions"][i][data["actions"][i] >= 0]]
        assert legal.all()  # every labelled move is legal in the observed position

    log = io.StringIO()
    runloop.run(supervised.ALGORITHM, _supervised_config(built, 3), tmp_path / "run", stream=log)
    assert "3 training positions" in log.getvalue()
    record = metrics.read_metrics(tmp_path / "run")[-1]
    assert math.isfinite(record["valid/policy_loss"]) and math.isfinite(record["train/policy_loss"])

    with pytest.raises(ValueError, match="has .* training positions; build more"):
        supervised.load_labels(supervised.prepare_config(_supervised_config(built, 10**6)))
    other = _supervised_config(built, 3)
    other.variant = "baby"
    with pytest.raises(ValueError, match="labels gardner, not config.variant=baby"):
        supervised.load_labels(supervised.prepare_config(other))
    with pytest.raises(ValueError, match="has no label manifest"):
        supervised.load_labels(supervised.prepare_config(_supervised_config(str(tmp_path), 3)))


def test_a_shard_written_but_not_listed_is_adopted_not_labelled_again(built, tmp_path):
    """A build killed between writing a shard and listing it (issue 70): the next build lists
    the shard (its seconds unknown, left out of the cost) instead of labelling it again."""
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    last = manifest["shards"].pop()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    lines = []
    # No engine: nothing may be labelled.
    after = labels.build(str(copy), SETTINGS, 20, 1, "/nonexistent/engine", log=lines.append)
    assert after["shards"][-1]["file"] == last["file"] and "seconds" not in after["shards"][-1]
    assert any("was written but not listed" in line for line in lines)
    assert "cost:" in labels.status(str(copy))


def test_an_engine_slow_to_start_is_started_again_not_the_end_of_the_build(tmp_path, monkeypatch):
    """A real engine that misses its `uciok` deadline on a loaded machine (a long build died so)
    gets the shard's next attempt; one that never answers still fails after the attempts."""
    from mmc_jax import uci

    calls = []
    arrays = {"fen": np.asarray(["x"]), "game": np.zeros(1, np.int64)}

    def slow_once(settings, index, engine):
        calls.append(index)
        if len(calls) == 1:
            raise uci.EngineNotUci("fairy-stockfish is not a UCI engine: no `uciok` within 60 s")
        return arrays

    monkeypatch.setattr(labels, "label_shard", slow_once)
    path = str(tmp_path / "shard-00007.npz")
    index, rows, _ = labels._shard_job((SETTINGS, 7, path, None))
    assert (index, rows, calls) == (7, 1, [7, 7]) and os.path.exists(path)

    def never(settings, index, engine):
        raise uci.EngineNotUci("cat is not a UCI engine")

    monkeypatch.setattr(labels, "label_shard", never)
    with pytest.raises(uci.EngineNotUci, match="not a UCI engine"):
        labels._shard_job((SETTINGS, 8, str(tmp_path / "shard-00008.npz"), None))
