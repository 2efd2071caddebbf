"""Tests for `python -m mmc_jax.play`: scripted games through stdin, bad input answered with
the legal moves, clean exits on end of input and Ctrl-C, the dark fog view.

In process, with the uniform-prior model and 0 simulations (the first legal move: no search
to compile); the game steps through the same compiled batch as the other arena tests.
"""

import io
import os
import subprocess
import sys

import pyffish as sf
import pytest

from mmc_jax import play, uci
from mmc_jax import rules as R
from mmc_jax.evaluation import pgn
from mmc_jax.infra import checkpoint
from mmc_jax.rules import notation

pytestmark = pytest.mark.usefixtures("fairy_stockfish")


def run(argv, lines):
    out = io.StringIO()
    status = play.main(argv, stdin=io.StringIO("".join(f"{line}\n" for line in lines)), stdout=out)
    return status, out.getvalue()


def test_scripted_game_with_bad_input(tmp_path):
    path = tmp_path / "game.pgn"
    lines = ["e2e4", "hello", "", "a2a3q", "moves", "board", "help", "E2E3", "b1c3", "c3b5"]
    status, out = run(
        ["--variant", "gardner", "--checkpoint", "none", "--simulations", "0", "--max-plies", "6"]
        + ["--pgn", str(path)],
        lines,
    )
    assert status == 0
    legal = "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3"
    assert f"illegal move 'e2e4'; legal moves: {legal}" in out
    assert "malformed move 'hello'" in out and f"; legal moves: {legal}" in out
    assert "illegal move 'a2a3q'" in out
    assert f"> legal moves: {legal}\n" in out  # the `moves` command, after the prompt
    assert "Type a move in UCI" in out and "♔" in out
    assert out.count("model plays") == 3
    assert "result: 1/2-1/2 (draw)" in out  # the ply cap of 6 ends the game
    (game,) = pgn.read_pgn(path)
    assert game.headers["White"] == "you" and game.result == "1/2-1/2"
    assert game.moves[0::2] == ["e2e3", "b1c3", "c3b5"] and len(game.moves) == 6
    assert len(pgn.replay(game, check_result=False)) == 7


def test_illegal_and_malformed_moves_list_the_legal_moves_alike():
    _, out = run(
        ["--variant", "gardner", "--checkpoint", "none", "--simulations", "0"], ["e2e4", "xyz"]
    )
    listed = [
        line.split("legal moves: ")[1] for line in out.splitlines() if "legal moves: " in line
    ]
    assert len(listed) == 2 and listed[0] == listed[1] == "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3"


def test_atomic_plays_its_shipped_model_by_default():
    _, out = run(["--variant", "atomic", "--simulations", "0"], ["quit"])
    assert "atomic-supervised" in out and "no trained model" not in out


def test_a_variant_without_a_trained_model_says_so():
    _, out = run(["--variant", "baby", "--simulations", "0"], ["quit"])
    assert out.startswith("no trained model for baby: an untrained search")
    assert "against an untrained search" in out and "uniform-prior search" not in out
    _, out = run(["--variant", "baby", "--checkpoint", "none", "--simulations", "0"], ["quit"])
    assert "against uniform-prior search" in out and "no trained model" not in out


def test_as_black_and_end_of_input():
    status, out = run(["--variant", "baby", "--as", "black", "--simulations", "0"], [])
    assert status == 0
    assert out.index("model plays") < out.index("your move>")
    assert "game ended (end of input) after 1 plies" in out


@pytest.mark.parametrize("flag", ["--colour", "--color"])
def test_the_colour_flag_by_its_other_names(flag):
    status, out = run(["--variant", "baby", flag, "black", "--simulations", "0"], [])
    assert status == 0 and out.index("model plays") < out.index("your move>")


def test_quit_and_ctrl_c():
    status, out = run(["--variant", "atomic", "--simulations", "0"], ["quit"])
    assert status == 0 and "game ended (quit) after 0 plies" in out

    class Interrupting(io.StringIO):
        def readline(self, *args):
            raise KeyboardInterrupt

    out = io.StringIO()
    status = play.main(["--variant", "atomic", "--simulations", "0"], Interrupting(), out)
    assert status == 0 and "game ended (interrupted)" in out.getvalue()


def test_dark_shows_fog_and_hides_the_model_move(monkeypatch):
    """Under fog the model moves from its own view (`model_engine`'s fair search), never
    through the arena's search, which steps the true board."""

    def reads_the_true_board(*args, **kwargs):
        raise AssertionError("the model searched the true board")

    monkeypatch.setattr(play.arena, "act", reads_the_true_board)
    status, out = run(["--variant", "dark", "--as", "black", "--simulations", "0"], ["moves"])
    assert status == 0
    assert "model moved (hidden in dark)" in out and "⊙" in out


