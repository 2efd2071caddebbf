"""Play a model in the terminal: `python -m mmc_jax.play --variant atomic --checkpoint runs/atomic`.

The board is drawn in Unicode (White at the bottom), moves are typed in UCI (`e2e3`, `a4a5q`
to promote). Anything else is answered, never a crash: a malformed or illegal move gets the
list of legal moves and a new prompt; `moves` lists them, `board` redraws, `help` explains,
`quit` (or end of input, or Ctrl-C) ends the game. In `dark` you see only your own pieces and
the squares your legal moves reach, and the model's moves are not shown until the end.

Without `--checkpoint` the opponent is the model shipped for the variant
(`checkpoint.default_model`; gardner: `gardner-h200`, the 6x128 network trained 5 minutes on one
GPU; `--checkpoint gardner-cpu` is the faster 2x32 one; atomic: `atomic-supervised` and
extinction: `extinction-supervised`, 2x32, learned from Fairy-Stockfish's games), else the
search with a uniform prior
(zero logits, zero value: it finds mates and king captures within its simulations, nothing
more; `--checkpoint none` asks for it). The model
plays its evaluation search (`--simulations`, deterministic) through the UCI engine's and the
page's compiled programs (`model_engine.ModelEngine`), so the three share one search program
and its compile cache; at `--simulations 0` its raw policy; `--pgn FILE` saves the game.

`--opponent NAME` plays any player of the one player table (`mmc_jax.evaluation.players`) whose
moves this command computes: a built-in player (random, greedy, ...) or a model; in a sensing
variant a recon agent (default `--recon-agent`).

For tests and scripts, `main(argv, stdin, stdout)` reads moves from any text stream.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

import jax

from mmc_jax import rules as R
from mmc_jax.evaluation import arena, model_engine, recon_player
from mmc_jax.evaluation import players as players_lib
from mmc_jax.infra import checkpoint, cli, startup
from mmc_jax.rules import notation

HELP = (
    "Type a move in UCI: from-square and to-square, like e2e3, plus the piece for a "
    "promotion (a4a5q, a4a5n). Commands: moves (list the legal moves), board (draw it "
    "again), help, quit."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.play",
        description="Play a minichess variant against a model (or the uniform-prior search) "
        "in the terminal, moves in UCI.",
    )
    parser.add_argument(
        "--variant",
        type=_variant_arg,
        required=True,
        help=cli.VARIANT_HELP + " (a sensing variant such as recon plays the recon protocol)",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="run workdir (or <workdir>/checkpoints/<step>), an exported model or a shipped "
        "model's name; default: the shipped model of the variant (gardner: "
        f"{checkpoint.default_model('gardner')}, atomic: {checkpoint.default_model('atomic')}, "
        f"extinction: {checkpoint.default_model('extinction')}), "
        "else the uniform-prior search; 'none': the uniform-prior search",
    )
    cli.add_integer(parser, "--step", 0, default=None)
    parser.add_argument(
        "--as",
        "--colour",
        "--color",
        dest="colour",
        choices=("white", "black"),
        default="white",
        help="your colour (default white)",
    )
    cli.add_integer(
        parser,
        "--simulations",
        0,
        default=32,
        help="the model's search simulations per move (0: raw policy; default 32)",
    )
    cli.add_integer(parser, "--max-plies", 1, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pgn", default=None, help="save the game to this PGN file")
    parser.add_argument(
        "--opponent",
        default=None,
        help="who you play, any player of the table that plays the variant's game: "
        f"{players_lib.listing('board')} (default: the model of --checkpoint); in a sensing "
        f"variant {', '.join(players_lib.names('recon'))} (default: --recon-agent)",
    )
    parser.add_argument(
        "--recon-agent",
        default="entropy-pimc",
        choices=players_lib.names("recon"),
        help="the opponent in a sensing variant (default entropy-pimc: information-gain "
        "sensing, PIMC moves over its exact belief)",
    )
    return parser


def _variant_arg(name: str) -> str:
    """argparse type: a variant spec (sensing variants included), canonical."""
    try:
        return R.check_variant(name, sensing=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _Quit(Exception):
    pass


def _read(stdin: TextIO, stdout: TextIO, prompt: str) -> str:
    stdout.write(prompt)
    stdout.flush()
    line = stdin.readline()
    if not line:
        raise _Quit("end of input")
    return line.strip()


def _model_move(single: arena.SingleGame, player: arena.Player, key, engine=None) -> int:
    """The model's action: `engine` (a `model_engine.ModelEngine`) searches as the UCI engine
    and the browser page do, with their programs; under fog from the model's own view and
    belief (the arena's search would step the true board and read your hidden pieces).
    Without an engine (the raw policy, 0 simulations) the arena's player moves."""
    if engine is None:
        return int(arena.act(player, single.rules, single.state, single.planes, [0], key)[0])
    position = engine.position(single.variant, single.start_fen, single.moves)
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    return single.parse(engine.search(position, max(player.num_simulations, 1), seed=seed).move)


def main(
    argv: list[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    """Command-line entry point; returns the exit status (0 also when you quit)."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    parser = _parser()
    args = parser.parse_args(argv)
    if args.pgn and R.is_sense(args.variant):
        parser.error("--pgn is not available for sensing variants (recon games are not PGN)")
    if args.pgn:  # before the game, not after it
        cli.check_output_file(parser, "--pgn", args.pgn)
    startup.start()
    if R.is_sense(args.variant):
        return _play_recon(parser, args, stdin, stdout)
    model = _opponent(parser, args)
    who = "model" if model.kind == players_lib.NETWORK_KIND else model.name
    human = 0 if args.colour == "white" else 1
    dark = R.has_fog(args.variant)
    engine = None
    if model.kind == players_lib.NETWORK_KIND and (dark or args.simulations > 0):
        # The model searches as the UCI engine and the page do, with their compiled programs
        # (one search program for the three, kept in the compile cache); under fog from its own
        # view (a fair search), never from the true board. At 0 simulations (the raw policy) it
        # plays through the arena.
        engine = model_engine.ModelEngine(
            model.network, model.params, model.name, max_plies=args.max_plies
        )

    def say(text: str = "") -> None:
        stdout.write(text + "\n")
        stdout.flush()

    if model.name == UNTRAINED:
        say(
            f"no trained model for {args.variant}: an untrained search (uniform prior, zero "
            "value: it sees only the game's results); --checkpoint RUN plays a trained one"
        )
    budget = f" ({args.simulations} simulations)" if model.kind == players_lib.NETWORK_KIND else ""
    say(f"{args.variant}: you play {args.colour.capitalize()} against {model.name}{budget}. {HELP}")
    say(
        "Preparing the game (the first model move compiles the search; later starts load it "
        "from the compile cache)..."
    )
    single = arena.SingleGame(args.variant, max_plies=args.max_plies)
    key = jax.random.key(args.seed)
    if engine is not None:
        engine.precompile(args.variant)  # the first model move's programs, side by side

    def draw() -> None:
        legal = list(single.legal_moves())
        shown = (
            notation.fog_view(single.fen, legal) if dark and single.turn == human else single.fen
        )
        say("")
        say(R.render(shown))
        say(f"{'White' if single.turn == 0 else 'Black'} to move" + ("   (fog)" if dark else ""))

    quit_reason = None
    try:
        while not single.over:
            if single.turn == human:
                draw()
                _human_move(single, stdin, stdout, say, draw)
            else:
                say(f"{who} is thinking...")
                move = single.play_action(
                    _model_move(single, model, jax.random.fold_in(key, len(single.moves)), engine)
                )
                say(f"{who} moved (hidden in dark)" if dark else f"{who} plays {move}")
    except _Quit as reason:
        quit_reason = str(reason)
    except KeyboardInterrupt:
        quit_reason = "interrupted"
    result = _say_the_end(single, quit_reason, say)
    if args.pgn:
        _save_pgn(args, single, model.name, human, result)
        say(f"saved {args.pgn}")
    return 0


UNTRAINED = "an untrained search"


def _opponent(parser: argparse.ArgumentParser, args) -> players_lib.Player:
    """The player you face: `--opponent` (an entry of the player table that plays on the
    board and whose moves this command computes: a built-in player or a model), by default
    the model of `--checkpoint`."""
    spec = args.opponent
    if spec is None or spec == "model":
        return _model_player(parser, args)
    try:
        entry = players_lib.entry_for(spec, "board", "--opponent")
        if entry.name == "model":
            args.checkpoint = spec
            return _model_player(parser, args)
        context = players_lib.Context(variant=args.variant, simulations=args.simulations)
        player = entry.build(spec, context)
        if entry.policy is not None:
            players_lib.check_fair(entry.name, args.variant)  # it is handed the true board
    except ValueError as error:
        parser.error(str(error))
    if not isinstance(player, players_lib.Player) or not player.is_jax:
        parser.error(
            f"--opponent {spec}: play computes the moves of {', '.join(players_lib.kinds())} "
            "and models (an engine: python -m mmc_jax.evaluate)"
        )
    return player


def _model_player(parser: argparse.ArgumentParser, args) -> arena.Player:
    """The model you play: `--checkpoint` (default the variant's shipped model, if any; "none":
    the uniform-prior search) with `--simulations`, named after its checkpoint."""
    if args.checkpoint is None:
        args.checkpoint = checkpoint.default_model(args.variant)
    if args.checkpoint is None:  # no shipped model for this variant
        network, params, name = None, None, UNTRAINED
    elif args.checkpoint.lower() == "none":
        network, params, name = None, None, "uniform-prior search"
    else:
        network, params, _ = cli.load_or_fail(parser, args.checkpoint, args.step, "--checkpoint")
        name = args.checkpoint
    return arena.model_player(name, network, params, args.simulations)


def _human_move(
    single: arena.SingleGame,
    stdin: TextIO,
    stdout: TextIO,
    say: Callable[[str], None],
    draw: Callable[[], None],
) -> None:
    """Reads commands until one is a legal move, and plays it; raises `_Quit` on quit."""
    while True:
        text = _read(stdin, stdout, "your move> ").lower()
        legal = sorted(single.legal_moves())
        if not text:
            continue
        if text in ("quit", "exit", "resign", "q"):
            raise _Quit("quit")
        if text in ("help", "?", "h"):
            say(HELP)
            continue
        if text in ("moves", "legal", "m"):
            say("legal moves: " + " ".join(legal))
            continue
        if text in ("board", "b"):
            draw()
            continue
        try:
            single.play(text)
            return
        except ValueError as error:
            message = str(error)
            if "legal moves:" not in message:
                message += "; legal moves: " + " ".join(legal)
            say(message)


def _say_the_end(
    single: arena.SingleGame, quit_reason: str | None, say: Callable[[str], None]
) -> str:
    """Shows the final board, the moves and the result; returns the result ("*" if quit)."""
    say("")
    say(R.render(single.fen))
    say("moves: " + (" ".join(single.moves) or "none"))
    if quit_reason:
        say(f"game ended ({quit_reason}) after {len(single.moves)} plies")
        return "*"
    result = single.result()
    winner = {"1-0": "White wins", "0-1": "Black wins", "1/2-1/2": "draw"}[result]
    say(f"result: {result} ({winner})")
    return result


def _save_pgn(args, single: arena.SingleGame, name: str, human: int, result: str) -> None:
    """Writes the game to `--pgn`."""
    from mmc_jax.evaluation import pgn

    white, black = ("you", name) if human == 0 else (name, "you")
    record = {
        "variant": args.variant,
        "white": white,
        "black": black,
        "start_fen": single.start_fen,
        "moves": single.moves,
        "result": result,
        "termination": "normal" if result != "*" else "unterminated",
    }
    pgn.write_pgn([record], args.pgn, event="mmc_jax play")


# ----------------------------------------------------------------------------- recon

RECON_HELP = (
    "Each turn you first sense a window: type its lower-left corner square (a1 senses a1-b2 "
    "with 2x2 windows); then request a move in UCI (e2e3, a4a5q) or pass. A move may be "
    "stopped by a hidden piece, or fail (taken as pass). Commands: windows, moves, board, "
    "help, quit. The board shows your pieces, what you last saw of the opponent, * unknown."
)


class _HumanRecon(recon_player.Player):
    """A person at the terminal behind the reconchess callbacks."""

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
            text = _read(self.stdin, self.stdout, prompt).lower()
            if text in ("quit", "exit", "resign", "q"):
                raise _Quit("quit")
            if text in ("help", "?", "h"):
                self.say(RECON_HELP)
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


def _play_recon(parser, args, stdin: TextIO, stdout: TextIO) -> int:
    """A person against a recon agent (`--recon-agent`) in a sensing variant."""

    def say(text: str = "") -> None:
        stdout.write(text + "\n")
        stdout.flush()

    rifle = R.parse(args.variant).capture == "rifle"
    human = _HumanRecon(stdin, stdout, say, rifle)
    spec = args.recon_agent if args.opponent is None else args.opponent
    try:
        agent = players_lib.build(spec, players_lib.Context(variant=args.variant), "--opponent")
        agent = recon_player.BeliefPlayer(agent, args.variant, seed=args.seed)
    except ValueError as error:
        parser.error(str(error))
    say(f"{args.variant} (reconnaissance-blind). {RECON_HELP}")
    say("Preparing the game (the agent compiles its belief updates: up to a minute)...")
    white, black = (human, agent) if args.colour == "white" else (agent, human)
    try:
        record = recon_player.play_game(white, black, args.variant, max_plies=args.max_plies)
    except _Quit as reason:
        say(f"game ended ({reason})")
        return 0
    except KeyboardInterrupt:
        say("game ended (interrupted)")
        return 0
    say("moves: " + " ".join(f"{c}:{text}" for c, kind, text in record.history if kind == "move"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
