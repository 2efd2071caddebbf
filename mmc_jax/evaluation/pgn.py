"""Game records as PGN: written by every evaluation (`--pgn FILE`), read back and replayed.

A game looks like

    [Event "mmc_jax ladder"]
    [Site "?"]
    [Date "2026.01.31"]
    [Round "17"]
    [White "model"]
    [Black "engine:nodes=100"]
    [Result "0-1"]
    [Variant "gardner"]
    [SetUp "1"]
    [FEN "rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 1"]
    [PlyCount "37"]
    [Termination "normal"]
    [OpeningPlies "4"]

    1. d2d3 e4d3 2. b1c3 d3d2 ... 0-1

Moves are UCI strings (`a4a5q` for a promotion), as the rules and Fairy-Stockfish write them.
`[Variant]` is the project's variant name (`mmc_jax.rules.VARIANTS`); `read_pgn` also accepts
the Fairy-Stockfish names (`babychess`, `mallett`, `atomic-gardner`, ...). `[FEN]` is always
written, so a reader needs no knowledge of the variant's start position; with pyffish:
`pyffish.get_fen(FAIRY_STOCKFISH_NAMES[variant], fen, moves)`. A game that an engine failure
aborted has result `*`, `[Termination "abandoned"]` and the error as a comment.

`read_pgn` parses headers, comments (`{...}` and `;`), move numbers, NAGs and variations
(skipped), and result tokens; SAN moves are refused with a clear message (this project writes
UCI). `replay` plays a game through the rules engine and checks every move and the result.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from mmc_jax import rules as R

RESULTS = ("1-0", "0-1", "1/2-1/2", "*")
_UCI = re.compile(r"^[a-e][1-5][a-e][1-5][qrbn]?$")
_TAG = re.compile(r'^\[\s*([A-Za-z0-9_]+)\s+"((?:[^"\\]|\\.)*)"\s*\]\s*$')
_SEVEN_TAGS = ("Event", "Site", "Date", "Round", "White", "Black", "Result")
_FSF_TO_PROJECT = {fsf: name for name, fsf in R.FAIRY_STOCKFISH_NAMES.items()}


@dataclasses.dataclass
class PgnGame:
    """A parsed game: `headers` in file order, `moves` (UCI), `result`, `comments`."""

    headers: dict[str, str]
    moves: list[str]
    result: str
    comments: list[str] = dataclasses.field(default_factory=list)

    @property
    def variant(self) -> str:
        """The project variant name of the `[Variant]` header (Fairy-Stockfish names too)."""
        name = self.headers.get("Variant", "").strip()
        if not name:
            raise ValueError("PGN game has no [Variant] header")
        name = _FSF_TO_PROJECT.get(name, _FSF_TO_PROJECT.get(name.lower(), name))
        try:
            return R.check_variant(name)
        except ValueError:  # a registered name in another case ("Gardner")
            return R.check_variant(name.lower())

    @property
    def fen(self) -> str:
        """The start position: `[FEN]`, else the variant's start position."""
        return self.headers.get("FEN") or R.START_FENS[self.variant]


# ---------------------------------------------------------------------------------------------
# Writing


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _comment(text: str) -> str:
    return "{" + text.replace("{", "(").replace("}", ")").replace("\n", " ") + "}"


def format_game(
    record,
    *,
    event: str = "mmc_jax",
    round_: str | int = "?",
    date: str | None = None,
    extra_headers: dict[str, Any] | None = None,
) -> str:
    """PGN text of one game. `record` has `variant`, `white`, `black`, `start_fen`, `moves`,
    `result`, and optionally `termination`, `opening_plies`, `error`, `headers` (an
    `arena.GameRecord` or anything with those attributes or keys)."""
    get = (
        (lambda name, default=None: record.get(name, default))
        if isinstance(record, dict)
        else (lambda name, default=None: getattr(record, name, default))
    )
    variant = R.check_variant(get("variant"))
    fen = get("start_fen") or R.START_FENS[variant]
    moves = list(get("moves"))
    result = get("result", "*")
    if result not in RESULTS:
        raise ValueError(f"result must be one of {RESULTS}, got {result!r}")
    for move in moves:
        if not _UCI.match(move):
            raise ValueError(f"not a UCI move on a 5x5 board: {move!r}")
    headers = {
        "Event": event,
        "Site": "?",
        "Date": date or datetime.date.today().strftime("%Y.%m.%d"),
        "Round": round_,
        "White": get("white", "?"),
        "Black": get("black", "?"),
        "Result": result,
        "Variant": variant,
        "SetUp": "1",
        "FEN": fen,
        "PlyCount": len(moves),
        "Termination": get("termination", "normal") or "normal",
    }
    if get("opening_plies"):
        headers["OpeningPlies"] = get("opening_plies")
    headers.update(get("headers", None) or {})
    headers.update(extra_headers or {})
    lines = [f'[{name} "{_escape(value)}"]' for name, value in headers.items()]

    fields = fen.split()
    number = int(fields[5]) if len(fields) == 6 and fields[5].isdigit() else 1
    black_first = len(fields) > 1 and fields[1] == "b"
    tokens = []
    for i, move in enumerate(moves):
        black = (i % 2 == 1) != black_first
        if not black:
            tokens.append(f"{number}.")
        elif i == 0:
            tokens.append(f"{number}...")
        tokens.append(move)
        if black:
            number += 1
    if get("error"):
        tokens.append(_comment(get("error")))
    tokens.append(result)
    # Wrap the movetext at 80 columns (PGN export format).
    text, line = [], ""
    for token in tokens:
        if line and len(line) + 1 + len(token) > 79:
            text.append(line)
            line = token
        else:
            line = f"{line} {token}" if line else token
    text.append(line)
    return "\n".join(lines) + "\n\n" + "\n".join(text) + "\n"


