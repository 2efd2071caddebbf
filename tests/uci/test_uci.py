"""Tests for mmc_jax.uci: the real Fairy-Stockfish plays legal moves; fake engines that crash,
hang, or play illegal moves are reported, never scored; a program that is no UCI engine fails
fast; the engine build (`python -m mmc_jax.uci build`) works and fails clearly.

The engine is Fairy-Stockfish built from pyffish's sources (`uci.ensure_engine`, the
`fairy_stockfish` fixture: the cached build, built on first use, about a minute; or
`$MMC_ENGINE`): these tests do not skip themselves. The fake engines
(tests/fake_uci_engine.py) answer the legal-move probe through pyffish. Only one test compiles
anything JAX (the arena at 2 games).
"""

import json
import os
import re
import shutil
import sys
import tarfile
import time
from pathlib import Path

import pyffish as sf
import pytest

from mmc_jax import rules as R
from mmc_jax import uci
from mmc_jax.evaluation import arena
from mmc_jax.uci import cli as uci_cli

FAKE = str(Path(__file__).parents[1] / "fake_uci_engine.py")
START = R.START_FENS["gardner"]


def fake(mode: str, nth: int = 1) -> list[str]:
    return [sys.executable, FAKE, mode, str(nth)]


@pytest.fixture(scope="module", autouse=True)
def fairy_stockfish():
    """The engine of these tests (built into the cache if missing; see tests/conftest.py)."""
    return uci.ensure_engine()


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
    if uci.default_engine() == uci.built_engine():  # `python -m mmc_jax.uci build`
        assert "11.1" not in version, version
        assert playable == set(R.FAIRY_STOCKFISH_NAMES)
        assert playable == {"gardner", "baby", "mallet", "atomic", "dark", "extinction"}


def test_built_engine_plays_atomic_and_extinction(fairy_stockfish, ffish):
    """The default engine (the build) plays the variants Debian's 11.1 cannot: a few moves of
    atomic and extinction, each legal for pyffish."""
    if os.environ.get("MMC_ENGINE") or fairy_stockfish != uci.built_engine():
        pytest.skip(f"the engine is {fairy_stockfish}, not the build (python -m mmc_jax.uci build)")
    for variant in ("atomic", "extinction"):
        name = R.FAIRY_STOCKFISH_NAMES[variant]
        with uci.UciEngine(variant) as engine:
            # A build without git metadata names itself by its compile date (DDMMYY).
            assert re.fullmatch(r"Fairy-Stockfish \d{6}( .*)?", engine.id_name), engine.id_name
            moves = []
            for _ in range(6):
                legal = ffish.legal_moves(name, R.START_FENS[variant], moves)
                if not legal or ffish.is_immediate_game_end(name, R.START_FENS[variant], moves)[0]:
                    break
                move = engine.best_move(R.START_FENS[variant], moves, uci.Limits(nodes=50))
                assert move in legal, (variant, moves, move)
                moves.append(move)


