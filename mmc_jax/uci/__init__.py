"""A UCI engine as an opponent: Fairy-Stockfish (or any UCI engine) in a subprocess.

    engine = UciEngine("gardner")                 # default_engine(): the build, or Debian's
    move = engine.best_move(start_fen, ["a2a3", "b4b3"], Limits(nodes=1000))
    engine.close()

Set-up: `uci`, then `setoption name VariantPath value <mmc_jax/data/fairy-variants.ini>` (the
sections of the variants Fairy-Stockfish can express), `uci` again (an engine lists the variants
of a loaded file only in its second option list), `setoption name UCI_Variant value <name>`
(`mmc_jax.rules.FAIRY_STOCKFISH_NAMES`; for a variant without one, the project's canonical
spelling, which a model served by `python -m mmc_jax.engine` lists), and `isready`. Before it
is used the engine must pass a probe: its legal moves (`go perft 1`) in a few fixed positions
of the variant must equal the project's rules (promotions, captures, late positions; the
expected moves are stored below and checked against pyffish and the rules by the tests). A
variant the engine does not list, or lists but plays by other rules, raises
`EngineUnsupported` with what the engine said.

Strength: `Limits(nodes=..., depth=..., movetime_ms=..., skill=...)`. Every search starts from
`ucinewgame` (cleared hash and histories), so with a node or depth limit and one thread a move
is a pure function of the game so far: matches are reproducible whatever the scheduling of
games onto engine processes. `skill` (Stockfish's "Skill Level", -20..20) picks among the best
moves at random by the engine's own clock-seeded generator: not reproducible.

Failures never pass silently: an engine that exits raises `EngineCrashed` (with its exit status
and last output), one that does not answer in time `EngineTimeout`, a move that is not legal in
the project's rules (or `bestmove (none)` where moves exist) `EngineIllegalMove` (with the
position and the legal moves). After any of them the engine is killed; `EnginePool` starts a
fresh one for the next request and hands the error back to the caller with the request.

The engine: `python -m mmc_jax.uci build` downloads the source distribution of the installed
`pyffish` (the Python build of Fairy-Stockfish that the tests use as an oracle; its `src/` holds
the whole engine, UCI loop included) with pip, compiles it with g++ (in parallel, about a minute
on 2 cores) into `$MMC_CACHE/fairy-stockfish-pyffish-<version>/fairy-stockfish` (default cache
`~/.cache/mmc_jax`) and prints the binary's path; a second call reuses the build. pyffish
0.0.90's engine plays gardner, baby, mallet, atomic, dark and extinction; it names itself by its
compile date ("Fairy-Stockfish 221126" when built on 2026-11-22: Stockfish's DDMMYY fallback
when the sources carry no version), so the ladders' "221126" is this build.
`default_engine()` looks in this order: `$MMC_ENGINE`, that build, a `fairy-stockfish` on the
PATH, Debian's /usr/games/fairy-stockfish.

`python -m mmc_jax.uci serve --model NAME ...` runs a trained model AS a UCI engine: it is
`python -m mmc_jax.engine --model NAME ...` (that module's docstring has the protocol).

`python -m mmc_jax.uci [--engine PATH]` prints which of the project's variants the engine can
play. Debian 12's `fairy-stockfish` 11.1 plays gardner, baby, mallet and dark; it has no atomic
template, and its extinction variant does not promote on the fifth rank (the variants file's
`promotionRegion` keys are newer than 11.1); rifle, monochromatic and bichromatic cannot be
written as Fairy-Stockfish variants at all. A program that does not answer `uci` with `uciok`
within `DEFAULT_UCI_TIMEOUT` seconds is not a UCI engine (`EngineNotUci`): the check stops
there with exit status 1.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import fcntl
import functools
import glob
import importlib.metadata
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from mmc_jax.infra.cache import cache_root
from mmc_jax.rules.variants import FAIRY_STOCKFISH_NAMES, START_FENS, VARIANTS, check_variant

DEBIAN_ENGINE = "/usr/games/fairy-stockfish"
ENGINE_NAMES = ("fairy-stockfish", "fairy_stockfish", "stockfish-fairy")
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_UCI_TIMEOUT = 5.0  # the first `uci` -> `uciok`: a real engine answers in milliseconds
DEFAULT_MOVE_TIMEOUT = 30.0
DEFAULT_HASH_MB = 4

# Legal moves of the start positions (stored: the rules' Python helpers compile a move
# generator, 10-20 s on a small CPU).
START_MOVES = {
    "gardner": "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3",
    "baby": "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3",
    "mallet": "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e1d3 e2e3",
    "atomic": "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3",
    "dark": "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3",
    "extinction": "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3",
}

# Probe positions per variant: (FEN, the legal moves in the project's rules and in pyffish).
# Picked from seeded random games: one with promotions (capturing ones too), one with several
# captures, one late in a game. tests/uci/test_uci.py checks them against both oracles.
PROBES: dict[str, tuple[tuple[str, str], ...]] = {
    "gardner": (
        (
            "r1bk1/1p1P1/Np2P/3p1/R1BK1 b - - 1 9",
            "a5a3 a5a4 a5b5 b3b2 b4a3 c5d4 d2c1b d2c1n d2c1q d2c1r d5e4",
        ),
        ("r1b1k/2p1p/p1P1q/P1P1Q/RNB1K w - - 1 6", "b1a3 b1d2 c1a3 c1b2 c1d2 c1e3 e1d1 e2e3"),
        (
            "2b1k/4p/2P2/r1P2/RN2K b - - 1 11",
            "a2a1 a2a3 a2a4 a2a5 a2b2 a2c2 c5a3 c5b4 c5d4 c5e3 e4e3 e5d5",
        ),
    ),
    "baby": (
        (
            "k2nr/qppPp/5/Pp1PQ/RNB1K b - - 0 5",
            "a4a2 a4a3 a4b3 a4b5 a4c2 a4d1 a5b5 b2a1b b2a1n b2a1q b2a1r b2c1b b2c1n b2c1q "
            "b2c1r b4b3 c4c3 d5c3 d5e3 e4e3",
        ),
        (
            "k3r/qppPp/2n2/Pp1PQ/RNB1K w - - 1 6",
            "a2a3 b1a3 b1c3 c1b2 d2c3 d2d3 d4d5b d4d5n d4d5q d4d5r d4e5b d4e5n d4e5q d4e5r "
            "e2c4 e2d1 e2d3 e2e3 e2e4",
        ),
        (
            "k4/2q1p/5/3K1/bNB2 b - - 0 11",
            "a1b2 a1c3 a1d4 a1e5 a5a4 a5b4 a5b5 c4a2 c4a4 c4b3 c4b4 c4b5 c4c1 c4c2 c4c3 c4c5 "
            "c4d3 c4d4 c4d5 c4e2 e4e3",
        ),
    ),
    "mallet": (
        (
            "1rk1b/Ppbpq/3P1/P1PNQ/R1K2 w - - 1 7",
            "a1b1 a2a3 a4a5b a4a5n a4a5q a4a5r a4b5b a4b5n a4b5q a4b5r c1b1 c1b2 c1d1 c2c3 "
            "d2b1 d2b3 d2c4 d2e4 d3c4 d3e4 e2d1 e2e1 e2e3 e2e4",
        ),
        ("r1kqb/ppbp1/1P1P1/P1PNQ/R1K2 b - - 2 5", "a4a3 a4b3 a5b5 c4b3 c4b5 c4d3 c5b5 d5e4"),
        (
            "1rk1b/p4/P1Pb1/5/K3n b - - 3 11",
            "b5a5 b5b1 b5b2 b5b3 b5b4 c5c4 c5d5 d3b1 d3c2 d3c4 d3e2 d3e4 e1c2 e5c3 e5d4",
        ),
    ),
    "atomic": (
        (
            "2b2/3Pk/5/4p/2K2 w - - 1 12",
            "c1b1 c1b2 c1c2 c1d2 d4c5b d4c5n d4c5q d4c5r d4d5b d4d5n d4d5q d4d5r",
        ),
        (
            "1nbqk/4p/P2pP/3P1/RN2K b - - 0 6",
            "b5a3 b5c3 b5d4 c5a3 c5b4 c5d4 c5e3 d5a2 d5b3 d5c4 d5d4",
        ),
        ("4K/5/4k/5/5 b - - 7 11", "e3d2 e3d3 e3d4 e3e2 e3e4"),
    ),
    "dark": (
        (
            "rnbk1/ppP1p/4P/P1P2/RNBqK w - - 0 5",
            "a2a3 b1a3 b1c3 b1d2 c1a3 c1b2 c1d2 c2c3 c4b5b c4b5n c4b5q c4b5r c4d5b c4d5n "
            "c4d5q c4d5r e1d1 e1d2 e1e2",
        ),
        (
            "r2qk/2pb1/p1P1p/P1P1Q/RNB1K w - - 0 6",
            "b1a3 b1d2 c1a3 c1b2 c1d2 c1e3 c3d4 e1d1 e1d2 e2c4 e2d1 e2d2 e2d3 e2e3",
        ),
        (
            "1r3/1k2p/4b/P1P2/RN2K b - - 1 11",
            "b4a3 b4a4 b4a5 b4b3 b4c3 b4c4 b4c5 b5a5 b5c5 b5d5 b5e5 e3c1 e3c5 e3d2 e3d4",
        ),
    ),
    "extinction": (
        (
            "r1bqk/pPppp/5/1PPPn/RNBQK w - - 0 3",
            "a1a2 a1a3 a1a4 b1a3 b1c3 b2b3 b4a5b b4a5n b4a5q b4a5r b4b5b b4b5n b4b5q b4b5r "
            "b4c5b b4c5n b4c5q b4c5r c2c3 d1e2 d2d3 e1e2",
        ),
        (
            "rnbq1/Qppk1/5/PP2P/RNB1K w - - 3 6",
            "a2a3 a4a3 a4a5 a4b3 a4b4 a4b5 a4c2 a4d1 b1a3 b1c3 b1d2 b2b3 c1d2 c1e3 e1d1 e1d2 e2e3",
        ),
    ),
}


@functools.cache
def start_moves(variant: str) -> str:
    """The legal moves of the variant's start position (stored for Fairy-Stockfish's variants;
    for the others computed once per process by the rules, which compiles a move generator)."""
    if variant in START_MOVES:
        return START_MOVES[variant]
    from mmc_jax import rules

    return " ".join(rules.legal_moves(variant, START_FENS[variant]))


# ---------------------------------------------------------------------------------------------
# Errors


class EngineError(RuntimeError):
    """Base class of every engine failure; the message says what happened and where."""


class EngineNotFound(EngineError):
    """No engine binary at the given path (or none installed)."""


class EngineNotUci(EngineError):
    """The program does not speak UCI: no `uciok` after `uci` (it hung, echoed, or exited)."""


class EngineBuildError(EngineError):
    """`build_engine` failed (no compiler, no pip, download or compile error)."""


class EngineUnsupported(EngineError):
    """The engine cannot play the variant (not listed, or it generates other moves)."""


class EngineCrashed(EngineError):
    """The engine process exited (or its pipe broke)."""


class EngineTimeout(EngineError):
    """The engine did not answer within the timeout."""


class EngineIllegalMove(EngineError):
    """The engine played a move that is not legal in the project's rules."""