def write_pgn(records: Iterable, file: str | os.PathLike | TextIO, **kwargs: Any) -> int:
    """Write games to a path or an open text file; returns the number written. Rounds are
    numbered 1, 2, ... unless `round_` is given; other keywords go to `format_game`."""
    own = isinstance(file, (str, os.PathLike))
    handle = open(file, "w", encoding="utf-8") if own else file
    count = 0
    try:
        for i, record in enumerate(records):
            options = dict(kwargs)
            options.setdefault("round_", i + 1)
            if count:
                handle.write("\n")
            handle.write(format_game(record, **options))
            count += 1
    finally:
        if own:
            handle.close()
    return count


# ---------------------------------------------------------------------------------------------
# Reading


def _movetext_tokens(text: str, where: str):
    """Tokens of a movetext: moves, results, comments (as ('comment', text))."""
    i, depth = 0, 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch == "{":
            end = text.find("}", i)
            if end < 0:
                raise ValueError(f"{where}: unterminated comment")
            if depth == 0:
                yield ("comment", text[i + 1 : end].strip())
            i = end + 1
        elif ch == ";":
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            if depth == 0:
                yield ("comment", text[i + 1 : end].strip())
            i = end
        elif ch == "(":
            depth += 1
            i += 1
        elif ch == ")":
            if depth == 0:
                raise ValueError(f"{where}: unbalanced ')'")
            depth -= 1
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in "{};()":
                j += 1
            if depth == 0:
                yield ("token", text[i:j])
            i = j


def _parse_game(header_lines: list[str], movetext: str, index: int) -> PgnGame:
    where = f"PGN game {index + 1}"
    headers: dict[str, str] = {}
    for line in header_lines:
        match = _TAG.match(line.strip())
        if not match:
            raise ValueError(f"{where}: malformed header line {line.strip()!r}")
        headers[match.group(1)] = re.sub(r"\\(.)", r"\1", match.group(2))
    moves, comments, result = [], [], None
    for kind, token in _movetext_tokens(movetext, where):
        if kind == "comment":
            comments.append(token)
            continue
        if token in RESULTS:
            if result is not None:
                raise ValueError(f"{where}: more than one result token")
            result = token
            continue
        token = re.sub(r"^\d+\.(\.\.)?", "", token)  # "12." / "12..." glued to a move
        if not token or token.startswith("$") or re.fullmatch(r"\d+\.*", token):
            continue
        token = token.rstrip("!?+#")
        if not _UCI.match(token):
            raise ValueError(
                f"{where}: move {token!r} is not a UCI move (like b2b3 or a4a5q); SAN is not "
                "supported, this project writes and reads UCI"
            )
        if result is not None:
            raise ValueError(f"{where}: move {token!r} after the result")
        moves.append(token)
    if result is None:
        result = headers.get("Result", "*")
    if headers.get("Result", result) != result:
        raise ValueError(
            f"{where}: [Result {headers['Result']!r}] disagrees with the movetext's {result!r}"
        )
    headers.setdefault("Result", result)
    return PgnGame(headers, moves, result, comments)


def read_pgn(source: str | os.PathLike | TextIO) -> list[PgnGame]:
    """Parse every game of a PGN file (path), open file or string with PGN text.

    Raises ValueError naming the game and the problem (malformed header, SAN move, ...)."""
    if hasattr(source, "read"):
        text = source.read()
    elif isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and os.path.exists(source)
    ):
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    else:
        text = str(source)
    games, headers, movetext = [], [], []

    def flush():
        if headers or any(line.strip() for line in movetext):
            games.append(_parse_game(headers, "\n".join(movetext), len(games)))

    for line in io.StringIO(text):
        stripped = line.strip()
        if stripped.startswith("[") and movetext and any(m.strip() for m in movetext):
            flush()
            headers, movetext = [], []
        if stripped.startswith("[") and not any(m.strip() for m in movetext):
            headers.append(stripped)
        elif not stripped.startswith("%"):
            movetext.append(line.rstrip("\n"))
    flush()
    return games


# ---------------------------------------------------------------------------------------------
# Replaying


def replay(game: PgnGame, check_result: bool = True) -> list[str]:
    """FENs of every position of `game` (start first), played by the rules engine.

    Raises ValueError for an illegal move (naming the ply and the legal moves), a move after
    the end of the game, or (with `check_result`) a decided result that the rules disagree
    with. A game cut short ("*", or a result before the rules end it: e.g. an adjudication)
    is accepted as long as every move is legal.
    """
    from mmc_jax.evaluation import arena

    single = arena.SingleGame(game.variant, game.fen)
    fens = [single.fen]
    for ply, move in enumerate(game.moves):
        try:
            single.play(move)
        except ValueError as error:
            raise ValueError(
                f"game {game.headers.get('White', '?')} vs {game.headers.get('Black', '?')}, "
                f"ply {ply + 1} ({move}): {error}"
            ) from None
        fens.append(single.fen)
    if check_result and single.over and game.result != "*" and single.result() != game.result:
        raise ValueError(f"the rules end the game {single.result()} but the PGN says {game.result}")
    return fens


def records_from_pgn(games: Sequence[PgnGame]) -> list[dict[str, Any]]:
    """Plain dicts (variant, white, black, start_fen, moves, result) of parsed games."""
    return [
        {
            "variant": g.variant,
            "white": g.headers.get("White", "?"),
            "black": g.headers.get("Black", "?"),
            "start_fen": g.fen,
            "moves": list(g.moves),
            "result": g.result,
            "termination": g.headers.get("Termination", "normal"),
        }
        for g in games
    ]
