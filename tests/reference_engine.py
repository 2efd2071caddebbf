"""Independent plain-Python reference rules engine for 5x5 minichess and its variants.

Written only from ``rules.md`` (the project specification), deliberately without reading or
importing anything from ``mmc_jax``, so that it can serve as an oracle for the jitted engine,
in particular for the variants Fairy-Stockfish cannot express (rifle, monochromatic,
bichromatic, and the composed variants of the rule space).  Pure Python, no numpy / JAX.
Speed is not a goal; clarity is.

Every ``variant`` argument is a spelling of the rule space of ``rules.md`` (a registered name,
a name with overrides, or overrides alone: ``"dark,capture=atomic"``,
``"start=shuffle:17,colour=other"``) or a :class:`RuleSet`; ``rule_set(spec)`` parses one
(with its own parser, written from ``rules.md``) and ``start_fen(spec)`` gives its start.

Public API (all module-level, all accept a FEN string or a :class:`Position`):

- ``VARIANTS``: the 9 variant names; ``START_FEN[variant]``.
- ``parse_fen(fen) -> Position``, ``to_fen(pos) -> str`` (Fairy-Stockfish format).
- ``legal_moves(variant, fen) -> list[str]``: UCI strings, sorted; ``[]`` when the game is
  already over by position (king captured / exploded, extinction).
- ``make_move(variant, fen, uci) -> str``: the FEN after a legal move (``ValueError`` if the move
  is not legal).
- ``result(variant, fen) -> '1-0' | '0-1' | '1/2-1/2' | None``: game over by position
  (checkmate, stalemate, captured / exploded king, extinction, no legal move).  The automatic
  draws (50-move rule, repetition, K vs K, ply cap) are NOT applied here.
- ``perft(variant, fen, depth) -> int``.
- ``fog_fen(fen, variant="dark") -> str``: the fog observation of the side to move, in the format of
  ``pyffish.get_fog_fen(fen, "dark-gardner")``.

Board representation: a tuple of 25 one-character strings, index ``sq = 5 * rank + file``
(a1 = 0, e1 = 4, a5 = 20), ``'.'`` for an empty square, upper case White, lower case Black.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import NamedTuple

VARIANTS = (
    "gardner",
    "baby",
    "mallet",
    "rifle",
    "atomic",
    "dark",
    "extinction",
    "monochromatic",
    "bichromatic",
)

GARDNER_FEN = "rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 1"
START_FEN = {
    "gardner": GARDNER_FEN,
    "baby": "kqbnr/ppppp/5/PPPPP/RNBQK w - - 0 1",
    "mallet": "rbkqb/ppppp/5/PPPPP/RNKQN w - - 0 1",
    "rifle": GARDNER_FEN,
    "atomic": GARDNER_FEN,
    "dark": GARDNER_FEN,
    "extinction": GARDNER_FEN,
    "monochromatic": GARDNER_FEN,
    "bichromatic": GARDNER_FEN,
}

# Variants in which a move may not leave the mover's own king attacked (atomic has its own
# version of that rule, handled separately).
CHECK_BASED = frozenset({"gardner", "baby", "mallet", "rifle", "monochromatic", "bichromatic"})

SIZE = 5
FILES = "abcde"
EMPTY = "."
PIECE_CHARS = "PNBRQKpnbrqk"
PROMOTION_PIECES = "qrbn"
EXTINCTION_TYPES = "KQRBNP"

KNIGHT_STEPS = ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2))
KING_STEPS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
ROOK_DIRS = ((1, 0), (0, 1), (-1, 0), (0, -1))
BISHOP_DIRS = ((1, 1), (-1, 1), (-1, -1), (1, -1))
QUEEN_DIRS = ROOK_DIRS + BISHOP_DIRS


# --------------------------------------------------------------------------------------------
# Squares
# --------------------------------------------------------------------------------------------


def sq_of(file: int, rank: int) -> int:
    return rank * SIZE + file


def file_of(sq: int) -> int:
    return sq % SIZE


def rank_of(sq: int) -> int:
    return sq // SIZE


def on_board(file: int, rank: int) -> bool:
    return 0 <= file < SIZE and 0 <= rank < SIZE


def sq_name(sq: int) -> str:
    return FILES[file_of(sq)] + str(rank_of(sq) + 1)


def parse_sq(name: str) -> int:
    if len(name) != 2 or name[0] not in FILES or name[1] not in "12345":
        raise ValueError(f"bad square name {name!r}")
    return sq_of(FILES.index(name[0]), int(name[1]) - 1)


def is_dark(sq: int) -> bool:
    """a1 is dark; a square is dark when (file + rank) is even (a = 0, rank 1 = 0)."""
    return (file_of(sq) + rank_of(sq)) % 2 == 0


def neighbours(sq: int) -> list[int]:
    f, r = file_of(sq), rank_of(sq)
    return [sq_of(f + df, r + dr) for df, dr in KING_STEPS if on_board(f + df, r + dr)]


def color_of(piece: str) -> str:
    return "w" if piece.isupper() else "b"


def opponent(color: str) -> str:
    return "b" if color == "w" else "w"


# --------------------------------------------------------------------------------------------
# Position and FEN
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    board: tuple  # 25 one-char strings, index 5 * rank + file
    turn: str  # 'w' or 'b'
    halfmove: int = 0
    fullmove: int = 1

    def piece_at(self, name: str) -> str:
        return self.board[parse_sq(name)]


def parse_fen(fen: str | Position) -> Position:
    """Parse a Fairy-Stockfish style 5x5 FEN.  Raises ValueError naming the problem."""
    if isinstance(fen, Position):
        return fen
    if not isinstance(fen, str):
        raise ValueError(f"FEN must be a string, got {type(fen).__name__}")
    fields = fen.split()
    if len(fields) < 2:
        raise ValueError(f"FEN needs at least a board and a side to move: {fen!r}")
    rows = fields[0].split("/")
    if len(rows) != SIZE:
        raise ValueError(f"FEN board must have {SIZE} ranks, got {len(rows)}: {fen!r}")
    board = [EMPTY] * (SIZE * SIZE)
    for i, row in enumerate(rows):
        rank = SIZE - 1 - i
        file = 0
        for ch in row:
            if ch.isdigit():
                file += int(ch)
            elif ch in PIECE_CHARS:
                if file >= SIZE:
                    raise ValueError(f"FEN rank {rank + 1} is too long: {row!r}")
                board[sq_of(file, rank)] = ch
                file += 1
            else:
                raise ValueError(f"bad character {ch!r} in FEN board {fields[0]!r}")
        if file != SIZE:
            raise ValueError(f"FEN rank {rank + 1} has {file} squares, not {SIZE}: {row!r}")
    turn = fields[1]
    if turn not in ("w", "b"):
        raise ValueError(f"side to move must be 'w' or 'b', got {turn!r}")
    for idx, name in ((2, "castling"), (3, "en-passant")):
        if len(fields) > idx and fields[idx] != "-":
            raise ValueError(f"{name} field must be '-' (no castling / en passant): {fen!r}")
    try:
        halfmove = int(fields[4]) if len(fields) > 4 else 0
        fullmove = int(fields[5]) if len(fields) > 5 else 1
    except ValueError as exc:
        raise ValueError(f"bad move counters in FEN {fen!r}") from exc
    if halfmove < 0 or fullmove < 1:
        raise ValueError(f"bad move counters in FEN {fen!r}")
    for f in range(SIZE):
        if board[sq_of(f, 0)] in ("P", "p") or board[sq_of(f, SIZE - 1)] in ("P", "p"):
            raise ValueError(f"pawn on the first or last rank in FEN {fen!r}")
    return Position(tuple(board), turn, halfmove, fullmove)


def board_to_str(board, hidden=None) -> str:
    """FEN board field; squares in ``hidden`` are written as '*' (one per square)."""
    rows = []
    for rank in range(SIZE - 1, -1, -1):
        row = ""
        empties = 0
        for file in range(SIZE):
            sq = sq_of(file, rank)
            if hidden is not None and sq in hidden:
                ch = "*"
            else:
                ch = board[sq]
            if ch == EMPTY:
                empties += 1
                continue
            if empties:
                row += str(empties)
                empties = 0
            row += ch
        if empties:
            row += str(empties)
        rows.append(row)
    return "/".join(rows)


def to_fen(pos: Position) -> str:
    return f"{board_to_str(pos.board)} {pos.turn} - - {pos.halfmove} {pos.fullmove}"


# --------------------------------------------------------------------------------------------
# The rule space (rules.md, "The rule space")
# --------------------------------------------------------------------------------------------


class RuleSet(NamedTuple):
    """One point of the rule space: the start board field and the four rule components."""

    start: str  # FEN board field of the start array
    capture: str  # normal | rifle | atomic
    goal: str  # checkmate | king | extinction
    fog: str  # off | on
    colour: str  # any | same | other


_NAMED_START = {
    "gardner": "rnbqk/ppppp/5/PPPPP/RNBQK",
    "baby": "kqbnr/ppppp/5/PPPPP/RNBQK",
    "mallet": "rbkqb/ppppp/5/PPPPP/RNKQN",
}
# The nine named variants as component overrides on top of gardner.
_NAMED_POINT = {
    "gardner": {},
    "baby": {"start": "baby"},
    "mallet": {"start": "mallet"},
    "rifle": {"capture": "rifle"},
    "atomic": {"capture": "atomic"},
    "dark": {"goal": "king", "fog": "on"},
    "extinction": {"goal": "extinction"},
    "monochromatic": {"colour": "same"},
    "bichromatic": {"colour": "other"},
}
_ALLOWED = {
    "capture": ("normal", "rifle", "atomic"),
    "goal": ("checkmate", "king", "extinction"),
    "fog": ("off", "on"),
    "colour": ("any", "same", "other"),
}


def shuffle_start(n: int) -> str:
    """Board field of ``shuffle:N``: White's rank 1 is permutation ``N % 120`` of KQRBN;
    Black mirrors it file by file (N < 120) or holds it reversed (N >= 120)."""
    perm = list(itertools.permutations("KQRBN"))[n % 120]
    white = "".join(perm)
    black = white.lower() if n < 120 else white.lower()[::-1]
    return black + "/ppppp/5/PPPPP/" + white


def _start_board(value: str) -> str:
    if value in _NAMED_START:
        return _NAMED_START[value]
    if value.startswith("shuffle:"):
        n = int(value.split(":", 1)[1])
        if not 0 <= n < 240:
            raise ValueError(f"shuffle number out of range: {value!r}")
        return shuffle_start(n)
    board = parse_fen(value + " w - - 0 1").board
    if board.count("K") != 1 or board.count("k") != 1:
        raise ValueError(f"start board needs one king per side: {value!r}")
    return board_to_str(board)


@functools.cache
def rule_set(variant) -> RuleSet:
    """Parse a variant spelling into a :class:`RuleSet` (a RuleSet is returned as is)."""
    if isinstance(variant, RuleSet):
        return variant
    chosen = {"start": "gardner", "capture": "normal", "goal": "checkmate", "fog": "off"}
    chosen["colour"] = "any"
    seen = set()
    for i, token in enumerate(t.strip() for t in variant.split(",")):
        if "=" not in token:
            if i != 0 or token not in _NAMED_POINT:
                raise ValueError(f"unknown variant {token!r} in {variant!r}")
            chosen.update(_NAMED_POINT[token])
            continue
        key, value = (x.strip() for x in token.split("=", 1))
        if key in seen or key not in ("start", *_ALLOWED):
            raise ValueError(f"bad component {key!r} in {variant!r}")
        seen.add(key)
        if key != "start" and value not in _ALLOWED[key]:
            raise ValueError(f"bad value {value!r} of {key} in {variant!r}")
        chosen[key] = value
    rs = RuleSet(_start_board(chosen.pop("start")), **chosen)
    if rs.fog == "on" and rs.goal == "checkmate":
        raise ValueError("fog=on needs goal king or extinction")
    if rs.goal == "extinction" and not all(
        ch in rs.start for ch in EXTINCTION_TYPES + EXTINCTION_TYPES.lower()
    ):
        raise ValueError("goal=extinction needs every piece type on each side at the start")
    return rs


def start_fen(variant) -> str:
    return rule_set(variant).start + " w - - 0 1"


# --------------------------------------------------------------------------------------------
# Piece movement
# --------------------------------------------------------------------------------------------


def _colour_ok(variant, frm: int, to: int) -> bool:
    """colour=same: same colour as the start square; colour=other: the other colour."""
    colour = rule_set(variant).colour
    if colour == "same":
        return is_dark(frm) == is_dark(to)
    if colour == "other":
        return is_dark(frm) != is_dark(to)
    return True


def _raw_targets(board, frm: int):
    """Standard chess movement of the piece on ``frm`` (no variant restriction).

    Yields ``(to, kind)`` where kind is 'quiet' (to an empty square) or 'capture' (onto an
    enemy piece), plus for attack detection 'attack' entries: every square the piece could
    capture on if an enemy stood there (for pawns the two forward diagonals, for sliders the
    ray up to and including the first occupied square).  Callers pick what they need.
    """
    piece = board[frm]
    color = color_of(piece)
    kind = piece.upper()
    f, r = file_of(frm), rank_of(frm)
    if kind == "P":
        fwd = 1 if color == "w" else -1
        if on_board(f, r + fwd) and board[sq_of(f, r + fwd)] == EMPTY:
            yield sq_of(f, r + fwd), "quiet"
        for df in (-1, 1):
            if on_board(f + df, r + fwd):
                to = sq_of(f + df, r + fwd)
                yield to, "attack"
                tgt = board[to]
                if tgt != EMPTY and color_of(tgt) != color:
                    yield to, "capture"
        return
    if kind in ("N", "K"):
        steps = KNIGHT_STEPS if kind == "N" else KING_STEPS
        for df, dr in steps:
            if not on_board(f + df, r + dr):
                continue
            to = sq_of(f + df, r + dr)
            yield to, "attack"
            tgt = board[to]
            if tgt == EMPTY:
                yield to, "quiet"
            elif color_of(tgt) != color:
                yield to, "capture"
        return
    dirs = {"B": BISHOP_DIRS, "R": ROOK_DIRS, "Q": QUEEN_DIRS}[kind]
    for df, dr in dirs:
        ff, rr = f + df, r + dr
        while on_board(ff, rr):
            to = sq_of(ff, rr)
            yield to, "attack"
            tgt = board[to]
            if tgt == EMPTY:
                yield to, "quiet"
            else:
                if color_of(tgt) != color:
                    yield to, "capture"
                break
            ff += df
            rr += dr


def attacks_from(variant, board, frm: int) -> set[int]:
    """Squares the piece on ``frm`` attacks: where it could capture under the variant's rules."""
    piece = board[frm]
    if rule_set(variant).capture == "atomic" and piece.upper() == "K":
        return set()  # kings cannot capture in atomic
    return {
        to
        for to, kind in _raw_targets(board, frm)
        if kind == "attack" and _colour_ok(variant, frm, to)
    }


