"""The one player table (`mmc_jax.evaluation.players`): every entry says what it is and builds,
and a player added from outside (here: "first legal move", registered by this module through
`players.register`) plays through `python -m mmc_jax.evaluate` and `python -m mmc_jax.play`
with no other change.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys

import jax.numpy as jnp
import pytest

from mmc_jax import algorithms, evaluate, play
from mmc_jax import rules as R
from mmc_jax.evaluation import players

FAKE_ENGINE = f"uci:{sys.executable} tests/fake_uci_engine.py"
LEARNED_MODEL = "experiments/recon/learned/model"  # the shipped learned recon agent's export
# specs of the entries not named by their name
SPECS = {
    "model": "none",
    "uci": FAKE_ENGINE,
    "one-ply": "one-ply:gardner-cpu",
    "learned": "learned:" + LEARNED_MODEL,
}
BUILT = {  # what each kind of entry builds
    players.BOARD: (players.Player, players.FogPlayer),
    players.SENSING: (players.ReconAgent,),
}


@pytest.mark.parametrize("entry", players.REGISTRY, ids=lambda e: e.name)
def test_every_entry_has_a_description_and_builds(entry):
    assert entry.description.strip() and "\n" not in entry.description
    assert entry.games and set(entry.games) <= set(players.GAMES)
    assert entry.needs in players.NEEDS
    for game in entry.games:
        variant = "gardner" if game == players.BOARD else "recon"
        context = players.Context(variant=variant, open_model=algorithms.open_model)
        spec = SPECS.get(entry.name, entry.name)
        assert players.entry_for(spec, game) is entry
        player = entry.build(spec, context)
        assert isinstance(player, BUILT[game]), (entry.name, game, player)
        if entry.policy is not None and game == players.BOARD:
            assert player.kind == entry.name and player.is_jax


def test_names_are_unique_and_an_unknown_spec_lists_the_table_on_one_line():
    assert len(set(players.names())) == len(players.names())
    with pytest.raises(ValueError, match="unknown player 'stockfish'") as error:
        players.build("stockfish")
    message = str(error.value)
    assert "\n" not in message and "uci:COMMAND" in message
    assert all(name in message for name in players.names("board") if name != "model")
    with pytest.raises(ValueError, match="players of recon: random, random-pimc"):
        players.build("greedy", players.Context(variant="recon"))


def test_the_game_of_a_variant_is_the_game_contracts():
    """Commands pick a variant's players by the game that plays it, never by its name."""
    assert players.game_of("recon") == players.game_of("recon,fog=sense:3") == players.SENSING
    assert players.game_of("gardner") == players.game_of("dark") == players.BOARD
    assert players.SENSING == R.game_for("recon").name and players.BOARD == R.BOARD.name


