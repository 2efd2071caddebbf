"""A person at the terminal against a sensing player (`fog=sense:W`): the game loop of
`python -m mmc_jax.play` for sensing variants.

    sensing_play.play("recon", players.build("entropy-pimc", players.Context(variant="recon")),
                      colour="white", stdin=sys.stdin, stdout=sys.stdout)

The person is a `recon_player.Player` reading the terminal (`HumanPlayer`); the opponent is a
player of the table that plays sensing variants and decides from the callbacks alone
(`recon_player.BeliefPlayer`: random, random-pimc, entropy-pimc; the learned agent plays in the
batched arena only, `python -m mmc_jax.evaluate`). Each turn the person senses a window by its
lower-left corner, then requests a move in UCI or passes; `windows`/`moves` list the choices,
`board` redraws, `help` explains, `quit` (or end of input, or Ctrl-C) ends the game; anything
else is answered with the choices, never a crash.

`Quit` and `read_line` are the terminal's reading, which the board game's loop shares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from mmc_jax import rules as R
from mmc_jax.evaluation import players as players_lib
from mmc_jax.evaluation import recon_player
from mmc_jax.rules import notation

DEFAULT_OPPONENT = "entropy-pimc"  # information-gain sensing, PIMC moves over its exact belief
HELP = (
    "Each turn you first sense a window: type its lower-left corner square (a1 senses a1-b2 "
    "with 2x2 windows); then request a move in UCI (e2e3, a4a5q) or pass. A move may be "
    "stopped by a hidden piece, or fail (taken as pass). Commands: windows, moves, board, "
    "help, quit. The board shows your pieces, what you last saw of the opponent, * unknown."
)


class Quit(Exception):
    """The person ended the game (`quit`, or the end of input)."""


def read_line(stdin: TextIO, stdout: TextIO, prompt: str) -> str:
    """The next line typed after `prompt`, stripped; raises `Quit` at the end of input."""
    stdout.write(prompt)
    stdout.flush()
    line = stdin.readline()
    if not line:
        raise Quit("end of input")
    return line.strip()


class HumanPlayer(recon_player.Player):
    """A person at the terminal behind the reconchess callbacks: it shows what the rules tell
    the person (own pieces, the last content seen of each other square) and reads the choices."""

    def __init__(self, stdin: TextIO, stdout: TextIO, say: Callable[[str], None], rifle: bool):
        self.stdin, self.stdout, self.say, self.rifle = stdin, stdout, say, rifle
        self.name = "you"

    def handle_game_start(self, color, board, opponent_name):
        self.white = color
        cells = {}
        for i, row in enumerate(notation.board_rows(board.split()[0])):
            for file, ch in enumerate(row):
                cells[f"{notation.FILES[file]}{5 - i}"] = ch
        self.own = {sq: p for sq, p in cells.items() if p != "." and p.isupper() == color}
        self.seen = {sq: p for sq, p in cells.items() if sq not in self.own}
        self.say(f"You play {'White' if color else 'Black'} against {opponent_name}.")

    def board(self) -> str:
        board = notation.fen_board(
            [self.own.get(f"{f}{rank}") or self.seen.get(f"{f}{rank}", "*") for f in notation.FILES]
            for rank in range(5, 0, -1)
        )
        return R.render(f"{board} {'w' if self.white else 'b'} - - 0 1")

    def _ask(self, prompt: str, valid: list[str], listing: str) -> str:
        while True:
            text = read_line(self.stdin, self.stdout, prompt).lower()
            if text in ("quit", "exit", "resign", "q"):
                raise Quit("quit")
            if text in ("help", "?", "h"):
                self.say(HELP)
            elif text in ("board", "b"):
                self.say(self.board())
            elif text in ("moves", "windows", "m", "w"):
                self.say(f"{listing}: " + " ".join(valid))
            elif text in valid:
                return text
            elif text:
                self.say(f"{text!r} is not one of the {listing}: " + " ".join(valid))

    def handle_opponent_move_result(self, captured_my_piece, capture_square):
        if captured_my_piece:
            self.own.pop(capture_square, None)
            self.seen[capture_square] = "*" if not self.rifle else "."
            self.say(f"The opponent captured your piece on {capture_square}.")
        self.say(self.board())

    def choose_sense(self, sense_actions, move_actions, seconds_left):
        return self._ask("sense> ", list(sense_actions), "windows (lower-left corners)")

    def handle_sense_result(self, sense_result):
        for sq, piece in sense_result:
            if sq not in self.own:
                self.seen[sq] = piece or "."
        self.say("You see: " + " ".join(f"{sq}={p or '.'}" for sq, p in sense_result))

    def choose_move(self, move_actions, seconds_left):
        text = self._ask("your move> ", sorted(move_actions) + ["pass"], "requestable moves")
        return None if text == "pass" else text

    def handle_move_result(self, requested_move, taken_move, captured, capture_square):
        if taken_move is not None and not (self.rifle and captured):
            piece = self.own.pop(taken_move[:2])
            if len(taken_move) == 5:
                piece = taken_move[4].upper() if self.white else taken_move[4]
            self.own[taken_move[2:4]] = piece
            self.seen[taken_move[:2]] = "."
            self.seen.pop(taken_move[2:4], None)
        elif captured:
            self.seen[capture_square] = "."
        tail = f", capturing on {capture_square}" if captured else ""
        self.say(f"You requested {requested_move or 'pass'}: taken {taken_move or 'pass'}{tail}.")

    def handle_game_end(self, winner_color, win_reason, game_history):
        result = (
            "draw"
            if winner_color is None
            else ("you win" if winner_color == self.white else "you lose")
        )
        self.say(f"Game over: {result} ({win_reason}).")


def opponent_player(
    variant: str, opponent: players_lib.ReconAgent, seed: int = 0
) -> recon_player.BeliefPlayer:
    """The table's sensing player `opponent` behind the callbacks; a one-line ValueError for
    one that cannot play there (the learned agent)."""
    return recon_player.BeliefPlayer(opponent, variant, seed=seed)


def play(
    variant: str,
    opponent: players_lib.ReconAgent | recon_player.Player,
    *,
    colour: str = "white",
    seed: int = 0,
    max_plies: int | None = None,
    stdin: TextIO,
    stdout: TextIO,
) -> None:
    """A person (`colour`, "white" or "black") against `opponent` (a player of the table,
    `players.ReconAgent`, or any `recon_player.Player`) in the sensing variant `variant`, at
    the terminal `stdin`/`stdout`, to the end of the game, a quit, the end of input or Ctrl-C.

    Raises:
      ValueError: `variant` is not a sensing variant, or `opponent` cannot play behind the
        callbacks (one line).
    """

    def say(text: str = "") -> None:
        stdout.write(text + "\n")
        stdout.flush()

    if isinstance(opponent, players_lib.ReconAgent):
        opponent = opponent_player(variant, opponent, seed)
    human = HumanPlayer(stdin, stdout, say, R.parse(variant).capture == "rifle")
    say(f"{R.canonical(variant)} (reconnaissance-blind). {HELP}")
    say("Preparing the game (the agent compiles its belief updates: up to a minute)...")
    white, black = (human, opponent) if colour == "white" else (opponent, human)
    try:
        record = recon_player.play_game(white, black, variant, max_plies=max_plies)
    except Quit as reason:
        say(f"game ended ({reason})")
        return
    except KeyboardInterrupt:
        say("game ended (interrupted)")
        return
    say("moves: " + " ".join(f"{c}:{text}" for c, kind, text in record.history if kind == "move"))
