"""`python -m mmc_jax.bench env`: random-play throughput with one protocol for every engine.

Inside one jitted `lax.scan`, each ply computes the legal action mask, draws a uniformly random
legal action (`mmc_jax.rules.random_legal_action`, the same sampler for every engine), steps,
and resets finished games in place. It reports env steps per second per batch size, the compile
time, the bytes one game's state takes, and legal moves enumerated per second (move generation
alone, like a perft). `--vs-pgx` runs pgx `gardner_chess` under the same protocol in the same
process and prints the ratio. `--mixed` also runs, per batch size, a batch of that many distinct
random combinations of the rule space (`mmc_jax.rules.sample_variants`, seed `--seed`) and
prints its steps/s against the single-variant batch, measured in the same run, as a ratio.
The arms of a batch size are timed round-robin like `selfplay`'s: steps/s from the median of
`--repeats` scans, ratios the median of the rounds' ratios. A row per batch size, then move
generation.
"""

from __future__ import annotations

import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax.bench import common, programs

NAME = "env"
HELP = "random-play env steps per second (mask + step + reset)"
ROWS = "batch size, then move generation"


def add_flags(p) -> None:
    """The `env` subcommand's flags."""
    common.add_list(
        p,
        "--batch-sizes",
        [1, 64, 512, 4096],
        "games in parallel, one row each (default 1 64 512 4096)",
        type=common.POSITIVE,
    )
    common.add_list(
        p,
        "--variants",
        ["gardner"],
        "variants in the batch (several = a mixed batch); default gardner",
    )
    p.add_argument("--scan-length", type=common.POSITIVE, default=32, help="plies per jitted scan")
    common.add_rounds(p, 5, "timed rounds per batch size, one scan of every arm each, round-robin")
    p.add_argument(
        "--movegen-batch",
        type=common.NON_NEGATIVE,
        default=4096,
        help="batch for the legal-moves-per-second count (0 skips it)",
    )
    p.add_argument("--vs-pgx", action="store_true", help="also run pgx gardner_chess")
    p.add_argument(
        "--mixed",
        action="store_true",
        help="also run a batch of random rule-space combinations (one per game) per batch size",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the --mixed combinations")


def check(parser, args) -> None:
    """Refuses (one usage line) variants that do not parse, and --vs-pgx on another variant."""
    try:
        args.variants = [R.check_variant(v) for v in args.variants]
    except ValueError as e:
        parser.error(str(e))
    if args.vs_pgx and args.variants != ["gardner"]:
        parser.error("--vs-pgx compares gardner only (pgx has no other variant)")


def legal_moves_per_second(variants: list[str], batch: int, scan_length: int, repeats: int):
    """Move generation alone, like a perft: legal moves enumerated per second.

    The positions are `scan_length` batches collected along random games, so every timed
    move generation works on different positions (nothing can be hoisted out of the loop).
    """
    rules = R.batch(variants, batch)

    def play(carry, key):
        state, planes = carry
        action = R.random_legal_action(key, R.planes_to_mask(planes))
        state, planes = R.step_with_planes(rules, state, action, planes)
        fresh = R.init(rules)
        done = state.terminated
        state = programs.where_done(done, fresh, state)
        planes = programs.where_done(done, R.legal_planes(rules, fresh), planes)
        return (state, planes), state

    @jax.jit
    def collect(key):
        state = R.init(rules)
        carry = (state, R.legal_planes(rules, state))
        return jax.lax.scan(play, carry, jax.random.split(key, scan_length))[1]

    positions = jax.block_until_ready(collect(jax.random.key(123)))

    @jax.jit
    def count(positions):
        def body(total, state):
            planes = R.legal_planes(rules, state)
            return total + jnp.sum(jax.lax.population_count(planes)), None

        return jax.lax.scan(body, jnp.int32(0), positions)[0]

    compiled = count.lower(positions).compile()
    jax.block_until_ready(compiled(positions))
    start = time.perf_counter()
    total = 0
    for _ in range(repeats):
        total += int(compiled(positions))
    return total / (time.perf_counter() - start)


def run(args) -> dict:
    """Env steps/s per batch size (one row each), then move generation (a row of its own)."""
    variants = args.variants
    common.say(
        args,
        f"mmc_jax env benchmark on {jax.default_backend()} "
        f"({jax.devices()[0].device_kind}), variants {variants}",
    )
    result = {
        "benchmark": "env",
        "variants": variants,
        **common.machine(),
        "num_devices": jax.device_count(),
        "cpu": platform.processor() or platform.machine(),
        "jax": jax.__version__,
        "scan_length": args.scan_length,
        "repeats": args.repeats,
        "state_bytes": R.state_bytes(),
        "rows": [],
    }
    if args.vs_pgx:
        import pgx  # a test and benchmark extra: only with --vs-pgx

        env = pgx.make("gardner_chess")
        result["pgx_version"] = pgx.__version__
        result["pgx_state_bytes"] = common.tree_bytes(env.init(jax.random.key(0)))
    pgx_bytes = result.get("pgx_state_bytes")
    common.say(
        args,
        f"state: {result['state_bytes']} bytes per game"
        + (f" (pgx: {pgx_bytes} bytes)" if pgx_bytes else ""),
    )
    rows = common.Rows(args, result)
    for batch in args.batch_sizes:
        if not rows.may_start(f"batch {batch}"):
            continue
        result["rows"].append(measure_batch(args, variants, batch))
        rows.record()
        common.say(args, row_line(result["rows"][-1]))
    if args.movegen_batch and rows.may_start(f"move generation at batch {args.movegen_batch}"):
        result["legal_moves_per_s"] = legal_moves_per_second(
            variants, args.movegen_batch, args.scan_length, args.repeats
        )
        rows.record()
        common.say(
            args,
            f"move generation: {result['legal_moves_per_s']:,.0f} legal moves/s "
            f"(batch {args.movegen_batch})",
        )
    return rows.finish()


def measure_batch(args, variants: list[str], batch: int) -> dict:
    """One batch size: every arm timed round-robin, steps/s and ratios."""
    arms = {"mmc_jax": programs.mmc_env_runner(variants, batch, args.scan_length)}
    if args.vs_pgx:
        arms["pgx"] = programs.pgx_env_runner(batch, args.scan_length)
    if args.mixed:
        specs = R.sample_variants(args.seed, batch)
        arms["mixed"] = programs.mmc_env_runner(specs, batch, args.scan_length)
    timed = common.time_scans_interleaved(arms, args.repeats, verbose=False)
    steps = {
        name: args.scan_length * batch / float(np.median(t["seconds"])) for name, t in timed.items()
    }
    out = {
        "batch": batch,
        "steps_per_s": steps["mmc_jax"],
        "compile_s": timed["mmc_jax"]["compile_s"],
    }
    if args.vs_pgx:
        ratios = common.round_ratios(timed, "pgx")
        out.update(
            pgx_steps_per_s=steps["pgx"],
            pgx_compile_s=timed["pgx"]["compile_s"],
            ratio=float(np.median(ratios)),
            ratio_min=float(np.min(ratios)),
            ratio_max=float(np.max(ratios)),
        )
    if args.mixed:
        # mixed steps/s over single-variant steps/s, round by round.
        mixed = [1.0 / r for r in common.round_ratios(timed, "mixed")]
        out.update(
            mixed_steps_per_s=steps["mixed"],
            mixed_compile_s=timed["mixed"]["compile_s"],
            mixed_ratio=float(np.median(mixed)),
        )
    out["seconds_per_scan_rounds"] = {name: t["seconds"] for name, t in timed.items()}
    return out


def row_line(row: dict) -> str:
    """The text line of a batch size's row."""
    line = (
        f"batch {row['batch']:>5}: {row['steps_per_s']:>12,.0f} steps/s "
        f"(compile {row['compile_s']:.1f} s)"
    )
    if "pgx_steps_per_s" in row:
        line += (
            f" | pgx {row['pgx_steps_per_s']:>10,.0f} steps/s "
            f"(compile {row['pgx_compile_s']:.1f} s) | ratio {row['ratio']:.1f}x "
            f"({row['ratio_min']:.1f}-{row['ratio_max']:.1f}x)"
        )
    if "mixed_steps_per_s" in row:
        line += (
            f" | mixed {row['batch']} combinations {row['mixed_steps_per_s']:>10,.0f} steps/s "
            f"(compile {row['mixed_compile_s']:.1f} s) | mixed / single "
            f"{row['mixed_ratio']:.2f}"
        )
    return line