def is_attacked(variant, board, sq: int, by_color: str) -> bool:
    for frm in range(SIZE * SIZE):
        piece = board[frm]
        if (
            piece != EMPTY
            and color_of(piece) == by_color
            and sq in attacks_from(variant, board, frm)
        ):
            return True
    return False


def king_square(board, color: str):
    king = "K" if color == "w" else "k"
    squares = [sq for sq in range(SIZE * SIZE) if board[sq] == king]
    if len(squares) > 1:
        raise ValueError(f"more than one {'white' if color == 'w' else 'black'} king")
    return squares[0] if squares else None


# --------------------------------------------------------------------------------------------
# Moves
# --------------------------------------------------------------------------------------------

# A move is a tuple (frm, to, promo, is_capture); promo is '' or one of 'qrbn'.


def move_to_uci(move) -> str:
    frm, to, promo, _ = move
    return sq_name(frm) + sq_name(to) + promo


def _pseudo_moves(variant, pos: Position):
    rs = rule_set(variant)
    board = pos.board
    us = pos.turn
    last_rank = SIZE - 1 if us == "w" else 0
    for frm in range(SIZE * SIZE):
        piece = board[frm]
        if piece == EMPTY or color_of(piece) != us:
            continue
        for to, kind in _raw_targets(board, frm):
            if kind == "attack":
                continue
            capture = kind == "capture"
            if not _colour_ok(variant, frm, to):
                continue
            if rs.capture == "atomic" and piece.upper() == "K" and capture:
                continue  # kings cannot capture in atomic (it would explode the king)
            promotes = piece.upper() == "P" and rank_of(to) == last_rank
            if promotes and not (rs.capture == "rifle" and capture):
                for promo in PROMOTION_PIECES:
                    yield (frm, to, promo, capture)
            else:
                yield (frm, to, "", capture)


