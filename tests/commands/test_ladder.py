"""Tests for the ladder and tournament subcommands of `python -m mmc_jax.evaluate`.

One tiny run (tests/ladder_run.py): a 1x8 random network with 2 simulations against random,
greedy and Fairy-Stockfish at 1 and 10 nodes, 2 games per pairing.
"""

import json
import os
import sys
from pathlib import Path

import ladder_run
import numpy as np
import pytest

from mmc_jax import evaluate
from mmc_jax.evaluation import elo, ladder

pytestmark = pytest.mark.usefixtures("fairy_stockfish")

RUNGS = ["random", "greedy", "engine:nodes=1", "engine:nodes=10"]


@pytest.mark.slow
def test_ladder_cli_writes_table_json_and_png():
    run = ladder_run.ladder()
    assert run["status"] == 0, run["stderr"]
    with open(os.path.join(run["out"], "ladder.json")) as handle:
        report = json.load(handle)
    assert report["rungs"] == RUNGS
    assert report["num_games"] == ladder_run.LADDER_GAMES and report["errors"] == []
    assert "Fairy-Stockfish" in report["engine"]["name"]
    ratings = report["elo"]["ratings"]
    model_name = "tiny@2"  # the latest step by default
    assert set(ratings) == {model_name, *RUNGS}
    assert ratings["random"]["elo"] == 0.0
    for name, r in ratings.items():
        low, high = r["ci95"]
        assert low <= r["elo"] <= high, name
    (model,) = report["models"]
    assert model["name"] == model_name and model["step"] == 2
    assert [row["opponent"] for row in model["rungs"]] == RUNGS
    for row in model["rungs"]:
        assert row["games"] == 2 and row["wins"] + row["draws"] + row["losses"] == 2
        assert row["loss_rate"] == row["losses"] / 2
        assert row["score"] == pytest.approx((row["wins"] + row["draws"] / 2) / 2)
    # 14 games: 4 x 2 for the model, 3 x 2 between neighbouring rungs.
    assert sum(p["games"] for p in report["elo"]["pairs"]) == ladder_run.LADDER_GAMES
    assert 1 <= len(report["openings"]) <= 1  # 2 games per pairing share opening 0
    assert len(report["openings"][0].split()) == 4
    with open(os.path.join(run["out"], "ladder.png"), "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "engine:nodes=10" in run["stdout"] and "loss rate" in run["stdout"]
    assert "Elo anchored at random = 0" in run["stdout"]


@pytest.mark.slow
def test_tournament_cli_rates_every_saved_step():
    run = ladder_run.tournament()
    assert run["status"] == 0, run["stderr"]
    with open(os.path.join(run["out"], "tournament.json")) as handle:
        report = json.load(handle)
    assert [m["step"] for m in report["models"]] == [1, 2]
    assert [m["name"] for m in report["models"]] == ["tiny@1", "tiny@2"]
    assert report["num_games"] == 2 * 4 * 2  # no games between rungs here
    assert os.path.getsize(os.path.join(run["out"], "tournament.png")) > 1000


def test_equivalent_nodes():
    rungs = ladder.rung_players(ladder.LadderSettings("gardner", nodes=(1, 10, 100)))
    ratings = {
        "random": {"elo": 0.0},
        "greedy": {"elo": 100.0},
        "engine:nodes=1": {"elo": 200.0},
        "engine:nodes=10": {"elo": 400.0},
        "engine:nodes=100": {"elo": 600.0},
    }
    assert ladder.equivalent_nodes(300.0, ratings, rungs) == pytest.approx(10**0.5)
    assert ladder.equivalent_nodes(400.0, ratings, rungs) == pytest.approx(10.0)
    assert ladder.equivalent_nodes(150.0, ratings, rungs) == "below 1"
    assert ladder.equivalent_nodes(700.0, ratings, rungs) == "above 100"


@pytest.mark.parametrize(
    "argv, status, message",
    [
        (["ladder", "--variant", "rifle"], 1, "cannot be written as a Fairy-Stockfish variant"),
        (["ladder", "--variant", "gardner", "--games", "3"], 2, "positive and even"),
        (["ladder", "--variant", "chess"], 2, "valid variants: gardner"),
        (["ladder", "--variant", "gardner", "--skill", "30"], 2, "--skill values"),
        (["tournament", "--variant", "gardner", "--run", "/nonexistent"], 2, "no such directory"),
    ],
)
def test_cli_errors(argv, status, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(argv)
    assert exit_info.value.code == status
    assert message in capsys.readouterr().err


def test_engine_that_cannot_play_the_variant_is_a_clear_error(capsys, tmp_path):
    """An engine without the variant (a fake one listing no minichess variant) stops the
    ladder at the variant check, with the way out."""
    fake = Path(__file__).resolve().parents[1] / "fake_uci_engine.py"
    script = tmp_path / "novariant"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} novariant\n")
    script.chmod(0o755)
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(
            ["ladder", "--variant", "atomic", "--engine", str(script), "--out", str(tmp_path)]
        )
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "cannot play atomic" in err and "--no-engine" in err


def test_tournament_unknown_step(capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(
            ["tournament", "--run", ladder_run.workdir(), "--variant", "gardner", "--steps", "9"]
        )
    assert exit_info.value.code == 2
    assert "'9' is not a saved step" in capsys.readouterr().err


def test_help_mentions_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--help"])
    assert exit_info.value.code == 0
    assert "ladder" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        evaluate.main(["ladder", "--help"])
    assert "--nodes" in capsys.readouterr().out


@pytest.mark.slow
def test_adaptation_evaluation_plays_the_reference_at_two_strengths_and_the_engine():
    """`adapt.evaluate_point`: the frozen reference with search and as its raw policy, and
    Fairy-Stockfish where it plays the variant (not rifle: no such engine variant)."""
    import jax
    import ml_collections

    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint

    net, params, _ = checkpoint.load_model(ladder_run.workdir(), step=2)
    _, reference, _ = checkpoint.load_model(ladder_run.workdir(), step=1)
    settings = ml_collections.ConfigDict(
        dict(
            num_games=2,
            num_simulations=2,
            opponents=("random",),
            max_plies=0,
            opening_plies=4,
            reference_raw=True,
            engine_nodes=(1,),
            engine="",
        )
    )
    key = jax.random.key(0)
    out = adapt.evaluate_point(net, params, "gardner", settings, key, reference=(net, reference))
    assert list(out) == ["random", "reference", "reference_raw", "fsf@1"]
    for name, match in out.items():
        assert match["num_games"] == 2 and match["wins"] + match["draws"] + match["losses"] == 2
        assert match["score_ci95"][0] <= match["score"] <= match["score_ci95"][1], name
    assert out["fsf@1"]["aborted"] == 0
    settings.opponents = ()
    assert adapt.evaluate_point(net, params, "rifle", settings, key) == {}


def test_ladder_plot_draws_a_perfect_and_a_zero_score(tmp_path):
    # A 400/0/0 rung crashed the plot after every game had been played: a Wilson upper end a
    # hair below 1.0, and Elo intervals 1e-13 beside their ratings, made negative error bars.
    rows = []
    for opponent, rewards in (("random", [1] * 400), ("engine:nodes=100", [-1] * 400)):
        stats = elo.match_statistics(np.array(rewards), np.ones(400))
        rows.append(
            {
                "opponent": opponent,
                "games": 400,
                "score": stats["score"],
                "score_ci95": stats["score_ci95"],
                "loss_rate": stats["losses"] / 400,
            }
        )
    pairs = [
        elo.PairResult("m@1", "random", 400, 0, 0),
        elo.PairResult("m@1", "engine:nodes=100", 0, 0, 400),
        elo.PairResult("engine:nodes=100", "random", 400, 0, 0),
    ]
    report = {
        "variant": "gardner",
        "elo": elo.fit_elo(pairs, "random", bootstrap=50),
        "models": [{"name": "m@1", "rungs": rows}],
    }
    path = tmp_path / "ladder.png"
    ladder.plot_ladder(report, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
