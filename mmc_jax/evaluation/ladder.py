"""The engine ladder and the checkpoint tournament: where a model stands, in Elo.

    python -m mmc_jax.evaluate ladder --checkpoint runs/gardner --variant gardner
    python -m mmc_jax.evaluate tournament --run runs/gardner --variant gardner

Rungs: the built-in players (`mmc_jax.evaluation.players`: random, greedy, ...; under fog
those fair there), and a UCI engine (Fairy-Stockfish) at increasing node limits (default 1,
10, 100, 1000, 10000; `--depth` and `--skill` rungs too). The model plays `--games` games
against every rung, colour-balanced (half as White), from a fixed suite of short random
openings (`--opening-plies`, seeded: opening k is the same in every pairing, see
`mmc_jax.evaluation.arena`). Neighbouring rungs also play each other (`--chain-games`), which ties
the scale together even where the model wins or loses everything against a rung. Every game of
the ladder runs in ONE batch (`arena.play_games`): the model's search sees all its positions
at once, while the engine processes search theirs.

The ratings are one maximum-likelihood fit over all results (`mmc_jax.evaluation.elo`: Bradley-Terry
on the Elo scale, draws as half points, one virtual draw per pair, anchored at random = 0) with
bootstrap 95% intervals (Fisher intervals in the JSON too). Since Gardner minichess is a draw
with perfect play, the table also gives the model's score (W + D/2) and loss rate per rung;
`equivalent_nodes` interpolates, in log nodes, the engine node limit of the model's rating.

The tournament puts several checkpoints of one run (by default every saved step) on the same
ladder, fits all of them together, and draws Elo over training steps.

Outputs in `--out` (default `<workdir>/ladder`, `ladder-<name>` for a shipped model, or
`<run>/tournament`): `ladder.json` / `tournament.json` and a PNG of the same name; `--pgn FILE`
saves every game.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mmc_jax import rules as R
from mmc_jax import uci
from mmc_jax.evaluation import arena
from mmc_jax.evaluation import elo as elo_lib
from mmc_jax.evaluation import pgn as pgn_lib
from mmc_jax.evaluation import players as players_lib
from mmc_jax.infra import checkpoint, cli

DEFAULT_NODES = (1, 10, 100, 1000, 10000)
SEARCHES = ("mcts", "one-ply")  # how a rated model moves (`--search`)
ANCHOR = "random"


@dataclasses.dataclass
class Model:
    """A model to rate: display name, network (None: uniform prior), params, checkpoint step;
    or, with `engine`, any UCI engine's command (e.g. a model served by `python -m
    mmc_jax.engine`), searching `go nodes <simulations>` per move."""

    name: str
    network: Any
    params: Any
    step: int | None = None
    engine: Sequence[str] | None = None


@dataclasses.dataclass
class LadderSettings:
    variant: str
    games: int = 200
    chain_games: int = 200
    simulations: int = 32
    search: str = "mcts"  # how a model moves: SEARCHES
    nodes: Sequence[int] = DEFAULT_NODES
    depths: Sequence[int] = ()
    skills: Sequence[int] = ()
    skill_nodes: int = 10000
    baselines: Sequence[str] = dataclasses.field(default_factory=players_lib.kinds)
    opening_plies: int = 4
    max_plies: int | None = None
    seed: int = 0
    engine: str | Sequence[str] | None = None  # a path, or a command (from `uci:COMMAND`)
    engine_processes: int = 2
    engine_timeout: float = uci.DEFAULT_MOVE_TIMEOUT
    prior_draws: float = 1.0
    bootstrap: int = 1000

    def engine_limits(self) -> list[uci.Limits]:
        limits = [uci.Limits(nodes=n) for n in self.nodes]
        limits += [uci.Limits(depth=d) for d in self.depths]
        limits += [uci.Limits(nodes=self.skill_nodes, skill=s) for s in self.skills]
        return limits


def rung_players(settings: LadderSettings) -> list[arena.Player]:
    """The ladder's rungs in order (the built-in baselines, then engines by limit)."""
    rungs = []
    for kind in settings.baselines:
        players_lib.builtin(kind, "baseline")
        players_lib.check_fair(kind, settings.variant)
        rungs.append(players_lib.build(kind, players_lib.Context(variant=settings.variant)))
    return rungs + [arena.engine_player(limits) for limits in settings.engine_limits()]


def _model_rewards(records: Sequence[arena.GameRecord], model: str, opponent: str) -> np.ndarray:
    """The model's results (+1 / 0 / -1) against `opponent`, model-as-White games first."""
    white, black = [], []
    for r in records:
        if not r.scored:
            continue
        points = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}[r.result]
        if r.white == model and r.black == opponent:
            white.append(points)
        elif r.black == model and r.white == opponent:
            black.append(-points)
    return np.array(white + black)


def _rung_table(records, model: str, rungs: Sequence[str], ratings: dict) -> list[dict]:
    rows = []
    for rung in rungs:
        rewards = _model_rewards(records, model, rung)
        if len(rewards) == 0:
            continue
        plies = np.zeros(len(rewards))
        stats = elo_lib.match_statistics(rewards, plies)
        rows.append(
            {
                "opponent": rung,
                "opponent_elo": ratings[rung]["elo"],
                "opponent_ci95": ratings[rung]["ci95"],
                "games": stats["num_games"],
                "wins": stats["wins"],
                "draws": stats["draws"],
                "losses": stats["losses"],
                "score": stats["score"],
                "score_ci95": stats["score_ci95"],
                "loss_rate": stats["losses"] / stats["num_games"],
            }
        )
    return rows


def equivalent_nodes(model_elo: float, ratings: dict, rungs: Sequence[arena.Player]) -> Any:
    """The engine node limit at the model's rating, interpolated in log10(nodes) between the
    node rungs around it (None without node rungs; "below"/"above" outside their range)."""
    points = sorted(
        (ratings[p.name]["elo"], p.limits.nodes)
        for p in rungs
        if p.kind == "engine" and p.limits.nodes and p.limits.skill is None and p.name in ratings
    )
    if not points:
        return None
    elos = [e for e, _ in points]
    if model_elo < elos[0]:
        return f"below {points[0][1]}"
    if model_elo > elos[-1]:
        return f"above {points[-1][1]}"
    # Ratings need not be monotone in nodes; interpolate along the sorted ratings.
    for (e0, n0), (e1, n1) in zip(points, points[1:], strict=False):
        if e0 <= model_elo <= e1:
            t = 0.0 if e1 == e0 else (model_elo - e0) / (e1 - e0)
            return float(10 ** ((1 - t) * math.log10(n0) + t * math.log10(n1)))
    return None


def run(
    models: Sequence[Model],
    settings: LadderSettings,
    *,
    progress=arena.print_progress,
) -> tuple[dict[str, Any], list[arena.GameRecord]]:
    """Plays the ladder for every model (one batch), fits Elo; returns (report, records)."""
    rungs = _checked_rungs(models, settings)
    players = [
        arena.engine_player(uci.Limits(nodes=max(settings.simulations, 1)), m.name)
        if m.engine
        else arena.model_player(
            m.name, m.network, m.params, settings.simulations, one_ply=settings.search == "one-ply"
        )
        for m in models
    ] + rungs
    games = _ladder_games(len(models), len(players), settings)
    pools: dict[str, uci.EnginePool] = {}
    started = time.monotonic()
    try:
        engine_id = _open_engine_pools(models, rungs, settings, pools)
        if progress:
            progress(
                f"ladder: {len(games)} games of {settings.variant} "
                f"({len(models)} model(s) x {len(rungs)} rungs x {settings.games}, "
                f"chain {settings.chain_games}); compiling first"
            )
        records = arena.play_games(
            players,
            games,
            seed=settings.seed,
            opening_plies=settings.opening_plies,
            max_plies=settings.max_plies,
            engine_pool=pools,
            progress=progress,
        )
    finally:
        for pool in {id(p): p for p in pools.values()}.values():
            pool.close()
    play_seconds = time.monotonic() - started
    fit = elo_lib.fit_elo(
        arena.pair_results(records),
        ANCHOR,
        prior_draws=settings.prior_draws,
        bootstrap=settings.bootstrap,
        seed=settings.seed,
    )
    report = {
        "variant": settings.variant,
        "settings": {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(settings).items()
        },
        "engine": engine_id,
        "rungs": [r.name for r in rungs],
        "models": _model_reports(models, rungs, records, fit["ratings"]),
        "elo": fit,
        "num_games": len(records),
        "errors": [
            {"game": i, "white": r.white, "black": r.black, "error": r.error}
            for i, r in enumerate(records)
            if not r.scored
        ],
        "openings": _openings(records, settings.games // 2),
        "seconds": {"play": play_seconds},
        "max_plies": settings.max_plies or R.get(settings.variant).max_plies.item(),
    }
    return report, records


def _checked_rungs(models: Sequence[Model], settings: LadderSettings) -> list[arena.Player]:
    """The ladder's rungs; ValueError for odd game counts, a ladder without its anchor, or
    clashing names."""
    if settings.games < 2 or settings.games % 2:
        raise ValueError(f"games per rung must be positive and even, got {settings.games}")
    if settings.chain_games < 0 or settings.chain_games % 2:
        raise ValueError(f"chain games must be even and >= 0, got {settings.chain_games}")
    rungs = rung_players(settings)
    if ANCHOR not in [r.name for r in rungs]:
        raise ValueError("the ladder is anchored at random = 0: keep 'random' in the baselines")
    names = [m.name for m in models]
    if len(set(names)) != len(names) or set(names) & {r.name for r in rungs}:
        raise ValueError(f"model names must be distinct from each other and the rungs: {names}")
    return rungs


def _ladder_games(
    num_models: int, num_players: int, settings: LadderSettings
) -> list[arena.GameSpec]:
    """Every model (players [0, num_models)) against every rung (the players after them),
    then each rung against the next (`chain_games`), colour-balanced."""
    games: list[arena.GameSpec] = []
    for i in range(num_models):
        for j in range(num_models, num_players):
            games += arena.colour_balanced(i, j, settings.games, settings.variant)
    if settings.chain_games:
        for j in range(num_models, num_players - 1):
            games += arena.colour_balanced(j, j + 1, settings.chain_games, settings.variant)
    return games


def _open_engine_pools(
    models: Sequence[Model],
    rungs: Sequence[arena.Player],
    settings: LadderSettings,
    pools: dict[str, uci.EnginePool],
) -> dict[str, Any] | None:
    """Opens the engine pools into `pools` {player name: pool}, as it goes (so that the caller
    closes those opened before a failure): one shared by the engine rungs, one per engine
    model. Returns the rungs' engine's {name, command}, None without engine rungs."""
    engine_id = None
    if any(p.kind == "engine" for p in rungs):
        slow = not isinstance(settings.engine, (str, type(None)))  # given as uci:COMMAND
        pool = uci.EnginePool(
            settings.variant,
            settings.engine if not slow else list(settings.engine),
            processes=settings.engine_processes,
            move_timeout=max(settings.engine_timeout, uci.SLOW_ENGINE_MOVE_TIMEOUT)
            if slow
            else settings.engine_timeout,
            **(uci.SLOW_ENGINE_TIMEOUTS if slow else {}),
        )
        pools.update({p.name: pool for p in rungs if p.kind == "engine"})
        engine_id = {"name": pool.id_name, "command": pool.command}
    for m in models:
        if m.engine:
            pools[m.name] = uci.EnginePool(
                settings.variant,
                list(m.engine),
                processes=settings.engine_processes,
                move_timeout=max(settings.engine_timeout, uci.SLOW_ENGINE_MOVE_TIMEOUT),
                **uci.SLOW_ENGINE_TIMEOUTS,
            )
    return engine_id


def _model_reports(
    models: Sequence[Model],
    rungs: Sequence[arena.Player],
    records: Sequence[arena.GameRecord],
    ratings: dict[str, Any],
) -> list[dict[str, Any]]:
    """Per rated model: its rating, its results per rung and its engine-node equivalent."""
    rung_names = [r.name for r in rungs]
    return [
        {
            "name": m.name,
            "step": m.step,
            **ratings[m.name],
            "rungs": _rung_table(records, m.name, rung_names, ratings),
            "equivalent_nodes": equivalent_nodes(ratings[m.name]["elo"], ratings, rungs),
        }
        for m in models
        if m.name in ratings
    ]


def _openings(records: Sequence[arena.GameRecord], limit: int) -> list[str]:
    """The distinct opening lines played (UCI moves joined by spaces), in order, at most
    `limit` of them."""
    openings: dict[str, None] = {}
    for record in records:
        if record.opening_plies and len(openings) < limit:
            openings.setdefault(" ".join(record.moves[: record.opening_plies]), None)
    return list(openings)


# ---------------------------------------------------------------------------------------------
# Text and plots


# What a ladder without chain games can say about Elo (read with its scores per rung).
UNCHAINED = (
    "note: no chain games (--chain-games 0): the rungs meet only the rated models, so a "
    "model's Elo against random = 0 rests on its games against random alone (one that wins "
    "them all sits at the bound the virtual draws set) and each other rung's Elo is fitted "
    "from that model's score against it; compare the scores per rung, or add chain games"
)


def format_ladder(report: dict[str, Any]) -> str:
    """The table a person reads: every player's Elo, then the model's results per rung."""
    ratings = report["elo"]["ratings"]
    lines = [
        f"{report['variant']}: {report['num_games']} games, Elo anchored at random = 0 "
        f"(MLE, draws = 1/2, {report['elo']['prior_draws']:g} virtual draw per pair, "
        f"bootstrap 95% CI)",
        f"{'player':<24} {'Elo':>7} {'95% CI':>17} {'games':>6} {'score':>6}",
    ]
    for name, r in sorted(ratings.items(), key=lambda kv: kv[1]["elo"]):
        low, high = r["ci95"]
        lines.append(
            f"{name:<24} {r['elo']:>7.0f} [{low:>6.0f}, {high:>6.0f}] {r['games']:>6} "
            f"{r['score']:>6.3f}"
        )
    for model in report["models"]:
        lines += [
            "",
            f"{model['name']} (Elo {model['elo']:.0f}, engine-node equivalent "
            f"{_nodes_text(model['equivalent_nodes'])}) against each rung:",
            f"{'opponent':<24} {'W':>5} {'D':>5} {'L':>5} {'score':>6} {'95% CI':>15} "
            f"{'loss rate':>9}",
        ]
        for row in model["rungs"]:
            low, high = row["score_ci95"]
            lines.append(
                f"{row['opponent']:<24} {row['wins']:>5} {row['draws']:>5} {row['losses']:>5} "
                f"{row['score']:>6.3f} [{low:.3f}, {high:.3f}] {row['loss_rate']:>9.3f}"
            )
    if not report.get("settings", {}).get("chain_games", 1) and len(report["rungs"]) > 1:
        lines += ["", UNCHAINED]
    if report["errors"]:
        lines += ["", f"{len(report['errors'])} game(s) aborted by engine errors (not scored):"]
        lines += [f"  game {e['game']}: {e['error']}" for e in report["errors"][:10]]
    return "\n".join(lines)


def _nodes_text(value) -> str:
    if value is None:
        return "n/a"
    return value if isinstance(value, str) else f"~{value:.0f} nodes"


def plot_ladder(report: dict[str, Any], path: str) -> None:
    """PNG: every player's Elo with its 95% interval; the model's score and loss rate per rung."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratings = report["elo"]["ratings"]
    order = sorted(ratings, key=lambda name: ratings[name]["elo"])
    model_names = {m["name"] for m in report["models"]}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.45 * len(order) + 2.5))
    for y, name in enumerate(order):
        r = ratings[name]
        low, high = r["ci95"]
        colour = "tab:red" if name in model_names else "tab:blue"
        left.errorbar(
            r["elo"], y, xerr=[[r["elo"] - low], [high - r["elo"]]], fmt="o", color=colour
        )
    left.set_yticks(range(len(order)), order)
    left.set_xlabel("Elo (random = 0), 95% bootstrap interval")
    left.grid(alpha=0.3)
    left.set_title(f"{report['variant']}: ladder")
    if report["models"]:
        model = report["models"][0]
        rows = model["rungs"]
        x = np.arange(len(rows))
        scores = [row["score"] for row in rows]
        errors = np.array(
            [
                [row["score"] - row["score_ci95"][0], row["score_ci95"][1] - row["score"]]
                for row in rows
            ]
        ).T
        right.bar(x - 0.2, scores, 0.4, yerr=errors, label="score (W + D/2)", color="tab:green")
        right.bar(
            x + 0.2, [row["loss_rate"] for row in rows], 0.4, label="loss rate", color="tab:gray"
        )
        right.set_xticks(x, [row["opponent"] for row in rows], rotation=30, ha="right")
        right.set_ylim(0, 1)
        right.axhline(0.5, color="black", lw=0.5)
        right.legend(loc="upper right")
        right.set_title(f"{model['name']} against each rung ({rows[0]['games']} games)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_tournament(report: dict[str, Any], path: str) -> None:
    """PNG: Elo over training steps with 95% intervals; the rungs as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratings = report["elo"]["ratings"]
    models = [m for m in report["models"] if m["step"] is not None]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    if models:
        steps = [m["step"] for m in models]
        elos = [m["elo"] for m in models]
        lows = [m["elo"] - m["ci95"][0] for m in models]
        highs = [m["ci95"][1] - m["elo"] for m in models]
        ax.errorbar(steps, elos, yerr=[lows, highs], fmt="o-", color="tab:red", label="model")
    for i, rung in enumerate(report["rungs"]):
        if rung in ratings:
            ax.axhline(ratings[rung]["elo"], color=f"C{i % 10}", ls="--", lw=0.8)
            ax.annotate(
                rung,
                (1.0, ratings[rung]["elo"]),
                xycoords=("axes fraction", "data"),
                fontsize=8,
                ha="right",
                va="bottom",
            )
    ax.set_xlabel("training step (checkpoint)")
    ax.set_ylabel("Elo (random = 0)")
    ax.set_title(f"{report['variant']}: Elo over training, 95% bootstrap intervals")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# CLI


def _positive_even(flag: str, allow_zero: bool = False):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if value < 0 or (value == 0 and not allow_zero) or value % 2:
            kind = "even and >= 0" if allow_zero else "positive and even"
            raise argparse.ArgumentTypeError(
                f"{flag} must be {kind} (colour-balanced), got {value}"
            )
        return value

    return parse


def _add_common(parser: argparse.ArgumentParser, games_default: int) -> None:
    parser.add_argument("--variant", type=cli.variant_arg, required=True, help=cli.VARIANT_HELP)
    parser.add_argument(
        "--games",
        type=_positive_even("--games"),
        default=games_default,
        help=f"games per model and rung, colour-balanced (default {games_default})",
    )
    parser.add_argument(
        "--chain-games",
        type=_positive_even("--chain-games", allow_zero=True),
        default=None,
        help="games between neighbouring rungs (default: --games; 0: none)",
    )
    cli.add_integer(parser, "--simulations", 0, default=32, help="0: raw policy")
    parser.add_argument(
        "--search",
        choices=SEARCHES,
        default="mcts",
        help="how a model moves: mcts (its search at --simulations) or one-ply (no search: the "
        "move whose next position its value head rates worst for the opponent; TD(lambda)'s "
        "player)",
    )
    cli.add_integer(
        parser,
        "--nodes",
        1,
        nargs="*",
        default=list(DEFAULT_NODES),
        help="engine rungs by node limit (default 1 10 100 1000 10000; none: --nodes)",
    )
    cli.add_integer(parser, "--depth", 1, nargs="*", default=[], help="depth rungs")
    parser.add_argument(
        "--skill",
        type=int,
        nargs="*",
        default=[],
        help="Skill Level rungs (-20..20, at --skill-nodes; random: not reproducible)",
    )
    cli.add_integer(parser, "--skill-nodes", 1, default=10000)
    parser.add_argument(
        "--no-engine",
        action="store_true",
        help=f"only the built-in players ({', '.join(players_lib.kinds())}; no engine rungs)",
    )
    parser.add_argument(
        "--no-greedy", action="store_true", help="leave the greedy rung out (random stays)"
    )
    parser.add_argument(
        "--engine",
        default=None,
        help=f"UCI engine binary (default {uci.default_engine()}; build one with `python -m "
        "mmc_jax.uci build`: pyffish 0.0.90's Fairy-Stockfish plays gardner, baby, mallet, "
        "atomic, dark, extinction), or 'uci:COMMAND' for a command with arguments (e.g. "
        "'uci:python -m mmc_jax.engine --model gardner-cpu', rungs of a served model)",
    )
    cli.add_integer(
        parser,
        "--engine-processes",
        1,
        default=2,
        help="engine processes searching in parallel (default 2)",
    )
    parser.add_argument(
        "--engine-timeout",
        type=float,
        default=uci.DEFAULT_MOVE_TIMEOUT,
        help="seconds per engine move before it counts as hung (default 30)",
    )
    cli.add_integer(
        parser,
        "--opening-plies",
        0,
        default=4,
        help="random plies of the fixed opening suite (default 4)",
    )
    cli.add_integer(parser, "--max-plies", 1, default=None)
    parser.add_argument("--seed", type=int, default=0, help="openings, baselines, bootstrap")
    parser.add_argument(
        "--prior-draws",
        type=float,
        default=1.0,
        help="virtual draws per pair in the Elo fit (default 1; 0: plain MLE)",
    )
    cli.add_integer(parser, "--bootstrap", 0, default=1000, help="resamples")
    parser.add_argument("--out", default=None, help="output folder for the JSON and PNG")
    parser.add_argument("--pgn", default=None, help="write every game to this PGN file")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead")


