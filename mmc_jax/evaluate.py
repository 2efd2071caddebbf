"""`python -m mmc_jax.evaluate`: how strong is a model, measured in games.

    python -m mmc_jax.evaluate --checkpoint runs/gardner --variant gardner --opponent greedy \\
        --games 400 [--simulations 32] [--seed 0] [--json] [--pgn FILE]

Plays a colour-balanced match (`mmc_jax.match.play_match`) of a checkpoint against `random`,
`greedy` (`mmc_jax.policies`) or another run's checkpoint, and prints W/D/L per colour, the
score with its 95% interval and the Elo difference (`mmc_jax.elo`).

Statistics: a game scores 1 / 0.5 / 0 for a model win / draw / loss; the match score is the
mean over N games. `score_ci95` is the normal approximation on the per-game scores with their
sample variance (ddof 1), clipped to [0, 1], as chess engine testers report it; when every
game has the same result the Wilson score interval is used instead (`ci_method` says which).
The Wilson interval is always reported too (`score_ci95_wilson`).

Two deterministic searches would replay one game per colour, so a network-vs-network match
opens with `--opening-plies` (default 4 there) paired random plies; 0 is refused for such a
match, since its games would not be independent.

`--checkpoint none` (or omitting it) evaluates the uniform-prior search: a stand-in network
with zero logits and zero value, so the search sees only the game's terminal rewards (a
shallow mate-and-king-capture finder). The network is rebuilt from the config saved with the
checkpoint (`mmc_jax.checkpoint.load_model`).

Subcommands: `python -m mmc_jax.evaluate ladder ...` rates a checkpoint in Elo against random,
greedy and Fairy-Stockfish at increasing node limits, `... tournament ...` every checkpoint of
a run (`mmc_jax.ladder`; those games run in the stepwise `mmc_jax.arena`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import jax

from mmc_jax import cli, startup, storage
from mmc_jax.match import NETWORK_OPENING_PLIES, play_match
from mmc_jax.policies import NAMED_OPPONENTS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.evaluate",
        description="Play a colour-balanced match of a checkpoint against an opponent.",
        epilog="Subcommands: `python -m mmc_jax.evaluate ladder ...` rates a checkpoint in Elo "
        "against random, greedy and Fairy-Stockfish at increasing node limits; "
        "`python -m mmc_jax.evaluate tournament ...` does it for every checkpoint of a run "
        "(see their --help).",
    )
    parser.add_argument(
        "--checkpoint",
        default="none",
        help="run workdir (or <workdir>/checkpoints/<step>); 'none' (default): uniform-prior "
        "search, i.e. zero logits and zero value, guided only by terminal rewards",
    )
    parser.add_argument("--step", type=cli.integer_arg("--step", 0), default=None)
    parser.add_argument("--variant", type=cli.variant_arg, required=True, help=cli.VARIANT_HELP)
    parser.add_argument(
        "--opponent", default="random", help="random, greedy, or another run's workdir"
    )
    parser.add_argument("--games", type=cli.games_arg, default=400, help="positive, even")
    parser.add_argument(
        "--simulations", type=cli.integer_arg("--simulations", 0), default=32, help="0: raw policy"
    )
    parser.add_argument(
        "--opponent-simulations",
        type=cli.integer_arg("--opponent-simulations", 0),
        default=None,
        help="for a checkpoint opponent (default: --simulations)",
    )
    parser.add_argument(
        "--opening-plies",
        type=cli.integer_arg("--opening-plies", 0),
        default=None,
        help=f"paired random plies opening every game (default: {NETWORK_OPENING_PLIES} when "
        "two networks play, whose deterministic searches would otherwise replay one game per "
        "colour; 0 otherwise)",
    )
    parser.add_argument(
        "--max-plies", type=cli.integer_arg("--max-plies", 1), default=None, help="draw after"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--pgn", default=None, help="write the games to this PGN file ([Variant], [FEN], UCI)"
    )
    return parser


def _format(result: dict[str, Any], model_name: str) -> str:
    def row(label, d):
        return (
            f"{label:<9} {d['wins']:>6} {d['draws']:>6} {d['losses']:>6} "
            f"{d['score']:>7.3f} {d['mean_plies']:>7.1f}"
        )

    low, high = result["score_ci95"]
    wlow, whigh = result["score_ci95_wilson"]
    elo = result["elo"]
    elo_text = "n/a" if elo is None else f"{elo:+.0f}"
    sims = result["num_simulations"]
    lines = [
        f"{result['variant']}: {model_name} ({sims} simulations) vs {result['opponent']}, "
        f"{result['num_games']} games (opening plies {result['opening_plies']}, "
        f"ply cap {result['max_plies']})",
        f"{'model as':<9} {'W':>6} {'D':>6} {'L':>6} {'score':>7} {'plies':>7}",
        row("White", result["white"]),
        row("Black", result["black"]),
        row("total", result),
        f"score {result['score']:.3f}, 95% CI [{low:.3f}, {high:.3f}] ({result['ci_method']}; "
        f"Wilson [{wlow:.3f}, {whigh:.3f}]); Elo {elo_text}",
    ]
    return "\n".join(lines)


SUBCOMMANDS = ("ladder", "tournament")


def _play(args, network, params, opponent, opponent_network, opponent_params, games):
    return play_match(
        network,
        params,
        args.variant,
        opponent,
        args.games,
        args.simulations,
        jax.random.key(args.seed),
        opponent_params=opponent_params,
        opponent_network=opponent_network,
        opponent_simulations=args.opponent_simulations,
        max_plies=args.max_plies,
        opening_plies=args.opening_plies,
        games_out=games,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    `ladder` and `tournament` as the first argument select those subcommands
    (`mmc_jax.ladder`); anything else is the match CLI, unchanged."""
    argv = sys.argv[1:] if argv is None else list(argv)
    startup.start()
    if argv and argv[0] in SUBCOMMANDS:
        from mmc_jax import ladder  # imports this module: load it only when asked

        return (ladder.ladder_main if argv[0] == "ladder" else ladder.tournament_main)(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.pgn:
        cli.check_output_file(parser, "--pgn", args.pgn)

    if args.checkpoint.lower() == "none":
        network, params, model_name = None, None, "uniform-prior search"
    else:
        network, params, config = cli.load_or_fail(
            parser, args.checkpoint, args.step, "--checkpoint"
        )
        model_name = args.checkpoint
        trained_on = list(config.get("variants", None) or [])
        if trained_on and args.variant not in trained_on:
            print(
                f"note: {args.checkpoint} was trained on {', '.join(trained_on)}, "
                f"not on {args.variant}",
                file=sys.stderr,
            )
    opponent, opponent_network, opponent_params = args.opponent, None, None
    if args.opponent not in NAMED_OPPONENTS:
        if not storage.is_remote(args.opponent) and not os.path.isdir(args.opponent):
            parser.error(
                f"--opponent must be one of {', '.join(NAMED_OPPONENTS)} or a checkpoint "
                f"workdir; {args.opponent!r} is neither"
            )
        opponent_network, opponent_params, _ = cli.load_or_fail(
            parser, args.opponent, None, "--opponent"
        )
        opponent = "checkpoint"

    if args.opening_plies is None:
        two_networks = opponent == "checkpoint" and network is not None
        args.opening_plies = NETWORK_OPENING_PLIES if two_networks else 0
    games = [] if args.pgn else None
    try:
        result = _play(args, network, params, opponent, opponent_network, opponent_params, games)
    except ValueError as error:
        parser.error(str(error))
    if opponent == "checkpoint":
        result["opponent"] = args.opponent
    if network is not None:
        result["model"] = model_name
    result["seed"] = args.seed
    if games is not None:
        from mmc_jax import pgn

        for g, record in enumerate(games):  # the model is White in the first half
            model_side, other = ("white", "black") if g < len(games) // 2 else ("black", "white")
            record[model_side], record[other] = model_name, args.opponent
        pgn.write_pgn(games, args.pgn, event="mmc_jax evaluate")
        result["pgn"] = args.pgn
    if args.json:
        print(json.dumps(result))
    else:
        print(_format(result, model_name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
