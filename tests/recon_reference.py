"""Independent plain-Python reference for reconnaissance-blind minichess (`fog=sense:W`).

Written from rules.md ("Reconnaissance-blind minichess") without reading or importing
`mmc_jax`, as an oracle for `mmc_jax.rules.recon`. It reuses the plain-Python reference
engine's board helpers (FEN, squares, the rule-space parser for the other components). Pure
Python; clarity over speed.

- `rule_set(spec)`: the components of a sensing variant (`recon`, `fog=sense:2|3`), with the
  constraints of rules.md.
- `Game`: the referee. `requestable()` (move strings and `pass`), `windows()`, `sense(w)`,
  `move(request)`, and what each player is told, as `Report`s.
- `PlayerView`: a player's knowledge, built from its reports ALONE (never the true board); its
  `observation()` is what rules.md lets the player use, laid out as the engine's observation.

Board: a tuple of 25 one-character strings, index `5 * rank + file` (a1 = 0, e1 = 4, a5 = 20),
`'.'` empty, upper case White.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import reference_engine as REF

PLY_SCALE = 256.0
PROMOTIONS = "qrbn"
KINDS = "PNBRQK"


class SenseRules(NamedTuple):
    start: str  # FEN board field
    capture: str  # normal | rifle
    goal: str  # king | extinction
    window: int  # 2 | 3
    colour: str  # any | same | other


def rule_set(spec: str) -> SenseRules:
    """Parse a sensing variant spelling (`recon`, `recon,fog=sense:3`,
    `capture=rifle,goal=extinction,fog=sense:2`, ...). ValueError for anything else."""
    tokens = [t.strip() for t in spec.split(",")]
    name, window = "gardner", 0
    overrides: dict[str, str] = {}
    for i, token in enumerate(tokens):
        if i == 0 and "=" not in token:
            name = token
            if token == "recon":  # the registered point: gardner, goal=king, fog=sense:2
                name, window, overrides["goal"] = "gardner", 2, "king"
            continue
        key, _, value = (x.strip() for x in token.partition("="))
        if key == "fog":
            if value not in ("sense:2", "sense:3"):
                raise ValueError(f"not a sensing variant: {spec!r}")
            window = int(value[-1])
            continue
        overrides[key] = value  # a component given after recon replaces recon's
    if not window:
        raise ValueError(f"not a sensing variant: {spec!r}")
    base = REF.rule_set(",".join([name] + [f"{k}={v}" for k, v in overrides.items()]))
    if base.goal not in ("king", "extinction"):
        raise ValueError("fog=sense needs goal king or extinction")
    if base.capture == "atomic":
        raise ValueError("fog=sense refuses atomic captures")
    return SenseRules(base.start, base.capture, base.goal, window, base.colour)


def sq(file: int, rank: int) -> int:
    return 5 * rank + file


def name(square: int) -> str:
    return "abcde"[square % 5] + str(square // 5 + 1)


def parse(square_name: str) -> int:
    return sq("abcde".index(square_name[0]), int(square_name[1]) - 1)


def is_dark(square: int) -> bool:
    return (square % 5 + square // 5) % 2 == 0


def mine(piece: str, colour: str) -> bool:
    return piece != "." and (piece.isupper() == (colour == "w"))


def window_squares(window: int, w: int, colour: str) -> list[int]:
    """Squares of window `w` of side `window` for `colour` (ranks mirrored for Black)."""
    n = 6 - window
    r, f = divmod(w, n)
    out = []
    for dr in range(window):
        for df in range(window):
            rank = r + dr if colour == "w" else 4 - (r + dr)
            out.append(sq(f + df, rank))
    return sorted(out)


def _colour_ok(rules: SenseRules, frm: int, to: int) -> bool:
    if rules.colour == "same":
        return is_dark(frm) == is_dark(to)
    if rules.colour == "other":
        return is_dark(frm) != is_dark(to)
    return True


def requestable(rules: SenseRules, own: dict[int, str], colour: str) -> list[str]:
    """Sorted requestable moves from the mover's own pieces `own` {square: piece} alone."""
    out = set()
    forward = 1 if colour == "w" else -1
    last = 4 if colour == "w" else 0

    def add(frm, to, pawn_step=None):
        if to in own or not _colour_ok(rules, frm, to):
            return
        text = name(frm) + name(to)
        if pawn_step and to // 5 == last:
            if pawn_step == "diagonal" and rules.capture == "rifle":
                out.add(text)  # never promotes: no letter
            else:
                out.update(text + p for p in PROMOTIONS)
        else:
            out.add(text)

    for frm, piece in own.items():
        f, r = frm % 5, frm // 5
        kind = piece.upper()
        if kind == "P":
            if REF.on_board(f, r + forward):
                add(frm, sq(f, r + forward), "forward")
            for df in (-1, 1):
                if REF.on_board(f + df, r + forward):
                    add(frm, sq(f + df, r + forward), "diagonal")
        elif kind in "NK":
            steps = REF.KNIGHT_STEPS if kind == "N" else REF.KING_STEPS
            for df, dr in steps:
                if REF.on_board(f + df, r + dr):
                    add(frm, sq(f + df, r + dr))
        else:
            dirs = {"B": REF.BISHOP_DIRS, "R": REF.ROOK_DIRS, "Q": REF.QUEEN_DIRS}[kind]
            for df, dr in dirs:
                nf, nr = f + df, r + dr
                while REF.on_board(nf, nr) and sq(nf, nr) not in own:
                    add(frm, sq(nf, nr))
                    nf, nr = nf + df, nr + dr
    return sorted(out) + ["pass"]


