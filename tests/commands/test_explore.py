"""Tests for `python -m mmc_jax.explore`: a small random run over two variants (2 x 7 games,
the padded batch of 16 that the other arena tests compile), its JSON, heatmap and statistics."""

import json
import os

import numpy as np
import pytest

from mmc_jax import explore


def test_iou_matrix():
    matrix = explore.iou_matrix([{1, 2, 3}, {2, 3, 4}, set()])
    assert matrix[0, 1] == matrix[1, 0] == pytest.approx(0.5)
    assert matrix[0, 2] == 0.0 and np.all(np.diag(matrix) == 1.0)


@pytest.mark.slow
def test_explore_cli_small_run(tmp_path, capsys):
    out = tmp_path / "explore"
    argv = ["--variants", "gardner", "atomic", "--games", "7", "--max-plies", "30"]
    assert explore.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "IoU of the position sets" in printed and "wrote" in printed
    with open(out / "explore.json") as handle:
        report = json.load(handle)
    assert report["variants"] == ["gardner", "atomic"] and list(report["policies"]) == ["random"]
    part = report["policies"]["random"]
    for variant in ("gardner", "atomic"):
        stats = part["per_variant"][variant]
        assert stats["games"] == 7
        assert stats["white_wins"] + stats["draws"] + stats["black_wins"] == 7
        assert 0 < stats["mean_plies"] <= 30 and 0 <= stats["decisive_rate"] <= 1
        assert stats["white_score"] == pytest.approx(
            (stats["white_wins"] + 0.5 * stats["draws"]) / 7
        )
        assert stats["distinct_positions"] > 7  # at least one new position per game
    iou = np.array(part["iou"])
    assert iou.shape == (2, 2) and np.allclose(iou, iou.T) and np.all(np.diag(iou) == 1)
    # Both start from the Gardner position, and their first moves are the same moves.
    assert 0 < iou[0, 1] < 1
    assert os.path.getsize(out / "explore.png") > 1000


def test_explore_cli_errors(tmp_path, capsys):
    for argv, message in [
        (["--variants", "gardner", "gardner"], "repeat"),
        (["--variants", "chess"], "valid variants"),
        (["--games", "0"], "--games must be positive"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            explore.main([*argv, "--out", str(tmp_path)])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
