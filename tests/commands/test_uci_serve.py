"""Tests for mmc_jax.engine: a trained model as a UCI engine.

The protocol is driven in-process (`UciServer` with the shipped 2x32 `gardner-cpu` model and
16-node searches, compiled once for the module); the fog tests check fairness the way the issue
asks: two true positions with the same view of the side to move give the same output, while a
search on the true positions (not fair) tells them apart. The slow test plays the served model
(a child process, `python -m mmc_jax.engine`) against Fairy-Stockfish through UCI in two
variants and checks every move against Fairy-Stockfish's own legal-move list.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyffish as sf
import pytest

from mmc_jax import engine, evaluate, uci
from mmc_jax import rules as R
from mmc_jax.engine import DEFAULT_WORLDS
from mmc_jax.evaluation import arena, pgn

START = R.START_FENS["gardner"]
START_MOVES = uci.START_MOVES["gardner"].split()
# Two dark positions that differ only on squares White cannot see (the black knight on b1 or
# a1: on b1 it attacks White's king on d2), found with pyffish.get_fog_fen.
FOG_A = "1rbk1/ppp1p/3P1/PPPKp/1nBQ1 w - - 0 7"
FOG_B = "1rbk1/ppp1p/3P1/PPPKp/n1BQ1 w - - 0 7"
FOG_VIEW = "*****/**p1p/3P1/PPPKp/**BQ1 w - - 0 7"
INFO = re.compile(
    r"^info depth (\d+) nodes (\d+) nps \d+ time \d+ score cp (-?\d+) wdl (\d+) (\d+) (\d+) "
    r"pv ([a-e1-5qrbn ]+)$"
)


class Lines(io.TextIOBase):
    """A text stream that collects whole lines and lets a test wait for one."""

    def __init__(self):
        self.lines: list[str] = []
        self._partial = ""
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            self._partial += text
            *done, self._partial = self._partial.split("\n")
            self.lines += done
            self._changed.notify_all()
        return len(text)

    def wait_for(self, pattern: str, start: int = 0, timeout: float = 300.0) -> int:
        """Index of the first line from `start` that matches `pattern` (a regex)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for i in range(start, len(self.lines)):
                    if re.search(pattern, self.lines[i]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line {pattern!r} in {self.lines[start:]}")
                self._changed.wait(left)


@pytest.fixture(scope="module")
def ffish():
    """pyffish with the project's variants (Fairy-Stockfish's own rules: the oracle)."""
    sf.load_variant_config(open(uci.variants_file()).read())
    return sf


@pytest.fixture(scope="module")
def model():
    return engine.load_engine("gardner-cpu")


@pytest.fixture
def server(model):
    out = Lines()
    server = engine.UciServer(model, out, warm_up=False)
    for line in ("setoption name Simulations value 16", "setoption name Worlds value 2"):
        server.handle(line)
    yield server, out
    server.handle("stop")
    server.run(io.StringIO("quit\n"))


def send(server, *lines):
    for line in lines:
        assert server.handle(line)


def test_uci_handshake_lists_every_variant_and_the_options(server):
    server, out = server
    send(server, "uci", "isready")
    out.wait_for("^readyok")
    assert out.lines[0] == "id name mmc_jax gardner-cpu"
    assert out.lines[-2:] == ["uciok", "readyok"]
    variants = next(line for line in out.lines if "UCI_Variant" in line).split()
    names = set(variants[variants.index("default") + 2 :]) - {"var"}
    assert set(R.FAIRY_STOCKFISH_NAMES.values()) <= names
    assert set(R.VARIANTS) <= names
    options = " ".join(out.lines)
    for option in ("Simulations", "Temperature", "Worlds", "Seed", "UCI_ShowWDL", "ReuseTree"):
        assert f"option name {option} type" in options


def test_search_prints_info_and_a_legal_bestmove(server, ffish):
    server, out = server
    send(server, "position startpos moves a2a3 e4e3", "go nodes 16")
    done = out.wait_for("^bestmove")
    info = next(INFO.match(line) for line in out.lines[:done] if INFO.match(line))
    depth, nodes, cp, win, draw, loss, pv = info.groups()
    assert int(nodes) == 16 and int(depth) == len(pv.split()) >= 2
    assert int(win) + int(draw) + int(loss) == 1000
    legal = ffish.legal_moves("gardner", START, ["a2a3", "e4e3"])
    move = out.lines[done].split()[1]
    assert move in legal and pv.split()[0] == move
    assert any(line.startswith("info string visits ") for line in out.lines[:done])


def test_malformed_and_illegal_lines_are_ignored_with_a_reason(server, ffish):
    server, out = server
    send(
        server,
        "position startpos moves a2a3",
        "bogus command",
        "setoption name Simulations value many",
        "setoption name NoSuchOption value 1",
        "setoption name UCI_Variant value chess",
        "go nodes -3",
        "position fen not/a/fen w - - 0 1",
        "position startpos moves a2a4",  # illegal: no double step
        "isready",
    )
    out.wait_for("readyok")
    out.wait_for("ignored position: illegal move 'a2a4'")
    text = "\n".join(out.lines)
    for reason in (
        "ignored unknown command: 'bogus command'",
        "simulations must be an integer",
        "no option 'nosuchoption'",
        "valid variants",
        "needs a positive number",
    ):
        assert reason in text
    assert "malformed FEN" in text or "ignored position" in text
    # The previous position (after a2a3) stays: Black moves.
    send(server, "go nodes 16")
    move = out.lines[out.wait_for("^bestmove")].split()[1]
    assert move in ffish.legal_moves("gardner", START, ["a2a3"])


def test_perft_and_finished_games(server, ffish):
    server, out = server
    send(server, "position startpos", "go perft 1")
    end = out.wait_for("^Nodes searched: 7")
    assert sorted(line.split(":")[0] for line in out.lines[end - 8 : end - 1]) == START_MOVES
    # A depth that would run for minutes is capped, said first, and answered (issue 70).
    sparse = "4k/p4/5/4P/K4 w - - 0 1"
    send(server, f"position fen {sparse}", "go perft 99")
    capped = out.wait_for("^info string perft 99 is capped to depth 7", start=end + 1)
    total = out.lines[out.wait_for("^Nodes searched: ", start=capped + 1, timeout=120)]
    assert int(total.split()[-1]) == R.perft("gardner", sparse, 7) == 70677  # (pyffish: 70,677)
    # White is mated (from a random game of pyffish): the game is over.
    mate = "r3k/p1Pp1/P3q/1BPK1/R2Q1 w - - 0 9"
    assert ffish.legal_moves("gardner", mate, []) == [] and ffish.gives_check("gardner", mate, [])
    send(server, f"position fen {mate}", "go nodes 16")
    assert out.lines[out.wait_for("^bestmove")] == "bestmove (none)"


def test_isready_and_stop_are_answered_during_a_search(server):
    server, out = server
    send(server, "setoption name MaxSimulations value 16", "position startpos", "go infinite")
    out.wait_for("^info string visits")  # grown to MaxSimulations; an infinite one waits
    send(server, "isready")
    ready = out.wait_for("^readyok")
    time.sleep(0.3)
    assert not any(line.startswith("bestmove") for line in out.lines)
    assert ready == len(out.lines) - 1
    send(server, "stop")
    move = out.lines[out.wait_for("^bestmove", timeout=10)].split()[1]
    assert move in START_MOVES
    started = time.monotonic()
    send(server, "go movetime 300")
    move = out.lines[out.wait_for("^bestmove", start=ready + 2, timeout=30)].split()[1]
    assert time.monotonic() - started < 3.0 and move in START_MOVES


class StubEngine:
    """A `ModelEngine` stand-in whose searches sleep: the protocol's timing without JAX."""

    name = "stub"
    compile_seconds = 5.0

    def __init__(self, seconds_per_node: float, compiled=(16, 32, 64)):
        self.seconds_per_node = seconds_per_node
        self.compiled = set(compiled)
        self.budgets: list[int] = []

    def position(self, variant, fen=None, moves=()):
        return engine.GamePosition(
            variant=variant,
            start_fen=START,
            moves=tuple(moves),
            fog=False,
            fen=START,
            legal={"a2a3": 62, "b2b3": 307},
            over=False,
            result=None,
            ply=None,
        )

    def forget(self):
        pass

    def is_compiled(self, position, budget, worlds):
        return budget in self.compiled

    def search(self, position, nodes, *, worlds, temperature, seed):
        self.budgets.append(nodes)
        seconds = nodes * self.seconds_per_node
        time.sleep(seconds)
        policy = {"b2b3": 0.75, "a2a3": 0.25}
        return engine.SearchResult("b2b3", policy, 0.1, ("b2b3",), nodes, nodes, 0, seconds)


def stub_server(seconds_per_node, **kwargs):
    out = Lines()
    stub = StubEngine(seconds_per_node, **kwargs)
    server = engine.UciServer(stub, out, warm_up=False)
    send(server, "setoption name Simulations value 16", "setoption name MaxSimulations value 256")
    return server, out, stub


def test_a_variant_with_its_own_model_is_played_by_it():
    """Without --model (`engine_for`), UCI_Variant atomic swaps in atomic's model for the
    searches after it; back on Gardner, Gardner's. `variant_engines` names them."""
    gardner, atomic = StubEngine(0.0), StubEngine(0.0)
    gardner.name, atomic.name = "gardner-model", "atomic-model"
    asked = []

    def engine_for(variant):
        asked.append(variant)
        return atomic if variant == "atomic" else gardner

    out = Lines()
    server = engine.UciServer(gardner, out, warm_up=False, engine_for=engine_for)
    send(server, "setoption name UCI_Variant value atomic", "position startpos", "go nodes 16")
    out.wait_for("^bestmove", timeout=10)
    assert server.engine is atomic and atomic.budgets == [16] and gardner.budgets == []
    start = len(out.lines)
    send(server, "setoption name UCI_Variant value gardner", "position startpos", "go nodes 16")
    out.wait_for("^bestmove", start=start, timeout=10)
    assert server.engine is gardner and asked == ["atomic", "gardner"]
    server.run(io.StringIO("quit\n"))
    engine_for = engine.variant_engines(None, 64)
    assert engine_for("atomic").name == "atomic-supervised"
    assert engine_for("gardner").name == engine_for("gardner,capture=rifle").name == "gardner-h200"


def test_stop_answers_at_once_while_a_search_runs():
    server, out, stub = stub_server(0.05)  # 16 nodes: 0.8 s
    send(server, "position startpos", "go infinite")
    time.sleep(0.2)
    send(server, "isready")
    assert out.lines == ["readyok"]  # during the search, at once
    started = time.monotonic()
    send(server, "stop")
    assert time.monotonic() - started < 0.1
    assert out.lines[-1] == "bestmove a2a3"  # no search finished: the first legal move
    assert "not a searched one" in out.lines[-2]
    send(server, "go nodes 16")  # the worker is free at once
    out.wait_for("^bestmove b2b3", start=len(out.lines), timeout=5)
    server.run(io.StringIO("quit\n"))


def test_infinite_grows_until_stop_and_movetime_keeps_its_deadline():
    server, out, stub = stub_server(0.001)
    send(server, "position startpos", "go infinite")
    out.wait_for("^info depth 1 nodes 256 ")
    time.sleep(0.3)
    assert stub.budgets == [16, 32, 64, 128, 256]  # up to MaxSimulations, compiled or not
    assert not any(line.startswith("bestmove") for line in out.lines)
    send(server, "stop")
    out.wait_for("^bestmove b2b3", timeout=5)

    stub.budgets.clear()
    stub.compiled = {16, 32, 64, 128, 256}
    started = time.monotonic()
    send(server, "go movetime 200")  # 16 + 32 + 64 nodes take 0.11 s; 128 more would not fit
    out.wait_for("^bestmove", start=len(out.lines), timeout=5)
    assert time.monotonic() - started < 0.4
    assert stub.budgets == [16, 32, 64]

    stub.budgets.clear()
    server.handle("setoption name Simulations value 256")
    started = time.monotonic()
    send(server, "go movetime 100")  # the first search (0.26 s) overruns: the deadline answers
    out.wait_for("^bestmove a2a3", start=len(out.lines), timeout=5)
    assert time.monotonic() - started < 0.25
    server.run(io.StringIO("quit\n"))


class GrowingStub(StubEngine):
    """A stub with the grown search's interface: each chunk sleeps its nodes' time."""

    capacity = 4096
    nodes_per_second = None

    def grows(self, position, nodes):
        return nodes <= self.capacity

    def grow(self, position, nodes, *, chunks=(), plan=None, temperature=0.0, seed=0):
        budget, done, result, pending, started = nodes, 0, None, list(chunks), time.monotonic()
        while done < budget:
            if plan is not None and done:
                step = plan(done, result)
                if step is None:
                    return
                budget, chunk = step
            else:
                chunk = pending.pop(0) if pending else budget - done
            stop = min(done + chunk, budget)
            time.sleep((stop - done) * self.seconds_per_node)
            self.budgets.append(stop - done)
            done = stop
            seconds = time.monotonic() - started
            policy = {"b2b3": 0.75, "a2a3": 0.25}
            result = engine.SearchResult("b2b3", policy, 0.1, ("b2b3",), done, done, 0, seconds)
            yield result


def test_movetime_grows_one_search_until_its_time_is_used():
    out = Lines()
    stub = GrowingStub(0.001)  # 1000 nodes per second (at most: a sleep may overrun)
    stub.nodes_per_second = 1000.0  # as measured by an earlier search
    server = engine.UciServer(stub, out, warm_up=False)
    send(server, "setoption name MaxSimulations value 4096", "position startpos")
    started = time.monotonic()
    send(server, "go movetime 600")
    end = out.wait_for("^bestmove b2b3", timeout=5)
    elapsed = time.monotonic() - started
    nodes = [int(line.split()[4]) for line in out.lines[:end] if line.startswith("info depth")]
    # The budget is what 1000 nodes/s fit into 90% of the time: its sleeps alone take > 0.5 s
    # (most of the time used); the deadline answers at 0.6 s at the latest (a loaded machine
    # may deliver the answer a little late).
    assert 0.45 < elapsed < 1.0
    assert nodes[0] == 2 and nodes[-1] > 150  # a first chunk (two legal moves), then growth
    assert nodes == sorted(set(nodes)) and nodes[-1] <= sum(stub.budgets) <= 600  # one search

    stub.budgets.clear()
    send(server, "setoption name MaxSimulations value 512", "go infinite")
    out.wait_for("^info string visits", start=end + 1, timeout=10)
    assert sum(stub.budgets) == 512  # up to MaxSimulations, then it waits for `stop`
    assert not any(line.startswith("bestmove") for line in out.lines[end + 1 :])
    send(server, "stop")
    out.wait_for("^bestmove", start=end + 1, timeout=5)
    server.run(io.StringIO("quit\n"))


def test_a_search_that_must_compile_says_so_first():
    """Under fog (or beyond the capacity) a new search size compiles: an `info string` says
    so before the wait; a compiled size does not."""
    server, out, stub = stub_server(0.0001)  # compiled: 16, 32, 64 nodes
    send(server, "position startpos", "go nodes 64")
    end = out.wait_for("^bestmove", timeout=5)
    assert not any("compiling" in line for line in out.lines[:end])
    send(server, "go nodes 128")
    end = out.wait_for("^bestmove", start=end + 1, timeout=5)
    notes = [line for line in out.lines if "compiling a search of 128 nodes" in line]
    assert len(notes) == 1 and out.lines.index(notes[0]) < end
    server.run(io.StringIO("quit\n"))


def test_clock_time_is_the_side_to_move_s():
    limits = {"wtime": 60_000, "btime": 2_000, "winc": 1_000, "binc": 0}
    assert engine._clock_time(limits, 0) == pytest.approx((3_000 + 800 - 50) / 1000)
    assert engine._clock_time(limits, 1) == pytest.approx((100 - 50) / 1000)
    assert engine._clock_time(limits) == engine._clock_time(limits, 1)  # unknown: the smaller
    out = Lines()
    stub = GrowingStub(0.0001)
    server = engine.UciServer(stub, out, warm_up=False)
    send(server, "position startpos moves a2a3")  # Black to move: btime counts
    send(server, "go wtime 60000 btime 2000")
    server.run(io.StringIO("quit\n"))
    assert server._current.movetime == pytest.approx(0.05)


def test_isready_during_the_warm_up_says_it_is_compiling():
    out = Lines()
    stub = StubEngine(0.0)
    stub.search = lambda position, nodes, **kwargs: time.sleep(1.0)  # a slow first compile
    server = engine.UciServer(stub, out, warm_up=True)
    deadline = time.monotonic() + 5
    while server._compiling is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the worker has begun the warm-up
    send(server, "isready")
    assert out.lines and out.lines[0].startswith("info string compiling the search")
    out.wait_for("^readyok", timeout=10)
    server.run(io.StringIO("quit\n"))


def test_isready_right_after_uci_hears_of_the_warm_up_whatever_the_timing():
    """An `isready` that comes before the worker has picked up the warm-up (a GUI sends it
    right after `uciok`) still gets the `info string` before its late `readyok`."""
    out = Lines()
    stub = StubEngine(0.0)
    started = threading.Event()
    stub.position = lambda *a, **k: (started.wait(5), StubEngine.position(stub, *a, **k))[1]
    server = engine.UciServer(stub, out, warm_up=True)
    send(server, "uci", "isready")
    started.set()
    end = out.wait_for("^readyok", timeout=10)
    notes = [i for i, line in enumerate(out.lines) if line.startswith("info string compiling")]
    assert notes and notes[0] < end
    server.run(io.StringIO("quit\n"))


def test_isready_waits_for_the_commands_before_it():
    server, out, stub = stub_server(0.001)
    slow = stub.position
    stub.position = lambda *a, **k: (time.sleep(0.3), slow(*a, **k))[1]
    send(server, "position startpos moves a2a3", "isready")
    assert out.lines == []
    out.wait_for("^readyok", timeout=5)
    server.run(io.StringIO("quit\n"))


def test_node_counts_share_one_compiled_search(server, model):
    """`go nodes N` for any N up to the engine's capacity runs one compiled program (the
    grown search): no second compile, exactly N nodes, no `compiling` note."""
    server, out = server
    position = model.position("gardner")
    model.search(position, 16)
    for nodes in (200, 37, 1):
        assert model.is_compiled(position, nodes, DEFAULT_WORLDS)
    assert not model.is_compiled(position, model.capacity + 1, DEFAULT_WORLDS)
    send(server, "position startpos", "go nodes 37")
    end = out.wait_for("^bestmove")
    assert any(re.match(r"^info depth \d+ nodes 37 ", line) for line in out.lines[:end])
    assert not any("compiling" in line for line in out.lines)


def test_grown_search_in_chunks_equals_one_call(model):
    """A search grown in chunks is the search of one call with the same budget (each from a
    new tree: `forget` drops the tree an earlier test's search kept)."""
    position = model.position("gardner", moves=["a2a3", "e4e3"])
    model.forget()
    whole = model.search(position, 24)
    steps = list(model.grow(position, 24, chunks=(5, 11)))
    assert [step.nodes for step in steps] == [5, 16, 24]
    last = steps[-1]
    assert (last.move, last.policy, last.value, last.pv) == (
        whole.move,
        whole.policy,
        whole.value,
        whole.pv,
    )


@pytest.mark.slow  # compiles the one-shot search of 24 simulations (a minute on 2 cores)
def test_grown_search_equals_the_one_shot_search(model):
    """The grown search (one program for every size) equals `_search`, the search compiled for
    its number of simulations (capacity 0: every search is a one-shot one)."""
    one_shot = engine.ModelEngine(model.network, model.params, capacity=0)
    moves = ["a2a3", "e4e3"]
    model.forget()  # a new tree, as the one-shot search's
    grown = model.search(model.position("gardner", moves=moves), 24)
    once = one_shot.search(one_shot.position("gardner", moves=moves), 24)
    assert (grown.move, grown.policy, grown.pv) == (once.move, once.policy, once.pv)
    assert grown.value == pytest.approx(once.value, abs=1e-6)


def test_temperature_samples_reproducibly(model):
    position = model.position("gardner")
    greedy = model.search(position, 16)
    assert greedy.move in START_MOVES and abs(sum(greedy.policy.values()) - 1) < 1e-5
    hot = [model.search(position, 16, temperature=5.0, seed=s).move for s in range(8)]
    assert hot == [model.search(position, 16, temperature=5.0, seed=s).move for s in range(8)]
    assert len(set(hot)) > 1  # a high temperature spreads over the moves the search visited


@pytest.mark.slow  # the fast tier's fairness check: tests/evaluation/test_fair_search.py
def test_fog_search_reads_only_the_view(model, server, ffish):
    """Two dark positions with the same view of the side to move: the same search output
    (through the protocol, every number but the timings), while the search of the true
    positions (what an unfair engine would run) tells them apart."""
    for fen in (FOG_A, FOG_B):
        assert ffish.get_fog_fen(fen, "dark-gardner") == FOG_VIEW
    a, b = (model.position("dark", fen) for fen in (FOG_A, FOG_B))
    assert a.view == b.view == FOG_VIEW
    assert a.legal == b.legal
    fair_a, fair_b = (model.search(p, 16, worlds=2, seed=3) for p in (a, b))
    assert fair_a.policy == fair_b.policy and fair_a.value == fair_b.value
    assert fair_a.move == fair_b.move and fair_a.pv == fair_b.pv == (fair_a.move,)
    # The omniscient search (perfect-information search on the true state) sees the knight.
    seen_a, seen_b = (model.search(dataclasses.replace(p, fog=False), 16) for p in (a, b))
    assert (seen_a.policy, seen_a.value) != (seen_b.policy, seen_b.value)

    server, out = server
    outputs = []
    for fen in (FOG_A, FOG_B):
        start = len(out.lines)
        send(server, "setoption name UCI_Variant value dark-gardner", f"position fen {fen}")
        send(server, "go nodes 16")
        end = out.wait_for("^bestmove", start=start)
        lines = [re.sub(r" (nps|time) \d+", "", line) for line in out.lines[start : end + 1]]
        outputs.append(lines)
    assert outputs[0] == outputs[1]
    assert outputs[0][-1].split()[1] in ffish.legal_moves("dark-gardner", FOG_A, [])


def test_model_that_cannot_load_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mmc_jax.engine", "--model", str(tmp_path / "nothing")],
        input="uci\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot load model")


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["gardner", "dark"])
def test_served_model_plays_fairy_stockfish_through_uci(variant):
    """The served model and Fairy-Stockfish, both through UCI, in the stepwise arena (one pool
    per engine); every move of every game is in Fairy-Stockfish's own legal-move list."""
    command = [sys.executable, "-m", "mmc_jax.engine", "--model", "gardner-cpu", "--no-warm-up"]
    players = [
        arena.engine_player(uci.Limits(nodes=16), "served"),
        arena.engine_player(uci.Limits(nodes=10), "fairy-stockfish"),
    ]
    pools = {
        "served": uci.EnginePool(
            variant,
            command,
            processes=1,
            **uci.SLOW_ENGINE_TIMEOUTS,
            move_timeout=uci.SLOW_ENGINE_MOVE_TIMEOUT,
        ),
        "fairy-stockfish": uci.EnginePool(variant, uci.ensure_engine(), processes=1),
    }
    try:
        records = arena.play_games(
            players,
            arena.colour_balanced(0, 1, 2, variant),
            engine_pool=pools,
            max_plies=24,
            opening_plies=2,
        )
        checker = uci.UciEngine(variant, uci.ensure_engine())
        try:
            for record in records:
                assert record.scored, record.error
                assert len(record.moves) >= 3
                for i, move in enumerate(record.moves):
                    legal = checker.perft_moves(record.start_fen, record.moves[:i])
                    assert move in legal, (record.moves[:i], move, legal)
        finally:
            checker.close()
    finally:
        for pool in pools.values():
            pool.close()
    assert {r.white for r in records} == {"served", "fairy-stockfish"}


