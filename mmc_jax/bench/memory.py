"""`python -m mmc_jax.bench memory`: the memory of one training iteration, compiled, never run.

For each `--configs` spec (a row each; default `gardner:full`) the algorithm the config names
compiles its iteration (`Algorithm.compile`, through `mmc_jax.bench.contract`) for its abstract
state (`Algorithm.abstract_state`: shapes only, nothing of its size is allocated), and the row
gives XLA's memory analysis of it: argument, output, aliased (outputs written over donated
arguments), temporary bytes, and their peak, argument + output - alias + temporaries; beside it
the run's own estimate (`runloop.estimate_memory`, what `train` prints and checks before it
allocates), the state's bytes, and, for a state with replay rings, the bytes per replay sample.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from mmc_jax.bench import common, contract
from mmc_jax.training import learner, runloop

NAME = "memory"
HELP = "XLA's memory analysis of one training iteration, and bytes per replay sample"
ROWS = "config"


def add_flags(p) -> None:
    """The `memory` subcommand's flags."""
    common.add_list(
        p,
        "--configs",
        ["gardner:full"],
        f"the configs measured, one row each: {contract.SPEC_HELP} (default gardner:full)",
        metavar="SPEC",
    )


def check(parser, args) -> None:
    """Refuses (one usage line) a spec that names no config."""
    for spec in args.configs:
        try:
            contract.load_config(spec)
        except ValueError as error:
            parser.error(f"--configs {error}")


def replay_rings(state) -> list[learner.ReplayBuffer]:
    """The replay rings in `state` (none for a learner without replay)."""

    def is_ring(x) -> bool:
        return isinstance(x, learner.ReplayBuffer)

    return [leaf for leaf in jax.tree.leaves(state, is_leaf=is_ring) if is_ring(leaf)]


def measure(spec: str) -> dict:
    """Replay bytes and XLA's memory analysis of one compiled iteration of `spec`, lowered
    from the abstract state (shapes only: nothing of its size is allocated, and the iteration
    is compiled, never run)."""
    prepared = contract.prepare(spec)  # a preset that fills the device gets its batch here
    algorithm, config, mesh = prepared.algorithm, prepared.config, prepared.mesh
    estimate = runloop.estimate_memory(algorithm, config, mesh)
    state = algorithm.abstract_state(config, mesh)
    data = contract.load_data(prepared, lambda line: None)
    started = time.perf_counter()
    compiled = contract.compile_step(prepared, state, data).compiled
    compile_seconds = time.perf_counter() - started
    if compiled is None:
        raise ValueError(f"{spec}: {algorithm.name}'s compiled step holds no XLA executable")
    analysis = compiled.memory_analysis()
    fields = ("argument", "output", "alias", "temp", "generated_code")
    sizes = {f: int(getattr(analysis, f"{f}_size_in_bytes")) for f in fields}
    # What the iteration holds at its peak: inputs, outputs not written over donated inputs, and
    # XLA's temporaries.
    sizes["peak"] = sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"]
    run = {
        "config": spec,
        "algorithm": algorithm.name,
        "batch": prepared.batch,
        # `mmc_jax.training.memory`'s estimate (what a run prints and checks before it
        # allocates) beside the compiler's figure.
        "estimate_bytes": {
            "state": estimate.state,
            "selfplay": estimate.selfplay,
            "learner": estimate.learner,
            "total": estimate.total,
        },
        "estimate_over_peak": estimate.total / sizes["peak"],
        "state_bytes": common.tree_bytes(state),
        "compiled_bytes": sizes,
        "compile_seconds": compile_seconds,
    }
    rings = replay_rings(state)
    if rings:
        # A ring's samples: its capacity, times its leading axes (JOAT: a ring per variant).
        samples = sum(int(np.prod(r.data.value_target.shape)) for r in rings)
        ring_bytes = common.tree_bytes(rings)
        run.update(
            replay_bytes_per_sample=ring_bytes / samples,
            replay_samples=samples,
            replay_bytes=ring_bytes,
        )
    return run


def row_line(run: dict) -> str:
    """The text line of a row."""
    mib = {k: v / 2**20 for k, v in run["compiled_bytes"].items()}
    replay = (
        f"replay {run['replay_bytes_per_sample']:.0f} bytes per sample x "
        f"{run['replay_samples']:,} = {run['replay_bytes'] / 2**20:.1f} MiB; "
        if "replay_bytes" in run
        else "no replay; "
    )
    return (
        f"{run['config']}: {replay}state {run['state_bytes'] / 2**20:.1f} MiB; compiled "
        f"iteration: arguments {mib['argument']:.1f} MiB, outputs {mib['output']:.1f} MiB "
        f"(aliased to donated arguments {mib['alias']:.1f} MiB), temporaries "
        f"{mib['temp']:.1f} MiB, peak {mib['peak']:.1f} MiB (compiled in "
        f"{run['compile_seconds']:.0f} s); estimate "
        f"{run['estimate_bytes']['total'] / 2**20:.1f} MiB = {run['estimate_over_peak']:.2f} x "
        f"the peak ({run['batch']})"
    )


def run(args) -> dict:
    """The compiled memory of one iteration of each `--configs` spec (one row each)."""
    result = {"benchmark": "memory", **common.machine(), "runs": []}
    rows = common.Rows(args, result)
    for spec in args.configs:
        if not rows.may_start(spec):
            continue
        try:
            found = measure(spec)
        except ValueError as error:
            raise SystemExit(f"error: {error}") from None
        result["runs"].append(found)
        if not args.json:
            print(row_line(found), flush=True)
        rows.record()
    return rows.finish()
