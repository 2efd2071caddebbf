"""`python -m mmc_jax.evaluate`: how strong is a model, measured in games.

    python -m mmc_jax.evaluate --checkpoint runs/gardner --variant gardner --opponent greedy \\
        --games 400 [--simulations 32] [--seed 0] [--json] [--pgn FILE]

Plays a colour-balanced match (`mmc_jax.evaluation.match.play_match`) of a checkpoint against
a built-in player (`random`, `greedy`, ...: `mmc_jax.evaluation.players`) or another run's
checkpoint, and prints W/D/L per colour, the score with its 95% interval and the Elo
difference (`mmc_jax.evaluation.elo`).

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
checkpoint (`mmc_jax.infra.checkpoint.load_model`).

Either side may be any UCI engine, `uci:COMMAND`: a model served by `python -m mmc_jax.engine`
(fair under fog), Fairy-Stockfish, or any other; it searches `go nodes <--simulations>` (the
opponent: `--opponent-simulations`). Such a match runs in the stepwise `mmc_jax.evaluation.arena`
(each engine in its own process; every engine move is checked against the rules), e.g. the shipped
Gardner model through UCI against Fairy-Stockfish at 100 nodes:

    python -m mmc_jax.evaluate --variant gardner --games 20 \\
        --checkpoint "uci:python -m mmc_jax.engine --model gardner-cpu" --simulations 64 \\
        --opponent "uci:$(python -m mmc_jax.uci build)" --opponent-simulations 100

A side may also be a model's one-ply value player, `one-ply:MODEL` (`mmc_jax.search.one_ply`:
no search, the move whose next position its value head rates worst for the opponent; how a
TD(λ) model plays, `configs/td_lambda.py`), e.g. `--checkpoint one-ply:runs/td --opponent
greedy`; it too plays in the stepwise arena.

A sensing variant (`fog=sense:W`, e.g. `--variant recon`: `mmc_jax.rules.is_sense`) is played
by the table's players of sensing variants, both sides named as on the board: `--checkpoint` a
sensing model (the learned agent of a `configs/recon.py` run or its export, also written
`learned:MODEL`) or any of those players (random, random-pimc, entropy-pimc), `--opponent`
likewise (default random), e.g. the shipped learned agent against information-gain sensing
with PIMC moves:

    python -m mmc_jax.evaluate --variant recon --checkpoint experiments/recon/learned/model \
        --opponent entropy-pimc --games 20

The games run in one batch of the compiled recon arena (`mmc_jax.evaluation.sensing_match`),
each searching decision over `--worlds` boards drawn from the player's exact belief, and the
report is the board match's (W/D/L per colour, the score with its intervals, Elo; `--json`).
A board player asked to play a sensing variant, or a sensing player a board variant, is refused
in one line, as are the board-only flags (`--simulations`, `--opponent-simulations`,
`--opening-plies`, `--pgn`).

Subcommands: `python -m mmc_jax.evaluate ladder ...` rates a checkpoint in Elo against random,
greedy and Fairy-Stockfish at increasing node limits, `... tournament ...` every checkpoint of
a run (`mmc_jax.evaluation.ladder`; those games run in the stepwise `mmc_jax.evaluation.arena`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import jax
import numpy as np

from mmc_jax import algorithms
from mmc_jax import rules as R
from mmc_jax.evaluation import players as players_lib
from mmc_jax.evaluation import sensing_match
from mmc_jax.evaluation.match import NETWORK_OPENING_PLIES, play_match
from mmc_jax.infra import checkpoint, cli, startup
from mmc_jax.training import memory

DEFAULT_SIMULATIONS = 32
ENGINE_WORDS = ("stockfish", "fairy-stockfish", "fairy_stockfish", "fsf", "engine", "uci")


def _engine_hint(opponent: str) -> str:
    """For an opponent that names an engine without the `uci:` form: how to write it."""
    if opponent.lower() in ENGINE_WORDS or "stockfish" in opponent.lower():
        return (
            "; a UCI engine is 'uci:COMMAND', e.g. Fairy-Stockfish: "
            '--opponent "uci:$(python -m mmc_jax.uci build)"'
        )
    return ""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.evaluate",
        description="Play a colour-balanced match of a checkpoint against an opponent.",
        epilog="A side may also be a model's one-ply value player, 'one-ply:MODEL' (no search: "
        "the move whose next position its value head rates worst for the opponent; how a "
        "TD(lambda) model plays). "
        "A sensing variant (fog=sense:W) is played by players of sensing variants on both "
        "sides (--checkpoint: a sensing model, the learned agent, or one of those players), "
        "in the compiled recon arena (--worlds). "
        "Subcommands: `python -m mmc_jax.evaluate ladder ...` rates a checkpoint in Elo "
        f"against the built-in players ({', '.join(players_lib.kinds())}) and Fairy-Stockfish "
        "at increasing node limits; "
        "`python -m mmc_jax.evaluate tournament ...` does it for every checkpoint of a run "
        "(see their --help).",
    )
    parser.add_argument(
        "--checkpoint",
        default="none",
        help="run workdir (or <workdir>/checkpoints/<step>), an exported model, or a shipped "
        f"model's name ({', '.join(checkpoint.shipped_models())}: python -m mmc_jax.export "
        "--list); 'none' (default): uniform-prior "
        "search, i.e. zero logits and zero value, guided only by terminal rewards; "
        "'uci:COMMAND': a UCI engine (e.g. 'uci:python -m mmc_jax.engine --model gardner-cpu'); "
        "in a sensing variant a player of sensing variants: "
        + players_lib.listing(players_lib.SENSING),
    )
    cli.add_integer(parser, "--step", 0, default=None)
    parser.add_argument(
        "--variant",
        type=cli.any_variant_arg,
        required=True,
        help=cli.VARIANT_HELP + " (a sensing variant, fog=sense:W, is played by the players of "
        "sensing variants)",
    )
    parser.add_argument(
        "--opponent",
        default="random",
        help=f"a built-in player ({', '.join(players_lib.kinds())}), another run's workdir, "
        "an exported or shipped model, or 'uci:COMMAND' (a UCI engine; Fairy-Stockfish: "
        '"uci:$(python -m mmc_jax.uci build)"); the players: '
        + players_lib.describe(players_lib.BOARD).replace("%", "%%")
        + "; in a sensing variant: "
        + players_lib.describe(players_lib.SENSING).replace("%", "%%"),
    )
    parser.add_argument("--games", type=cli.games_arg, default=400, help="positive, even")
    cli.add_integer(
        parser,
        "--simulations",
        0,
        default=None,
        help=f"0: raw policy; a UCI engine's `go nodes` (default {DEFAULT_SIMULATIONS}; board "
        "variants)",
    )
    cli.add_integer(
        parser,
        "--opponent-simulations",
        0,
        default=None,
        help="for a checkpoint opponent (default: --simulations)",
    )
    cli.add_integer(
        parser,
        "--opening-plies",
        0,
        default=None,
        help=f"paired random plies opening every game (default: {NETWORK_OPENING_PLIES} when "
        "two networks play, whose deterministic searches would otherwise replay one game per "
        "colour; 0 otherwise)",
    )
    cli.add_integer(parser, "--max-plies", 1, default=None, help="draw after")
    cli.add_integer(
        parser,
        "--compact",
        1,
        default=None,
        help="shrink the batch by quarters as games end, down to N games, so a long match "
        "with a searching side costs what its running games cost (two more compiles; a "
        "sampled or random player's draws differ from the full batch's; default: off)",
    )
    cli.add_integer(
        parser,
        "--worlds",
        1,
        default=None,
        help="sensing variants: boards drawn from a player's belief per searching decision "
        f"(PIMC's and the learned agent's; default {sensing_match.DEFAULT_WORLDS})",
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
    if "worlds" in result:  # a sensing variant's match
        header = (
            f"{result['variant']}: {model_name} vs {result['opponent']}, {result['num_games']} "
            f"games (worlds {result['worlds']}, belief size {result['belief_size']}, "
            f"ply cap {result['max_plies']})"
        )
    else:
        header = (
            f"{result['variant']}: {model_name} ({result['num_simulations']} simulations) vs "
            f"{result['opponent']}, {result['num_games']} games (opening plies "
            f"{result['opening_plies']}, ply cap {result['max_plies']})"
        )
    lines = [
        header,
        f"{'model as':<9} {'W':>6} {'D':>6} {'L':>6} {'score':>7} {'plies':>7}",
        row("White", result["white"]),
        row("Black", result["black"]),
        row("total", result),
        f"score {result['score']:.3f}, 95% CI [{low:.3f}, {high:.3f}] ({result['ci_method']}; "
        f"Wilson [{wlow:.3f}, {whigh:.3f}]); Elo {elo_text}",
    ]
    return "\n".join(lines)


SUBCOMMANDS = ("ladder", "tournament")


def _uci_match(args, sides) -> tuple[dict[str, Any], list]:
    """The match when a side is a UCI engine: `arena.play_games` with one engine pool per
    engine side. `sides` are (name, kind, payload) for the model and the opponent: kind
    "engine" (payload: (command, nodes)), "model" (network, params, simulations), or a
    built-in player's kind. Returns (`elo.match_statistics` of the model's games, the game
    records)."""
    from mmc_jax import uci
    from mmc_jax.evaluation import arena
    from mmc_jax.evaluation import elo as elo_lib

    players, pools = [], {}
    try:
        for name, kind, payload in sides:
            if kind == "engine":
                command, nodes = payload
                players.append(arena.engine_player(uci.Limits(nodes=max(nodes, 1)), name))
                pools[name] = uci.EnginePool(
                    args.variant,
                    command,
                    processes=1,
                    move_timeout=uci.SLOW_ENGINE_MOVE_TIMEOUT,
                    **uci.SLOW_ENGINE_TIMEOUTS,
                )
            elif kind == "model":
                players.append(arena.model_player(name, *payload))
            elif kind == "player":  # built by the player table (the one-ply player)
                players.append(payload)
            else:
                players.append(arena.Player(name, kind))
        records = arena.play_games(
            players,
            arena.colour_balanced(0, 1, args.games, args.variant),
            seed=args.seed,
            opening_plies=args.opening_plies,
            max_plies=args.max_plies,
            engine_pool=pools,
            progress=arena.print_progress,
        )
    finally:
        for pool in pools.values():
            pool.close()
    points = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}
    rewards, plies = [], []
    for record in records:
        if record.scored:
            sign = 1 if record.white == players[0].name else -1
            rewards.append(sign * points[record.result])
            plies.append(len(record.moves))
    if not rewards:
        errors = "; ".join(sorted({r.error for r in records if r.error})[:3])
        raise uci.EngineError(f"every game was aborted: {errors}")
    result = elo_lib.match_statistics(np.array(rewards), np.array(plies))
    aborted = [r.error for r in records if not r.scored]
    result.update(
        variant=args.variant,
        num_simulations=args.simulations,
        opponent_simulations=args.opponent_simulations,
        max_plies=args.max_plies or int(R.get(args.variant).max_plies),
        opening_plies=args.opening_plies,
        aborted=len(aborted),
        errors=aborted[:10],
    )
    return result, records


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
        compact=args.compact or 0,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    `ladder` and `tournament` as the first argument select those subcommands
    (`mmc_jax.evaluation.ladder`); anything else is the match CLI, unchanged."""
    argv = sys.argv[1:] if argv is None else list(argv)
    startup.start()
    if argv and argv[0] in SUBCOMMANDS:
        from mmc_jax.evaluation import ladder

        return (ladder.ladder_main if argv[0] == "ladder" else ladder.tournament_main)(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if R.is_sense(args.variant):
        return _sensing_main(parser, args)
    if args.worlds is not None:
        parser.error(
            f"--worlds is for sensing variants (fog=sense:W), not {args.variant}: its players "
            "search with --simulations"
        )
    if args.simulations is None:
        args.simulations = DEFAULT_SIMULATIONS
    _refuse_sensing_player(parser, args.checkpoint, "--checkpoint")
    if args.pgn:
        cli.check_output_file(parser, "--pgn", args.pgn)

    try:
        model_engine = uci_engine_command(args.checkpoint)
        opponent_engine = uci_engine_command(args.opponent)
    except ValueError as error:
        parser.error(str(error))
    if model_engine or opponent_engine or _one_ply(args.checkpoint) or _one_ply(args.opponent):
        return _uci_main(parser, args, model_engine, opponent_engine)
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
    entry = _opponent_entry(parser, args.opponent)
    if entry.policy is None:  # a model (`--opponent none` stays the uniform prior's search)
        player = entry.build(args.opponent, _context(parser, args, None, "--opponent"))
        opponent_network, opponent_params = player.network, player.params
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
        from mmc_jax.evaluation import pgn

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


def _context(parser, args, step, flag) -> players_lib.Context:
    """The player table's context of this command (a model that fails to load is a usage
    error naming `flag`)."""
    simulations = args.simulations if flag == "--checkpoint" else args.opponent_simulations
    return players_lib.Context(
        variant=args.variant,
        simulations=args.simulations if simulations is None else simulations,
        step=step,
        load_model=lambda spec, step: cli.load_or_fail(parser, spec, step, flag),
    )


def _opponent_entry(parser, spec: str) -> players_lib.Entry:
    """The table's entry of `--opponent` among those this match plays (built-in policies and
    models; UCI engines go to `_uci_main`); a usage error listing them otherwise."""
    try:
        entry = players_lib.entry_for(spec, players_lib.BOARD, "--opponent")
    except ValueError as error:
        parser.error(str(error) + _engine_hint(spec))
    if entry.policy is None and entry.name not in ("model", players_lib.ONE_PLY):
        parser.error(
            f"--opponent {spec}: evaluate plays {', '.join(players_lib.kinds())}, a model or "
            "uci:COMMAND (the fog searches: experiments/dark/run.py)"
        )
    return entry


def _refuse_sensing_player(parser, spec: str, flag: str) -> None:
    """A usage error (one line) when `spec` names a player of the table that plays sensing
    variants only (`--opponent` is checked by `_opponent_entry`)."""
    try:
        entry = players_lib.entry_for(spec, None, flag)
    except ValueError:
        return  # no player of the table: a checkpoint path, checked when it loads
    if not entry.plays(players_lib.BOARD):
        parser.error(str(players_lib.other_game(entry, spec, flag, players_lib.BOARD)))


BOARD_ONLY = {
    "--simulations": "the players of sensing variants search with --worlds",
    "--opponent-simulations": "the players of sensing variants search with --worlds",
    "--opening-plies": "sensing players draw their own games apart (their keys differ)",
    "--pgn": "their games are not PGN",
    "--compact": "the recon arena does not shrink its batch",
}


def _sensing_main(parser, args) -> int:
    """`main` for a sensing variant (see the module docstring): both sides are players of the
    table that play sensing variants, in one batch of the compiled recon arena."""
    for flag, why in BOARD_ONLY.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            parser.error(f"{flag} is for board variants, not {args.variant}: {why}")
    if args.checkpoint.lower() == "none":
        parser.error(
            f"--checkpoint: a sensing variant's match ({args.variant}) plays a player of sensing "
            f"variants on both sides: {players_lib.listing(players_lib.SENSING)}"
        )
    worlds = sensing_match.DEFAULT_WORLDS if args.worlds is None else args.worlds
    model = _sensing_player(parser, args, args.checkpoint, "--checkpoint", args.step)
    opponent = _sensing_player(parser, args, args.opponent, "--opponent", None)
    if model.name == opponent.name:
        model = dataclasses.replace(model, name=f"{model.name} (model)")
    try:
        result = sensing_match.play_match(
            args.variant, model, opponent, args.games, jax.random.key(args.seed),
            max_plies=args.max_plies, worlds=worlds,
        )  # fmt: skip
    except ValueError as error:
        parser.error(str(error))
    result["seed"] = args.seed
    print(json.dumps(result) if args.json else _format(result, model.name))
    return 0


def _sensing_player(parser, args, spec: str, flag: str, step) -> players_lib.ReconAgent:
    """The player of sensing variants `spec` names (`flag`'s), its model (the learned agent's)
    opened by `algorithms.open_model`; a usage error in one line otherwise."""
    try:
        entry = players_lib.entry_for(spec, players_lib.SENSING, flag)
    except ValueError as error:
        parser.error(str(error))
    context = players_lib.Context(
        variant=args.variant,
        step=step,
        open_model=lambda path, at: cli.open_or_fail(
            parser, path, at, flag, opener=algorithms.open_model
        ),
    )
    try:
        return entry.build(spec, context)
    except ValueError as error:
        parser.error(f"{flag} {error}")


def _one_ply(spec: str) -> bool:
    """Whether `spec` names the one-ply value player of a model (`one-ply:MODEL`)."""
    return spec.startswith(players_lib.ONE_PLY_PREFIX)


def uci_engine_command(spec: str) -> list[str] | None:
    """`uci.engine_command` (imported only when a side is a UCI engine)."""
    if not spec.startswith("uci:"):
        return None
    from mmc_jax import uci

    return uci.engine_command(spec)


def _uci_main(parser, args, model_engine, opponent_engine) -> int:
    """`main` when a side is a UCI engine or a one-ply player (see the module docstring): the
    stepwise arena."""
    from mmc_jax import uci
    from mmc_jax.evaluation import pgn

    if args.pgn:
        cli.check_output_file(parser, "--pgn", args.pgn)
    if args.compact is not None:
        parser.error(
            "--compact: a match with a UCI engine or a one-ply player runs in the stepwise "
            "arena, whose model buffers shrink as its games end anyway"
        )
    if args.opponent_simulations is None:
        args.opponent_simulations = args.simulations
    fog = R.has_fog(args.variant)

    def side(spec, engine, simulations, flag, step):
        if engine:
            return " ".join(engine), "engine", (engine, simulations)
        if flag == "--opponent" and _opponent_entry(parser, spec).policy is not None:
            return spec, spec, None
        if fog:
            parser.error(
                f"{flag} {spec}: under fog ({args.variant}) a network plays fairly against a "
                "UCI engine only when it is served as one: "
                f"{flag} 'uci:python -m mmc_jax.engine --model {spec}'"
            )
        if spec.lower() == "none":
            return "uniform-prior search", "model", (None, None, simulations)
        if _one_ply(spec):
            try:
                return spec, "player", players_lib.build(spec, _context(parser, args, step, flag))
            except ValueError as error:
                parser.error(f"{flag} {error}")
        network, params, _ = cli.load_or_fail(parser, spec, step, flag)
        return spec, "model", (network, params, simulations)

    model = side(args.checkpoint, model_engine, args.simulations, "--checkpoint", args.step)
    opponent = side(args.opponent, opponent_engine, args.opponent_simulations, "--opponent", None)
    for (_, kind, payload), flag in (
        (model, "--simulations"),
        (opponent, "--opponent-simulations"),
    ):
        if kind == "model" and payload[2]:  # one game at a time: one tree (issue 52)
            try:
                memory.check_search(payload[2], name=flag)
            except ValueError as error:
                parser.error(str(error))
    if model[0] == opponent[0]:
        model = (f"{model[0]} (model)", *model[1:])
    if args.opening_plies is None:
        deterministic = opponent[1] in ("engine", "model", "player")
        args.opening_plies = NETWORK_OPENING_PLIES if deterministic else 0
    try:
        result, records = _uci_match(args, [model, opponent])
    except uci.EngineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        parser.error(str(error))
    result.update(model=model[0], opponent=opponent[0], seed=args.seed)
    if args.pgn:
        pgn.write_pgn(records, args.pgn, event="mmc_jax evaluate")
        result["pgn"] = args.pgn
    if args.json:
        print(json.dumps(result))
    else:
        print(_format(result, model[0]))
        if result["aborted"]:
            print(f"{result['aborted']} game(s) aborted (not scored): {result['errors'][0]}")
    return 1 if result["aborted"] else 0


if __name__ == "__main__":
    sys.exit(main())
