"""The one-ply value player (`search.one_ply`, TD(λ)'s player) through the player table's
`one-ply` entry: `evaluate` plays it on either side, `evaluate ladder --search one-ply` rates a
model as it, and bad specs get one line."""

from __future__ import annotations

import json

import ladder_run
import pytest

from mmc_jax import evaluate
from mmc_jax.evaluation import ladder, players


def test_the_table_has_a_one_ply_entry_that_builds_a_model_player_without_search():
    entry = players.entry_for("one-ply:gardner-cpu", "board")
    assert entry.name == "one-ply" and entry.needs == "model"
    assert "one-ply:model" in players.describe("board")
    player = players.build("one-ply:gardner-cpu", players.Context(variant="gardner"))
    assert player.kind == players.NETWORK_KIND and player.one_ply
    assert player.num_simulations == 0 and player.network is not None


def test_evaluate_plays_a_one_ply_model_against_greedy_and_as_the_opponent(capsys):
    # The shipped Gardner model's value head, one ply deep, against greedy.
    argv = ["--variant", "gardner", "--games", "4", "--max-plies", "40", "--json"]
    status = evaluate.main(["--checkpoint", "one-ply:gardner-cpu", "--opponent", "greedy", *argv])
    assert status == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == "one-ply:gardner-cpu" and result["opponent"] == "greedy"
    assert result["wins"] + result["draws"] + result["losses"] == 4
    # ... and as the opponent of the tiny ladder model's search.
    status = evaluate.main(
        ["--checkpoint", ladder_run.workdir(), "--opponent", "one-ply:gardner-cpu", *argv]
    )
    assert status == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["opponent"] == "one-ply:gardner-cpu"
    assert result["wins"] + result["draws"] + result["losses"] == 4


@pytest.mark.parametrize(
    "spec, variant, message",
    [
        ("one-ply:", "gardner", "the one-ply player needs a model, 'one-ply:MODEL'"),
        ("one-ply:none", "gardner", "the one-ply player needs a model"),
        ("one-ply:gardner-cpu", "dark", "under fog"),
    ],
)
def test_a_bad_one_ply_spec_is_one_line(capsys, spec, variant, message):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--checkpoint", spec, "--variant", variant, "--opponent", "random"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_ladder_rates_a_model_as_its_one_ply_player(tmp_path, capsys):
    out = tmp_path / "ladder"
    status = evaluate.main(
        [
            "ladder", "--checkpoint", ladder_run.workdir(), "--variant", "gardner",
            "--search", "one-ply", "--no-engine", "--games", "2", "--chain-games", "0",
            "--max-plies", "40", "--out", str(out),
        ]
    )  # fmt: skip
    assert status == 0
    report = json.loads((out / "ladder.json").read_text())
    assert report["settings"]["search"] == "one-ply"
    rungs = report["models"][0]["rungs"]
    assert {rung["opponent"] for rung in rungs} == {"random", "greedy"}
    assert all(rung["games"] == 2 for rung in rungs)
    # Without chain games the table says what its Elo rests on; with them it does not.
    assert ladder.UNCHAINED in capsys.readouterr().out
    assert ladder.UNCHAINED not in ladder.format_ladder(
        {**report, "settings": {**report["settings"], "chain_games": 2}}
    )