FAKE = [sys.executable, str(Path(__file__).parents[1] / "fake_uci_engine.py"), "good"]


def test_evaluate_and_the_ladder_take_a_uci_engine_on_either_side(tmp_path, capsys):
    """`uci:COMMAND` as the model and as the opponent of `evaluate`, and as the rated player of
    the ladder (here the fake engine of tests/fake_uci_engine.py, which plays the first legal
    move; the served model plays Fairy-Stockfish in the slow test above)."""
    fake = "uci:" + shlex.join(FAKE)
    pgn_path = tmp_path / "games.pgn"
    argv = ["--variant", "gardner", "--games", "2", "--max-plies", "12", "--json"]
    status = evaluate.main(
        [*argv, "--checkpoint", fake, "--opponent", fake, "--pgn", str(pgn_path)]
    )
    result = json.loads(capsys.readouterr().out)
    assert status == 0 and result["num_games"] == 2 and result["aborted"] == 0
    assert result["opening_plies"] == 4  # two deterministic engines: paired random openings
    games = pgn.read_pgn(str(pgn_path))
    assert len(games) == 2 and all(pgn.replay(game) for game in games)

    out = tmp_path / "ladder"
    status = evaluate.main(
        [
            "ladder", "--variant", "gardner", "--checkpoint", fake, "--no-engine", "--games",
            "2", "--chain-games", "0", "--max-plies", "12", "--bootstrap", "0", "--out",
            str(out), "--json",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["models"][0]["name"] == shlex.join(FAKE)
    assert {row["opponent"] for row in report["models"][0]["rungs"]} == {"random", "greedy"}


def test_precompile_leaves_the_first_search_nothing_to_compile(model):
    """`ModelEngine.precompile` compiles the first move's programs (the replay and the grown
    search) from their shapes, side by side; the search then finds them compiled. A capacity no
    other test uses makes them new programs in this process."""
    from mmc_jax.evaluation import model_engine
    from mmc_jax.infra import compile_log

    fresh = model_engine.ModelEngine(model.network, model.params, "fresh", capacity=40)
    with compile_log.Tally() as before:
        assert fresh.precompile("gardner") is True
    compiled = {name for name, _ in before.summary(top=50)["slowest"]}
    assert {"jit(_grow)", "jit(_grow_result)", "jit(_grow_start)"} <= compiled
    with compile_log.Tally() as tally:
        result = fresh.search(fresh.position("gardner", moves=["a2a3"]), 24)
    names = {name for name, _ in tally.summary(top=50)["slowest"]}
    assert not names & {"jit(_grow)", "jit(_grow_result)", "jit(_grow_start)", "jit(_advance)"}
    assert result.nodes == 24 and result.move in fresh.position("gardner", moves=["a2a3"]).legal
    assert fresh.precompile("dark") is False  # fog searches compile their own program


@pytest.mark.parametrize("go", ["go depth 0", "go nodes -3", "go nodes many", "go sideways 3"])
def test_every_go_gets_a_bestmove_even_with_limits_it_cannot_use(go):
    """A GUI waits for the `bestmove` of every `go`: limits this engine cannot use are said in
    an `info string`, and the search runs on its other limits (or the Simulations option)."""
    server, out, stub = stub_server(0.0001)
    send(server, "position startpos", go)
    end = out.wait_for("^bestmove", timeout=10)
    assert out.lines[end].split()[1] in ("a2a3", "b1a3", "b1c3", "b2b3", "c2c3", "d2d3", "e2e3")
    if go != "go depth 0":
        assert any(line.startswith("info string ignored the limits of") for line in out.lines)
    server.run(io.StringIO("quit\n"))