@pytest.mark.parametrize(
    "spec, game, message",
    [
        ("greedy", players.SENSING, "'greedy' plays the board variants, not the sensing"),
        ("entropy-pimc", players.BOARD, "'entropy-pimc' plays the sensing variants (fog=sense"),
        ("learned:" + LEARNED_MODEL, players.BOARD, "plays the sensing variants"),
        ("one-ply:gardner-cpu", players.SENSING, "plays the board variants, not the sensing"),
    ],
)
def test_a_player_of_the_other_game_is_refused_in_one_line_naming_its_game(spec, game, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        players.entry_for(spec, game, "--opponent")
    assert "\n" not in str(error.value) and f"players of {game}: " in str(error.value)


def test_a_model_path_is_the_board_model_or_the_learned_agent_by_the_game():
    assert players.entry_for("gardner-cpu", players.BOARD).name == "model"
    assert players.entry_for(LEARNED_MODEL, players.BOARD).name == "model"
    assert players.entry_for(LEARNED_MODEL, players.SENSING).name == players.LEARNED
    assert players.entry_for("learned:" + LEARNED_MODEL, players.SENSING).name == players.LEARNED
    context = players.Context(variant="recon", open_model=algorithms.open_model)
    agent = players.build(LEARNED_MODEL, context)
    assert agent.learned and agent.model == LEARNED_MODEL and agent.params is not None
    assert agent.search == algorithms.open_model(LEARNED_MODEL).network
    assert agent == players.build(LEARNED_MODEL, context)  # the same player: same model
    assert not players.build("entropy-pimc", context).learned


@pytest.mark.parametrize(
    "spec, context, message",
    [
        ("learned", {}, "'learned': the learned agent needs its model, 'learned:MODEL'"),
        ("learned:gardner-cpu", {"open_model": algorithms.open_model},
         "gardner-cpu: a board-game model; a sensing variant (recon) plays a sensing model"),
        ("learned:" + LEARNED_MODEL, {}, "needs every learner's model kinds"),
    ],
)  # fmt: skip
def test_the_learned_agent_without_a_sensing_model_is_refused_in_one_line(spec, context, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        players.build(spec, players.Context(variant="recon", **context))
    assert "\n" not in str(error.value)


def _first_legal(key, rules, board, legal):
    """int32 [B]: the legal move of lowest id (the dummy player of these tests)."""
    del key, rules, board
    return jnp.argmax(legal, axis=-1).astype(jnp.int32)


@pytest.fixture
def first_legal():
    """The dummy player, registered from this module as any contributor would add one."""
    entry = players.register(
        players.Builtin("first-legal", _first_legal, True, "the legal move of lowest id")
    )
    yield entry
    players.unregister(entry.name)


def test_a_registered_player_is_in_the_table_and_the_help(first_legal, capsys):
    assert players.names()[-1] == "first-legal" and players.kinds()[-1] == "first-legal"
    with pytest.raises(ValueError, match="already in the table"):
        players.register(first_legal)
    for main in (evaluate.main, play.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        assert "first-legal" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        evaluate.main(["--variant", "gardner", "--opponent", "stockfish"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown --opponent 'stockfish'" in error and "first-legal" in error


def test_a_registered_player_plays_through_evaluate(first_legal, capsys):
    status = evaluate.main(
        ["--variant", "gardner", "--checkpoint", "none", "--simulations", "0"]
        + ["--opponent", "first-legal", "--games", "2", "--max-plies", "8", "--json"]
    )
    assert status == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["opponent"] == "first-legal" and result["num_games"] == 2
    assert result["illegal_moves"] == {"model": 0, "opponent": 0}


def test_a_registered_player_plays_through_play(first_legal):
    out = io.StringIO()
    moves = io.StringIO("e2e3\nb1c3\n")
    argv = ["--variant", "gardner", "--opponent", "first-legal", "--max-plies", "4"]
    assert play.main(argv, stdin=moves, stdout=out) == 0
    text = out.getvalue()
    assert "against first-legal" in text and "result: 1/2-1/2" in text
    replies = [line.split()[-1] for line in text.splitlines() if "first-legal plays" in line]
    # Black's legal move of lowest id after 1. e2e3 and after 2. b1c3 (action 49 s + plane,
    # the mover's view: Black's a-pawn and then its knight's first target).
    assert len(replies) == 2 and all(len(move) == 4 for move in replies), text


def test_play_refuses_a_player_it_cannot_compute_naming_the_table(capsys):
    with pytest.raises(SystemExit):
        play.main(["--variant", "gardner", "--opponent", "stockstuff"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown --opponent 'stockstuff'" in error and "random, greedy" in error


def test_engine_and_serve_load_their_model_through_the_table(monkeypatch):
    """`engine --model` and `serve --model` (both `model_engine.load_engine`) resolve the spec
    in the table: its model entry builds the network, and any other entry is refused by name."""
    from mmc_jax.evaluation import model_engine, policies

    made = []

    def build(spec, context):
        made.append((spec, context.name))
        return players.model_player(context.name, policies.UniformPriorNetwork(), {"w": 1}, 0)

    model = dataclasses.replace(players.entry("model"), build=build)
    monkeypatch.setattr(
        players, "REGISTRY", tuple(model if e.name == "model" else e for e in players.REGISTRY)
    )
    engine = model_engine.load_engine("gardner-cpu")
    assert made == [("gardner-cpu", "gardner-cpu")] and engine.params == {"w": 1}
    assert model_engine.load_engine("none").name == "uniform-prior"
    for spec in ("greedy", "one-ply:gardner-cpu", FAKE_ENGINE):
        entry = players.entry_for(spec, "board")
        with pytest.raises(ValueError, match=f"the player table's '{entry.name}' entry, not a"):
            model_engine.load_engine(spec)
