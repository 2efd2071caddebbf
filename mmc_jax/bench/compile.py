"""`python -m mmc_jax.bench compile`: what each program a user meets costs to compile.

For every program (`PROGRAMS`: the rules' step, random play, the self-play scan, one iteration
of every registered learner, the engine's search, the match arena, adapt's evaluation) it
reports the seconds JAX spends tracing, lowering to StableHLO and in XLA's compile, the number
of programs compiled, and the size of the main program (lines of the StableHLO module JAX hands
to XLA and of the optimised HLO XLA makes of it, where the program object is at hand). pgx's
`gardner_chess` random play and the same self-play search over it are measured in the same run,
so `selfplay-scan` and `env-scan` stand beside their pgx peers as ratios. A learner's iteration
(`NAME-iteration` for every `algorithms.REGISTRY` name) is its config's compiled step, made
through the Algorithm contract (`mmc_jax.bench.contract`) from the first config file of
configs/ that trains it, at its `quick` preset where it has one, else `cpu`; only the step's
compile is tallied (not its data, made first: supervised learning plays 4 engine games).

Each program is measured in a process of its own (`python -m mmc_jax.bench.compile PROGRAM`)
with the persistent compile cache off, so every number is from an empty cache and no program
inherits another's traced functions (in one process the second program would skip the move
generation's tracing). The seconds come from JAX's own compile events (`jax.monitoring`),
summed over every compile the program's start needs. Run nothing else meanwhile (pause
background jobs with SIGSTOP): a busy core doubles XLA's time. `--xla-flags` adds XLA flags to
every measured process (to measure an optimisation level, say). A row per program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections

from mmc_jax import adapt, algorithms
from mmc_jax import rules as R
from mmc_jax.bench import common, contract, programs
from mmc_jax.evaluation import match, model_engine
from mmc_jax.infra import compile_log, startup
from mmc_jax.model import network as network_lib

NAME = "compile"
HELP = "trace, lowering and XLA seconds and program sizes of every program, empty cache"
ROWS = "program"

# name -> (what it is, its pgx peer or "")
PROGRAMS: dict[str, tuple[str, str]] = {
    "rules-step": ("R.step of 64 games of 4 mixed variants", ""),
    "env-scan": ("random play: 64 gardner games x 16 plies in one scan (bench env)", "pgx-env"),
    "pgx-env": ("pgx gardner_chess random play, as env-scan", ""),
    "selfplay-scan": (
        "self-play: 64 games x 4 plies, 32 simulations, 2x32 net (bench selfplay)",
        "pgx-selfplay",
    ),
    "pgx-selfplay": ("pgx gardner_chess under mctx, as selfplay-scan", ""),
    **{
        f"{name}-iteration": (f"one train iteration of the {name} learner (quick or cpu)", "")
        for name in algorithms.REGISTRY
    },
    "engine-search": ("the engine's first search: gardner-cpu, 256 nodes, the start", ""),
    "match-arena": ("gardner:cpu's evaluation matches (greedy, random)", ""),
    "adapt-evaluation": ("adapt's evaluation of joint-study on atomic", ""),
}


def _size(lowered=None, compiled=None) -> dict[str, int]:
    """Lines of the StableHLO module and of XLA's optimised HLO (where at hand)."""
    out = {}
    if lowered is not None:
        out["stablehlo_lines"] = len(lowered.as_text().splitlines())
    if compiled is not None:
        out["hlo_lines"] = len(compiled.as_text().splitlines())
    return out


def _jitted(run: Callable, *args) -> dict[str, int]:
    """Lower and compile a jitted `run` on `args`; its sizes."""
    lowered = run.lower(*args)
    return _size(lowered, lowered.compile())


def _rules_step() -> dict:
    rules = R.batch(["gardner", "atomic", "dark", "rifle"], 16)
    rules = jax.tree.map(lambda x: jnp.concatenate([x] * 4), rules)
    state = jax.eval_shape(R.init, rules)
    return _jitted(jax.jit(R.step), rules, state, jax.ShapeDtypeStruct((64,), jnp.int32))