def _settings(args) -> LadderSettings:
    for value in args.skill:
        if not -20 <= value <= 20:
            raise ValueError(f"--skill values must be in [-20, 20], got {value}")
    return LadderSettings(
        variant=args.variant,
        games=args.games,
        chain_games=args.games if args.chain_games is None else args.chain_games,
        simulations=args.simulations,
        search=args.search,
        nodes=() if args.no_engine else tuple(args.nodes),
        depths=() if args.no_engine else tuple(args.depth),
        skills=() if args.no_engine else tuple(args.skill),
        skill_nodes=args.skill_nodes,
        baselines=tuple(
            kind
            for kind in players_lib.fair_kinds(args.variant)
            if not (args.no_greedy and kind == "greedy")
        ),
        opening_plies=args.opening_plies,
        max_plies=args.max_plies,
        seed=args.seed,
        engine=(uci.engine_command(args.engine) or args.engine) if args.engine else None,
        engine_processes=args.engine_processes,
        engine_timeout=args.engine_timeout,
        prior_draws=args.prior_draws,
        bootstrap=args.bootstrap,
    )


def ladder_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.evaluate ladder",
        description=f"Rate a checkpoint in Elo against the built-in players "
        f"({', '.join(players_lib.kinds())}) and a UCI engine "
        "(Fairy-Stockfish) at increasing node limits: colour-balanced games from a fixed "
        "suite of random openings, one maximum-likelihood fit anchored at random = 0. Writes "
        "ladder.json and ladder.png to --out. See experiments/ladder/README.md.",
    )
    parser.add_argument(
        "--checkpoint",
        default="none",
        help="run workdir (or <workdir>/checkpoints/<step>); 'none': the uniform-prior search; "
        "'uci:COMMAND': any UCI engine, searching `go nodes <--simulations>` (e.g. "
        "'uci:python -m mmc_jax.engine --model gardner-cpu')",
    )
    cli.add_integer(parser, "--step", 0, default=None)
    _add_common(parser, games_default=200)
    return parser


