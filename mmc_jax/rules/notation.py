"""FEN, UCI move strings and a Unicode board renderer (plain Python, not jitted).

FEN is written as Fairy-Stockfish writes it: `rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 1`. Bad input
raises `ValueError` naming what is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from mmc_jax.rules import tables as T

FILES = "abcde"
_PROMOTION_PLANE = {"r": 0, "b": 3, "n": 6}  # + direction (0 forward, 1 to e-file, 2 to a-file)


@dataclasses.dataclass(frozen=True)
class Position:
    """A parsed FEN. `pieces`/`own` are bitboards from the side to move's point of view."""

    pieces: tuple[int, ...]
    own: int
    turn: int
    halfmove: int
    fullmove: int


def mirror_bits(x: int) -> int:
    out = 0
    for sq in range(T.NUM_SQUARES):
        if x >> sq & 1:
            f, r = divmod(sq, 5)
            out |= 1 << T.square(f, 4 - r)
    return out


def _square_name(sq: int) -> str:
    f, r = divmod(sq, 5)
    return f"{FILES[f]}{r + 1}"


def _parse_square(text: str, move: str) -> int:
    if len(text) != 2 or text[0] not in FILES or text[1] not in "12345":
        raise ValueError(f"malformed move {move!r}: {text!r} is not a square a1-e5")
    return T.square(FILES.index(text[0]), int(text[1]) - 1)


def parse_fen(fen: str) -> Position:
    """Parse a 5x5 FEN. Raises ValueError naming the malformed field."""
    if not isinstance(fen, str):
        raise ValueError(f"FEN must be a string, got {type(fen).__name__}")
    fields = fen.split()
    if len(fields) != 6:
        raise ValueError(
            f"malformed FEN {fen!r}: expected 6 fields (board, side, castling, en passant, "
            f"half-move clock, move number), got {len(fields)}"
        )
    board, side, castling, ep, halfmove, fullmove = fields
    ranks = board.split("/")
    if len(ranks) != 5:
        raise ValueError(f"malformed FEN {fen!r}: board field needs 5 ranks, got {len(ranks)}")
    pieces = [0] * 6
    white = 0
    for i, text in enumerate(ranks):
        rank = 4 - i
        file = 0
        for ch in text:
            if ch.isdigit():
                file += int(ch)
            elif ch.lower() in T.PIECE_LETTERS:
                if file < 5:
                    bit = 1 << T.square(file, rank)
                    pieces[T.PIECE_LETTERS.index(ch.lower())] |= bit
                    if ch.isupper():
                        white |= bit
                file += 1
            else:
                raise ValueError(
                    f"malformed FEN {fen!r}: board field has unknown piece {ch!r} "
                    f"(expected one of PNBRQK / pnbrqk or a digit)"
                )
        if file != 5:
            raise ValueError(
                f"malformed FEN {fen!r}: board field rank {rank + 1} ({text!r}) covers "
                f"{file} files, expected 5"
            )
    if side not in ("w", "b"):
        raise ValueError(f"malformed FEN {fen!r}: side-to-move field must be 'w' or 'b'")
    if castling != "-":
        raise ValueError(f"malformed FEN {fen!r}: castling field must be '-' (no castling)")
    if ep != "-":
        raise ValueError(f"malformed FEN {fen!r}: en-passant field must be '-' (no en passant)")
    if not halfmove.isdigit():
        raise ValueError(f"malformed FEN {fen!r}: half-move clock {halfmove!r} is not an integer")
    if not fullmove.isdigit() or int(fullmove) < 1:
        raise ValueError(f"malformed FEN {fen!r}: move number {fullmove!r} must be an integer >= 1")
    occ = 0
    for p in pieces:
        occ |= p
    for colour, side_bits in (("White", white), ("Black", occ & ~white)):
        kings = bin(pieces[T.KING] & side_bits).count("1")
        if kings > 1:
            raise ValueError(f"malformed FEN {fen!r}: board field has {kings} {colour} kings")
    turn = 0 if side == "w" else 1
    if turn == 1:
        pieces = [mirror_bits(p) for p in pieces]
        own = mirror_bits(occ & ~white)
    else:
        own = white
    return Position(tuple(pieces), own, turn, int(halfmove), int(fullmove))


def board_chars(pieces, own, turn) -> list[str]:
    """25 characters (absolute squares, `square = 5 * file + rank`), '.' for empty."""
    chars = ["."] * T.NUM_SQUARES
    for sq in range(T.NUM_SQUARES):
        for p in range(6):
            if int(pieces[p]) >> sq & 1:
                mine = int(own) >> sq & 1
                white = mine if turn == 0 else not mine
                letter = T.PIECE_LETTERS[p]
                f, r = divmod(sq, 5)
                absolute = sq if turn == 0 else T.square(f, 4 - r)
                chars[absolute] = letter.upper() if white else letter
    return chars


def board_rows(board: str) -> list[str]:
    """The rows (rank 5 first) of a FEN's board field, one character per square, "." for an
    empty one: the inverse of `fen_board`."""
    return ["".join("." * int(c) if c.isdigit() else c for c in row) for row in board.split("/")]


def fen_board(rows: Iterable[Iterable[str]]) -> str:
    """The board field of a FEN from its rows (rank 5 first), one character per square, "."
    for an empty one: runs of empty squares become digits."""
    out = []
    for row in rows:
        text, empty = "", 0
        for ch in row:
            if ch == ".":
                empty += 1
                continue
            text += (str(empty) if empty else "") + ch
            empty = 0
        out.append(text + (str(empty) if empty else ""))
    return "/".join(out)


