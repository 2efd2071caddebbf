"""Tests for mmc_jax.evaluation.pgn: writing, reading and replaying game records, by the project's
rules and by Fairy-Stockfish (pyffish).

The games come from the shared small ladder (tests/ladder_run.py: model, random, greedy and
Fairy-Stockfish games) and from the recording match arena (`play_match(..., games_out=...)`).
"""

import io

import jax
import ladder_run
import pyffish as sf
import pytest

from mmc_jax import rules as R
from mmc_jax import uci
from mmc_jax.evaluation import match, pgn

pytestmark = pytest.mark.usefixtures("fairy_stockfish")

RECORD = {
    "variant": "baby",
    "white": 'engine "x"',
    "black": "model",
    "start_fen": "k4/2q1p/5/3K1/bNB2 b - - 0 11",
    "moves": ["c4c1", "d2e3", "e4e3"],
    "result": "*",
    "termination": "abandoned",
    "error": "engine crashed {status 3}",
}


@pytest.fixture(scope="module")
def ffish():
    sf.load_variant_config(open(uci.variants_file()).read())
    return sf


def test_format_and_read_roundtrip():
    text = pgn.format_game(RECORD, round_=7, date="2026.01.02")
    assert '[Variant "baby"]' in text and '[FEN "k4/2q1p/5/3K1/bNB2 b - - 0 11"]' in text
    assert '[White "engine \\"x\\""]' in text
    assert "11... c4c1 12. d2e3 e4e3 {engine crashed (status 3)} *" in text
    (game,) = pgn.read_pgn(text)
    assert game.variant == "baby" and game.fen == RECORD["start_fen"]
    assert game.moves == RECORD["moves"] and game.result == "*"
    assert game.headers["White"] == 'engine "x"' and game.headers["Round"] == "7"
    assert game.comments == ["engine crashed (status 3)"]


def test_reader_handles_pgn_syntax_and_refuses_san():
    text = """[Event "x"]
[Variant "mallett"]
[Result "1/2-1/2"]

1. a2a3 {a comment} $1 b4b3 2.b1c3 (2. e2e3 a5a4) a5a4 ; rest of line
3... e1d3 1/2-1/2

[Variant "gardner"]
[Result "0-1"]

1. e2e3 0-1
"""
    first, second = pgn.read_pgn(text)
    assert first.variant == "mallet"  # the Fairy-Stockfish name maps to the project's
    assert first.moves == ["a2a3", "b4b3", "b1c3", "a5a4", "e1d3"]
    assert first.comments == ["a comment", "rest of line"]
    assert second.fen == R.START_FENS["gardner"] and second.result == "0-1"
    with pytest.raises(ValueError, match="'Nf3' is not a UCI move.*SAN is not supported"):
        pgn.read_pgn('[Variant "gardner"]\n\n1. Nf3 *\n')
    with pytest.raises(ValueError, match="disagrees"):
        pgn.read_pgn('[Variant "gardner"]\n[Result "1-0"]\n\n1. e2e3 0-1\n')
    with pytest.raises(ValueError, match="no \\[Variant\\] header"):
        _ = pgn.read_pgn("1. e2e3 *\n")[0].variant
    with pytest.raises(ValueError, match="valid variants"):
        _ = pgn.read_pgn('[Variant "chess"]\n\n*\n')[0].variant
    with pytest.raises(ValueError, match="malformed header"):
        pgn.read_pgn("[Variant gardner]\n\n*\n")
    with pytest.raises(ValueError, match="not a UCI move"):
        pgn.format_game(dict(RECORD, moves=["e2e4x"]))


def check_with_pyffish(ffish, game: pgn.PgnGame) -> None:
    """Every move legal for Fairy-Stockfish; a decisive result ends the game there (mate)."""
    name = R.FAIRY_STOCKFISH_NAMES[game.variant]
    for ply, move in enumerate(game.moves):
        assert move in ffish.legal_moves(name, game.fen, game.moves[:ply]), (ply, move)
    if game.result in ("1-0", "0-1"):
        assert ffish.legal_moves(name, game.fen, game.moves) == []
        assert ffish.gives_check(name, game.fen, game.moves)
        assert game.result == ("1-0" if len(game.moves) % 2 else "0-1")


@pytest.mark.slow
def test_ladder_pgn_is_read_by_the_project_and_by_pyffish(ffish):
    run = ladder_run.ladder()
    assert run["status"] == 0, run["stderr"]
    games = pgn.read_pgn(run["pgn"])
    assert len(games) == ladder_run.LADDER_GAMES
    players = {g.headers["White"] for g in games} | {g.headers["Black"] for g in games}
    assert {"tiny@2", "random", "greedy", "engine:nodes=1", "engine:nodes=10"} == players
    for game in games:
        assert game.headers["OpeningPlies"] == "4" and game.headers["SetUp"] == "1"
        check_with_pyffish(ffish, game)
        fens = pgn.replay(game)  # the project's rules: legal moves, and the same result
        assert len(fens) == len(game.moves) + 1
        final = ffish.get_fen("gardner", game.fen, game.moves)
        assert fens[-1] == final


@pytest.mark.slow
def test_match_records_replay_under_pyffish(ffish, tmp_path):
    """`play_match(..., games_out=...)` (the `--pgn` of the match CLI): the same call as
    test_evaluate's greedy-vs-random match (so the same compiled arena), whose records agree
    with its statistics and replay move by move under pyffish."""
    records = []
    result = match.play_match(
        "greedy", None, "gardner", "random", 128, 0, jax.random.key(1), games_out=records
    )
    assert len(records) == 128
    assert sum(len(r["moves"]) for r in records) == pytest.approx(128 * result["mean_plies"])
    path = tmp_path / "match.pgn"
    assert pgn.write_pgn(records, path) == 128
    games = pgn.read_pgn(path)
    assert [g.headers["White"] for g in games] == ["greedy"] * 64 + ["random"] * 64
    scores = {"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}
    points = [scores[g.result] if i < 64 else 1 - scores[g.result] for i, g in enumerate(games)]
    assert sum(points) / 128 == pytest.approx(result["score"])
    for game in games:
        check_with_pyffish(ffish, game)


def test_write_pgn_to_an_open_file():
    buffer = io.StringIO()
    assert pgn.write_pgn([RECORD, dict(RECORD, result="1-0", error=None)], buffer) == 2
    games = pgn.read_pgn(buffer.getvalue())
    assert [g.headers["Round"] for g in games] == ["1", "2"]
    assert [g.result for g in games] == ["*", "1-0"]
