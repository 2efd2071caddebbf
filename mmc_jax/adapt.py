"""Adaptation: AlphaZero iterations on one variant from a pretrained checkpoint, evaluated.

    python -m mmc_jax.adapt --variant dark --init_from runs/joat --workdir runs/adapt_dark
    python -m mmc_jax.adapt --variant dark --init_from runs/joat --iterations 5 \\
        --eval_at 0,1,2,5 --reference runs/dark_ref --workdir runs/adapt_dark_5
    python -m mmc_jax.adapt --variant dark --init_from scratch --config configs/joat.py:cpu \\
        --workdir runs/adapt_dark_scratch

`--init_from` is a run's workdir (or `<workdir>/checkpoints/<step>`): a meta-training run
(configs/joat.py), a single-variant run (configs/gardner.py), or `scratch` for a fresh
network; without it, the shipped `joint-study` (the adaptation study's start, shipped by its
registered rule: experiments/adaptation/README.md). The network is rebuilt from the
checkpoint's saved config. The adaptation is one
`mmc_jax.training.runloop.run` of AlphaZero on `--variant` from those parameters (fresh optimizer
state), its evaluations a hook called after the iterations of `--eval_at`, with the
AlphaZero settings (games, plies, simulations, learner, replay) of, in this order: the `adapt`
section of `--config`, a single-variant `--config` itself, the `adapt` section saved with the
checkpoint, or the checkpoint's own single-variant settings.

After 0 (the unadapted start) and every iteration of `--eval_at` (default: every iteration),
the model plays colour-balanced matches against random and greedy, the adapted model also
against the unadapted one, optionally against a frozen `--reference` checkpoint (and its raw
policy, `--reference_raw`) and against Fairy-Stockfish (`--engine_nodes 100,1000`). The
workdir gets the training run (checkpoints, metrics, plots), `adaptation.json` (every match
with W/D/L and 95% CIs, frames, settings), `adaptation.md` (the table) and
`plots/adaptation.png` (score against each opponent over adaptation iterations). The command
ends with the table, a `verdict:` line (the adapted model against the unadapted one; under fog,
where networks play only the built-in players and a note says so at the start, its score
against the strongest of them at the start and at the end) and a `next:` line. Re-running
the command resumes: finished evaluations are kept, training continues from its checkpoint.
One run at a time per workdir: a second is refused before it reads or writes anything there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

from mmc_jax import algorithms, uci
from mmc_jax import rules as R
from mmc_jax.algorithms import alphazero
from mmc_jax.evaluation import arena, match
from mmc_jax.infra import checkpoint as checkpoint_lib
from mmc_jax.infra import cli, storage
from mmc_jax.infra import metrics as metrics_lib
from mmc_jax.model import network as network_lib
from mmc_jax.training import runloop

SCRATCH = ("scratch", "none")
# The model `--init_from` defaults to: shipped in the package (mmc_jax/data/models).
DEFAULT_MODEL = "joint-study"  # the decisive study's ship rule (Amendment 3)
RESULTS_FILE = "adaptation.json"
TABLE_FILE = "adaptation.md"
PLOT_FILE = "adaptation.png"
# Network-vs-network matches start from this many uniformly random plies, paired across
# colours: two deterministic searches would otherwise replay one game per colour.
DEFAULT_OPENING_PLIES = 4
FOG_NOTE = (
    "note: {variant} has fog: the adapted model plays only the built-in players (a match "
    "between two networks would need a belief for each), not the unadapted one or a reference"
)
_MATCH_FIELDS = (
    "num_games",
    "wins",
    "draws",
    "losses",
    "score",
    "score_ci95",
    "mean_plies",
    "opening_decided",
)


# ---------------------------------------------------------------------------------------------
# Start point and config


def on_device(params: Any) -> Any:
    """Parameters committed to the first device, as `evaluate.load_model` returns them (so
    that every start point and iteration reuses one compiled arena)."""
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.device_put(params, sharding)


def _config_dict(value: Any) -> ml_collections.ConfigDict:
    if isinstance(value, ml_collections.ConfigDict):
        return ml_collections.ConfigDict(value.to_dict())
    return ml_collections.ConfigDict(value)


def _is_single_variant(config: ml_collections.ConfigDict) -> bool:
    return (
        "selfplay" in config
        and "batch_size" in config.selfplay
        and algorithms.name_of(config) == alphazero.ALGORITHM.name
    )


def load_start(init_from: str, config: ml_collections.ConfigDict | None, seed: int = 0):
    """(network config, params, saved run config or None, label) of the starting point.

    `init_from` "scratch" (or "none") needs `config` with a `network` section; the parameters
    are a fresh initialisation from `seed`.

    Raises:
      FileNotFoundError: no such directory or no checkpoint in it.
      ValueError: the checkpoint cannot be rebuilt (no network config, shapes that do not fit
        it), or scratch without a config.
    """
    if str(init_from).lower() in SCRATCH:
        if config is None or "network" not in config:
            raise ValueError("--init_from scratch needs --config (its network section)")
        network_config = _config_dict(config.network)
        network = network_lib.make_network(network_config)
        params = jax.jit(lambda key: network_lib.init_params(network, key, R.OBS_SHAPE))(
            jax.random.fold_in(jax.random.key(seed), 7)
        )
        return network_config, on_device(params), None, "scratch"
    _, params, saved = checkpoint_lib.load_model(init_from)
    label = (
        str(init_from)
        if str(init_from) in checkpoint_lib.shipped_models()
        else storage.absolute(init_from)
    )
    return _config_dict(saved.network), on_device(params), saved, label


def _adapt_source(
    config: ml_collections.ConfigDict | None, saved: ml_collections.ConfigDict | None
) -> ml_collections.ConfigDict:
    for candidate in (config, saved):
        if candidate is None:
            continue
        if "adapt" in candidate:
            return _config_dict(candidate.adapt)
        if _is_single_variant(candidate):
            return _config_dict(candidate)
    raise ValueError(
        "no adaptation settings: pass --config (configs/joat.py[:preset], whose `adapt` section "
        "is used, or a single-variant config such as configs/gardner.py:cpu)"
    )


def adaptation_config(
    variant: str,
    iterations: int,
    network: ml_collections.ConfigDict,
    *,
    config: ml_collections.ConfigDict | None = None,
    saved: ml_collections.ConfigDict | None = None,
    init_label: str = "scratch",
    seed: int = 0,
) -> ml_collections.ConfigDict:
    """The single-variant `mmc_jax.train` config of an adaptation run (see the module doc).

    Its `eval` section holds the adaptation's own evaluation settings (`every` is 0: the
    training loop does not evaluate; `run_adaptation` does).
    """
    source = _adapt_source(config, saved)
    out = ml_collections.ConfigDict()
    out.variant = R.check_variant(variant)
    out.variants = ()
    out.seed = int(seed)
    out.num_iterations = max(int(iterations), 1)
    out.network = _config_dict(network)
    out.selfplay = _config_dict(source.selfplay)
    out.learner = _config_dict(source.learner)
    out.replay = _config_dict(source.replay)
    out.eval = ml_collections.ConfigDict()
    out.eval.every = 0
    out.eval.num_games = int(source.eval.get("num_games", 64))
    out.eval.num_simulations = int(source.eval.get("num_simulations", 16))
    out.eval.opponents = tuple(source.eval.get("opponents", ("random", "greedy")))
    out.eval.max_plies = int(source.eval.get("max_plies", 0) or 0)
    out.eval.opening_plies = int(source.eval.get("opening_plies", DEFAULT_OPENING_PLIES))
    out.eval.opening = str(source.eval.get("opening", "random"))  # or "policy" (match.py)
    # True: matches between two networks sample every move from each side's policy (match.py)
    out.eval.sampled = bool(source.eval.get("sampled", False))
    out.eval.num_worlds = int(source.selfplay.get("num_worlds", 4))  # fog: PIMC worlds
    checkpoint = source.get("checkpoint", {})
    out.checkpoint = ml_collections.ConfigDict()
    out.checkpoint.every = 1  # every evaluated iteration must be restorable
    out.checkpoint.max_to_keep = max(int(checkpoint.get("max_to_keep", 2)), 2)
    out.checkpoint.keep_period = 0
    out.checkpoint.save_replay = bool(checkpoint.get("save_replay", True))
    out.init_from = init_label
    return out


# ---------------------------------------------------------------------------------------------
# Evaluation


def match_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The fields of a `match.play_match` result that adaptation results keep."""
    return {k: result[k] for k in _MATCH_FIELDS if k in result}