def _type_missing(rules: SenseRules, board, colour: str) -> bool:
    kinds = KINDS if rules.goal == "extinction" else "K"
    present = {p.upper() for p in board if mine(p, colour)}
    return any(k not in present for k in kinds)


@dataclass
class Report:
    """What one player is told: kind 'notify' (square), 'sense' (squares -> contents),
    'move' (requested, taken, capture square)."""

    kind: str
    ply: int
    square: int | None = None
    contents: dict[int, str] | None = None
    requested: str | None = None
    taken: str | None = None


@dataclass
class Game:
    """The referee: the true board and both players' reports."""

    rules: SenseRules
    board: tuple
    turn: str = "w"
    fullmove: int = 1
    max_plies: int = 256
    ply: int = 0
    phase: str = "sense"
    result: str | None = None  # '1-0', '0-1', '1/2-1/2'
    reports: dict[str, list[Report]] = field(default_factory=lambda: {"w": [], "b": []})
    notification: int | None = None

    @classmethod
    def from_fen(cls, spec: str, fen: str, max_plies: int = 256) -> Game:
        pos = REF.parse_fen(fen)
        return cls(rule_set(spec), pos.board, pos.turn, pos.fullmove, max_plies)

    def fen(self) -> str:
        return f"{REF.board_to_str(self.board)} {self.turn} - - 0 {self.fullmove}"

    def own(self, colour: str) -> dict[int, str]:
        return {s: p for s, p in enumerate(self.board) if mine(p, colour)}

    def legal(self) -> list[str]:
        """The legal actions as text: moves and `pass`, or `sense:w`; [] once over."""
        if self.result is not None:
            return []
        if self.phase == "sense":
            return [f"sense:{w}" for w in range((6 - self.rules.window) ** 2)]
        return requestable(self.rules, self.own(self.turn), self.turn)

    def sense(self, w: int) -> dict[int, str]:
        assert self.phase == "sense" and self.result is None
        contents = {s: self.board[s] for s in window_squares(self.rules.window, w, self.turn)}
        self.reports[self.turn].append(Report("sense", self.ply, contents=contents))
        self.phase = "move"
        return contents

    def resolve(self, request: str) -> tuple[tuple, str, int | None]:
        """(board, taken move, capture square) of a request on the true board."""
        board = list(self.board)
        if request == "pass":
            return self.board, "pass", None
        frm, to = parse(request[:2]), parse(request[2:4])
        piece = board[frm]
        kind = piece.upper()
        rifle = self.rules.capture == "rifle"
        enemy = "b" if self.turn == "w" else "w"
        end = to
        if kind in "BRQ":  # travel along the line; stop at the first opponent piece
            df = (to % 5 > frm % 5) - (to % 5 < frm % 5)
            dr = (to // 5 > frm // 5) - (to // 5 < frm // 5)
            s = frm
            while True:
                s = sq(s % 5 + df, s // 5 + dr)
                if mine(board[s], enemy) or s == to:
                    end = s
                    break
        target = board[end]
        captures = mine(target, enemy)
        if kind == "P":
            diagonal = frm % 5 != to % 5
            if (diagonal and not captures) or (not diagonal and target != "."):
                return self.board, "pass", None
        taken = name(frm) + name(end)
        if captures and rifle:
            board[end] = "."
            return tuple(board), taken, end
        board[frm] = "."
        if kind == "P" and end // 5 in (0, 4):
            letter = request[4:] or "q"
            board[end] = letter.upper() if self.turn == "w" else letter
            taken += letter
        else:
            board[end] = piece
        return tuple(board), taken, end if captures else None

    def move(self, request: str) -> tuple[str, int | None]:
        assert self.phase == "move" and self.result is None
        assert request in self.legal(), request
        mover, other = self.turn, "b" if self.turn == "w" else "w"
        self.board, taken, capture = self.resolve(request)
        self.reports[mover].append(
            Report("move", self.ply, square=capture, requested=request, taken=taken)
        )
        if capture is not None:
            self.reports[other].append(Report("notify", self.ply, square=capture))
        self.notification = capture
        self.ply += 1
        if _type_missing(self.rules, self.board, mover):  # the mover loses first
            self.result = "0-1" if mover == "w" else "1-0"
        elif _type_missing(self.rules, self.board, other):
            self.result = "1-0" if mover == "w" else "0-1"
        elif self.ply >= self.max_plies:
            self.result = "1/2-1/2"
        if mover == "b":
            self.fullmove += 1
        self.turn, self.phase = other, "sense"
        return taken, capture

    def play(self, action: str):
        if action.startswith("sense:"):
            return self.sense(int(action.split(":")[1]))
        return self.move(action)


class PlayerView:
    """A player's knowledge from its own reports alone (and the public start position)."""

    def __init__(self, rules: SenseRules, colour: str, start_board):
        self.rules, self.colour = rules, colour
        self.own = {s: p for s, p in enumerate(start_board) if mine(p, colour)}
        self.memory: dict[int, str] = {}  # square -> opponent piece or '.', last news
        self.news: dict[int, int] = {}  # square -> ply of that news
        self.sensed: list[int] = []
        self.notification: int | None = None
        self.last_from: int | None = None
        self.last_to: int | None = None
        self.last_capture: int | None = None

    def tell(self, report: Report) -> None:
        rifle = self.rules.capture == "rifle"
        if report.kind == "notify":
            self.own.pop(report.square, None)
            self.memory.pop(report.square, None)
            if rifle:
                self.memory[report.square] = "."
                self.news[report.square] = report.ply
            self.notification = report.square
        elif report.kind == "sense":
            self.sensed = sorted(report.contents)
            for s, piece in report.contents.items():
                self.news[s] = report.ply
                if mine(piece, self.colour):
                    self.memory.pop(s, None)
                else:
                    self.memory[s] = piece
        elif report.kind == "move":
            self.last_capture = report.square
            self.last_from = self.last_to = None
            if report.taken != "pass":
                frm, to = parse(report.taken[:2]), parse(report.taken[2:4])
                self.last_from, self.last_to = frm, to
                if rifle and report.square is not None:
                    self.memory[to] = "."
                    self.news[to] = report.ply
                else:
                    piece = self.own.pop(frm)
                    if report.taken[4:]:
                        letter = report.taken[4]
                        piece = letter.upper() if self.colour == "w" else letter
                    self.own[to] = piece
                    self.memory.pop(to, None)
                    self.memory[frm] = "."
                    self.news[frm] = report.ply

    def start_turn(self) -> None:
        """A new turn: nothing sensed yet (called when this player is to sense)."""
        self.sensed = []

    def end_turn(self) -> None:
        """The turn is over: its window and notification are the past (the next turn has its
        own)."""
        self.notification = None
        self.sensed = []

    def observation(self, ply: int, phase: str) -> list:
        """[5][5][34] nested lists, [rank][file][channel] in this player's view."""
        rs = self.rules
        descriptor = [float(rs.capture == c) for c in ("normal", "rifle", "atomic")]
        descriptor += [float(rs.goal == g) for g in ("checkmate", "king", "extinction")]
        descriptor += [float(rs.window == w) for w in (2, 3)]
        descriptor += [float(rs.colour == c) for c in ("any", "same", "other")]
        scalars = [float(self.colour == "b"), float(phase == "move"), ply / PLY_SCALE]
        grid = []
        for view_rank in range(5):
            rank = view_rank if self.colour == "w" else 4 - view_rank
            row = []
            for file in range(5):
                s = sq(file, rank)
                cell = [0.0] * 20
                if s in self.own:
                    cell[KINDS.index(self.own[s].upper())] = 1.0
                elif s in self.memory:
                    content = self.memory[s]
                    cell[12 if content == "." else 6 + KINDS.index(content.upper())] = 1.0
                    cell[19] = (ply - self.news[s]) / PLY_SCALE
                else:
                    cell[13] = 1.0
                cell[14] = float(s in self.sensed)
                cell[15] = float(s == self.notification)
                cell[16] = float(s == self.last_from)
                cell[17] = float(s == self.last_to)
                cell[18] = float(s == self.last_capture)
                row.append(cell + scalars + descriptor)
            grid.append(row)
        return grid


class Match:
    """A `Game` with both players' `PlayerView`s kept up to date from their reports."""

    def __init__(self, spec: str, fen: str, max_plies: int = 256):
        self.game = Game.from_fen(spec, fen, max_plies)
        self.views = {c: PlayerView(self.game.rules, c, self.game.board) for c in "wb"}
        self._told = {"w": 0, "b": 0}

    def _deliver(self) -> None:
        for c in "wb":
            reports = self.game.reports[c]
            for report in reports[self._told[c] :]:
                self.views[c].tell(report)
            self._told[c] = len(reports)

    def observation(self) -> list:
        g = self.game
        return self.views[g.turn].observation(g.ply, g.phase)

    def play(self, action: str):
        g = self.game
        mover = g.turn
        if action.startswith("sense:"):
            self.views[mover].start_turn()
        else:
            self.views[mover].end_turn()
        out = g.play(action)
        self._deliver()
        return out