def _apply_board(variant, board, move):
    """The board after ``move`` (no legality check)."""
    mode = rule_set(variant).capture
    frm, to, promo, capture = move
    b = list(board)
    piece = b[frm]
    if capture and mode == "rifle":
        b[to] = EMPTY  # the capturer stays on its square
        return tuple(b)
    if capture and mode == "atomic":
        b[frm] = EMPTY
        b[to] = EMPTY
        for n in neighbours(to):
            if b[n] != EMPTY and b[n].upper() != "P":
                b[n] = EMPTY
        return tuple(b)
    b[frm] = EMPTY
    if promo:
        b[to] = promo.upper() if piece.isupper() else promo
    else:
        b[to] = piece
    return tuple(b)


def _kings_adjacent(board) -> bool:
    wk, bk = king_square(board, "w"), king_square(board, "b")
    if wk is None or bk is None:
        return False
    return max(abs(file_of(wk) - file_of(bk)), abs(rank_of(wk) - rank_of(bk))) == 1


def _is_legal(variant, pos: Position, move) -> bool:
    rs = rule_set(variant)
    if rs.goal != "checkmate":
        return True  # no check: every pseudo-legal move is legal
    us, them = pos.turn, opponent(pos.turn)
    board = _apply_board(variant, pos.board, move)
    own_king = king_square(board, us)
    if rs.capture == "atomic":
        if own_king is None:
            return False  # exploding your own king is illegal (even if theirs explodes too)
        if king_square(board, them) is None:
            return True  # exploding the enemy king wins at once
        if _kings_adjacent(board):
            return True  # touching kings are immune to check
        return not is_attacked(variant, board, own_king, them)
    if own_king is None:
        return True
    return not is_attacked(variant, board, own_king, them)


