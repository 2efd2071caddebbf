"""A trained model as a UCI engine: play it in any chess GUI, match runner or ladder.

    python -m mmc_jax.engine --model gardner-cpu        # or: python -m mmc_jax.uci serve ...
    python -m mmc_jax.engine --model runs/atomic [--step N]  # search size: setoption (below)

speaks UCI on stdin/stdout. `--model` is a shipped model's name (`gardner-h200`, `gardner-cpu`,
`joat-cpu`, `joat-study`, `joint-study`, `atomic-supervised`, `extinction-supervised`), an
exported model folder, a run's workdir or one of its checkpoints (`checkpoint.load_model`), or
`none` (the uniform-prior search: zero logits, zero value); it plays every variant. Without it
each variant is played by its shipped model (`checkpoint.DEFAULT_MODELS`: atomic by
`atomic-supervised`, extinction by `extinction-supervised`), every other by Gardner's
(`gardner-h200`), swapped in when UCI_Variant changes (`variant_engines`). A model that cannot
be loaded ends the program at once with one line `error: ...` on stderr and exit status 1.

Protocol (what a GUI sends, what the engine answers):

  uci                  `id name mmc_jax <model>`, the options below, `uciok`
  isready              `readyok`: at once during a search; otherwise once the commands
                       before it are done (the start-up warm-up compile, a replay), as UCI
                       asks, so a GUI that waits for it finds the search compiled; while the
                       warm-up still compiles, an `info string compiling the search ...` first
  setoption name N value V     options (names are case-insensitive):
      UCI_Variant      every variant the project plays: Fairy-Stockfish's names where it has
                       them (gardner, babychess, mallett, atomic-gardner, dark-gardner,
                       extinction-gardner-qrbn), the project's names (baby, mallet, rifle, atomic,
                       dark, extinction, monochromatic, bichromatic), and any composed spelling
                       of the rule space (`capture=atomic,goal=king,fog=on`; docs/rules.md)
      Simulations      network evaluations per move for `go` without a limit (256); under
                       fog they are split over the sampled worlds (Simulations // Worlds each)
      MaxSimulations   the most a `go movetime` / `go infinite` search grows to (8192; without
                       fog at most the engine's `--capacity`, 1024)
      Worlds           fog only: worlds sampled from the mover's belief per search (8)
      Temperature      0 (default): play the search's move; T > 0: sample the move from the
                       visit shares raised to 1/T (seeded by Seed and the ply: reproducible)
      Seed             world sampling under fog and Temperature sampling (0)
      UCI_ShowWDL      add `wdl W D L` to the score (true)
      ReuseTree        keep the search tree for the next move (true): without fog, when the
                       next `position` is this game with moves played since (the engine's
                       move and the reply), the subtree under them is searched on, within
                       `--capacity` nodes (`ModelEngine.grow`; docs/engine.md)
  ucinewgame           forget the cached game and the kept tree
  position startpos|fen F [moves M ...]   a malformed FEN or an illegal move: the line is
                       ignored (the previous position stays) with an `info string` naming the
                       problem and the legal moves
  go nodes N           one search of exactly N simulations (at most what fits in memory:
                       a larger N is capped, with an `info string` that says so)
  go movetime MS | wtime/btime/winc/binc/movestogo   one search that grows until the time is
                       used: a first chunk of one simulation per considered move (a move to
                       answer with), then the budget the measured speed fits into 90% of the
                       time left, in chunks of a quarter of it, an `info` line after each;
                       `bestmove` comes at the deadline at the latest. A clock gives the side
                       to move (of the last `position`) its remaining time / movestogo (20)
                       + 0.8 x its increment, at most half its time, less 50 ms
  go infinite          the same without a deadline, up to MaxSimulations (and what fits in
                       memory: an `info string` says where it stops), until `stop`
  go [depth D]         one search of Simulations (a depth is not a limit of this search; it is
                       named in an `info string`)
  go perft D           the legal-move counts per move (as Fairy-Stockfish prints them); D at
                       most 7 (about 6 s; deeper is capped, said in an `info string`)
  stop                 `bestmove` at once: the best completed search so far
  quit                 ends the program, also during a search
Compiled programs: without fog every search of up to `--capacity` simulations (1024) is one
compiled program, the grown search (`model_engine.ModelEngine.grow`: one tree that any number
of simulations fills, in chunks), compiled by the start-up warm-up; so no `go nodes N` up to it
and no timed search compiles again (a timed search grows to the capacity at most). Under fog,
and beyond the capacity, each search size (per Worlds) is its own program, compiled on first
use after an `info string compiling a search of N nodes ...`. The times a GUI waits, measured
on the 2-core development machine: docs/engine.md (`experiments/bench/engine_start.py`).
Memory: a search's tree is linear in its nodes (about 9 KiB a node as estimated,
`memory.search_bytes`); a search may take half the device's memory (the host's on a CPU), so
`--capacity` beyond it is refused at start-up in one line, and `go nodes N`, Simulations and
the doublings of `go infinite` are capped to it (`ModelEngine.max_nodes`; docs/engine.md).

Anything else is answered with `info string ignored ...` naming the line and the reason, and
nothing changes; but a `go` always ends in a `bestmove`: limits it cannot use (`go nodes -3`,
`go nodes many`) are named in an `info string` and the search runs with Simulations.
`bestmove` is always a legal move (`bestmove (none)` only when the game is over in the
position); if `stop` or the deadline comes before the first search has finished (the first
search after start-up compiles it: about 10 s on a 2-core CPU, its programs compiled side by
side by `ModelEngine.precompile`, then cached on disk by `mmc_jax.infra.cache`), it is the
first legal move in alphabetical order, and an `info string` says so. A warm-up search of
the start position (Simulations) is compiled at start-up and whenever the variant changes
(the grown search serves every variant: rules are data). Each `go` searches in a thread of its
own: after `stop` the engine goes on with the next commands at once, while an abandoned search
that was still compiling finishes in the background (its result is dropped).

Each finished search prints `info depth D nodes N nps X time T score cp C wdl W D L pv ...` and
`info string visits <move> <share> ...` (its top moves). The score is the search's root value v
(in [-1, 1], the side to move's expected result) as Lc0 writes it, cp = 90 tan(1.5637541897 v);
the network has no draw head, so `wdl` is the split of the expected score (1 + v) / 2 with the
most draws: W = 1000 max(v, 0), L = 1000 max(-v, 0), D = 1000 - W - L. The principal variation
follows the chosen move and then the most visited child down the tree; `depth` is its length.

Fog (`dark` and every `fog=on` variant) is fair: the GUI sends the true game (start and moves),
the engine replays it as a referee would, and the side to move's belief is updated only from its
own observations at its own plies (`fog.observe_and_update`, as in `pimc.fog_match`); the search
is `fog.mover_fair_search` over worlds sampled from that belief, and every number printed (moves,
shares, value) is computed from the observation history alone. So two games whose observation
histories are equal (for example two FENs that differ only on squares the mover cannot see) give
the same output (tests/commands/test_uci_serve.py checks it). A game from the variant's start
position starts from an exact belief (the start is public); a game from another FEN starts from
the opponent's material only (`belief.initial_belief(exact=False)`), as `mmc_jax.analyse` does.
Under fog the principal variation is the chosen move alone (the K worlds' trees differ).

Library use: the engine itself lives in `mmc_jax.evaluation.model_engine` (the web page
`mmc_jax.serve` plays through it too); its names are re-exported here:

    engine = ModelEngine(network, params, name="gardner-cpu")
    position = engine.position("gardner", moves=["a2a3", "e4e3"])   # GamePosition
    result = engine.search(position, simulations=64)                  # SearchResult
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from mmc_jax import rules as R
from mmc_jax.evaluation.model_engine import (  # the library half, re-exported: engine.X
    DEFAULT_CANDIDATES,
    DEFAULT_CAPACITY,
    DEFAULT_MAX_SIMULATIONS,
    DEFAULT_SIMULATIONS,
    DEFAULT_WORLDS,
    GROW_SHARE,
    MAX_SIMULATIONS_OPTION,
    PV_LENGTH,
    TOP_MOVES,
    GamePosition,
    ModelEngine,
    SearchResult,
    load_engine,
    parse_uci_variant,
    score_cp,
    timed_plan,
    uci_variant_names,
    wdl,
)
from mmc_jax.infra import checkpoint, startup
from mmc_jax.training import memory

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_CAPACITY",
    "DEFAULT_MAX_SIMULATIONS",
    "DEFAULT_SIMULATIONS",
    "DEFAULT_WORLDS",
    "GROW_SHARE",
    "MAX_SIMULATIONS_OPTION",
    "PV_LENGTH",
    "TOP_MOVES",
    "GamePosition",
    "ModelEngine",
    "SearchResult",
    "UciServer",
    "load_engine",
    "main",
    "parse_uci_variant",
    "score_cp",
    "uci_variant_names",
    "wdl",
]


# ---------------------------------------------------------------------------------------------
# The UCI protocol

# `go perft` depth bound: Gardner's depth 7 (6.9M) counts in about 6 s on a 2-core CPU; depth 8
# would take minutes and gigabytes, during which the engine answers nothing.
MAX_PERFT = 7
# The check options: their name as sent, lower-cased -> (the name they are listed by, the
# `_Options` field they set).
CHECK_OPTIONS = {
    "uci_showwdl": ("UCI_ShowWDL", "show_wdl"),
    "reusetree": ("ReuseTree", "reuse_tree"),
}
COMPILING = (
    "compiling the search (once per start-up: about 10 s on a 2-core CPU the first time, "
    "seconds once the program is in the disk cache)"
)


@dataclasses.dataclass
class _Options:
    variant: str = "gardner"
    simulations: int = DEFAULT_SIMULATIONS
    max_simulations: int = DEFAULT_MAX_SIMULATIONS
    worlds: int = DEFAULT_WORLDS
    temperature: float = 0.0
    seed: int = 0
    show_wdl: bool = True
    reuse_tree: bool = True


@dataclasses.dataclass
class _Job:
    """A `go`: the position, its limits, and who answers (the worker or `stop`/the timer)."""

    position: GamePosition | None
    options: _Options
    nodes: int | None = None
    most: int | None = None  # the largest search that fits in memory (`UciServer._fitting`)
    movetime: float | None = None  # seconds
    infinite: bool = False
    started: float = dataclasses.field(default_factory=time.monotonic)
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    best: SearchResult | None = None
    answered: bool = False


class UciServer:
    """The UCI loop of a `ModelEngine` (see the module docstring): `run(stdin)` reads commands
    until `quit` or the end of input; `handle(line)` takes one (False after `quit`).

    The reading thread answers `uci`, `isready`, `setoption`, `stop` and `quit` at once; one
    worker thread replays positions and runs the searches in order, so a search never blocks
    the protocol. Output lines are written whole, under a lock, and flushed.
    """

    def __init__(
        self,
        engine: ModelEngine,
        output: TextIO,
        *,
        warm_up: bool = True,
        engine_for: Callable[[str], ModelEngine] | None = None,
    ):
        self.engine = engine
        # The model of each variant (`variant_engines`: no --model given), else None: `engine`
        # plays every variant. Called by the worker when UCI_Variant changes.
        self._engine_for = engine_for
        self.output = output
        self.options = _Options()
        self._out_lock = threading.Lock()
        self._jobs: queue.Queue = queue.Queue()
        self._position: GamePosition | None = None
        self._current: _Job | None = None
        self._warm_up = warm_up
        self._compiling: str | None = None  # what the worker is compiling now, if anything
        self._turn = 0  # the side to move of the last `position` (for wtime/btime)
        self._worker = threading.Thread(target=self._work, name="uci-search", daemon=True)
        self._worker.start()
        if warm_up:  # said from now on, so that an `isready` right after `uci` hears it too
            self._compiling = COMPILING
            self._jobs.put(("warm", self.options.variant))

    # -- output

    def send(self, line: str) -> None:
        """Write one line (thread-safe)."""
        with self._out_lock:
            self.output.write(line + "\n")
            self.output.flush()

    def info(self, text: str) -> None:
        """`info string <text>` on one line."""
        self.send("info string " + " ".join(str(text).split()))

    # -- the reading side

    def run(self, stream: TextIO) -> int:
        """Serve commands from `stream` until `quit` or its end; returns 0."""
        for line in stream:
            if not self.handle(line):
                break
        self._quit()
        return 0

    def handle(self, line: str) -> bool:
        """One command line; False once `quit` was read."""
        words = line.split()
        if not words:
            return True
        command, args = words[0], words[1:]
        try:
            if command == "quit":
                return False
            if command == "uci":
                self._uci()
            elif command == "isready":
                if self.searching:
                    self.send("readyok")  # at once, the search goes on
                else:
                    if self._compiling:  # a GUI waits on this answer: say why it is late
                        self.info(f"{self._compiling}; readyok follows")
                    self._jobs.put(("ready", None))  # after the commands before it
            elif command == "setoption":
                self._setoption(args)
            elif command == "ucinewgame":
                self._jobs.put(("newgame", None))
            elif command == "position":
                self._position_command(args)
            elif command == "go":
                try:
                    self._go(args)
                except ValueError as error:  # a GUI waits for a `bestmove`: it always gets one
                    self.info(f"ignored the limits of {line.strip()!r}: {error}; searching "
                              "with the Simulations option")  # fmt: skip
                    self._go([])
            elif command == "stop":
                if self._current is not None:
                    self._current.stop.set()
                    self._answer(self._current)
            elif command in ("debug", "ponderhit", "register"):
                self.info(f"ignored {command!r}: not used by this engine")
            else:
                self.info(f"ignored unknown command: {line.strip()!r}")
        except ValueError as error:
            self.info(f"ignored {line.strip()!r}: {error}")
        return True

    def _uci(self) -> None:
        self.send(f"id name mmc_jax {self.engine.name}")
        self.send("id author the mmc_jax authors")
        names = " ".join(f"var {name}" for name in uci_variant_names())
        self.send(f"option name UCI_Variant type combo default gardner {names}")
        top = MAX_SIMULATIONS_OPTION
        self.send(
            f"option name Simulations type spin default {DEFAULT_SIMULATIONS} min 1 max {top}"
        )
        self.send(
            f"option name MaxSimulations type spin default {DEFAULT_MAX_SIMULATIONS} min 1 "
            f"max {top}"
        )
        self.send(f"option name Worlds type spin default {DEFAULT_WORLDS} min 1 max 256")
        self.send("option name Temperature type string default 0")
        self.send("option name Seed type spin default 0 min 0 max 2147483647")
        self.send("option name UCI_ShowWDL type check default true")
        self.send("option name ReuseTree type check default true")
        self.send("uciok")

    def _setoption(self, args: list[str]) -> None:
        if not args or args[0] != "name":
            raise ValueError("expected `setoption name <name> [value <value>]`")
        rest = args[1:]
        split = rest.index("value") if "value" in rest else len(rest)
        name, value = " ".join(rest[:split]).lower(), " ".join(rest[split + 1 :])
        if name == "uci_variant":
            variant = parse_uci_variant(value)
            if variant != self.options.variant:
                self.options.variant = variant
                self._compiling = COMPILING
                self._jobs.put(("variant", variant))
        elif name in ("simulations", "maxsimulations", "worlds", "seed"):
            number = _integer(value, name)
            top = {"worlds": 256, "seed": 2**31 - 1}.get(name, MAX_SIMULATIONS_OPTION)
            if not (0 if name == "seed" else 1) <= number <= top:
                raise ValueError(f"{name} must be in [{0 if name == 'seed' else 1}, {top}]")
            attr = {"maxsimulations": "max_simulations"}.get(name, name)
            setattr(self.options, attr, number)
        elif name == "temperature":
            try:
                temperature = float(value)
            except ValueError:
                raise ValueError(f"Temperature must be a number, got {value!r}") from None
            if not 0 <= temperature <= 100 or math.isnan(temperature):
                raise ValueError(f"Temperature must be in [0, 100], got {value!r}")
            self.options.temperature = temperature
        elif name in CHECK_OPTIONS:
            label, attr = CHECK_OPTIONS[name]
            if value.lower() not in ("true", "false"):
                raise ValueError(f"{label} must be true or false, got {value!r}")
            setattr(self.options, attr, value.lower() == "true")
        elif name in ("hash", "threads", "ponder", "multipv", "uci_chess960", "variantpath"):
            self.info(f"option {name} has no effect on this engine")
        else:
            raise ValueError(f"no option {name!r}")

    def _position_command(self, args: list[str]) -> None:
        if not args:
            raise ValueError("expected `position startpos|fen <fen> [moves ...]`")
        if args[0] == "startpos":
            fen, rest = None, args[1:]
        elif args[0] == "fen":
            end = args.index("moves") if "moves" in args else len(args)
            fen, rest = " ".join(args[1:end]), args[end:]
            if not fen:
                raise ValueError("`position fen` without a FEN")
        else:
            raise ValueError(f"expected startpos or fen after `position`, got {args[0]!r}")
        if rest and rest[0] != "moves":
            raise ValueError(f"expected `moves` after the position, got {rest[0]!r}")
        side = fen.split()[1] if fen and len(fen.split()) > 1 else "w"
        self._turn = (side == "b") ^ (len(rest[1:]) % 2)
        self._jobs.put(("position", (self.options.variant, fen, tuple(rest[1:]))))

    def _go(self, args: list[str]) -> None:
        limits: dict[str, int] = {}
        infinite, perft = False, None
        notes = []
        i = 0
        while i < len(args):
            word = args[i]
            if word == "infinite":
                infinite = True
                i += 1
            elif word == "ponder":
                notes.append("ponder is not supported: searching the position as given")
                i += 1
            elif word == "searchmoves":
                notes.append("searchmoves is not supported: searching every legal move")
                i = len(args)
            elif word in (
                "nodes",
                "movetime",
                "depth",
                "wtime",
                "btime",
                "winc",
                "binc",
                "movestogo",
                "mate",
                "perft",
            ):
                if i + 1 >= len(args):
                    raise ValueError(f"`go {word}` needs a number")
                number = _integer(args[i + 1], word)
                if number < 0 or (word in ("nodes", "perft") and number < 1):
                    raise ValueError(f"`go {word}` needs a positive number, got {number}")
                if word == "perft":
                    perft = number
                else:
                    limits[word] = number
                i += 2
            else:
                raise ValueError(f"unknown `go` argument {word!r}")
        if perft is not None:
            if perft > MAX_PERFT:  # a deeper count outgrows memory and ignores `stop`
                self.info(
                    f"perft {perft} is capped to depth {MAX_PERFT} (a deeper count takes minutes "
                    "and gigabytes, answering nothing meanwhile)"
                )
                perft = MAX_PERFT
            self._jobs.put(("perft", perft))
            return
        for word in ("depth", "mate"):
            if word in limits:
                notes.append(f"{word} is not a limit of this search: using the other limits")
        if self._current is not None and not self._current.answered:
            self._current.stop.set()
            self._answer(self._current)
        job = _Job(None, dataclasses.replace(self.options), infinite=infinite)
        if "nodes" in limits:
            job.nodes = limits["nodes"]
        if "movetime" in limits:
            job.movetime = limits["movetime"] / 1000
        elif {"wtime", "btime"} & set(limits):
            job.movetime = _clock_time(limits, self._turn)
        for note in notes:
            self.info(note)
        self._current = job
        self._jobs.put(("go", job))
        if job.movetime is not None and not job.infinite:
            timer = threading.Timer(job.movetime, self._answer, args=(job,))
            timer.daemon = True
            timer.start()

    # -- answering a search

    def _answer(self, job: _Job) -> None:
        """Send the job's `bestmove` (once): the best completed search, or a fallback."""
        with job.lock:
            if job.answered:
                return
            if job.position is None and job.best is None:
                # Not even replayed yet: the worker answers as soon as it has the position.
                job.stop.set()
                return
            job.answered = True
            if job.best is not None:
                self.send(f"bestmove {job.best.move}")
            elif job.position is not None and job.position.legal:
                move = next(iter(job.position.legal))
                self.info(
                    "stopped before the first search finished (it compiles on first use): "
                    f"{move} is the first legal move, not a searched one"
                )
                self.send(f"bestmove {move}")
            else:
                self.send("bestmove (none)")

    # -- the worker

    def _work(self) -> None:
        while True:
            kind, payload = self._jobs.get()
            if kind == "quit":
                return
            try:
                self._do(kind, payload)
            except Exception as error:  # noqa: BLE001 -- a bug must not kill the engine
                self.info(f"internal error in {kind}: {type(error).__name__}: {error}")
                if kind == "go":
                    payload.position = payload.position or self._position
                    self._answer(payload)

    def _do(self, kind: str, payload: Any) -> None:
        if kind == "warm" or kind == "variant":
            self._position = None
            if kind == "variant" and self._engine_for is not None:
                try:
                    self.engine = self._engine_for(payload)
                except (FileNotFoundError, ValueError, OSError) as error:
                    self.info(f"variant {payload}: its model cannot be loaded ({error}); "
                              f"{self.engine.name} plays it")  # fmt: skip
            if kind == "variant" or self._warm_up:
                try:
                    self._compiling = COMPILING
                    # The first move's programs, compiled side by side.
                    precompile = getattr(self.engine, "precompile", None)
                    if precompile is not None:
                        precompile(payload)
                    position = self.engine.position(payload)
                    self._position = position
                    if self._warm_up and not position.over:
                        self.engine.search(
                            position, self.options.simulations, worlds=self.options.worlds
                        )
                        if getattr(self.engine, "nodes_per_second", 0) is None:
                            # The compiling search's time is no speed: one more, compiled,
                            # gives the speed the first timed search plans with.
                            self.engine.search(position, 64, worlds=self.options.worlds)
                except ValueError as error:
                    self.info(f"variant {payload}: {error}")
                finally:
                    self._compiling = None
        elif kind == "ready":
            self.send("readyok")
        elif kind == "newgame":
            self.engine.forget()
        elif kind == "position":
            variant, fen, moves = payload
            try:
                self._position = self.engine.position(variant, fen, moves)
            except ValueError as error:
                self.info(f"ignored position: {error}")
        elif kind == "perft":
            self._perft(payload)
        elif kind == "go":
            self._search(payload)

    def _current_position(self) -> GamePosition | None:
        if self._position is None:
            try:
                self._position = self.engine.position(self.options.variant)
            except ValueError as error:
                self.info(f"no position: {error}")
        return self._position

    def _perft(self, depth: int) -> None:
        position = self._current_position()
        if position is None:
            return
        total = 0
        for move in position.legal:
            if depth == 1:
                count = 1
            else:
                after = self.engine.position(
                    position.variant, position.start_fen, [*position.moves, move]
                )
                count = R.perft(position.variant, after.fen, depth - 1)
                self.engine.position(position.variant, position.start_fen, position.moves)
            total += count
            self.send(f"{move}: {count}")
        self.send("")
        self.send(f"Nodes searched: {total}")

    def _search(self, job: _Job) -> None:
        """On the worker: the position of a `go`; the search itself runs in its own thread, so
        that after `stop` the worker goes on with the next commands at once."""
        position = self._current_position()
        with job.lock:
            job.position = position
            stopped_early = job.stop.is_set()
        if position is None or position.over:
            if position is not None:
                self.info(f"the game is over ({position.result}): no move to search")
            with job.lock:
                job.answered = True
            self.send("bestmove (none)")
            return
        threading.Thread(
            target=self._run_search, args=(job, position, stopped_early), daemon=True
        ).start()

    def _run_search(self, job: _Job, position: GamePosition, stopped_early: bool) -> None:
        try:
            self._searches(job, position, stopped_early)
        except Exception as error:  # noqa: BLE001 -- a bug must not kill the engine
            self.info(f"internal error in the search: {type(error).__name__}: {error}")
            self._answer(job)

    def _searches(self, job: _Job, position: GamePosition, stopped_early: bool) -> None:
        options = job.options
        if hasattr(self.engine, "reuse_tree"):  # the ReuseTree option of this `go`
            self.engine.reuse_tree = options.reuse_tree

        def run(budget: int) -> SearchResult:
            return self.engine.search(
                position,
                budget,
                worlds=options.worlds,
                temperature=options.temperature,
                seed=options.seed,
            )

        simulations = self._fitting(job, position)
        if simulations is None:
            self._answer(job)
            return
        if stopped_early:
            # `stop` or the deadline came while the worker was busy before: one search if it
            # is compiled (milliseconds), else the fallback move.
            budget = job.nodes or simulations
            if self.engine.is_compiled(position, budget, options.worlds):
                result = run(budget)
                with job.lock:
                    if not job.answered:
                        job.best = result
                        self.send(result.info_line(options.show_wdl))
            self._answer(job)
            return
        top = max(options.max_simulations, options.simulations)
        grows = getattr(self.engine, "grows", None)
        timed = job.nodes is None and (job.movetime is not None or job.infinite)
        if timed and grows is not None and grows(position, min(top, self.engine.capacity)):
            self._grow(job, position, min(top, self.engine.capacity))
            return
        if job.nodes is not None:
            budgets = [job.nodes]
        elif job.movetime is None and not job.infinite:
            budgets = [simulations]
        else:
            budgets, budget = [], simulations
            while budget <= min(max(options.max_simulations, simulations), job.most or budget):
                budgets.append(budget)
                budget *= 2
            if job.most is not None and budget <= options.max_simulations:
                self.info(
                    f"MaxSimulations {options.max_simulations}: the searches grow to "
                    f"{budgets[-1]} nodes at most ({job.most} fit in memory)"
                )
        last_seconds = 0.0
        for index, budget in enumerate(budgets):
            if job.stop.is_set():
                break
            if index and job.movetime is not None:
                expected = 2.2 * last_seconds
                if not self.engine.is_compiled(position, budget, options.worlds):
                    expected += self.engine.compile_seconds or 0.0
                if time.monotonic() - job.started + expected > job.movetime:
                    break
            if not self.engine.is_compiled(position, budget, options.worlds):
                self.info(
                    f"compiling a search of {budget} nodes (once per size and start-up; about "
                    "a minute on a small CPU the first time, seconds once in the disk cache)"
                )
            result = run(budget)
            last_seconds = result.seconds
            with job.lock:
                if job.answered:
                    return
                job.best = result
                self.send(result.info_line(options.show_wdl))
                self.send(result.visits_line())
                if result.consistent == 0:
                    self.info("no sampled world was consistent with the observation")
        if job.infinite:
            job.stop.wait()
        self._answer(job)

    def _fitting(self, job: _Job, position: GamePosition) -> int | None:
        """The Simulations option capped, and `go nodes N` (`job.nodes`) capped, to what fits in
        memory (`ModelEngine.max_nodes`), each cap said in one `info string`; `job.most` the
        bound. None when not even one simulation fits (the fallback move answers)."""
        options = job.options
        check = getattr(self.engine, "check_size", None)
        if check is None:  # an engine without a memory bound
            return options.simulations
        job.most = self.engine.max_nodes(position.fog, options.worlds)
        if job.most < 1:
            self.info("no search fits in memory: answering without one")
            return None
        for name, wanted in (("go nodes", job.nodes), ("Simulations", options.simulations)):
            if wanted is not None and wanted > job.most:
                try:
                    check(position.fog, wanted, options.worlds)
                except ValueError as error:
                    self.info(f"{name} {wanted}: {error}; searching {job.most}")
        if job.nodes is not None:
            job.nodes = min(job.nodes, job.most)
        return min(options.simulations, job.most)

    def _grow(self, job: _Job, position: GamePosition, top: int) -> None:
        """A timed or infinite search that grows one tree in chunks (`ModelEngine.grow` with
        `model_engine.timed_plan`: a first chunk of one simulation per considered move, then a
        budget of what the measured speed fits into `GROW_SHARE` of the time left, infinite:
        `top`), each chunk followed by its `info` line, until the budget, the deadline or
        `stop`."""
        options = job.options
        deadline = None if job.movetime is None else job.started + job.movetime
        chunks, plan = timed_plan(self.engine, position, top, deadline, job.stop)
        for result in self.engine.grow(
            position,
            top,
            chunks=chunks,
            plan=plan,
            temperature=options.temperature,
            seed=options.seed,
        ):
            with job.lock:
                if job.answered:
                    return
                job.best = result
                self.send(result.info_line(options.show_wdl))
        if job.best is not None:
            with job.lock:
                if not job.answered:
                    self.send(job.best.visits_line())
        if job.infinite:
            job.stop.wait()
        self._answer(job)

    def _quit(self) -> None:
        if self._current is not None:
            self._current.stop.set()
        self._jobs.put(("quit", None))

    @property
    def searching(self) -> bool:
        """Whether a `go` has not been answered yet."""
        return self._current is not None and not self._current.answered