@pytest.mark.slow
def test_not_a_uci_engine_fails_fast(capsys, tmp_path):
    """`uci --engine /bin/cat` (issue 13): no `uciok`, one line, status 1, within seconds; a
    program that exits at once likewise."""
    start = time.monotonic()
    assert uci_cli.main(["--engine", "/bin/cat"]) == 1
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert elapsed < uci.DEFAULT_UCI_TIMEOUT + 4, elapsed
    assert err.startswith("error: /bin/cat is not a UCI engine: no `uciok` within 5 s")
    assert err.count("\n") == 1, err
    with pytest.raises(uci.EngineNotUci, match="exited before answering"):
        uci.UciEngine("gardner", shutil.which("true"))
    with pytest.raises(uci.EngineNotUci, match="no `uciok` within 0.3 s"):
        uci.UciEngine("gardner", "/bin/cat", uci_timeout=0.3)
    with pytest.raises(uci.EngineNotUci):
        uci.check_engine("/bin/cat", ["gardner", "atomic"])


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
    assert uci_cli.main(["--variants", "gardner", "rifle"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gardner        yes") and "rifle          NO" in out
    with pytest.raises(SystemExit):
        uci_cli.main(["--variants", "chess"])
    assert "valid variants" in capsys.readouterr().err
    assert uci_cli.main(["--engine", "/nonexistent/engine", "--variants", "gardner"]) == 1
    err = capsys.readouterr().err
    assert "no UCI engine at '/nonexistent/engine'" in err
    # train and the other commands without an --engine flag: the variable is the way out.
    assert "MMC_ENGINE=PATH (or --engine PATH, where a command has that flag)" in err


def test_default_engine_is_found(fairy_stockfish):
    path = uci.default_engine()
    assert os.path.isfile(path) and os.access(path, os.X_OK), path
    if not os.environ.get("MMC_ENGINE") and uci.built_engine():
        assert path == uci.built_engine() == fairy_stockfish  # the build comes first


def test_build_reuses_the_cache(fairy_stockfish):
    """A second build is a no-op: same path, binary untouched, well under a second."""
    if os.environ.get("MMC_ENGINE") or fairy_stockfish != uci.built_engine():
        pytest.skip("the tests do not use the cached build")
    before = os.stat(fairy_stockfish).st_mtime_ns
    start = time.monotonic()
    assert uci.build_engine(log=lambda line: None) == fairy_stockfish
    assert time.monotonic() - start < 1.0
    assert os.stat(fairy_stockfish).st_mtime_ns == before
    info = json.loads((Path(fairy_stockfish).parent / "build.json").read_text())
    assert info["pyffish"] == uci.pyffish_version() and "Fairy-Stockfish" in info["id_name"]


# A pyffish-like source archive whose "engine" is a few lines of C++: the whole build path
# (extract, parallel compile, link, `uci` check, cache) in a second or two.
TINY_ENGINE = r"""
#include <iostream>
#include <string>
int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "uci") std::cout << "id name TinyEngine 1\nuciok" << std::endl;
    if (line == "quit") break;
  }
}
"""


def tiny_sdist(tmp_path, version="9.9.9") -> str:
    root = tmp_path / f"pyffish-{version}"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.cpp").write_text(TINY_ENGINE)
    (root / "src" / "pyffish.cpp").write_text("#error not part of the engine\n")
    (root / "src" / "ffishjs.cpp").write_text("#error not part of the engine\n")
    archive = tmp_path / f"pyffish-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    return str(archive)


def test_build_from_a_source_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("MMC_CACHE", str(tmp_path / "cache"))
    lines = []
    path = uci.build_engine(sdist=tiny_sdist(tmp_path), jobs=2, log=lines.append)
    assert path == str(tmp_path / "cache" / "fairy-stockfish-pyffish-9.9.9" / "fairy-stockfish")
    assert uci.built_engine("9.9.9") == path
    assert lines[0] == "compiling 1 files with 2 parallel g++ jobs ..."  # not pyffish/ffishjs
    assert lines[-1].startswith("built TinyEngine 1 in ")
    info = json.loads((Path(path).parent / "build.json").read_text())
    assert info["id_name"] == "TinyEngine 1" and "-DLARGEBOARDS" in info["flags"]
    mtime = os.stat(path).st_mtime_ns
    assert uci.build_engine("9.9.9", log=lines.append) == path  # cached: nothing downloaded
    assert os.stat(path).st_mtime_ns == mtime
    assert sorted(os.listdir(Path(path).parent)) == ["build.json", "fairy-stockfish"]


def test_build_errors_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MMC_CACHE", str(tmp_path / "cache"))
    quiet = dict(log=lambda line: None)
    with pytest.raises(uci.EngineBuildError, match="no C\\+\\+ compiler 'no-such-g\\+\\+'"):
        uci.build_engine("9.9.9", cxx="no-such-g++", **quiet)
    no_pip = tmp_path / "python-without-pip"
    no_pip.write_text("#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n")
    no_pip.chmod(0o755)
    with pytest.raises(uci.EngineBuildError, match="pip is missing .*No module named pip"):
        uci.build_engine("9.9.9", python=str(no_pip), **quiet)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no network use: the download fails at once
    with pytest.raises(uci.EngineBuildError, match="downloading pyffish==9.9.9's source"):
        uci.build_engine("9.9.9", **quiet)
    with pytest.raises(uci.EngineBuildError, match="no source archive at"):
        uci.build_engine(sdist=str(tmp_path / "pyffish-1.0.tar.gz"), **quiet)
    assert uci.built_engine("9.9.9") is None
    monkeypatch.setenv("CXX", "no-such-g++")
    assert uci_cli.main(["build", "--version", "9.9.9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no C++ compiler") and err.count("\n") == 1
    with pytest.raises(SystemExit):
        uci_cli.main(["build", "--jobs", "0"])