def tournament_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.evaluate tournament",
        description="Put several checkpoints of a run on the same ladder (one joint Elo fit, "
        "random = 0) and draw Elo over training steps. Writes tournament.json and "
        "tournament.png to --out.",
    )
    parser.add_argument("--run", required=True, help="the run's workdir")
    parser.add_argument(
        "--steps",
        nargs="*",
        default=None,
        help="checkpoint steps (default: every saved step; 'latest' for the newest)",
    )
    _add_common(parser, games_default=100)
    return parser


def _checkpoint_steps(parser, workdir: str) -> list[int]:
    if not os.path.isdir(workdir):
        parser.error(f"--run {workdir}: no such directory")
    if checkpoint.latest_step(workdir) is None:
        parser.error(f"--run {workdir}: no checkpoint under {workdir}/checkpoints")
    with checkpoint.Checkpointer(workdir, max_to_keep=None, async_save=False) as ckpt:
        return ckpt.all_steps()


def _finish(args, argv, report, records, kind: str) -> int:
    out = args.out
    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, f"{kind}.json")
    png_path = os.path.join(out, f"{kind}.png")
    report["command"] = f"python -m mmc_jax.evaluate {kind} " + " ".join(argv)
    with open(json_path, "w") as handle:
        json.dump(report, handle, indent=1)
    (plot_ladder if kind == "ladder" else plot_tournament)(report, png_path)
    if args.pgn:
        pgn_lib.write_pgn(records, args.pgn, event=f"mmc_jax {kind}")
    if args.json:
        print(json.dumps(report))
    else:
        print(format_ladder(report))
        print(f"\nwrote {json_path} and {png_path}" + (f" and {args.pgn}" if args.pgn else ""))
    if report["errors"]:
        print(
            f"error: {len(report['errors'])} game(s) were aborted by engine failures and not "
            f"scored; see {json_path}",
            file=sys.stderr,
        )
        return 1
    return 0


