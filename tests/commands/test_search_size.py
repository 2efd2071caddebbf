"""A search too large for memory is refused (or, by the UCI engine, capped) in one line before
anything compiles, at every entry point that takes a size (issue 52, item 1): the page, the
UCI engine, evaluate, analyse, train.

The memory is made small (`memory.device_limit` patched) rather than the sizes huge, and the
compiled pieces are patched to fail, so nothing is compiled or allocated.
"""

from __future__ import annotations

import io
import time

import pytest
from test_uci_serve import Lines, StubEngine, send

from mmc_jax import analyse, engine, evaluate, serve
from mmc_jax.evaluation import match, model_engine
from mmc_jax.training import memory

FITS = 100  # simulations of one tree that fit in the patched memory


@pytest.fixture
def small_memory(monkeypatch):
    """Memory in which a search of one tree of `FITS` simulations fits, and no more."""
    tree = memory.search_bytes(1, FITS)
    limit = int(tree / memory.SEARCH_FRACTION) + 1
    monkeypatch.setattr(memory, "device_limit", lambda devices=None: (limit, 1, "a test's"))
    assert memory.max_search_simulations(1) == FITS
    return limit


def _no_compile(*args, **kwargs):
    raise AssertionError("compiled before the size was checked")


def test_the_estimate_is_linear_and_the_check_names_what_fits(small_memory):
    assert memory.search_bytes(1, 2 * FITS + 1) == 2 * memory.search_bytes(1, FITS)
    memory.check_search(FITS)
    with pytest.raises(ValueError) as error:
        memory.check_search(FITS + 1, name="--simulations")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"--simulations {FITS + 1}: the search tree needs about ")
    assert message.endswith(
        f"more than half the {memory.gib(small_memory)} of a test's; at most {FITS} fit"
    )


def test_the_model_engine_refuses_before_compiling(small_memory, monkeypatch):
    monkeypatch.setattr(model_engine, "_search", _no_compile)
    monkeypatch.setattr(model_engine, "_grow_start", _no_compile)
    model = model_engine.ModelEngine(None, None, capacity=64)
    position = StubEngine(0).position("gardner")
    assert model.max_nodes(False) == FITS
    with pytest.raises(
        ValueError, match=rf"^a search of 5000 nodes needs about .* at most {FITS} fit$"
    ):
        model.search(position, 5000)
    small = model_engine.ModelEngine(None, None, capacity=2 * FITS)  # its grown tree: too large
    with pytest.raises(ValueError, match=r"^a search of 16 nodes needs about "):
        small.search(position, 16)
    assert small.max_nodes(False) == 0


def test_the_page_refuses_a_game_too_large_in_one_line(small_memory, monkeypatch):
    monkeypatch.setattr(model_engine, "_search", _no_compile)
    monkeypatch.setattr(model_engine, "_grow_start", _no_compile)
    app = serve.Server({serve.UNIFORM: "none"}, serve.UNIFORM, simulations=16)
    with pytest.raises(serve.RequestError) as error:
        app.new_game({"simulations": 1024})
    assert error.value.status == 400
    assert str(error.value).startswith("simulations 1024: a search of 1024 nodes needs about ")
    assert "\n" not in str(error.value) and not app._games


def test_the_page_refuses_a_default_too_large_at_start_up(small_memory, capsys):
    assert serve.main(["--model", "none", "--simulations", "1000", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --simulations 1000: the search tree"), err


def test_the_engine_refuses_a_capacity_too_large_at_start_up(small_memory, capsys):
    assert engine.main(["--model", "none", "--capacity", "1000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --capacity 1000: the search tree"), err


class BoundedStub(StubEngine):
    """The UCI tests' stub engine with the model engine's memory bound (no grown search)."""

    capacity = 16
    tree_size = model_engine.ModelEngine.tree_size
    check_size = model_engine.ModelEngine.check_size
    max_nodes = model_engine.ModelEngine.max_nodes


def test_the_engine_caps_nodes_and_grows_only_in_steps_that_fit(small_memory):
    out = Lines()
    stub = BoundedStub(0.001, compiled=())
    server = engine.UciServer(stub, out, warm_up=False)
    send(server, "setoption name Simulations value 16", "setoption name MaxSimulations value 256")
    send(server, "position startpos", "go nodes 100000000")
    done = out.wait_for("^bestmove b2b3", timeout=10)
    capped = [line for line in out.lines[:done] if "go nodes 100000000" in line]
    assert len(capped) == 1 and capped[0].startswith("info string go nodes 100000000: a search")
    assert capped[0].endswith(f"at most {FITS} fit; searching {FITS}"), capped[0]
    assert stub.budgets == [FITS]

    stub.budgets.clear()
    start = len(out.lines)
    send(server, "go infinite")
    out.wait_for("^info depth 1 nodes 64 ", start=start, timeout=10)
    time.sleep(0.2)
    assert stub.budgets == [16, 32, 64]  # 128 and 256 would not fit
    assert any("grow to 64 nodes at most" in line for line in out.lines[start:])
    started = time.monotonic()
    send(server, "stop")
    assert time.monotonic() - started < 0.1 and out.lines[-1] == "bestmove b2b3"
    server.run(io.StringIO("quit\n"))


def test_analyse_refuses_before_compiling(small_memory, monkeypatch, capsys):
    monkeypatch.setattr(analyse, "_analyse", _no_compile)
    fen = "4k/5/2n2/5/K4 w - - 0 1"
    assert analyse.main(["--variant", "gardner", "--fen", fen, "--simulations", "1000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: simulations 1000: the search tree"), err
    # Under fog a tree per world: 8 worlds of 20 simulations do not fit either.
    argv = ["--variant", "dark", "--fen", fen, "--simulations", "20", "--worlds", "8"]
    assert analyse.main(argv) == 2
    assert "simulations 20 x 8 trees" in capsys.readouterr().err


def test_evaluate_refuses_before_compiling(small_memory, monkeypatch, capsys):
    monkeypatch.setattr(match, "_arena", _no_compile)
    argv = ["--variant", "gardner", "--games", "4", "--simulations", "30"]
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(argv)  # 4 games' trees of 30 simulations: more than 100 of one
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("python -m mmc_jax.evaluate: error: num_simulations 30 x 4 trees: ")
    assert last.endswith(f"at most {memory.max_search_simulations(4)} fit"), last


def test_train_refuses_simulations_that_cannot_fit(tmp_path, monkeypatch):
    """train's own check (`runloop.check_memory`) counts the search tree of every game."""
    from configs import gardner
    from mmc_jax.algorithms import alphazero
    from mmc_jax.training import runloop

    algorithm = alphazero.ALGORITHM
    config = gardner.get_config("smoke")
    state = runloop.estimate_memory(
        algorithm, algorithm.prepare_config(config), algorithm.make_mesh(config)
    ).total
    monkeypatch.setattr(runloop, "_memory_limit", lambda mesh: (4 * state, 1, "a test's"))
    monkeypatch.setattr(algorithm, "setup", _no_compile)
    config.selfplay.num_simulations = 65536
    with pytest.raises(ValueError) as error:
        runloop.run(algorithm, config, tmp_path / "run", stream=None)
    message = str(error.value)
    assert "\n" not in message and "one iteration needs about" in message
    assert "selfplay.num_simulations" in message and not (tmp_path / "run").exists()
