"""Action-value labels (mmc_jax/labels.py) with the real Fairy-Stockfish: every legal move of
every position labelled, each position stored with its mirror, whole games held out, a rerun
makes only missing shards, other settings refused, a damaged shard named."""

import os

import numpy as np
import pytest

from mmc_jax import labels
from mmc_jax import rules as R

SETTINGS = {
    "variant": "gardner",
    "seed": 3,
    "nodes": 50,
    "games": 1,
    "max_plies": 12,
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
        labels.main(["build", str(tmp_path), "--nodes", "0"])
    assert "--nodes must be at least 1" in capsys.readouterr().err
    assert labels.main(["status", str(tmp_path)]) == 0
    assert "no labels yet" in capsys.readouterr().out