def test_fog_view_matches_pyffish():
    sf.load_variant_config(open(uci.variants_file()).read())
    fens = [fen for fen, _ in uci.PROBES["dark"]] + [R.START_FENS["dark"]]
    for fen in fens:
        legal = sf.legal_moves("dark-gardner", fen, [])
        assert notation.fog_view(fen, legal) == sf.get_fog_fen(fen, "dark-gardner"), fen


def test_cli_errors_in_a_subprocess():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    process = subprocess.run(
        [sys.executable, "-m", "mmc_jax.play", "--variant", "chess"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert process.returncode == 2 and "valid variants: gardner" in process.stderr
    assert "Traceback" not in process.stderr


@pytest.mark.parametrize("argv", [["--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main(argv)
    assert exit_info.value.code == 0
    assert "--checkpoint" in capsys.readouterr().out


def test_gardner_defaults_to_the_shipped_default_model():
    status, out = run(["--variant", "gardner", "--simulations", "0"], ["quit"])
    assert status == 0 and f"against {checkpoint.default_model('gardner')}" in out


def test_a_searching_model_moves_as_the_uci_engine_does():
    """With simulations, play's model searches through `ModelEngine`, the program the UCI
    engine and the page use (one search program for the three): its move is the engine's."""
    import jax

    from mmc_jax.evaluation import model_engine

    status, out = run(
        ["--variant", "gardner", "--checkpoint", "gardner-cpu", "--simulations", "8"]
        + ["--as", "black"],
        [],
    )
    assert status == 0
    played = next(line for line in out.splitlines() if line.startswith("model plays "))
    engine = model_engine.load_engine("gardner-cpu")
    seed = int(jax.random.randint(jax.random.fold_in(jax.random.key(0), 0), (), 0, 2**31 - 1))
    expected = engine.search(engine.position("gardner"), 8, seed=seed).move
    assert played == f"model plays {expected}"


# ---------------------------------------------------------------------------------------------
# Sensing variants (fog=sense:W): sense then move, against a player of the table that plays them


def test_a_sensing_variant_is_played_sense_then_move_against_the_default_opponent():
    status, out = run(
        ["--variant", "recon", "--max-plies", "2"],
        ["help", "z9", "a1", "moves", "b2", "pass"],
    )
    assert status == 0
    assert "You play White against entropy-pimc." in out
    assert "You see: a1=R a2=P b1=N b2=P" in out
    assert "'z9' is not one of the windows" in out and "'b2' is not one of the" in out
    assert "You requested pass: taken pass." in out
    assert "Game over: draw (draw by the ply cap)." in out


def test_a_sensing_variant_plays_the_opponent_named_and_ends_at_the_end_of_input():
    status, out = run(
        ["--variant", "recon,fog=sense:3", "--as", "black", "--opponent", "random-pimc"], ["c3"]
    )
    assert status == 0
    assert "You play Black against random-pimc." in out
    assert out.index("You play Black") < out.index("sense> ")
    # Black's window c3 (3x3) is c3-e5; White's first move cannot reach ranks 4 and 5.
    assert "You see: c3=" in out and "c4=p c5=b d3=" in out and "d4=p d5=q e3=" in out
    assert out.rstrip().endswith("game ended (end of input)")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--variant", "recon", "--opponent", "greedy"],
         "--opponent 'greedy' plays the board variants, not the sensing variants (fog=sense:W); "
         "players of recon: random, random-pimc, entropy-pimc"),
        (["--variant", "gardner", "--opponent", "entropy-pimc"],
         "--opponent 'entropy-pimc' plays the sensing variants (fog=sense:W), not the board "
         "variants; players of board: random, greedy"),
        (["--variant", "recon", "--opponent", "gardner-cpu"],
         "--opponent gardner-cpu: a board-game model; a sensing variant (recon) plays a sensing "
         "model"),
        (["--variant", "recon", "--checkpoint", "experiments/recon/learned/model"],
         "--checkpoint experiments/recon/learned/model: the learned agent plays in the batched "
         "arena only (it reads what only the arena tracks): python -m mmc_jax.evaluate "
         "--variant recon --checkpoint <model>"),
        (["--variant", "recon", "--recon-agent", "random"],
         "unrecognized arguments: --recon-agent random"),
        (["--variant", "recon", "--pgn", "game.pgn"],
         "--pgn is not available for sensing variants (their games are not PGN)"),
    ],
)  # fmt: skip
def test_play_refuses_a_player_of_the_other_game_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main(argv, stdin=io.StringIO(""), stdout=io.StringIO())
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert message in error[-1] and "Traceback" not in "\n".join(error), error
