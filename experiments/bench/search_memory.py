"""What a compiled search costs by simulations: XLA's memory analysis, the program, the compile.

    python experiments/bench/search_memory.py [--simulations 16 32 64 128 256] [--model gardner-cpu]

Compiles the engine's one-shot search (`model_engine._search`: one game, the model's network,
no fog) at each size in a fresh process (nothing is run) and prints a row per size: XLA's
memory analysis of the program (arguments + outputs + temporaries, and the temporaries alone),
the characters of its optimized HLO, the compile's seconds, the process's peak resident memory
and what the compile added to it. Run from a checkout of the code to measure; the results
before and after issue 52's fix are in docs/engine.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def one(simulations: int, model: str) -> str:
    import resource
    import time

    import jax

    from mmc_jax import rules as R
    from mmc_jax.evaluation import model_engine
    from mmc_jax.infra import checkpoint

    network, params, _ = checkpoint.load_model(model)
    engine = model_engine.ModelEngine(network, params, model)
    position = engine.position("gardner")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lowered = model_engine._search.lower(
        params,
        R.stack([R.get("gardner")]),
        position.ply.state,
        None,
        jax.random.key(0),
        network=network,
        simulations=simulations,
        fog=False,
        worlds=1,
        candidates=model_engine.DEFAULT_CANDIDATES,
    )
    started = time.time()
    compiled = lowered.compile()
    seconds = time.time() - started
    stats = compiled.memory_analysis()
    program = stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    return (
        f"| {simulations} | {program / 2**20:.2f} MiB | {stats.temp_size_in_bytes / 2**20:.2f} MiB "
        f"| {len(compiled.as_text()) / 1e6:.2f} M | {seconds:.0f} s | {peak / 2**20:.2f} GiB "
        f"| {(peak - before) / 2**20:.2f} GiB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, nargs="*", default=[16, 32, 64, 128, 256])
    parser.add_argument("--model", default="gardner-cpu")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(one(args.one, args.model), flush=True)
        return
    print(
        "| simulations | program memory | temporaries | optimized HLO | compile | peak RSS "
        "| added by the compile |\n|---:|---:|---:|---:|---:|---:|---:|",
        flush=True,
    )
    for simulations in args.simulations:
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(simulations), "--model", args.model],
            capture_output=True,
            text=True,
        )
        rows = [line for line in done.stdout.splitlines() if line.startswith("|")]
        print(
            rows[-1] if rows else f"| {simulations} | failed: {done.stderr[-200:]!r} |", flush=True
        )


if __name__ == "__main__":
    main()