def _integer(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None


def _clock_time(limits: dict[str, int], turn: int | None = None) -> float:
    """Seconds for a move from the clock fields of `go`: the side to move's (`turn` 0 White, 1
    Black, from the last `position`; None or a missing field: the smaller of the two) remaining
    time over the moves to go (20 when not given) plus most of its increment, at most half the
    remaining time, less 50 ms for the answer, at least 10 ms."""
    times = [limits[k] for k in ("wtime", "btime") if k in limits]
    increments = [limits.get(k, 0) for k in ("winc", "binc")]
    mine = ("wtime", "btime")[turn] if turn is not None else None
    remaining = limits[mine] if mine in limits else min(times)
    increment = increments[turn] if mine in limits else min(increments)
    share = remaining / max(limits.get("movestogo", 20), 1) + 0.8 * increment
    return max(min(share, remaining / 2) - 50, 10) / 1000


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.engine",
        description="A trained model as a UCI engine on stdin/stdout (every variant; fair "
        "search under fog). Options and protocol: the module docstring, `pydoc mmc_jax.engine`.",
        epilog="UCI options (setoption): UCI_Variant, Simulations, MaxSimulations, Worlds, "
        "Temperature, Seed, UCI_ShowWDL, ReuseTree (keep the search tree for the next move: "
        "true; false searches every move from an empty tree).",
    )
    default = checkpoint.default_model("gardner") or "none"
    own = ", ".join(f"{v}: {m}" for v, m in checkpoint.own_default_models().items())
    parser.add_argument(
        "--model",
        default=None,
        help=f"a shipped model's name ({', '.join(checkpoint.shipped_models())}), an exported "
        "model, a run workdir or a checkpoint folder, for every variant; 'none': the "
        f"uniform-prior search (default: each variant's shipped model, {own}; else {default})",
    )
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
    parser.add_argument("--max-plies", type=int, default=None, help="ply cap (draw), default 256")
    parser.add_argument(
        "--no-warm-up", action="store_true", help="do not compile a search at start-up"
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=DEFAULT_CAPACITY,
        help="nodes of the one compiled search tree that serves every `go nodes N` up to it and "
        f"the timed searches (default {DEFAULT_CAPACITY}; a larger tree makes each simulation "
        "slower, a larger request compiles its own search)",
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    exit_when_done: Callable[[int], None] | None = None,
) -> int:
    """`python -m mmc_jax.engine --model NAME`: serve UCI until `quit`; returns the exit status
    (1, with one line on stderr, when the model cannot be loaded)."""
    args = _parser().parse_args(argv)
    startup.start()
    try:  # the grown search's tree is compiled at start-up: it must fit
        memory.check_search(max(args.capacity, 1), name="--capacity")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    per_variant = args.model is None  # each variant's own shipped model where it has one
    if per_variant:
        args.model = checkpoint.default_model("gardner") or "none"
    try:
        engine = load_engine(
            args.model, args.step, max_plies=args.max_plies, capacity=max(args.capacity, 1)
        )
    except (FileNotFoundError, ValueError, OSError) as error:
        print(f"error: cannot load model {args.model!r}: {error}", file=sys.stderr, flush=True)
        return 1
    engine_for = None
    if per_variant:
        engine_for = variant_engines(args.max_plies, max(args.capacity, 1), {args.model: engine})
    server = UciServer(
        engine, stdout or sys.stdout, warm_up=not args.no_warm_up, engine_for=engine_for
    )
    status = server.run(stdin or sys.stdin)
    if exit_when_done is not None:
        exit_when_done(status)
    return status


def variant_engines(
    max_plies: int | None, capacity: int, loaded: dict[str, ModelEngine] | None = None
) -> Callable[[str], ModelEngine]:
    """`variant -> ModelEngine`: the variant's shipped model (`checkpoint.default_model`; a
    composed variant without one: Gardner's), each loaded once (`loaded`: {name: engine}
    already loaded)."""
    loaded = dict(loaded or {})
    gardner = checkpoint.default_model("gardner") or "none"

    def engine_for(variant: str) -> ModelEngine:
        name = checkpoint.default_model(variant) or gardner
        if name not in loaded:
            loaded[name] = load_engine(name, None, max_plies=max_plies, capacity=capacity)
        return loaded[name]

    return engine_for


def _exit_now(status: int) -> None:
    """Leave at once: a compile or search still running in the worker would hold the exit."""
    sys.stdout.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main(exit_when_done=_exit_now))