def in_check(variant, fen) -> bool:
    """Whether the side to move is in check (always False unless goal=checkmate)."""
    pos = parse_fen(fen)
    rs = rule_set(variant)
    if rs.goal != "checkmate":
        return False
    king = king_square(pos.board, pos.turn)
    if king is None:
        return False
    if rs.capture == "atomic" and _kings_adjacent(pos.board):
        return False
    return is_attacked(variant, pos.board, king, opponent(pos.turn))


def _check_variant(variant) -> None:
    rule_set(variant)  # raises on bad spellings


def _validate_kings(variant, pos: Position) -> None:
    rs = rule_set(variant)
    for color in ("w", "b"):
        sq = king_square(pos.board, color)  # raises on two kings
        # A king can be lost only where capturing or exploding it ends the game.
        if sq is None and rs.goal == "checkmate" and rs.capture != "atomic":
            raise ValueError(
                f"{variant}: the {'white' if color == 'w' else 'black'} king is missing"
            )


def _result_by_position(variant, pos: Position):
    """Game over regardless of the legal moves: captured / exploded king, extinction."""
    rs = rule_set(variant)
    if rs.goal == "king" or (rs.goal == "checkmate" and rs.capture == "atomic"):
        wk = king_square(pos.board, "w")
        bk = king_square(pos.board, "b")
        if wk is None and bk is None:
            # cannot arise by play; the side that just moved is considered to have lost last
            return "1-0" if pos.turn == "w" else "0-1"
        if wk is None:
            return "0-1"
        if bk is None:
            return "1-0"
        return None
    if rs.goal == "extinction":
        # The side that just moved is examined first (so promoting your last pawn loses even
        # if the move also wiped out a type of the opponent), then the side to move.
        just_moved = opponent(pos.turn)
        for color in (just_moved, pos.turn):
            present = {p.upper() for p in pos.board if p != EMPTY and color_of(p) == color}
            if any(t not in present for t in EXTINCTION_TYPES):
                return "0-1" if color == "w" else "1-0"
        return None
    return None