def to_fen(pieces, own, turn, halfmove, fullmove, hidden: int = 0) -> str:
    """FEN of a position given in the mover's view; `hidden` (absolute bits) become `*`."""
    chars = board_chars(pieces, own, turn)
    board = fen_board(
        [
            "*" if hidden >> T.square(file, rank) & 1 else chars[T.square(file, rank)]
            for file in range(5)
        ]
        for rank in range(4, -1, -1)
    )
    side = "w" if int(turn) == 0 else "b"
    return f"{board} {side} - - {int(halfmove)} {int(fullmove)}"


def action_to_uci(action: int, turn: int, pieces, own, rifle: bool = False) -> str:
    """UCI string of `action` in a position (mover's view bitboards, absolute output)."""
    from_sq, plane = divmod(int(action), T.NUM_PLANES)
    to_sq = int(T.TO_SQUARE[from_sq, plane])
    if to_sq < 0:
        raise ValueError(f"action {action} leaves the board")
    suffix = ""
    is_pawn = int(pieces[T.PAWN]) >> from_sq & 1
    is_capture = (
        int(pieces[0] | pieces[1] | pieces[2] | pieces[3] | pieces[4] | pieces[5]) & ~int(own)
    ) >> to_sq & 1
    if is_pawn and to_sq % 5 == 4 and not (rifle and is_capture):
        suffix = "q" if plane >= 9 else "rbn"[plane // 3]
    if turn == 1:
        from_sq = T.square(from_sq // 5, 4 - from_sq % 5)
        to_sq = T.square(to_sq // 5, 4 - to_sq % 5)
    return _square_name(from_sq) + _square_name(to_sq) + suffix


def uci_to_action(move: str, turn: int) -> int:
    """Action id of a UCI string (syntax only; legality is checked by the caller)."""
    if not isinstance(move, str) or len(move) not in (4, 5):
        raise ValueError(f"malformed move {move!r}: expected UCI like 'b2b3' or 'a4a5q'")
    from_sq = _parse_square(move[:2], move)
    to_sq = _parse_square(move[2:4], move)
    promotion = move[4:]
    if promotion and promotion not in "qrbn":
        raise ValueError(f"malformed move {move!r}: promotion piece must be one of q, r, b, n")
    if turn == 1:
        from_sq = T.square(from_sq // 5, 4 - from_sq % 5)
        to_sq = T.square(to_sq // 5, 4 - to_sq % 5)
    df, dr = to_sq // 5 - from_sq // 5, to_sq % 5 - from_sq % 5
    if promotion in ("r", "b", "n"):
        if dr != 1 or abs(df) > 1:
            raise ValueError(f"malformed move {move!r}: under-promotion must be a pawn step")
        direction = {0: 0, 1: 1, -1: 2}[df]
        return from_sq * T.NUM_PLANES + _PROMOTION_PLANE[promotion] + direction
    for plane in range(9, T.NUM_PLANES):
        if tuple(T.PLANE_VECTORS[plane]) == (df, dr):
            return from_sq * T.NUM_PLANES + plane
    raise ValueError(f"malformed move {move!r}: no piece moves from {move[:2]} to {move[2:4]}")


_UNICODE = dict(zip("KQRBNPkqrbnp", "♔♕♖♗♘♙♚♛♜♝♞♟", strict=True))


def fog_view(fen: str, legal_moves: Iterable[str]) -> str:
    """The FEN the side to move sees under fog: its own pieces and the target squares of its
    legal moves; every other square is `*` (the format of `rules.fog_fen`). Computed from the
    true FEN by the referee (the engine, the web server, `mmc_jax.play`); what it returns holds
    nothing hidden."""
    board, side = fen.split()[:2]
    white = side == "w"
    visible = {move[2:4] for move in legal_moves}
    rows = []
    for i, text in enumerate(board.split("/")):
        cells: list[str] = []
        for ch in text:
            cells += ["."] * int(ch) if ch.isdigit() else [ch]
        rows.append(
            [
                ch
                if (ch != "." and ch.isupper() == white) or f"{FILES[f]}{5 - i}" in visible
                else "*"
                for f, ch in enumerate(cells)
            ]
        )
    return fen_board(rows) + " " + " ".join(fen.split()[1:])


def render(fen: str, hidden_char: str = "⊙", empty_char: str = "·") -> str:
    """A Unicode board of a FEN (White at the bottom); `*` squares (fog) print as `⊙`.

    Raises ValueError naming the problem when the board field is malformed.
    """
    if not isinstance(fen, str) or not fen.split():
        raise ValueError(f"cannot render {fen!r}: expected a FEN (or a FEN board field)")
    board = fen.split()[0]
    ranks = board.split("/")
    if len(ranks) != 5:
        raise ValueError(f"cannot render {fen!r}: the board field needs 5 ranks, got {len(ranks)}")
    lines = []
    for i, text in enumerate(ranks):
        row = []
        for ch in text:
            if ch.isdigit():
                row += [empty_char] * int(ch)
            elif ch == "*":
                row.append(hidden_char)
            elif ch in _UNICODE:
                row.append(_UNICODE[ch])
            else:
                raise ValueError(
                    f"cannot render {fen!r}: unknown piece {ch!r} on rank {5 - i} (expected "
                    f"PNBRQK / pnbrqk, a digit or '*')"
                )
        if len(row) != 5:
            raise ValueError(
                f"cannot render {fen!r}: rank {5 - i} ({text!r}) covers {len(row)} squares, "
                f"expected 5"
            )
        lines.append(f"{5 - i} " + " ".join(row))
    lines.append("  " + " ".join(FILES))
    return "\n".join(lines)


def position_arrays(position: Position):
    return np.asarray(position.pieces, np.uint32), np.uint32(position.own)