def _env_scan() -> dict:
    run, carry = programs.mmc_env_runner(["gardner"], 64, 16)
    return _jitted(run, carry, jax.random.key(0))


def _pgx_env() -> dict:
    run, state = programs.pgx_env_runner(64, 16)
    return _jitted(run, state, jax.random.key(0))


def _selfplay_scan() -> dict:
    run, state, _ = programs.mmc_selfplay_runner(64, 4, 32, 2, 32)
    return _jitted(run, state, jax.random.key(0))


def _pgx_selfplay() -> dict:
    run, state = programs.pgx_selfplay_runner(64, 4, 32, 2, 32, "mctx")
    return _jitted(run, state, jax.random.key(0))


# A learner's iteration is measured on its config's smallest CPU preset: `quick` where the file
# has one (JOAT's: the README's first command), else `cpu`.
CPU_PRESETS = ("quick", "cpu")
# Overrides of a learner's config for this measurement (not its shapes): supervised learning's
# dataset of 4 engine games instead of the preset's 2000 (tens of minutes to play).
OVERRIDES = {
    "supervised": (
        "--config.data.games=4",
        "--config.data.shard_games=2",
        "--config.data.nodes=30",
        "--config.data.processes=1",
    ),
}


def iteration_config(name: str) -> str:
    """The spec (`NAME:PRESET`) of the config that `iteration_program(name)` compiles: the
    first config file of the checkout's configs/ (by name) whose `quick` or `cpu` preset
    trains the registered learner `name`."""
    for config_name in contract.config_names():
        for preset in CPU_PRESETS:
            spec = f"{config_name}:{preset}"
            try:
                trains = algorithms.name_of(contract.load_config(spec))
            except ValueError:  # no such preset
                continue
            if trains == name:
                return spec
            break
    raise ValueError(f"no config file in {contract.CONFIGS} trains the {name} learner")


def iteration_program(name: str) -> Callable[[], dict]:
    """The measure of one train iteration of the registered learner `name`, through the
    Algorithm contract (`mmc_jax.bench.contract`): only the iteration's compile is tallied,
    not its data or its state's initialisation."""

    def measure() -> dict:
        prepared = contract.prepare(iteration_config(name), OVERRIDES.get(name, ()))
        data = contract.load_data(prepared, lambda line: None)
        state = contract.init_state(prepared, data)
        with compile_log.Tally() as tally:
            step = contract.compile_step(prepared, state, data)
        return {"tally": tally.summary(), **_size(None, step.compiled)}

    return measure


def _engine_search() -> dict:
    engine = model_engine.load_engine("gardner-cpu")
    engine.search(engine.position("gardner"), 256)
    return {}


def _match_arena() -> dict:
    config = contract.prepare("gardner:cpu").config
    network = network_lib.make_network(config.network)
    params = network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)
    match.evaluate_run_params(config, params, jax.random.key(1))
    return {}


def _adapt_evaluation() -> dict:
    network_config, params, saved, _ = adapt.load_start("joint-study", None)
    network = network_lib.make_network(network_config)
    config = adapt.adaptation_config("atomic", 1, network_config, saved=saved)
    settings = ml_collections.ConfigDict(config.eval.to_dict())
    settings.reference_raw = False
    settings.engine_nodes = ()
    adapt.evaluate_point(network, params, "atomic", settings, jax.random.key(0), unadapted=params)
    return {}


MEASURES: dict[str, Callable[[], dict]] = {
    "rules-step": _rules_step,
    "env-scan": _env_scan,
    "selfplay-scan": _selfplay_scan,
    **{f"{name}-iteration": iteration_program(name) for name in algorithms.REGISTRY},
    "engine-search": _engine_search,
    "match-arena": _match_arena,
    "adapt-evaluation": _adapt_evaluation,
    "pgx-env": _pgx_env,
    "pgx-selfplay": _pgx_selfplay,
}


def measure_one(name: str) -> dict:
    """Measures program `name` in this process (the child's work): its compile seconds by
    stage, the count of programs XLA compiled, the sizes, and the wall seconds of it all."""
    started = time.perf_counter()
    with compile_log.Tally() as tally:
        sizes = MEASURES[name]()
    summary = sizes.pop("tally", None) or tally.summary()
    return {
        "program": name,
        **summary,
        **sizes,
        "wall_s": time.perf_counter() - started,
    }


