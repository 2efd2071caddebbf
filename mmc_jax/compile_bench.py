"""`python -m mmc_jax.bench compile`: what each program a user meets costs to compile.

For every program (`PROGRAMS`: the rules' step, random play, the self-play scan, one iteration
of each learner, the engine's search, the match arena, adapt's evaluation) it reports the
seconds JAX spends tracing, lowering to StableHLO and in XLA's compile, the number of programs
compiled, and the size of the main program (lines of the StableHLO module JAX hands to XLA and
of the optimised HLO XLA makes of it, where the program object is at hand). pgx's
`gardner_chess` random play and the same self-play search over it are measured in the same run,
so `selfplay-scan` and `env-scan` stand beside their pgx peers as ratios.

Each program is measured in a process of its own with the persistent compile cache off, so
every number is from an empty cache and no program inherits another's traced functions (in one
process the second program would skip the move generation's tracing). The seconds come from
JAX's own compile events (`jax.monitoring`), summed over every compile the program's start
needs. Run nothing else meanwhile (pause background jobs with SIGSTOP): a busy core doubles
XLA's time.
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
import numpy as np

from mmc_jax import rules as R
from mmc_jax.infra import compile_log
from mmc_jax.training import bench_programs

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
    "alphazero-iteration": ("one train iteration of configs/gardner.py:cpu", ""),
    "joat-iteration": ("one train iteration of configs/joat.py:quick (the README's job)", ""),
    "supervised-iteration": ("one train iteration of configs/supervised.py:cpu", ""),
    "td_lambda-iteration": ("one train iteration of configs/td_lambda.py:cpu", ""),
    "recon-iteration": ("one train iteration of configs/recon.py:cpu", ""),
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
    run, carry = bench_programs.mmc_env_runner(["gardner"], 64, 16)
    return _jitted(run, carry, jax.random.key(0))


def _pgx_env() -> dict:
    run, state = bench_programs.pgx_env_runner(64, 16)
    return _jitted(run, state, jax.random.key(0))


def _selfplay_scan() -> dict:
    run, state, _ = bench_programs.mmc_selfplay_runner(64, 4, 32, 2, 32)
    return _jitted(run, state, jax.random.key(0))


def _pgx_selfplay() -> dict:
    run, state = bench_programs.pgx_selfplay_runner(64, 4, 32, 2, 32, "mctx")
    return _jitted(run, state, jax.random.key(0))


def _config(name: str, preset: str):
    from mmc_jax import algorithms
    from mmc_jax.infra import cli

    config = cli.load_preset(name, preset)
    algorithm = algorithms.algorithm_for(config)
    return algorithm, algorithm.prepare_config(config)


def _synthetic_dataset(config, rows: int = 256) -> dict[str, np.ndarray]:
    """A dataset of `supervised.load_dataset`'s layout (random positions, each labelled with its
    first legal move): the iteration's shapes without the engine's games."""
    variant = str(config.variant)
    rules = R.batch(variant, rows)
    state = R.init(rules)
    keys = jax.random.split(jax.random.key(0), 8)
    for key in keys:  # a few random plies, so that the positions differ
        state = R.step(rules, state, R.random_legal_action(key, R.legal_action_mask(rules, state)))
    mask = np.asarray(R.legal_action_mask(rules, state))
    actions = -np.ones((rows, int(config.data.multipv)), np.int32)
    actions[:, 0] = np.argmax(mask, axis=-1)
    probs = np.where(actions >= 0, 1.0, 0.0).astype(np.float32)
    return {
        "obs": np.asarray(R.observe(rules, state)),
        "mask": mask,
        "actions": actions,
        "probs": probs,
        "value": np.zeros(rows, np.float32),
        "train_rows": np.asarray(rows),
    }


def _iteration(name: str, preset: str) -> Callable[[], dict]:
    def measure() -> dict:
        from mmc_jax.algorithms import supervised

        algorithm, config = _config(name, preset)
        mesh = algorithm.make_mesh(config)
        if algorithm is supervised.ALGORITHM:
            data = _synthetic_dataset(config)
        else:
            data = algorithm.load_data(config, mesh, "", lambda line: None)
        state = algorithm.init_state(config, mesh, data, jax.random.key(0))
        # Only the iteration's compile counts (not the state's initialisation).
        with compile_log.Tally() as tally:
            step = algorithm.compile(config, mesh, state, data, 0)
        return {"tally": tally.summary(), **_size(None, step.compiled)}

    return measure


def _engine_search() -> dict:
    from mmc_jax.evaluation import model_engine

    engine = model_engine.load_engine("gardner-cpu")
    engine.search(engine.position("gardner"), 256)
    return {}


def _match_arena() -> dict:
    from mmc_jax.evaluation import match
    from mmc_jax.model import network as network_lib

    _, config = _config("gardner", "cpu")
    network = network_lib.make_network(config.network)
    params = network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)
    match.evaluate_run_params(config, params, jax.random.key(1))
    return {}


def _adapt_evaluation() -> dict:
    import ml_collections

    from mmc_jax import adapt
    from mmc_jax.model import network as network_lib

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
    "alphazero-iteration": _iteration("gardner", "cpu"),
    "joat-iteration": _iteration("joat", "quick"),
    "supervised-iteration": _iteration("supervised", "cpu"),
    "td_lambda-iteration": _iteration("td_lambda", "cpu"),
    "recon-iteration": _iteration("recon", "cpu"),
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
    command = [sys.executable, "-m", "mmc_jax.compile_bench", name]
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


def main(argv=None) -> None:
    """The child: measure the one program named and print its JSON line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in MEASURES:
        raise SystemExit(f"usage: python -m mmc_jax.compile_bench PROGRAM, one of {list(MEASURES)}")
    from mmc_jax.infra import startup

    startup.apply_xla_flags()
    print(json.dumps(measure_one(argv[0])), flush=True)


if __name__ == "__main__":
    main()
