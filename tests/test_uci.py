"""Tests for mmc_jax.uci: the real Fairy-Stockfish plays legal moves; fake engines that crash,
hang, or play illegal moves are reported, never scored.

The engine binary is installed by CI (`apt-get install fairy-stockfish`, see .ci/run): these
tests do not skip themselves. The fake engines (tests/fake_uci_engine.py) answer the legal-move
probe through pyffish. Only one test compiles anything (the arena at 2 games).
"""

import os
import sys
from pathlib import Path

import pyffish as sf
import pytest

from mmc_jax import arena, uci
from mmc_jax import rules as R

FAKE = str(Path(__file__).with_name("fake_uci_engine.py"))
START = R.START_FENS["gardner"]


def fake(mode: str, nth: int = 1) -> list[str]:
    return [sys.executable, FAKE, mode, str(nth)]


@pytest.fixture(scope="module")
def ffish():
    sf.load_variant_config(open(uci.variants_file()).read())
    return sf


def test_probe_positions_match_pyffish(ffish):
    """The stored probe answers are the rules' legal moves (checked against the rules when they
    were generated, and here against Fairy-Stockfish's Python build)."""
    for variant, expected in uci.START_MOVES.items():
        name = R.FAIRY_STOCKFISH_NAMES[variant]
        assert sorted(ffish.legal_moves(name, R.START_FENS[variant], [])) == expected.split()
    for variant, probes in uci.PROBES.items():
        name = R.FAIRY_STOCKFISH_NAMES[variant]
        for fen, moves in probes:
            assert sorted(ffish.legal_moves(name, fen, [])) == moves.split(), (variant, fen)
    assert set(uci.PROBES) == set(R.FAIRY_STOCKFISH_NAMES) == set(uci.START_MOVES)


def test_real_engine_plays_legal_moves(ffish):
    """Fairy-Stockfish at several limits: every move it picks is legal (pyffish), along a game
    that it plays against itself; searches with a node limit are reproducible."""
    with uci.UciEngine("gardner") as engine:
        assert "Fairy-Stockfish" in engine.id_name
        moves = []
        limits = [uci.Limits(nodes=1), uci.Limits(nodes=100), uci.Limits(depth=2)]
        for ply in range(16):
            legal = ffish.legal_moves("gardner", START, moves)
            if not legal:
                break
            move = engine.best_move(START, moves, limits[ply % 3])
            assert move in legal, (moves, move)
            moves.append(move)
        again = engine.best_move(START, moves[:6], uci.Limits(nodes=100))
        assert again == engine.best_move(START, moves[:6], uci.Limits(nodes=100))
        skilled = engine.best_move(START, [], uci.Limits(nodes=50, skill=0))
        assert skilled in ffish.legal_moves("gardner", START, [])


def test_which_variants_the_engine_plays():
    report = uci.check_engine()
    playable = {v for v, entry in report.items() if entry["playable"]}
    assert {"gardner", "baby", "mallet", "dark"} <= playable
    for variant in ("rifle", "monochromatic", "bichromatic"):  # not expressible at all
        assert "cannot be written as a Fairy-Stockfish variant" in report[variant]["reason"]
    with uci.UciEngine("gardner") as engine:
        version = engine.id_name
    if "11.1" in version:  # Debian 12's build: no atomic, no fifth-rank promotion in extinction
        assert playable == {"gardner", "baby", "mallet", "dark"}
        assert "Variant template 'atomic' does not exist" in report["atomic"]["reason"]
        assert "by other rules" in report["extinction"]["reason"]