def evaluate_point(
    network,
    params: Any,
    variant: str,
    settings: ml_collections.ConfigDict,
    key: jax.Array,
    *,
    unadapted: Any = None,
    reference: tuple[Any, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Matches of `params` on `variant`: {opponent: summary} for every `settings.opponents`,
    plus "unadapted" (against those params) and "reference" ((network, params)) when given,
    "reference_raw" (the reference's raw policy, a weaker second strength) with
    `settings.reference_raw`, and "fsf@N" (Fairy-Stockfish at N nodes per move) for every N
    of `settings.engine_nodes` when the engine plays the variant.

    The key of a match depends only on the opponent, so every start point and iteration plays
    the same random openings / tie-breaks (paired comparisons). Under fog the model plays from
    its observations (`pimc`, `settings.num_worlds` worlds) and only against built-in players:
    a second network would need beliefs of its own. Matches between two networks
    begin with `settings.opening_plies` plies, uniformly random or sampled from each side's
    search policy (`settings.opening` "policy"), the same in game i and game i + N/2; with
    `settings.sampled` both networks then sample every move from their own policy.

    The matches against the built-in players and against the unadapted network (and a
    reference of the same architecture) share one compiled arena (`mixed_opponents`).
    """
    games, sims = int(settings.num_games), int(settings.num_simulations)
    max_plies = int(settings.get("max_plies", 0) or 0) or None
    openings = int(settings.get("opening_plies", DEFAULT_OPENING_PLIES))
    opening = str(settings.get("opening", "random"))
    sampled = bool(settings.get("sampled", False))
    # (name, key index, opponent keyword arguments)
    matches = [
        (opponent, i, {"opponent": opponent}) for i, opponent in enumerate(settings.opponents)
    ]
    fog = R.has_fog(variant)  # networks play fairly only against built-in players
    # One arena for the built-in players and the unadapted network: the same program plays
    # either, chosen by data (sampled matches differ in the model's side, so they cannot).
    mixed = unadapted is not None and not fog and not sampled
    if unadapted is not None and not fog:
        matches.append(
            ("unadapted", 100, {"opponent_network": network, "opponent_params": unadapted})
        )
    if reference is not None and not fog:
        ref_network, ref_params = reference
        matches.append(
            ("reference", 101, {"opponent_network": ref_network, "opponent_params": ref_params})
        )
        if settings.get("reference_raw", False):
            raw = {"opponent_network": ref_network, "opponent_params": ref_params}
            matches.append(("reference_raw", 102, {**raw, "opponent_simulations": 0}))
    out = {}
    for name, index, opponent in matches:
        networks = "opponent_network" in opponent
        if mixed and opponent.get("opponent_network", network) == network:
            if not networks:
                opponent.update(opponent_network=network, opponent_params=unadapted)
            opponent["mixed_opponents"] = "opponent_simulations" not in opponent
        result = match.play_match(
            network,
            params,
            variant,
            opponent.pop("opponent", "checkpoint"),
            games,
            sims,
            jax.random.fold_in(key, index),
            max_plies=max_plies,
            opening_plies=openings if networks or fog else 0,
            opening=opening if networks else "random",
            num_worlds=int(settings.get("num_worlds", 4)),
            sampled=sampled and networks,
            **opponent,
        )
        out[name] = match_summary(result)
    engine_nodes = tuple(settings.get("engine_nodes", ()) or ())
    if engine_nodes and not fog and uci.supported_by_fairy_stockfish(variant):
        for i, nodes in enumerate(engine_nodes):
            result = arena.engine_match(
                network,
                params,
                variant,
                games,
                sims,
                uci.Limits(nodes=int(nodes)),
                seed=int(jax.random.randint(jax.random.fold_in(key, 200 + i), (), 0, 2**30)),
                opening_plies=openings,
                max_plies=max_plies,
                engine=settings.get("engine") or None,
            )
            out[f"fsf@{nodes}"] = {**match_summary(result), "aborted": result["aborted"]}
    return out


def _frames_at(workdir: str, iteration: int) -> int:
    if iteration == 0:
        return 0
    for record in metrics_lib.read_metrics(workdir):
        if record.get("step") == iteration:
            return int(record["frames"])
    raise RuntimeError(f"no metrics record for iteration {iteration} in {workdir}")


def _format_score(match: dict[str, Any] | None) -> str:
    if not match:
        return "-"
    low, high = match["score_ci95"]
    return f"{match['score']:.2f} [{low:.2f}, {high:.2f}]"


def markdown_table(results: dict[str, Any]) -> str:
    """The results as a markdown table: one row per evaluated iteration."""
    points = results["points"]
    named = list(results["settings"]["opponents"]) + ["unadapted", "reference", "reference_raw"]
    found = {o for p in points for o in p["matches"]}
    used = [o for o in named if o in found] + sorted(found - set(named))
    settings = results["settings"]
    lines = [
        f"Adaptation to `{results['variant']}` from `{results['init_from']}`: "
        f"{settings['num_games']} colour-balanced games per match, "
        f"{settings['num_simulations']} simulations, ply cap "
        f"{settings['max_plies'] or 256}, seed {results['seed']};",  # two lines, each < 200
        f"score = (W + D/2) / games with 95% CI; games between two networks open with "
        f"{settings.get('opening_plies', 0)} random plies.",
        "",
        "| iteration | frames | " + " | ".join(f"vs {o}" for o in used) + " |",
        "|---:|---:|" + "---:|" * len(used),
    ]
    for point in points:
        cells = [_format_score(point["matches"].get(o)) for o in used]
        lines.append(f"| {point['iteration']} | {point['frames']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def verdict(results: dict[str, Any]) -> str:
    """One line that says what the table means: the adapted model against the unadapted one
    (its interval above 0.5: stronger; below: weaker; else no clear difference), or where that
    match was not played (under fog, or without `--head_to_head`) its score against the
    strongest built-in opponent at the start and at the last iteration."""
    points = results["points"]
    last = max(points, key=lambda p: p["iteration"], default=None)
    if last is None or last["iteration"] == 0:
        return "verdict: only the unadapted start was evaluated (--iterations 0)"
    n = last["iteration"]
    after = f"after {n} adaptation iteration{'s' if n != 1 else ''}"
    head = last["matches"].get("unadapted")
    if head:
        low, high = head["score_ci95"]
        if low > 0.5:
            meaning = "stronger than before"
        elif high < 0.5:
            meaning = "weaker than before"
        else:
            meaning = "no clear difference yet (the interval holds 0.5)"
        return (
            f"verdict: {after} the adapted model scores {_format_score(head)} against the "
            f"unadapted one: {meaning}"
        )
    start = next((p for p in points if p["iteration"] == 0), None)
    built_in = [o for o in reversed(results["settings"]["opponents"]) if o in last["matches"]]
    if start is None or not built_in or built_in[0] not in start["matches"]:
        return f"verdict: {after}: see the table (no start point to compare with)"
    opponent = built_in[0]
    before, now = start["matches"][opponent], last["matches"][opponent]
    if now["score_ci95"][0] > before["score_ci95"][1]:
        meaning = "better"
    elif now["score_ci95"][1] < before["score_ci95"][0]:
        meaning = "worse"
    else:
        meaning = "no clear change yet (the intervals overlap)"
    return (
        f"verdict: against {opponent}, {_format_score(before)} at the start and "
        f"{_format_score(now)} {after}: {meaning}"
    )


def next_hint(variant: str, init_from: str, workdir: str, iterations: int) -> str:
    """The `next:` line: more iterations (the run resumes), then play the adapted model."""
    more = max(2 * iterations, iterations + 1)
    return (
        f"next: python -m mmc_jax.adapt --variant '{variant}' --init_from {init_from} "
        f"--iterations {more} --workdir {workdir}   (resumes: {more - iterations} more); "
        f"play it: python -m mmc_jax.serve --model {workdir}"
    )


def plot_curve(results: dict[str, Any], path: str) -> None:
    """Score against each opponent over adaptation iterations, with 95% CI bars."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    points = results["points"]
    names = sorted({o for p in points for o in p["matches"]})
    for name in names:
        xs, ys, lows, highs = [], [], [], []
        for point in points:
            match = point["matches"].get(name)
            if match:
                xs.append(point["iteration"])
                ys.append(match["score"])
                lows.append(match["score"] - match["score_ci95"][0])
                highs.append(match["score_ci95"][1] - match["score"])
        axes.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=f"vs {name}")
    axes.set_ylim(-0.02, 1.02)
    axes.axhline(0.5, color="grey", linewidth=0.5, linestyle="--")
    axes.set_xlabel("adaptation iterations")
    axes.set_ylabel("score (W + D/2)")
    axes.set_title(f"{results['variant']} from {os.path.basename(results['init_from'])}")
    axes.grid(alpha=0.3)
    if names:  # a run stopped before its first point has no curve yet
        axes.legend(fontsize="small")
    figure.tight_layout()
    metrics_lib.save_figure(figure, path)


# ---------------------------------------------------------------------------------------------
# The run


def _check_workdir(workdir: str, config: ml_collections.ConfigDict) -> None:
    """Refuses a workdir that holds an adaptation of another variant or from another start."""
    if checkpoint_lib.latest_step(workdir) is None:
        return
    saved = checkpoint_lib.load_metadata(workdir).get("config") or {}
    problems = []
    if saved.get("variant") != config.variant:
        problems.append(f"variant {saved.get('variant')!r} (now {config.variant!r})")
    if saved.get("init_from") != config.init_from:
        problems.append(f"init_from {saved.get('init_from')!r} (now {config.init_from!r})")
    if problems:
        raise ValueError(
            f"{workdir} holds an adaptation run with another "
            + " and ".join(problems)
            + "; use another --workdir"
        )


def run_adaptation(
    variant: str,
    init_from: str,
    workdir: str | os.PathLike,
    *,
    iterations: int = 1,
    config: ml_collections.ConfigDict | None = None,
    eval_at: list[int] | None = None,
    num_games: int | None = None,
    num_simulations: int | None = None,
    max_plies: int | None = None,
    reference: str | None = None,
    reference_raw: bool = False,
    engine_nodes: tuple[int, ...] = (),
    engine: str | None = None,
    head_to_head: bool = True,
    seed: int = 0,
    init_seed: int | None = None,
    stream=sys.stdout,
) -> dict[str, Any]:
    """Adapts a checkpoint to `variant` for `iterations` AlphaZero iterations and evaluates it
    at the iterations `eval_at` (default 0..iterations); writes the results into `workdir`.

    Returns the results dict written to `adaptation.json`: variant, init_from, seed, settings,
    `points` [{iteration, frames, seconds, matches: {opponent: {score, score_ci95, wins, draws,
    losses, num_games, mean_plies}}}]. `reference_raw` adds a match against the reference's
    raw policy (a second, weaker strength); `engine_nodes` matches against Fairy-Stockfish
    (`engine`, default the built one) at those nodes per move where it plays the variant.
    `seed` seeds the adaptation's self-play and evaluation; `init_seed` (default `seed`) the
    initialisation of a scratch start, so that scratch starts can vary as pretraining seeds do
    while the adaptation and its evaluation games stay paired across starts.

    Raises:
      ValueError: unknown variant (the message lists them), a checkpoint that does not fit,
        no adaptation settings, or a workdir holding another adaptation.
      FileNotFoundError: a missing checkpoint (`init_from` or `reference`).
    """
    R.check_variant(variant)
    workdir = os.fspath(workdir)
    points_wanted = _points_wanted(iterations, eval_at)

    def log(line: str) -> None:
        if stream is not None:
            print(line, file=stream, flush=True)

    init_seed = seed if init_seed is None else int(init_seed)
    network_config, params0, saved, label = load_start(init_from, config, init_seed)
    run_config = adaptation_config(
        variant, iterations, network_config, config=config, saved=saved, init_label=label, seed=seed
    )
    settings = _match_settings(
        run_config.eval, num_games, num_simulations, max_plies, reference_raw, engine_nodes, engine
    )
    alphazero.prepare_config(run_config)  # validates before any work
    _check_workdir(workdir, run_config)
    network = network_lib.make_network(network_config)
    reference_model = checkpoint_lib.load_model(reference)[:2] if reference else None
    results_path = storage.join(workdir, RESULTS_FILE)
    results = _new_results(variant, label, seed, init_seed, settings, reference, run_config)
    # One writer per workdir: the adaptation's results and its training run alike.
    with runloop.workdir_lock(workdir, log):
        previous = storage.read_text(results_path)
        results["points"] = _kept_points(previous, results, points_wanted, seed)
        done = {p["iteration"] for p in results["points"]}
        storage.to_path(workdir).mkdir(parents=True, exist_ok=True)
        evaluate_at = _PointEvaluator(
            network,
            variant,
            settings,
            jax.random.key(seed + 1_000_003),
            params0 if head_to_head else None,
            reference_model,
            results,
            results_path,
            log,
        )
        if 0 in points_wanted and 0 not in done:
            evaluate_at(0, params0, 0, 0.0)
        reached = _evaluate_checkpointed_points(workdir, points_wanted, done, params0, evaluate_at)
        last = max(
            [p for p in points_wanted if p not in {q["iteration"] for q in results["points"]}]
            or [0]
        )
        stopped_at = None
        if last > 0:
            stopped_at = _train_and_evaluate(
                run_config, workdir, params0, last, points_wanted, reached, evaluate_at, stream
            )
        storage.write_atomically(storage.join(workdir, TABLE_FILE), markdown_table(results))
        plot_curve(results, storage.join(workdir, metrics_lib.PLOTS_SUBDIR, PLOT_FILE))
    if stopped_at is not None:
        # The points played so far are in adaptation.json; a caller must not read the
        # unfinished curve as the whole one.
        raise runloop.Stopped(f"{workdir}: stopped by a signal at iteration {stopped_at}")
    return results


def _new_results(variant, label, seed, init_seed, settings, reference, run_config) -> dict:
    """What `adaptation.json` records before any point is played."""
    return {
        "variant": variant,
        "init_from": label,
        "seed": seed,
        "init_seed": init_seed,
        "settings": _recorded_settings(settings),
        "reference": storage.absolute(reference) if reference else None,
        "frames_per_iteration": alphazero.samples_per_iteration(run_config),
        "points": [],
    }


@dataclasses.dataclass
class _PointEvaluator:
    """Called with (point, params, frames, train seconds): plays the point's matches and
    records them in `adaptation.json` (rewritten at every point) and on the log."""

    network: Any
    variant: str
    settings: ml_collections.ConfigDict
    key: jax.Array
    unadapted: Any  # the start's params for the head-to-head matches, None without them
    reference: tuple[Any, Any] | None  # (network, params)
    results: dict[str, Any]
    results_path: str
    log: Callable[[str], None]

    def __call__(self, point: int, params: Any, frames: int, trained: float) -> None:
        started = time.time()
        matches = evaluate_point(
            self.network,
            params,
            self.variant,
            self.settings,
            self.key,
            unadapted=self.unadapted if point > 0 else None,
            reference=self.reference,
        )
        entry = {
            "iteration": point,
            "frames": frames,
            "train_seconds": trained,
            "eval_seconds": time.time() - started,
            "matches": matches,
        }
        results = self.results
        results["points"] = sorted(results["points"] + [entry], key=lambda p: p["iteration"])
        storage.write_atomically(self.results_path, json.dumps(results, indent=1))
        scores = ", ".join(f"{o} {_format_score(m)}" for o, m in matches.items())
        self.log(f"{self.variant} after {point} adaptation iterations ({frames} frames): {scores}")


def _points_wanted(iterations: int, eval_at: list[int] | None) -> list[int]:
    """The sorted iterations to evaluate (default 0..iterations); ValueError for a bad
    iteration count or a point outside 0..iterations."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be a non-negative integer, got {iterations!r}")
    points_wanted = sorted(set(range(iterations + 1) if eval_at is None else eval_at))
    bad = [p for p in points_wanted if not 0 <= p <= iterations]
    if bad:
        raise ValueError(f"eval_at {bad} outside 0..{iterations} (the adaptation iterations)")
    return points_wanted


def _match_settings(
    eval_config: ml_collections.ConfigDict,
    num_games: int | None,
    num_simulations: int | None,
    max_plies: int | None,
    reference_raw: bool,
    engine_nodes: tuple[int, ...],
    engine: str | None,
) -> ml_collections.ConfigDict:
    """The evaluation's match settings: the run config's `eval` section with the arguments
    given over it; ValueError for non-positive engine nodes or an odd number of games."""
    settings = ml_collections.ConfigDict(eval_config.to_dict())
    if num_games is not None:
        settings.num_games = int(num_games)
    if num_simulations is not None:
        settings.num_simulations = int(num_simulations)
    if max_plies is not None:
        settings.max_plies = int(max_plies)
    settings.reference_raw = bool(reference_raw)
    settings.engine_nodes = tuple(int(n) for n in engine_nodes)
    settings.engine = engine or ""
    if any(n <= 0 for n in settings.engine_nodes):
        raise ValueError(f"engine nodes must be positive, got {list(engine_nodes)}")
    if settings.num_games <= 0 or settings.num_games % 2:
        raise ValueError(f"the number of games must be positive and even, got {settings.num_games}")
    return settings


def _recorded_settings(settings: ml_collections.ConfigDict) -> dict[str, Any]:
    """The match settings `adaptation.json` records (and a resumed run must match)."""
    recorded = {
        k: settings[k] for k in ("num_games", "num_simulations", "max_plies", "opening_plies")
    }
    if settings.get("opening", "random") != "random":  # older results files lack the key
        recorded["opening"] = settings.opening
    if settings.get("sampled", False):
        recorded["sampled"] = True
    recorded["opponents"] = list(settings.opponents)
    if settings.reference_raw:
        recorded["reference_raw"] = True
    if settings.engine_nodes:
        recorded["engine_nodes"] = list(settings.engine_nodes)
    return recorded


def _kept_points(
    previous_text: str | None, results: dict[str, Any], points_wanted: list[int], seed: int
) -> list[dict[str, Any]]:
    """The evaluated points of an earlier `adaptation.json` (its text, None if there is none)
    worth keeping: those wanted now, when it is the same adaptation with the same settings."""
    if previous_text is None:
        return []
    previous = json.loads(previous_text)
    same = all(
        previous.get(k, seed if k == "init_seed" else None) == results[k]
        for k in ("variant", "init_from", "init_seed", "settings")
    )
    if same and previous.get("reference") == results["reference"]:
        return [p for p in previous["points"] if p["iteration"] in points_wanted]
    return []


def _evaluate_checkpointed_points(
    workdir: str,
    points_wanted: list[int],
    done: set[int],
    params0: Any,
    evaluate_at: Callable[[int, Any, int, float], None],
) -> int:
    """Evaluates the wanted points behind a resumed run's checkpoint that an earlier call left
    out; returns the step the checkpoint reached (0 without one)."""
    template = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), params0
    )
    reached = checkpoint_lib.latest_step(workdir) or 0
    for point in points_wanted:
        if 0 < point <= reached and point not in done:
            try:
                restored = checkpoint_lib.restore_subtree(workdir, "params", template, step=point)
            except FileNotFoundError:
                raise ValueError(
                    f"{workdir}: iteration {point} was trained, but neither its result (for "
                    f"this reference and these settings) nor its checkpoint is kept (newest "
                    f"{reached}); adapt again in a fresh --workdir"
                ) from None
            evaluate_at(point, on_device(restored), _frames_at(workdir, point), 0.0)
    return reached


def _train_and_evaluate(
    run_config: ml_collections.ConfigDict,
    workdir: str,
    params0: Any,
    last: int,
    points_wanted: list[int],
    reached: int,
    evaluate_at: Callable[[int, Any, int, float], None],
    stream,
) -> int | None:
    """Trains (resuming from the workdir's checkpoint) up to iteration `last`, evaluating the
    wanted points past `reached` as the run loop reaches them. Returns the iteration a signal
    stopped the run at, or None when it reached `last`."""
    train_started = time.time()

    def on_eval(iteration: int, state: Any, record: dict[str, Any]) -> None:
        if iteration in points_wanted and iteration > reached:
            evaluate_at(
                iteration,
                on_device(jax.device_get(state.params)),
                int(record["frames"]),
                time.time() - train_started,
            )

    run_config.unlock()
    run_config.num_iterations = last
    result = runloop.run(
        alphazero.ALGORITHM,
        run_config,
        workdir,
        init_params=params0,
        on_eval=on_eval,
        stream=stream,
        lock=False,  # held by the caller
    )
    return int(result.record["iteration"]) if result.stopped else None


# ---------------------------------------------------------------------------------------------
# CLI


def define_flags(flag_values=None) -> None:
    """The adapt flags (absl; `--config` is an optional ml_collections config file)."""
    from absl import flags
    from ml_collections import config_flags

    fv = flags.FLAGS if flag_values is None else flag_values
    flags.DEFINE_string(
        "variant", None, f"variant to adapt to: {', '.join(R.VARIANTS)}", flag_values=fv
    )
    flags.DEFINE_string(
        "init_from",
        None,
        "start: a run workdir, <workdir>/checkpoints/<step>, an exported model, a shipped "
        f"model's name, or 'scratch' (default: the shipped {DEFAULT_MODEL!r} start)",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "workdir",
        None,
        "adaptation run directory (default runs/adapt_<variant>); re-running resumes",
        flag_values=fv,
    )
    flags.DEFINE_integer("iterations", 1, "AlphaZero iterations on the variant", flag_values=fv)
    flags.DEFINE_string(
        "eval_at",
        None,
        "comma-separated iterations to evaluate (default: 0..iterations)",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "games", None, "games per match (even; default: the config's)", flag_values=fv
    )
    flags.DEFINE_integer("simulations", None, "search simulations in evaluation", flag_values=fv)
    flags.DEFINE_integer("max_plies", None, "ply cap of evaluation games (0: 256)", flag_values=fv)
    flags.DEFINE_string("reference", None, "a frozen checkpoint to play against", flag_values=fv)
    flags.DEFINE_bool(
        "reference_raw",
        False,
        "also play the reference's raw policy (no search): a second, weaker strength",
        flag_values=fv,
    )
    flags.DEFINE_list(
        "engine_nodes",
        [],
        "also play Fairy-Stockfish at these nodes per move (comma-separated), where it plays "
        "the variant and there is no fog",
        flag_values=fv,
    )
    flags.DEFINE_bool(
        "head_to_head", True, "play the adapted model against the unadapted one", flag_values=fv
    )
    flags.DEFINE_integer("seed", 0, "seed of the adaptation run and the evaluation", flag_values=fv)
    config_flags.DEFINE_config_file(
        "config",
        None,
        "adaptation settings: configs/joat.py[:preset] (its `adapt` section) or a single-variant "
        "config (default: those saved with the checkpoint)",
        flag_values=fv,
        lock_config=True,
    )


def main(argv) -> None:
    """absl entry point; every error is one line on stderr (`error: ...`), exit status 2."""
    from absl import flags

    cli.absl_start(argv)
    FLAGS = flags.FLAGS
    if not FLAGS.variant:
        cli.fail("--variant is required, e.g. --variant dark")
    try:
        variant = R.check_variant(FLAGS.variant)
    except ValueError as error:
        cli.fail(f"--variant: {error}")
    init_from = FLAGS.init_from or DEFAULT_MODEL
    if init_from not in checkpoint_lib.shipped_models() and not FLAGS.init_from:
        cli.fail("--init_from is required: a run workdir, <workdir>/checkpoints/<step>, or scratch")
    workdir = FLAGS.workdir or os.path.join("runs", f"adapt_{variant}")
    start_note = (
        ""
        if FLAGS.init_from
        else " (the shipped joint-pretraining model, the study's pick; --init_from to change)"
    )
    where_note = "" if FLAGS.workdir else " (--workdir to change)"
    print(f"adapting {init_from}{start_note} to {variant}", flush=True)
    print(f"workdir {workdir}{where_note}", flush=True)
    eval_at = None
    if FLAGS.eval_at:
        try:
            eval_at = [int(x) for x in FLAGS.eval_at.split(",") if x.strip()]
        except ValueError:
            cli.fail(f"--eval_at must be integers, got {FLAGS.eval_at!r}")
    try:
        engine_nodes = tuple(int(x) for x in FLAGS.engine_nodes)
    except ValueError:
        cli.fail(f"--engine_nodes must be integers, got {','.join(FLAGS.engine_nodes)!r}")
    if FLAGS.reference_raw and not FLAGS.reference:
        cli.fail("--reference_raw needs --reference (the checkpoint whose raw policy plays)")
    for flag, path in (("--init_from", init_from), ("--reference", FLAGS.reference)):
        if path and str(path).lower() not in SCRATCH:
            cli.check_model_path(flag, path)
    cli.check_workdir(workdir)
    if R.has_fog(variant) and (FLAGS.head_to_head or FLAGS.reference):
        print(FOG_NOTE.format(variant=variant), flush=True)
    try:
        results = run_adaptation(
            variant,
            init_from,
            workdir,
            iterations=FLAGS.iterations,
            config=FLAGS.config,
            eval_at=eval_at,
            num_games=FLAGS.games,
            num_simulations=FLAGS.simulations,
            max_plies=FLAGS.max_plies,
            reference=FLAGS.reference,
            reference_raw=FLAGS.reference_raw,
            engine_nodes=engine_nodes,
            head_to_head=FLAGS.head_to_head,
            seed=FLAGS.seed,
        )
    except (FileNotFoundError, ValueError, FloatingPointError, OSError, uci.EngineError) as error:
        cli.fail(str(error))
    except runloop.Interrupted:
        print("interrupted; re-run the same command to resume", file=sys.stderr)
        cli.exit_at_once(130)
    except KeyboardInterrupt:
        cli.fail("interrupted; re-run the same command to resume", status=130)
    except runloop.Stopped as error:
        cli.fail(f"{error}; the points played are kept: re-run the same command to resume")
    print(markdown_table(results), end="")
    print(verdict(results))
    print(f"written: {storage.join(workdir, RESULTS_FILE)}, {TABLE_FILE}, plots/{PLOT_FILE}")
    print(next_hint(variant, init_from, workdir, FLAGS.iterations))


if __name__ == "__main__":
    from absl import app

    define_flags()
    cli.define_distributed_flags()
    app.run(main, flags_parser=cli.absl_flags_parser(__doc__))
