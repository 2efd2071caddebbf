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
moves this command computes: a built-in player (random, greedy, ...) or a model.

A sensing variant (`fog=sense:W`: `mmc_jax.rules.is_sense`) plays its own turns, a sense
then a move request, against a player of the table that plays sensing variants
(`--opponent`, default entropy-pimc): `mmc_jax.evaluation.sensing_play`.

For tests and scripts, `main(argv, stdin, stdout)` reads moves from any text stream.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

import jax

from mmc_jax import algorithms
from mmc_jax import rules as R
from mmc_jax.evaluation import arena, model_engine, sensing_play
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
        type=cli.any_variant_arg,
        required=True,
        help=cli.VARIANT_HELP + " (a sensing variant, fog=sense:W, plays its sense-then-move "
        "turns)",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="run workdir (or <workdir>/checkpoints/<step>), an exported model or a shipped "
        "model's name; default: the shipped model of the variant (gardner: "
        f"{checkpoint.default_model('gardner')}, atomic: {checkpoint.default_model('atomic')}, "
        f"extinction: {checkpoint.default_model('extinction')}), "
        "else the uniform-prior search; 'none': the uniform-prior search (a sensing "
        "variant's opponent is --opponent's)",
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
        f"{players_lib.listing(players_lib.BOARD)} (default: the model of --checkpoint); in a "
        f"sensing variant {', '.join(_sensing_opponents())} (default: "
        f"{sensing_play.DEFAULT_OPPONENT}: information-gain sensing, PIMC moves over its exact "
        "belief; the learned agent plays in python -m mmc_jax.evaluate)",
    )
    return parser


def _sensing_opponents() -> list[str]:
    """The table's players of sensing variants that decide from what they are told (every one
    but the learned agent, which reads what only the batched arena tracks)."""
    return [n for n in players_lib.names(players_lib.SENSING) if n != players_lib.LEARNED]


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
        parser.error("--pgn is not available for sensing variants (their games are not PGN)")
    if args.pgn:  # before the game, not after it
        cli.check_output_file(parser, "--pgn", args.pgn)
    startup.start()
    if R.is_sense(args.variant):
        return _play_sensing(parser, args, stdin, stdout)
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
    except sensing_play.Quit as reason:
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
        entry = players_lib.entry_for(spec, players_lib.BOARD, "--opponent")
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
    """Reads commands until one is a legal move, and plays it; raises `sensing_play.Quit` on
    quit."""
    while True:
        text = sensing_play.read_line(stdin, stdout, "your move> ").lower()
        legal = sorted(single.legal_moves())
        if not text:
            continue
        if text in ("quit", "exit", "resign", "q"):
            raise sensing_play.Quit("quit")
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


def _play_sensing(parser: argparse.ArgumentParser, args, stdin: TextIO, stdout: TextIO) -> int:
    """A person against a player of the table that plays sensing variants: `--opponent`
    (default `sensing_play.DEFAULT_OPPONENT`), or the learned agent of the sensing model
    `--checkpoint` (which plays in the batched arena only, and is refused in one line)."""
    flag = "--checkpoint" if args.opponent is None and args.checkpoint else "--opponent"
    spec = args.opponent or args.checkpoint or sensing_play.DEFAULT_OPPONENT
    context = players_lib.Context(
        variant=args.variant,
        step=args.step,
        open_model=lambda path, step: cli.open_or_fail(
            parser, path, step, flag, opener=algorithms.open_model
        ),
    )
    try:
        entry = players_lib.entry_for(spec, players_lib.SENSING, flag)
    except ValueError as error:
        parser.error(str(error))
    try:
        opponent = sensing_play.opponent_player(
            args.variant, entry.build(spec, context), seed=args.seed
        )
    except ValueError as error:
        parser.error(f"{flag} {error}")
    sensing_play.play(
        args.variant,
        opponent,
        colour=args.colour,
        seed=args.seed,
        max_plies=args.max_plies,
        stdin=stdin,
        stdout=stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