def test_engine_start_up_errors(tmp_path):
    with pytest.raises(uci.EngineNotFound, match="apt-get install fairy-stockfish"):
        uci.UciEngine("gardner", str(tmp_path / "no-engine"))
    with pytest.raises(uci.EngineUnsupported, match="cannot be written"):
        uci.UciEngine("rifle")
    with pytest.raises(ValueError, match="valid variants"):
        uci.UciEngine("chess960")
    with pytest.raises(uci.EngineUnsupported, match="has no 'mallett'"):
        uci.UciEngine("mallet", fake("good"))
    with pytest.raises(uci.EngineUnsupported, match="has no 'gardner'"):
        uci.UciEngine("gardner", fake("novariant"))
    with pytest.raises(uci.EngineUnsupported, match="by other rules"):
        uci.UciEngine("gardner", fake("wrongrules"))
    with pytest.raises(ValueError, match="nodes must be a positive integer"):
        uci.Limits(nodes=0)
    with pytest.raises(ValueError, match="skill"):
        uci.Limits(skill=21)
    assert uci.Limits().go_command() == "go depth 1"
    assert uci.Limits(nodes=10, depth=3).go_command() == "go nodes 10 depth 3"


def test_engine_failures_raise_clear_errors():
    with uci.UciEngine("gardner", fake("crash")) as engine:
        with pytest.raises(uci.EngineCrashed, match=r"exited \(status 3\)"):
            engine.best_move(START, [], uci.Limits(nodes=1))
        assert not engine.alive
    with uci.UciEngine("gardner", fake("hang")) as engine:
        with pytest.raises(uci.EngineTimeout, match="no answer within 0.5 s"):
            engine.best_move(START, [], uci.Limits(nodes=1), timeout=0.5)
        assert not engine.alive  # killed: a hung engine is never reused


def test_pool_hands_errors_back_and_restarts(tmp_path):
    """A pool of one process whose engine crashes at its second search: the second request
    gets the error, the third a fresh engine's move."""
    with uci.EnginePool("gardner", fake("crash", 2), processes=1) as pool:
        request = uci.MoveRequest(START, (), uci.Limits(nodes=1))
        first, second, third = pool.map([request] * 3)
        assert first.move == "a2a3" and first.error is None
        assert second.move is None and isinstance(second.error, uci.EngineCrashed)
        assert third.move == "a2a3"
    with pytest.raises(ValueError, match="processes"):
        uci.EnginePool("gardner", fake("good"), processes=0)


@pytest.mark.parametrize(
    "mode, message, num_failed",
    [
        ("illegal", "played 'a1a5', not a legal move in gardner", 1),
        ("garbage", "played 'zz99', not a legal move", 1),
        ("none", "played '(none)', not a legal move", 1),
        # Every fresh process crashes at its first search again: both games are lost.
        ("crash", "exited (status 3)", 2),
    ],
)
def test_arena_reports_engine_failures(mode, message, num_failed):
    """Random against a faulty engine, 2 games: a game where the engine fails is aborted ("*",
    termination "abandoned", the error recorded) and left out of the results; the engine's
    other game goes on (its next search is a good one)."""
    players = [arena.random_player(), arena.engine_player(uci.Limits(nodes=1), name="fake")]
    games = arena.colour_balanced(0, 1, 2, "gardner")
    with uci.EnginePool("gardner", fake(mode), processes=1) as pool:
        records = arena.play_games(players, games, engine_pool=pool, max_plies=12)
    failed = [r for r in records if not r.scored]
    assert len(failed) == num_failed, [r.error for r in records]
    for record in failed:
        assert record.result == "*" and record.termination == "abandoned"
        assert message in record.error and record.error.startswith("fake: ")
    results = arena.pair_results(records)
    assert sum(r.games for r in results) == 2 - num_failed  # only games played to their end


def test_check_cli(capsys):
    assert uci.main(["--variants", "gardner", "rifle"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gardner        yes") and "rifle          NO" in out
    with pytest.raises(SystemExit):
        uci.main(["--variants", "chess"])
    assert "valid variants" in capsys.readouterr().err
    assert uci.main(["--engine", "/nonexistent/engine", "--variants", "gardner"]) == 1
    assert "no UCI engine at '/nonexistent/engine'" in capsys.readouterr().err


def test_default_engine_is_found():
    path = uci.default_engine()
    assert os.path.isfile(path) and os.access(path, os.X_OK), path