def _legal(variant, pos: Position):
    if _result_by_position(variant, pos) is not None:
        return []
    return [m for m in _pseudo_moves(variant, pos) if _is_legal(variant, pos, m)]


def legal_moves(variant, fen) -> list[str]:
    _check_variant(variant)
    pos = parse_fen(fen)
    _validate_kings(variant, pos)
    return sorted(move_to_uci(m) for m in _legal(variant, pos))


def _play(variant, pos: Position, move) -> Position:
    frm, _, _, capture = move
    board = _apply_board(variant, pos.board, move)
    pawn_move = pos.board[frm].upper() == "P"
    halfmove = 0 if (capture or pawn_move) else pos.halfmove + 1
    fullmove = pos.fullmove + (1 if pos.turn == "b" else 0)
    return Position(board, opponent(pos.turn), halfmove, fullmove)


def make_move(variant, fen, uci: str) -> str:
    _check_variant(variant)
    pos = parse_fen(fen)
    _validate_kings(variant, pos)
    for m in _legal(variant, pos):
        if move_to_uci(m) == uci:
            return to_fen(_play(variant, pos, m))
    raise ValueError(f"illegal move {uci!r} in {variant} position {to_fen(pos)!r}")


def result(variant, fen):
    """'1-0', '0-1', '1/2-1/2' if the game is over by position, else None."""
    _check_variant(variant)
    pos = parse_fen(fen)
    _validate_kings(variant, pos)
    res = _result_by_position(variant, pos)
    if res is not None:
        return res
    if _legal(variant, pos):
        return None
    if rule_set(variant).goal != "checkmate":
        return "1/2-1/2"  # no legal move is a draw where there is no check
    if in_check(variant, pos):
        return "0-1" if pos.turn == "w" else "1-0"  # checkmate
    return "1/2-1/2"  # stalemate


def _perft(variant, pos: Position, depth: int) -> int:
    moves = _legal(variant, pos)
    if depth == 1:
        return len(moves)
    return sum(_perft(variant, _play(variant, pos, m), depth - 1) for m in moves)


def perft(variant, fen, depth: int) -> int:
    _check_variant(variant)
    pos = parse_fen(fen)
    _validate_kings(variant, pos)
    if depth <= 0:
        return 1
    return _perft(variant, pos, depth)


def fog_fen(fen, variant="dark") -> str:
    """Fog view of the side to move: own pieces and targets of its legal moves (under
    ``variant``) are visible, every other square is '*' (hidden pieces and hidden empty
    squares look alike)."""
    pos = parse_fen(fen)
    visible = {sq for sq, p in enumerate(pos.board) if p != EMPTY and color_of(p) == pos.turn}
    visible |= {m[1] for m in _legal(variant, pos)}
    hidden = set(range(SIZE * SIZE)) - visible
    return f"{board_to_str(pos.board, hidden)} {pos.turn} - - {pos.halfmove} {pos.fullmove}"
