"""experiments/strength/curve.py (issue 72's data curve): the registered rows and matches, the
difference of two matches with its interval, the report and plot on made-up matches, the second
seed's row once the best row is known, and one-line refusals."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "experiments" / "strength" / "curve.py"
_spec = importlib.util.spec_from_file_location("strength_curve", PATH)
curve = importlib.util.module_from_spec(_spec)
sys.modules["strength_curve"] = curve
_spec.loader.exec_module(curve)


def _match(score_wins: int, draws: int, games: int = 400) -> dict:
    losses = games - score_wins - draws
    score = (score_wins + 0.5 * draws) / games
    return {"num_games": games, "wins": score_wins, "draws": draws, "losses": losses,
            "score": score, "score_ci95": [score - 0.04, score + 0.04]}  # fmt: skip


def test_the_registered_rows_and_matches(monkeypatch):
    assert set(curve.ROWS) == {f"{n}-1e{e}" for n in ("2x32", "6x64") for e in (4, 5, 6)}
    assert curve.ROWS["6x64-1e5"] == (100_000, (6, 64), 0)
    monkeypatch.setattr(curve, "_engine", lambda: "/bin/fsf")
    names = curve.matches()
    assert len(names) == 7 and names["fsf10000-sims0"][1:] == [
        "--opponent-simulations=10000",
        "--simulations=0",
    ]


def test_the_difference_of_two_matches_has_a_normal_interval():
    a, b = _match(100, 40), _match(60, 40)
    d, low, high = curve.difference(a, b)
    assert d == pytest.approx(0.1)
    var_a = (100 + 0.25 * 40) / 400 - a["score"] ** 2
    var_b = (60 + 0.25 * 40) / 400 - b["score"] ** 2
    se = math.sqrt(var_a / 400 + var_b / 400)
    assert (high - low) / 2 == pytest.approx(1.96 * se)


def test_report_plot_and_second_seed_on_made_up_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(curve, "ROWS_DIR", tmp_path / "curve")
    monkeypatch.setattr(curve, "HERE", tmp_path)
    monkeypatch.setattr(curve, "_engine", lambda: "/bin/fsf")
    assert curve.best_row() is None and curve.SECOND_SEED not in curve._rows()
    rows = {name: 30 for name in curve.ROWS} | {"2x32-1e4": 40, "2x32-1e5": 90}
    for row, wins in rows.items():
        if row == "6x64-1e6":
            continue  # (added below: the second seed waits for every row)
        folder = tmp_path / "curve" / row
        (folder / "matches").mkdir(parents=True)
        (folder / "train.json").write_text(json.dumps({"final": {"valid/policy_loss": 1.5}}))
        for match in curve.matches():
            (folder / "matches" / f"{match}.json").write_text(json.dumps(_match(wins, 20)))
    assert curve.best_row() is None  # one registered row is not rated yet
    folder = tmp_path / "curve" / "6x64-1e6"
    (folder / "matches").mkdir(parents=True)
    for match in curve.matches():
        (folder / "matches" / f"{match}.json").write_text(json.dumps(_match(30, 20)))
    assert curve.best_row() == "2x32-1e5"
    assert curve._rows()[curve.SECOND_SEED] == (100_000, (2, 32), 1)
    text = curve.report()
    assert "| 2x32-1e5 | 100,000 | 2x32 | 0 | 1.500 |" in text
    assert "2x32: 10^5 - 10^4 positions against FSF at 1,000 nodes" in text and "+0.125" in text
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_bad_rows_are_refused_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(curve, "ROWS_DIR", tmp_path)
    assert curve.main(["train", "3x3-1e4"]) == 1
    err = capsys.readouterr().err
    assert "unknown row '3x3-1e4'" in err and err.count("\n") == 1
    assert curve.main(["evaluate", "6x64-1e6"]) == 1
    assert "not trained yet" in capsys.readouterr().err


def test_the_registered_interval_is_wilsons():
    match = {"score_ci95": [0.0, 1.0], "score_ci95_wilson": [0.1, 0.2]}
    assert curve._interval(match) == "[0.100, 0.200]"