def _check_outputs(parser, args) -> None:
    """Output paths are checked before any game is played (never lose finished games)."""
    cli.check_output_folder(parser, "--out", args.out)
    if args.pgn:
        cli.check_output_file(parser, "--pgn", args.pgn)


def _run_or_fail(parser, models, settings):
    try:
        return run(models, settings)
    except uci.EngineError as error:
        hint = (
            " (run only the built-in players with --no-engine)"
            if isinstance(error, uci.EngineUnsupported)
            else ""
        )
        print(f"error: {error}{hint}", file=sys.stderr)
        raise SystemExit(1) from None
    except ValueError as error:
        parser.error(str(error))


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]):
    """(args, `LadderSettings`) of `argv`; a bad setting is an argparse error (one line)."""
    args = parser.parse_args(argv)
    try:
        return args, _settings(args)
    except ValueError as error:
        parser.error(str(error))


def ladder_main(argv: Sequence[str]) -> int:
    """`python -m mmc_jax.evaluate ladder ...`; returns the exit status."""
    parser = ladder_parser()
    args, settings = _parse(parser, argv)
    try:
        command = uci.engine_command(args.checkpoint)
    except ValueError as error:
        parser.error(f"--checkpoint: {error}")
    if command:
        models = [Model(" ".join(command), None, None, engine=command)]
        default_out = f"ladder-{args.variant}"
    elif args.checkpoint.lower() == "none":
        models = [Model("uniform-prior", None, None)]
        default_out = f"ladder-{args.variant}"
    else:
        network, params, config = cli.load_or_fail(
            parser, args.checkpoint, args.step, "--checkpoint"
        )
        workdir, step = checkpoint.split_checkpoint_path(args.checkpoint, args.step)
        step = step if step is not None else checkpoint.latest_step(workdir)
        name = os.path.basename(workdir) + (f"@{step}" if step is not None else "")
        models = [Model(name, network, params, step)]
        shipped = checkpoint.resolve_model_path(args.checkpoint) != args.checkpoint
        # A shipped model's outputs go beside it, never into a folder named like it (which
        # would be a local folder of that name: issue 70).
        default_out = f"ladder-{args.checkpoint}" if shipped else os.path.join(workdir, "ladder")
    args.out = args.out or default_out
    _check_outputs(parser, args)
    report, records = _run_or_fail(parser, models, settings)
    report["checkpoint"] = args.checkpoint
    return _finish(args, argv, report, records, "ladder")


def tournament_main(argv: Sequence[str]) -> int:
    """`python -m mmc_jax.evaluate tournament ...`; returns the exit status."""
    parser = tournament_parser()
    args, settings = _parse(parser, argv)
    saved = _checkpoint_steps(parser, args.run)
    if args.steps in (None, [], ["all"]):
        steps = saved
    else:
        steps = []
        for text in args.steps:
            if text == "latest":
                steps.append(saved[-1])
            elif text.isdigit() and int(text) in saved:
                steps.append(int(text))
            else:
                parser.error(
                    f"--steps: {text!r} is not a saved step of {args.run}; saved: "
                    f"{', '.join(map(str, saved))}"
                )
    models = []
    name = os.path.basename(os.path.abspath(args.run))
    for step in dict.fromkeys(steps):
        network, params, _ = cli.load_or_fail(parser, args.run, step, "--run")
        models.append(Model(f"{name}@{step}", network, params, step))
    args.out = args.out or os.path.join(args.run, "tournament")
    _check_outputs(parser, args)
    report, records = _run_or_fail(parser, models, settings)
    report["run"] = args.run
    return _finish(args, argv, report, records, "tournament")