def run_child(name: str, timeout: float, xla_flags: str = "") -> dict:
    """`measure_one(name)` in a fresh process without the persistent compile cache, with
    `xla_flags` added to its `XLA_FLAGS`."""
    env = dict(os.environ, MMC_COMPILE_CACHE="off", JAX_ENABLE_COMPILATION_CACHE="false")
    if xla_flags:
        env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""), xla_flags]).strip()
    command = [sys.executable, "-m", "mmc_jax.bench.compile", name]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"program": name, "error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"program": name, "error": f"exit {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def format_row(row: dict) -> str:
    """One line of the table: the program, its seconds by stage, programs and sizes."""
    if "error" in row:
        return f"{row['program']:22s} failed: {row['error']}"
    sizes = ""
    if "stablehlo_lines" in row:
        sizes += f" | StableHLO {row['stablehlo_lines']:,} lines"
    if "hlo_lines" in row:
        sizes += f" | HLO {row['hlo_lines']:,} lines"
    return (
        f"{row['program']:22s} compile {row['compile_s']:6.1f} s (trace {row['trace_s']:5.1f}, "
        f"lower {row['lower_s']:5.1f}, XLA {row['xla_s']:6.1f}; {row['programs']} programs) "
        f"| wall {row['wall_s']:6.1f} s{sizes}"
    )


def add_ratios(results: dict[str, dict]) -> None:
    """`vs_pgx`: each program's compile seconds over its pgx peer's, measured in the same run."""
    for name, (_, peer) in PROGRAMS.items():
        mine, theirs = results.get(name), results.get(peer)
        if not peer or not mine or not theirs or "error" in mine or "error" in theirs:
            continue
        mine["vs_pgx"] = mine["compile_s"] / max(theirs["compile_s"], 1e-9)


def add_flags(p) -> None:
    """The `compile` subcommand's flags."""
    common.add_list(
        p,
        "--programs",
        list(PROGRAMS),
        "the programs measured, each in its own process (default: all, pgx's peers included): "
        + ", ".join(PROGRAMS),
        choices=list(PROGRAMS),
        metavar="NAME",
    )
    p.add_argument(
        "--xla-flags",
        default="",
        metavar="FLAGS",
        help=(
            "XLA flags added to every measured process (a single flag as --xla-flags=FLAG), "
            "e.g. the tests' "
            "'--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true' "
            "(default: none beyond the commands' own)"
        ),
    )
    p.add_argument(
        "--program-timeout",
        type=common.POSITIVE,
        default=900,
        help="seconds one program may take before it is reported as timed out (default 900)",
    )


def run(args) -> dict:
    """A row per `--programs` entry: its compile seconds by stage and sizes, each measured in a
    fresh process from an empty cache (`run_child`); `vs_pgx` beside the programs that have a
    pgx peer, once both are measured."""
    result = {
        "benchmark": "compile",
        "xla_flags": args.xla_flags,
        **common.machine(),
        "programs": {},
    }
    rows = common.Rows(args, result)
    for name in args.programs:
        if not rows.may_start(name):
            continue
        common.say(args, f"{name}: {PROGRAMS[name][0]} ...")
        row = run_child(name, float(args.program_timeout), args.xla_flags)
        result["programs"][name] = row
        add_ratios(result["programs"])
        common.say(args, "  " + format_row(row))
        for mine, (_, peer) in PROGRAMS.items():
            if peer == name and "vs_pgx" in result["programs"].get(mine, {}):
                ratio = result["programs"][mine]["vs_pgx"]
                common.say(args, f"  {mine} compiles in {ratio:.2f}x the time of {peer}")
        rows.record()
    return rows.finish()


def main(argv=None) -> None:
    """The child: measure the one program named and print its JSON line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in MEASURES:
        raise SystemExit(f"usage: python -m mmc_jax.bench.compile PROGRAM, one of {list(MEASURES)}")
    startup.apply_xla_flags()
    print(json.dumps(measure_one(argv[0])), flush=True)


if __name__ == "__main__":
    main()