# ---------------------------------------------------------------------------------------------
# Settings


@dataclasses.dataclass(frozen=True)
class Limits:
    """How hard the engine thinks per move: any of nodes, depth, movetime_ms (a `go` limit;
    several are combined by the engine, which stops at the first reached) and skill (the
    "Skill Level" option, -20..20, set before the search; 20 = full strength).

    With no `go` limit at all the search is `go depth 1` (never an infinite search).
    """

    nodes: int | None = None
    depth: int | None = None
    movetime_ms: int | None = None
    skill: int | None = None

    def __post_init__(self):
        for name in ("nodes", "depth", "movetime_ms"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        if self.skill is not None and (
            isinstance(self.skill, bool)
            or not isinstance(self.skill, int)
            or not -20 <= self.skill <= 20
        ):
            raise ValueError(f"skill must be an integer in [-20, 20], got {self.skill!r}")

    def go_command(self) -> str:
        parts = ["go"]
        if self.nodes is not None:
            parts += ["nodes", str(self.nodes)]
        if self.depth is not None:
            parts += ["depth", str(self.depth)]
        if self.movetime_ms is not None:
            parts += ["movetime", str(self.movetime_ms)]
        if len(parts) == 1:
            parts += ["depth", "1"]
        return " ".join(parts)

    def label(self) -> str:
        """Short name, e.g. 'nodes=100' or 'depth=3,skill=5'."""
        fields = [
            f"{name}={getattr(self, name)}"
            for name in ("nodes", "depth", "movetime_ms", "skill")
            if getattr(self, name) is not None
        ]
        return ",".join(fields) or "depth=1"


def variants_file() -> str:
    """Path of the shipped Fairy-Stockfish variants file (mmc_jax/data/fairy-variants.ini)."""
    return str(resources.files("mmc_jax").joinpath("data", "fairy-variants.ini"))


def default_engine() -> str:
    """The engine used when none is given: `$MMC_ENGINE`, the build of `build_engine` (in the
    cache), a `fairy-stockfish` on the PATH, or Debian's /usr/games/fairy-stockfish (which is
    not on a root PATH)."""
    if os.environ.get("MMC_ENGINE"):
        return os.environ["MMC_ENGINE"]
    built = built_engine()
    if built:
        return built
    for name in ENGINE_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return DEBIAN_ENGINE


def _command(engine: str | Sequence[str] | None) -> list[str]:
    if engine is None:
        engine = default_engine()
    command = [engine] if isinstance(engine, (str, os.PathLike)) else list(engine)
    if not command:
        raise EngineNotFound("empty engine command")
    path = os.fspath(command[0])
    resolved = shutil.which(path) if os.sep not in path else path
    if resolved is None or not os.path.isfile(resolved):
        raise EngineNotFound(
            f"no UCI engine at {path!r}; build Fairy-Stockfish with `python -m mmc_jax.uci "
            "build` (from pyffish's sources, about a minute), or install Debian's with "
            "`apt-get install fairy-stockfish` (it lands in /usr/games; it plays fewer "
            "variants), or name one with MMC_ENGINE=PATH (or --engine PATH, where a command "
            "has that flag)"
        )
    if not os.access(resolved, os.X_OK):
        raise EngineNotFound(f"engine {resolved!r} is not executable")
    return [resolved, *command[1:]]


ENGINE_PREFIX = "uci:"
# Timeouts for an engine named on a command line with `uci:`: it may be a model served by
# `python -m mmc_jax.engine`, which loads its network before `uciok` and compiles its move
# generator and search on the first probe and the first `go` (tens of seconds each on a small
# CPU, then cached on disk).
SLOW_ENGINE_TIMEOUTS = {"uci_timeout": 60.0, "handshake_timeout": 600.0}
SLOW_ENGINE_MOVE_TIMEOUT = 600.0


def engine_command(spec: str) -> list[str] | None:
    """The command of a player given as `uci:COMMAND` (split as a shell would, e.g.
    `uci:python -m mmc_jax.engine --model gardner-cpu` or `uci:/usr/games/fairy-stockfish`);
    None for anything else. ValueError for an empty or unbalanced command."""
    if not spec.startswith(ENGINE_PREFIX):
        return None
    try:
        command = shlex.split(spec[len(ENGINE_PREFIX) :])
    except ValueError as error:
        raise ValueError(f"cannot split the engine command {spec!r}: {error}") from None
    if not command:
        raise ValueError(f"{spec!r} names no engine command after {ENGINE_PREFIX!r}")
    return command


def supported_by_fairy_stockfish(variant: str) -> bool:
    """Whether the variant can be written as a Fairy-Stockfish variant at all."""
    return check_variant(variant) in FAIRY_STOCKFISH_NAMES


# ---------------------------------------------------------------------------------------------
# Building Fairy-Stockfish from pyffish's source distribution

ENGINE_BINARY = "fairy-stockfish"
# As pyffish's setup.py (all variants, large boards, no embedded network), without -flto: the
# engine is small, link-time optimisation would serialise the build.
BUILD_DEFINES = (
    "-DLARGEBOARDS",
    "-DALLVARS",
    "-DPRECOMPUTED_MAGICS",
    "-DNNUE_EMBEDDING_OFF",
    "-DIS_64BIT",
)
BUILD_FLAGS = ("-std=c++17", "-O2", "-DNDEBUG", "-pthread", "-w", *BUILD_DEFINES)
# pyffish's Python module and its JavaScript binding: the rest (main.cpp, uci.cpp, ...) is the
# engine.
NOT_ENGINE_SOURCES = ("pyffish.cpp", "ffishjs.cpp")


def pyffish_version() -> str | None:
    """The installed pyffish's version (e.g. '0.0.90'), None when it is not installed."""
    try:
        return importlib.metadata.version("pyffish")
    except importlib.metadata.PackageNotFoundError:
        return None


def engine_build_dir(version: str) -> Path:
    """The build directory of pyffish `version`'s engine in the cache."""
    return cache_root() / f"fairy-stockfish-pyffish-{version}"


def _version_key(path: str) -> tuple:
    version = path.rsplit("pyffish-", 1)[-1].split(os.sep)[0]
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def built_engine(version: str | None = None) -> str | None:
    """Path of the engine built from pyffish `version`'s sources (default: the installed
    pyffish; without pyffish, the newest build in the cache), or None if there is none."""
    version = version or pyffish_version()
    if version:
        candidates = [str(engine_build_dir(version) / ENGINE_BINARY)]
    else:
        pattern = str(cache_root() / "fairy-stockfish-pyffish-*" / ENGINE_BINARY)
        candidates = sorted(glob.glob(pattern), key=_version_key, reverse=True)
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _engine_id(binary: str, timeout: float = DEFAULT_HANDSHAKE_TIMEOUT) -> str:
    """The `id name` a binary answers to `uci` (raises EngineBuildError otherwise)."""
    try:
        out = subprocess.run(
            [binary], input="uci\nquit\n", capture_output=True, text=True, timeout=timeout
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        raise EngineBuildError(f"the built engine {binary} does not run: {error}") from None
    for line in out.splitlines():
        if line.startswith("id name "):
            return line[len("id name ") :].strip()
    raise EngineBuildError(f"the built engine {binary} does not answer `uci`: {out[-200:]!r}")


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on `path` (concurrent builds of one version wait for each other)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download_sdist(version: str, dest: str, python: str) -> str:
    """pip-download pyffish==version's sdist into `dest`; returns the archive's path."""
    try:
        has_pip = subprocess.run(
            [python, "-m", "pip", "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise EngineBuildError(f"cannot run {python} -m pip: {error}") from None
    if has_pip.returncode != 0:
        raise EngineBuildError(
            f"pip is missing ({python} -m pip: {_last_lines(has_pip.stderr, 1)}); install it "
            "(python -m ensurepip) or pass --sdist with pyffish's source archive"
        )
    command = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--disable-pip-version-check", "-q", "-d", dest, f"pyffish=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    archives = glob.glob(os.path.join(dest, f"pyffish-{version}.tar.gz"))
    if done.returncode != 0 or not archives:
        raise EngineBuildError(
            f"downloading pyffish=={version}'s source distribution failed (pip download "
            f"exited {done.returncode}: {_last_lines(done.stderr + done.stdout, 2)}); check "
            "the network or pass --sdist with the archive"
        )
    return archives[0]


def _extract(archive: str, dest: str) -> Path:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse links out of `dest`
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)
    sources = glob.glob(os.path.join(dest, "*", "src", "main.cpp"))
    if not sources:
        raise EngineBuildError(f"{archive} has no src/main.cpp: not a pyffish source archive")
    return Path(sources[0]).parent


def _compile(cxx: str, src: Path, objdir: Path, jobs: int, log) -> list[str]:
    """Compile every engine source file of `src` with `jobs` compilers at once; object paths."""
    files = [
        p
        for p in sorted(src.rglob("*.cpp"))
        if p.name not in NOT_ENGINE_SOURCES and "incbin" not in p.parts
    ]
    files.sort(key=lambda p: -p.stat().st_size)  # longest first: the pool finishes together
    log(f"compiling {len(files)} files with {jobs} parallel g++ jobs ...")

    def one(path: Path) -> str:
        obj = objdir / (str(path.relative_to(src)).replace(os.sep, "_") + ".o")
        done = subprocess.run(
            [cxx, *BUILD_FLAGS, "-c", str(path), "-o", str(obj)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise EngineBuildError(
                f"{cxx} failed on {path.relative_to(src)}: {_last_lines(done.stderr)}"
            )
        return str(obj)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, files))


def build_engine(
    version: str | None = None,
    *,
    sdist: str | None = None,
    jobs: int | None = None,
    cxx: str | None = None,
    force: bool = False,
    python: str = sys.executable,
    log: Callable[[str], None] | None = None,
) -> str:
    """Build Fairy-Stockfish from pyffish's source distribution; the binary's path.

    Args:
      version: pyffish version (default: the installed one, so the engine and the tests'
        oracle are one program).
      sdist: a local `pyffish-<version>.tar.gz` instead of downloading it with pip.
      jobs: parallel compilers (default: the CPU count).
      cxx: the C++ compiler (default `$CXX`, else g++).
      force: rebuild even if the cache has the binary (otherwise it is reused at once).
      python: the interpreter whose pip downloads the archive.
      log: progress lines (default: stderr).

    Raises EngineBuildError with a one-line message when g++ or pip is missing, the download
    fails, a file does not compile, or the result does not answer `uci`.
    """
    if log is None:
        log = lambda line: print(line, file=sys.stderr, flush=True)
    if version is None and sdist is not None:
        version = os.path.basename(sdist).removeprefix("pyffish-").removesuffix(".tar.gz")
    version = version or pyffish_version()
    if not version:
        raise EngineBuildError(
            "pyffish is not installed, so the engine version is unknown: pip install -e "
            "'.[test]' (or pass --version)"
        )
    build_dir = engine_build_dir(version)
    binary = build_dir / ENGINE_BINARY
    with _locked(cache_root() / f".fairy-stockfish-pyffish-{version}.lock"):
        if binary.is_file() and os.access(binary, os.X_OK) and not force:
            return str(binary)
        cxx = cxx or os.environ.get("CXX") or "g++"
        compiler = shutil.which(cxx)
        if compiler is None:
            raise EngineBuildError(
                f"no C++ compiler {cxx!r}: install g++ (apt-get install g++) or set CXX"
            )
        jobs = jobs or os.cpu_count() or 1
        start = time.monotonic()
        build_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="fairy-stockfish-", dir=build_dir) as tmp:
            if sdist is None:
                log(f"downloading pyffish=={version}'s source distribution with pip ...")
                sdist = _download_sdist(version, tmp, python)
            elif not os.path.isfile(sdist):
                raise EngineBuildError(f"no source archive at {sdist!r}")
            src = _extract(sdist, tmp)
            objdir = Path(tmp) / "obj"
            objdir.mkdir()
            objects = _compile(compiler, src, objdir, jobs, log)
            linked = Path(tmp) / ENGINE_BINARY
            done = subprocess.run(
                [compiler, "-pthread", *objects, "-o", str(linked)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise EngineBuildError(f"linking failed: {_last_lines(done.stderr)}")
            id_name = _engine_id(str(linked))
            os.replace(linked, binary)  # atomic: a reader never sees half a binary
        seconds = time.monotonic() - start
        info = {
            "pyffish": version,
            "id_name": id_name,
            "compiler": compiler,
            "flags": list(BUILD_FLAGS),
            "jobs": jobs,
            "seconds": round(seconds, 1),
        }
        (build_dir / "build.json").write_text(json.dumps(info, indent=1) + "\n")
        log(f"built {id_name} in {seconds:.0f} s: {binary}")
        return str(binary)


def ensure_engine(log: Callable[[str], None] | None = None) -> str:
    """The engine for tests and CI: `$MMC_ENGINE` if set, else the cached build, building it
    first if there is none (falling back to an installed engine, with a warning, when the
    build fails and one exists)."""
    if os.environ.get("MMC_ENGINE"):
        return os.environ["MMC_ENGINE"]
    try:
        return build_engine(log=log)
    except EngineBuildError as error:
        fallback = default_engine()
        if os.path.isfile(fallback) and os.access(fallback, os.X_OK):
            print(f"warning: {error}; using {fallback}", file=sys.stderr)
            return fallback
        raise


# ---------------------------------------------------------------------------------------------
# One engine process


_EOF = object()
# The engine processes this process started and has not closed (`kill_all`).
_LIVE: weakref.WeakSet = weakref.WeakSet()


def kill_all() -> None:
    """Kill every engine process this process started and has not closed: a dying worker's
    last act (`uci.workers.worker_init`), so that no engine outlives it."""
    for engine in list(_LIVE):
        engine.kill()


class UciEngine:
    """One UCI engine process set up for one variant (see the module docstring).

    Args:
      variant: a project variant (spec): its Fairy-Stockfish name is asked for where it has
        one, else its canonical spelling (which `python -m mmc_jax.engine` lists).
      engine: path of the binary, or a command list (e.g. [python, script]); default
        `default_engine()`.
      variant_path: the variants file (default: the shipped one); None-like "" skips it.
      hash_mb: the engine's hash table (small: it is cleared before every move).
      threads: search threads (1 keeps node-limited searches deterministic).
      handshake_timeout: seconds for start-up answers (uciok, readyok, perft).
      uci_timeout: seconds for the very first `uciok`; a program that does not answer in
        time (or exits first) is not a UCI engine: `EngineNotUci`.
      probe: check the engine's legal moves in `PROBES[variant]` before use.
    """

    def __init__(
        self,
        variant: str,
        engine: str | Sequence[str] | None = None,
        *,
        variant_path: str | None = None,
        hash_mb: int = DEFAULT_HASH_MB,
        threads: int = 1,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        uci_timeout: float = DEFAULT_UCI_TIMEOUT,
        probe: bool = True,
    ):
        variant = check_variant(variant)
        self.variant = variant
        # Fairy-Stockfish's name where it has one; else the project's spelling, which only an
        # engine that lists it plays (`python -m mmc_jax.engine`, every variant).
        self.uci_variant = FAIRY_STOCKFISH_NAMES.get(variant, variant)
        self.command = _command(engine)
        self.variant_path = variants_file() if variant_path is None else variant_path
        self.handshake_timeout = handshake_timeout
        self.uci_timeout = uci_timeout
        self.name = os.path.basename(self.command[-1] if len(self.command) > 1 else self.command[0])
        self.id_name: str | None = None
        self.options: dict[str, str] = {}
        self.variants: list[str] = []
        self._last_lines: collections.deque[str] = collections.deque(maxlen=30)
        self._lines: queue.Queue = queue.Queue()
        self._skill: int | None = None
        self._process: subprocess.Popen | None = None
        self._start()
        try:
            self._handshake(hash_mb, threads)
            if probe:
                self.probe()
        except BaseException:
            self.kill()
            raise

    # -- process plumbing

    def _start(self) -> None:
        try:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
        except OSError as error:
            raise EngineNotFound(f"cannot start engine {self.command}: {error}") from error
        _LIVE.add(self)
        threading.Thread(target=self._reader, args=(self._process.stdout,), daemon=True).start()

    def _reader(self, stream) -> None:
        try:
            for line in stream:
                self._lines.put(line.rstrip("\r\n"))
        except (OSError, ValueError):
            pass
        self._lines.put(_EOF)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _output_tail(self) -> str:
        tail = list(self._last_lines)[-8:]
        return " | ".join(tail) if tail else "(no output)"

    def _crashed(self, waiting_for: str) -> EngineCrashed:
        status = None
        if self._process is not None:
            try:
                status = self._process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                status = None
        self.kill()
        return EngineCrashed(
            f"engine {self.name} exited (status {status}) while {waiting_for}; "
            f"last output: {self._output_tail()}"
        )

    def send(self, line: str) -> None:
        """Write one command line to the engine."""
        if not self.alive:
            raise self._crashed(f"sending {line!r}")
        try:
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._crashed(f"sending {line!r}") from None

    def _read_until(self, done, timeout: float, waiting_for: str) -> list[str]:
        """Lines up to and including the first for which `done(line)` holds."""
        deadline = time.monotonic() + timeout
        lines = []
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(remaining, 0.0))
            except queue.Empty:
                self.kill()
                raise EngineTimeout(
                    f"engine {self.name} gave no answer within {timeout:g} s while "
                    f"{waiting_for}; last output: {self._output_tail()}"
                ) from None
            if line is _EOF:
                raise self._crashed(waiting_for)
            self._last_lines.append(line)
            lines.append(line)
            if done(line):
                return lines

    def kill(self) -> None:
        """Stop the process at once (no questions asked)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            try:
                self._process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if self._process is not None:
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        """Ask the engine to quit; kill it if it does not within a second."""
        if self.alive:
            try:
                self._process.stdin.write("quit\n")
                self._process.stdin.flush()
                self._process.wait(timeout=1.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- protocol

    def _uci(self, timeout: float | None = None) -> list[str]:
        self.send("uci")
        return self._read_until(
            lambda line: line.strip() == "uciok",
            self.handshake_timeout if timeout is None else timeout,
            "waiting for uciok",
        )

    def _parse_options(self, lines: list[str]) -> None:
        for line in lines:
            if line.startswith("id name "):
                self.id_name = line[len("id name ") :].strip()
            elif line.startswith("option name "):
                name, _, rest = line[len("option name ") :].partition(" type ")
                self.options[name.strip()] = rest
                if name.strip() == "UCI_Variant":
                    words = rest.split()
                    self.variants = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "var"]

    def _handshake(self, hash_mb: int, threads: int) -> None:
        try:
            first = self._uci(min(self.uci_timeout, self.handshake_timeout))
        except (EngineTimeout, EngineCrashed) as error:
            raise EngineNotUci(
                f"{self.command[0]} is not a UCI engine: "
                + (
                    f"no `uciok` within {min(self.uci_timeout, self.handshake_timeout):g} s "
                    "after `uci`"
                    if isinstance(error, EngineTimeout)
                    else "it exited before answering `uci` with `uciok`"
                )
                + f"; last output: {self._output_tail()}"
            ) from None
        self._parse_options(first)
        loaded = []
        if self.variant_path and "VariantPath" in self.options:
            if not os.path.isfile(self.variant_path):
                raise EngineError(f"variants file {self.variant_path!r} does not exist")
            self.send(f"setoption name VariantPath value {self.variant_path}")
            # Engines list the variants of the file only in the next option list.
            loaded = self._uci()
            self._parse_options(loaded)
        if "UCI_Variant" not in self.options:
            raise EngineUnsupported(
                f"engine {self.name} ({self.id_name}) has no UCI_Variant option: it cannot play "
                f"{self.variant}; use Fairy-Stockfish (--engine PATH)"
            )
        if self.uci_variant not in self.variants and self.variant in self.variants:
            self.uci_variant = self.variant  # an engine that lists the project's names
        if self.uci_variant not in self.variants:
            said = [
                line
                for line in first + loaded
                if not line.startswith(("option ", "id ", "uciok")) and line.strip()
            ]
            raise EngineUnsupported(
                f"engine {self.name} ({self.id_name}) cannot play {self.variant}: its UCI_Variant "
                f"has no {self.uci_variant!r} after loading {self.variant_path}"
                + (f" (the engine said: {' '.join(said)})" if said else "")
                + (
                    "; a newer Fairy-Stockfish build may (--engine PATH)"
                    if self.variant in FAIRY_STOCKFISH_NAMES
                    else f"; {self.variant!r} cannot be written as a Fairy-Stockfish variant "
                    "(capture or colour rules it has no option for): a model served by "
                    "`python -m mmc_jax.engine` plays it (--engine)"
                )
            )
        for name, value in (("Threads", threads), ("Hash", hash_mb)):
            if name in self.options:
                self.send(f"setoption name {name} value {value}")
        self.send(f"setoption name UCI_Variant value {self.uci_variant}")
        self.ready()

    def ready(self, timeout: float | None = None) -> None:
        """`isready` / `readyok` round trip."""
        self.send("isready")
        self._read_until(
            lambda line: line.strip() == "readyok",
            self.handshake_timeout if timeout is None else timeout,
            "waiting for readyok",
        )

    @staticmethod
    def _position_command(fen: str, moves: Sequence[str]) -> str:
        command = f"position fen {fen}"
        return command + (" moves " + " ".join(moves) if moves else "")

    def perft_moves(self, fen: str, moves: Sequence[str] = ()) -> list[str]:
        """The engine's legal moves after `moves` from `fen` (`go perft 1`), sorted."""
        self.send(self._position_command(fen, moves))
        self.send("go perft 1")
        lines = self._read_until(
            lambda line: line.startswith("Nodes searched"),
            self.handshake_timeout,
            "waiting for the result of `go perft 1`",
        )
        out = []
        for line in lines:
            move, sep, count = line.partition(":")
            if sep and count.strip().isdigit() and " " not in move.strip():
                out.append(move.strip())
        return sorted(out)

    def probe(self) -> None:
        """Raise EngineUnsupported unless the engine's legal moves equal the rules' in every
        probe position of the variant (and in the start position)."""
        positions = [(START_FENS[self.variant], start_moves(self.variant))]
        for fen, expected in [*positions, *PROBES.get(self.variant, ())]:
            got = self.perft_moves(fen)
            expected_moves = sorted(expected.split())
            if got != expected_moves:
                only_engine = sorted(set(got) - set(expected_moves))
                only_rules = sorted(set(expected_moves) - set(got))
                raise EngineUnsupported(
                    f"engine {self.name} ({self.id_name}) plays {self.variant} "
                    f"({self.uci_variant}) by other rules: in {fen!r} it generates "
                    f"{' '.join(only_engine) or 'nothing more'} that the rules do not, and "
                    f"misses {' '.join(only_rules) or 'nothing'}; a newer Fairy-Stockfish "
                    "build may play it (--engine PATH)"
                )

    def best_move(
        self,
        fen: str,
        moves: Sequence[str],
        limits: Limits,
        timeout: float = DEFAULT_MOVE_TIMEOUT,
    ) -> str:
        """The engine's move (UCI string) after `moves` from `fen`.

        Starts with `ucinewgame` (reproducible searches); raises EngineTimeout when no
        `bestmove` comes within `timeout` seconds (the process is killed), EngineCrashed when
        it exits. The move is returned as given: the caller checks it against the rules.
        """
        self.send("ucinewgame")
        if limits.skill != self._skill and "Skill Level" in self.options:
            value = 20 if limits.skill is None else limits.skill
            self.send(f"setoption name Skill Level value {value}")
            self._skill = limits.skill
        self.send(self._position_command(fen, moves))
        self.send(limits.go_command())
        lines = self._read_until(
            lambda line: line.startswith("bestmove"),
            timeout,
            f"searching ({limits.go_command()}) after {len(moves)} moves from {fen!r}",
        )
        words = lines[-1].split()
        return words[1] if len(words) > 1 else "(none)"

    def score_move(
        self,
        fen: str,
        move: str,
        limits: Limits,
        timeout: float = DEFAULT_MOVE_TIMEOUT,
    ) -> float:
        """The score of `move` in `fen` (centipawns, mover's view; a mate in n +-(MATE_CP -
        n)): the search restricted to it (`go ... searchmoves move`) after `ucinewgame`, so
        that no search reads another's hash; the deepest iteration's exact score."""
        self.send("ucinewgame")
        self.send(self._position_command(fen, ()))
        self.send(f"{limits.go_command()} searchmoves {move}")
        lines = self._read_until(
            lambda line: line.startswith("bestmove"),
            timeout,
            f"scoring {move} ({limits.go_command()}) in {fen!r}",
        )
        scores = [parsed[3] for parsed in map(parse_info_line, lines) if parsed is not None]
        if not scores:
            raise EngineError(f"no score for {move} in {fen!r} ({limits.label()})")
        return scores[-1]

    def analyse(
        self,
        fen: str,
        moves: Sequence[str],
        limits: Limits,
        multipv: int,
        timeout: float = DEFAULT_MOVE_TIMEOUT,
    ) -> list[tuple[str, float]]:
        """The engine's `multipv` best moves after `moves` from `fen`, best first, each with
        its score in centipawns from the mover's view (a mate in n: +-(MATE_CP - n)), from the
        deepest iteration that reported every rank (a node limit can stop the last one
        part-way). Fewer when fewer moves are legal; [] when none."""
        if isinstance(multipv, bool) or not isinstance(multipv, int) or multipv < 1:
            raise ValueError(f"multipv must be a positive integer, got {multipv!r}")
        self.send("ucinewgame")
        if "MultiPV" in self.options:
            self.send(f"setoption name MultiPV value {multipv}")
        self.send(self._position_command(fen, moves))
        self.send(limits.go_command())
        lines = self._read_until(
            lambda line: line.startswith("bestmove"),
            timeout,
            f"analysing ({limits.go_command()}, multipv {multipv}) after {len(moves)} moves "
            f"from {fen!r}",
        )
        if "MultiPV" in self.options:
            self.send("setoption name MultiPV value 1")
        by_depth: dict[int, dict[int, tuple[str, float]]] = {}
        for line in lines:
            parsed = parse_info_line(line)
            if parsed is not None:
                depth, rank, move, score = parsed
                by_depth.setdefault(depth, {})[rank] = (move, score)
        if not by_depth:
            return []
        most = max(len(ranks) for ranks in by_depth.values())
        depth = max(d for d, ranks in by_depth.items() if len(ranks) == most)
        ranked, seen, out = by_depth[depth], set(), []
        for rank in sorted(ranked):
            move, score = ranked[rank]
            if rank <= multipv and move not in seen:  # the engine may repeat a move
                seen.add(move)
                out.append((move, score))
        return out


MATE_CP = 100_000.0


def parse_info_line(line: str) -> tuple[int, int, str, float] | None:
    """(depth, multipv rank, first pv move, score in centipawns) of a UCI `info` line with a
    score and a pv, or None (a mate in n scores +-(MATE_CP - n); a bound is None)."""
    words = line.split()
    if not words or words[0] != "info" or "pv" not in words or "score" not in words:
        return None
    try:
        at = words.index("score")
        kind, value = words[at + 1], int(words[at + 2])
        if at + 3 < len(words) and words[at + 3] in ("lowerbound", "upperbound"):
            return None
        move = words[words.index("pv") + 1]
        rank = int(words[words.index("multipv") + 1]) if "multipv" in words else 1
        depth = int(words[words.index("depth") + 1]) if "depth" in words else 0
    except (ValueError, IndexError):
        return None
    if kind == "cp":
        return depth, rank, move, float(value)
    if kind == "mate":
        return depth, rank, move, (MATE_CP - abs(value)) * (1.0 if value > 0 else -1.0)
    return None


# ---------------------------------------------------------------------------------------------
# A pool of engine processes


@dataclasses.dataclass(frozen=True)
class MoveRequest:
    """One search: the game so far (`moves` from `fen`) and the limits."""

    fen: str
    moves: tuple[str, ...]
    limits: Limits


@dataclasses.dataclass(frozen=True)
class MoveReply:
    """The engine's move, or the error that stopped it (exactly one is set)."""

    move: str | None
    error: EngineError | None = None


class EnginePool:
    """`processes` engine processes of one variant serving move requests in parallel.

    `map(requests)` returns one `MoveReply` per request, in order; an engine error is handed
    back in its reply (the engine is killed and a fresh one is started for the next request),
    so one bad game never stops the others. Start-up errors (no binary, unsupported variant)
    are raised by the constructor, which starts one engine to check them.
    """

    def __init__(
        self,
        variant: str,
        engine: str | Sequence[str] | None = None,
        *,
        processes: int = 2,
        move_timeout: float = DEFAULT_MOVE_TIMEOUT,
        **engine_kwargs: Any,
    ):
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ValueError(f"processes must be a positive integer, got {processes!r}")
        self.variant = variant
        self.engine = engine
        self.move_timeout = move_timeout
        self.engine_kwargs = engine_kwargs
        self.processes = processes
        first = UciEngine(variant, engine, **engine_kwargs)  # raises start-up errors here
        self.id_name = first.id_name
        self.command = first.command
        self._free: queue.Queue = queue.Queue()
        self._free.put(first)
        for _ in range(processes - 1):
            self._free.put(None)  # started on first use
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=processes, thread_name_prefix="uci"
        )
        self._closed = False

    def _serve(self, request: MoveRequest) -> MoveReply:
        engine = self._free.get()
        try:
            if engine is None or not engine.alive:
                engine = UciEngine(self.variant, self.engine, **self.engine_kwargs)
            move = engine.best_move(request.fen, request.moves, request.limits, self.move_timeout)
            return MoveReply(move)
        except EngineError as error:
            if engine is not None:
                engine.kill()
            engine = None
            return MoveReply(None, error)
        finally:
            self._free.put(engine)

    def submit(self, requests: Sequence[MoveRequest]) -> list[concurrent.futures.Future]:
        """Futures of `MoveReply`s (start the searches; collect them later)."""
        if self._closed:
            raise EngineError("the engine pool is closed")
        return [self._executor.submit(self._serve, r) for r in requests]

    def map(self, requests: Sequence[MoveRequest]) -> list[MoveReply]:
        return [f.result() for f in self.submit(requests)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        while not self._free.empty():
            engine = self._free.get()
            if engine is not None:
                engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------------------------
# Which variants can an engine play?


def check_engine(
    engine: str | Sequence[str] | None = None, variants: Sequence[str] = VARIANTS
) -> dict[str, dict[str, Any]]:
    """{variant: {"playable": bool, "reason": str}} for an engine (probes every variant)."""
    report = {}
    for variant in variants:
        try:
            with UciEngine(variant, engine) as e:
                report[variant] = {
                    "playable": True,
                    "reason": f"{e.id_name}: UCI_Variant {e.uci_variant}, legal moves agree in "
                    f"{1 + len(PROBES.get(variant, ()))} probe positions",
                }
        except (EngineNotFound, EngineNotUci):
            raise  # about the program, not the variant: no use trying the others
        except EngineError as error:
            report[variant] = {"playable": False, "reason": str(error)}
    return report
