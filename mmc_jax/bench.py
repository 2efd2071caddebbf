"""Benchmarks: `python -m mmc_jax.bench NAME`, NAME one of the subcommands described below.

`env` measures random-play throughput with one protocol for every engine: inside one jitted
`lax.scan`, each ply computes the legal action mask, draws a uniformly random legal action
(`mmc_jax.rules.random_legal_action`, the same sampler for every engine), steps, and resets
finished games in place. It reports env steps per second per batch size, the compile time,
the bytes one game's state takes, and legal moves enumerated per second (move generation
alone, like a perft). `--vs-pgx` runs pgx `gardner_chess` under the same protocol in the same
process and prints the ratio. `--mixed` also runs, per batch size, a batch of that many distinct
random combinations of the rule space (`mmc_jax.rules.sample_variants`, seed `--seed`) and
prints its steps/s against the single-variant batch, measured in the same run, as a ratio.
The arms of a batch size are timed round-robin like `selfplay`'s (below): steps/s from the
median of `--repeats` scans, ratios the median of the rounds' ratios.

`selfplay` measures self-play moves per second: B games (default 64) each searched with
Gumbel MuZero (32 simulations, a 2-block x 32-channel net) and stepped, inside one jitted scan,
with the project's search (`mmc_jax.search` over the batch-first loop `mmc_jax.search.mcts`: the
rules inside the tree, a compact action space of 160 slots). `--vs-pgx` runs the same search, same
network shape, over pgx `gardner_chess` in the same process (pgx carries its observation and
mask in its state; the tree spans its 1225 actions), once with `mctx.gumbel_muzero_policy` (pgx
as people use it: the ratio the targets name) and once with `mmc_jax.search.mcts` (so the rest of
the ratio is the engine, not the loop). The arms are timed round-robin, one scan of `--plies` plies
each per round for `--repeats` rounds (default 5), each carrying its own games on; moves/s come
from the median scan time, and `ratio` is the median of the rounds' ratios (`ratio_min`,
`ratio_max`: their range), so a slow moment of a shared machine lands on one round of every
arm. `--breakdown` times the whole scan and its parts alone (network, rules, the search's
bookkeeping over 160 slots and over 1225 actions), all arms in one rotation, the fastest of
`--repeats` rounds each; the glue is the whole less the parts.
`--memory-batch 1024` reports the compiler's peak-memory estimate of one searched ply at that
batch. On several devices (`MMC_CPU_DEVICES=2`: one per core) every arm runs under
`sharding.map_games`, each device searching its share of the games as training does, pgx's
arms included, so the ratio compares the engines on the same devices; `--breakdown` needs one.

`learner` times the AlphaZero learner (`learner.train_epoch`, a `lax.scan` of minibatch steps)
and the JOAT inner loop (`meta.adapt_tasks`) against their limit, the same number of steps of
one jitted `learner.train_step` called in a Python loop, and against the paths before issue 10
(XLA's own convolution gradient; the inner loop vmapped over the tasks), all arms interleaved
in one process, medians of `--repeats` rounds.

`memory` reports, for each `--configs` NAME:PRESET (default `gardner:full`), the replay ring's
bytes per sample and XLA's memory analysis of one training iteration compiled (never run) from
the abstract state: argument, output, aliased (outputs written over donated arguments),
temporary bytes, and their peak, argument + output - alias + temporaries.

`processes` measures the multi-process overhead on this machine: `train` (default
`configs/gardner.py:cpu`) as 2 processes x 1 CPU device joined by gloo over 127.0.0.1
(`launch.start_local`) against 1 process x 2 devices, the same global batch, the median of the
iteration times each run records, alternated `--repeats` times; `two_processes_vs_one` is the
time ratio.

`xla-flags` measures the project's XLA flags (`mmc_jax.infra.startup`): `selfplay` at each
`--batch-sizes` and `learner`, each run as its own process with XLA's defaults
(`MMC_XLA_FLAGS=off`) and with the project's flags, alternated `--rounds` times; it reports the
medians and `speedup` (default time / flagged time, above 1: the flags help).

`move` times what `engine`, `serve` and `play` wait for: one engine move
(`ModelEngine.search`, one game, B = 1) of each `--models` (shipped names, exported models,
runs) at each `--simulations` (default 256, the engine's default), on the same positions (the
start and the first model's own moves at 8 simulations), round-robin over the models for
`--repeats` rounds; it reports the median seconds per move, the first search's time (the
compile) and each model's ratio to the first: e.g. `--models gardner-cpu PATH/gardner-h200`
says how much slower a 6x128 network moves than the shipped 2x32 one on this machine.

`compile` measures what each program a user meets costs to compile (`mmc_jax.compile_bench`: the
rules' step, random play, self-play, one iteration of every learner, the engine's first search,
the match arena, adapt's evaluation, and pgx's random play and self-play beside ours), each in a
fresh process with the persistent cache off: JAX's tracing, lowering and XLA seconds from its
compile events, the programs XLA compiled, and the main program's StableHLO and optimised HLO
lines; `vs_pgx` is a program's compile seconds over its pgx peer's. `--xla-flags` adds XLA flags
to every measured process (to measure an optimisation level, say).

Rows as they are measured (so a time limit never costs a finished row): `env` measures a row per
batch size and then move generation; `selfplay` the moves/s of every arm, then `--breakdown`,
then `--memory-batch`; `iteration` a row per config; `processes` and `xla-flags` a row per run.
Each row is printed as soon as it is measured; with `--json`, stdout gets the whole result so
far as one JSON line after every row (the last line is the most complete; `complete` is true
once the run finished), and `--json-out PATH` is rewritten with it after every row (`learner`,
one row, writes it at the end). `--time-limit SECONDS` starts no new row once that many seconds
have passed since the command started: the first row always runs, and one note on stderr names
the rows skipped (the JSON's `skipped`).

Every benchmark runs with the project's XLA flags, as the commands do.
Timings are wall-clock on whatever JAX sees (`jax.devices()`); run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax.infra import cli, startup
from mmc_jax.training import bench_programs


class Rows:
    """A benchmark's result, written out row by row so that a kill keeps every finished row.

    After each row (`record`): with `--json`, stdout gets the whole result so far as one JSON
    line (so the last line is always the most complete), and `--json-out PATH` is rewritten
    with it (atomically: a reader never sees half a file). With `--time-limit SECONDS`, a row
    may start (`may_start`) only while fewer than that many seconds have passed since the
    command started; the first row always runs, and `finish` names the rows left out in one
    note on stderr. The result carries `complete` (false until `finish`) and `skipped`.
    """

    def __init__(self, args, result: dict):
        self.result = result
        self.json_lines = bool(getattr(args, "json", False))
        self.json_out = getattr(args, "json_out", None)
        self.time_limit = getattr(args, "time_limit", None)
        self.started = getattr(args, "started", None) or time.monotonic()
        self.rows_started = 0
        result["complete"] = False
        result["skipped"] = []

    def may_start(self, row: str) -> bool:
        """Whether row `row` may start now; if not, it is recorded as skipped."""
        late = (
            self.time_limit is not None
            and self.rows_started > 0
            and time.monotonic() - self.started >= self.time_limit
        )
        if late or self.result["skipped"]:  # once one is skipped, so is every later row
            self.result["skipped"].append(row)
            return False
        self.rows_started += 1
        return True

    def record(self) -> None:
        """A row is done: print the result so far (with `--json`) and rewrite `--json-out`."""
        if self.json_lines:
            print(json.dumps(self.result), flush=True)
        if self.json_out:
            write_json(self.json_out, self.result)

    def finish(self) -> dict:
        """The run is over: the result marked complete, recorded, and a note of skipped rows."""
        self.result["complete"] = True
        self.record()
        if self.result["skipped"]:
            print(
                f"note: --time-limit {self.time_limit:g} s reached; skipped "
                + ", ".join(self.result["skipped"]),
                file=sys.stderr,
                flush=True,
            )
        return self.result


def write_json(path: str, data: dict) -> None:
    """`data` as JSON into `path`, through a temporary file beside it and a rename."""
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        json.dump(data, handle)
        handle.write("\n")
    os.replace(temporary, path)


def _tree_bytes(tree) -> int:
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def time_scans_interleaved(arms: dict, rounds: int, verbose: bool) -> dict:
    """Each arm `name: (run, state)` (a jitted `run(state, key) -> state`) compiled and warmed
    up, then timed one scan per arm per round, round-robin for `rounds` rounds, each arm
    carrying its own games on: `{name: {"compile_s": s, "seconds": [per-round scan seconds]}}`.

    Round-robin, so that a slow moment of a shared machine slows one round of every arm
    rather than one arm's whole measurement (the ratio of two arms timed one after the other
    moved by 1.28x between back-to-back runs).
    """
    compiled, states, out = {}, {}, {}
    for name, (run, state) in arms.items():
        start = time.perf_counter()
        compiled[name] = run.lower(state, jax.random.key(0)).compile()
        out[name] = {"compile_s": time.perf_counter() - start, "seconds": []}
        states[name] = jax.block_until_ready(compiled[name](state, jax.random.key(0)))  # warm-up
        if verbose and len(arms) > 1:
            print(f"  {name}: compiled in {out[name]['compile_s']:.1f} s", flush=True)
    for i in range(rounds):
        for name in arms:
            start = time.perf_counter()
            states[name] = jax.block_until_ready(
                compiled[name](states[name], jax.random.key(i + 1))
            )
            out[name]["seconds"].append(time.perf_counter() - start)
    return out


def round_ratios(timed: dict, peer: str) -> list[float]:
    """The peer's scan seconds over mmc_jax's, round by round (above 1: mmc_jax is faster)."""
    return [p / m for p, m in zip(timed[peer]["seconds"], timed["mmc_jax"]["seconds"], strict=True)]


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
        state = bench_programs.where_done(done, fresh, state)
        planes = bench_programs.where_done(done, R.legal_planes(rules, fresh), planes)
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


def bench_env(args) -> dict:
    """Env steps/s per batch size (one row each), then move generation (a row of its own)."""
    variants = args.variants
    for v in variants:
        R.check_variant(v)
    result = {
        "benchmark": "env",
        "variants": variants,
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "num_devices": jax.device_count(),
        "cpu": platform.processor() or platform.machine(),
        "jax": jax.__version__,
        "scan_length": args.scan_length,
        "repeats": args.repeats,
        "state_bytes": R.state_bytes(),
        "rows": [],
    }
    if args.vs_pgx:
        import pgx

        env = pgx.make("gardner_chess")
        result["pgx_version"] = pgx.__version__
        result["pgx_state_bytes"] = _tree_bytes(env.init(jax.random.key(0)))
    if not args.json:
        pgx_bytes = result.get("pgx_state_bytes")
        print(
            f"state: {result['state_bytes']} bytes per game"
            + (f" (pgx: {pgx_bytes} bytes)" if pgx_bytes else ""),
            flush=True,
        )
    rows = Rows(args, result)
    for batch in args.batch_sizes:
        if not rows.may_start(f"batch {batch}"):
            continue
        result["rows"].append(_env_row(args, variants, batch))
        rows.record()
        if not args.json:
            _print_row(result["rows"][-1])
    if args.movegen_batch and rows.may_start(f"move generation at batch {args.movegen_batch}"):
        result["legal_moves_per_s"] = legal_moves_per_second(
            variants, args.movegen_batch, args.scan_length, args.repeats
        )
        rows.record()
        if not args.json:
            print(
                f"move generation: {result['legal_moves_per_s']:,.0f} legal moves/s "
                f"(batch {args.movegen_batch})",
                flush=True,
            )
    return rows.finish()


def _env_row(args, variants: list[str], batch: int) -> dict:
    """One batch size of `bench env`: every arm timed round-robin, steps/s and ratios."""
    arms = {"mmc_jax": bench_programs.mmc_env_runner(variants, batch, args.scan_length)}
    if args.vs_pgx:
        arms["pgx"] = bench_programs.pgx_env_runner(batch, args.scan_length)
    if args.mixed:
        specs = R.sample_variants(args.seed, batch)
        arms["mixed"] = bench_programs.mmc_env_runner(specs, batch, args.scan_length)
    timed = time_scans_interleaved(arms, args.repeats, verbose=False)
    steps = {
        name: args.scan_length * batch / float(np.median(t["seconds"])) for name, t in timed.items()
    }
    row = {
        "batch": batch,
        "steps_per_s": steps["mmc_jax"],
        "compile_s": timed["mmc_jax"]["compile_s"],
    }
    if args.vs_pgx:
        ratios = round_ratios(timed, "pgx")
        row.update(
            pgx_steps_per_s=steps["pgx"],
            pgx_compile_s=timed["pgx"]["compile_s"],
            ratio=float(np.median(ratios)),
            ratio_min=float(np.min(ratios)),
            ratio_max=float(np.max(ratios)),
        )
    if args.mixed:
        # mixed steps/s over single-variant steps/s, round by round.
        mixed = [1.0 / r for r in round_ratios(timed, "mixed")]
        row.update(
            mixed_steps_per_s=steps["mixed"],
            mixed_compile_s=timed["mixed"]["compile_s"],
            mixed_ratio=float(np.median(mixed)),
        )
    row["seconds_per_scan_rounds"] = {name: t["seconds"] for name, t in timed.items()}
    return row


# ----------------------------------------------------------------------------- self-play


def _node_bytes() -> int:
    """Bytes of one search-tree node's embedding: the engine State and its 49 legal-move plane
    words (`mmc_jax.search`)."""
    return R.state_bytes() + 4 * 49


def _bookkeeping_runner(batch: int, simulations: int, num_actions: int, node_bytes: int = 4):
    """The search alone (`mcts.gumbel_muzero_policy`, as self-play runs it): a no-op
    recurrent_fn over `num_actions` actions, whose nodes carry an embedding of `node_bytes`
    bytes (ours: a State and its legal planes). Its flat priors give shallower trees than a
    network's, so this is a lower bound on the search's own time."""
    import mctx

    from mmc_jax.search import mcts

    width = max(node_bytes // 4, 1)

    def recurrent_fn(params, key, action, embedding):
        del params, key
        first = embedding[:, 0].astype(jnp.float32)
        output = mctx.RecurrentFnOutput(
            reward=jnp.zeros(batch),
            discount=-jnp.ones(batch),
            prior_logits=jnp.zeros((batch, num_actions)) + first[:, None],
            value=first,
        )
        return output, embedding + action[:, None].astype(embedding.dtype)

    @jax.jit
    def run(embedding, key):
        root = mctx.RootFnOutput(
            prior_logits=jnp.zeros((batch, num_actions)),
            value=jnp.zeros(batch),
            embedding=embedding,
        )
        out = mcts.gumbel_muzero_policy(
            None,
            key,
            root,
            recurrent_fn,
            num_simulations=simulations,
            max_num_considered_actions=16,
        )
        return out.action_weights.sum()

    return run, jnp.zeros((batch, width), jnp.uint32)


def _time_parts(network, params, rules, batch, plies, simulations, repeats, selfplay):
    """Seconds per self-play scan of `plies` plies, in all and in each part timed alone: the
    whole scan (`selfplay`: the jitted runner and its state), the network (plies x
    (simulations + 1) evaluations), the rules (as many steps with observation and legal
    moves), and mctx's tree bookkeeping (the search with a no-op recurrent_fn) over the
    project's slots and over all 1225 actions.

    The glue is a difference of these, so they are timed in one rotation, each arm once per
    round for `repeats` rounds, and each reports its fastest round: a slow moment of a shared
    machine then slows one round of every arm rather than one arm.
    """
    from mmc_jax import search

    state = R.init(rules)
    n = plies * (simulations + 1)  # network evaluations and node expansions per scan

    @jax.jit
    def net_only(obs, key):
        del key

        def body(total, i):
            # A different input every evaluation, and every output used: nothing is hoisted
            # out of the loop or pruned.
            x = obs + i.astype(obs.dtype) * 1e-6
            logits, value = network.apply({"params": params}, x, None)
            return total + value.sum() + logits.sum(), None

        return jax.lax.scan(body, 0.0, jnp.arange(n))[0]

    @jax.jit
    def rules_only(state, key):
        def body(carry, k):
            state, planes = carry
            action = R.random_legal_action(k, R.planes_to_mask(planes))
            state, planes = R.step_with_planes(rules, state, action, planes)
            obs = R.observe(rules, state, planes)
            fresh = R.init(rules)
            done = state.terminated
            state = bench_programs.where_done(done, fresh, state)
            planes = bench_programs.where_done(done, R.legal_planes(rules, fresh), planes)
            return (state, planes), obs.sum()  # all of it: none pruned

        carry = (state, R.legal_planes(rules, state))
        return jax.lax.scan(body, carry, jax.random.split(key, n))[1].sum()

    arms = {  # name: (jitted fn, its first argument, calls per scan)
        "total": (*selfplay, 1),
        "network": (net_only, R.observe(rules, state), 1),
        "rules": (rules_only, state, 1),
    }
    for name, width in (("slots", search.MAX_LEGAL_MOVES), ("all_actions", R.NUM_ACTIONS)):
        run, embedding = _bookkeeping_runner(batch, simulations, width)
        arms[f"search_bookkeeping_{name}"] = (run, embedding, plies)
    # The same over slots with nodes as large as ours: what carrying the State costs mctx.
    run, embedding = _bookkeeping_runner(batch, simulations, search.MAX_LEGAL_MOVES, _node_bytes())
    arms["search_bookkeeping_node_state"] = (run, embedding, plies)

    compiled = {}
    for name, (fn, arg, _) in arms.items():
        compiled[name] = fn.lower(arg, jax.random.key(0)).compile()
        jax.block_until_ready(compiled[name](arg, jax.random.key(0)))  # warm-up
    best = dict.fromkeys(arms, float("inf"))
    for i in range(repeats):
        for name, (_, arg, calls) in arms.items():
            start = time.perf_counter()
            for _ in range(calls):
                out = compiled[name](arg, jax.random.key(i + 1))
            jax.block_until_ready(out)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def selfplay_mesh(args):
    """None on one device; else a `data` mesh over every device, once the batches are checked
    to split over it (`--breakdown` times its parts on one device, so it needs one)."""
    from mmc_jax.infra import sharding

    devices = jax.device_count()
    if devices == 1:
        return None
    if args.breakdown:
        raise SystemExit(
            f"error: --breakdown times its parts on one device, but JAX sees {devices}; run it "
            f"without MMC_CPU_DEVICES or --xla_force_host_platform_device_count"
        )
    for flag, value in (("--batch", args.batch), ("--memory-batch", args.memory_batch)):
        if value % devices:
            raise SystemExit(
                f"error: {flag}={value} does not split over the {devices} devices; use a "
                f"multiple of {devices}"
            )
    return sharding.make_mesh()


def bench_selfplay(args) -> dict:
    """Self-play moves/s of every arm (the first row), then `--breakdown` and `--memory-batch`
    (a row each)."""
    batch, plies, sims = args.batch, args.plies, args.simulations
    mesh = selfplay_mesh(args)
    result = {
        "benchmark": "selfplay",
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "devices": jax.device_count(),
        "batch": batch,
        "plies_per_scan": plies,
        "simulations": sims,
        "network": f"{args.blocks}x{args.channels}",
        "dtype": args.dtype,
        "repeats": args.repeats,
    }
    rows = Rows(args, result)
    rows.may_start("moves/s")  # the first row always runs
    network, params, rules, scan = _selfplay_moves(args, result, mesh)
    rows.record()
    if args.breakdown and rows.may_start("breakdown"):
        _selfplay_breakdown(args, result, network, params, rules, scan)
        rows.record()
    if args.memory_batch and rows.may_start(f"memory at B={args.memory_batch}"):
        _selfplay_memory(args, result, mesh)
        rows.record()
    return rows.finish()


def _selfplay_moves(args, result: dict, mesh):
    """The first row: self-play moves/s of mmc_jax (and, with --vs-pgx, of pgx under its own
    and under our search loop, arms interleaved) into `result`. Returns the network, its
    parameters, the rules and the (run, state) of the scan timed, for the breakdown."""
    batch, plies, sims = args.batch, args.plies, args.simulations
    net = (args.blocks, args.channels)
    run, state, (network, params, rules) = bench_programs.mmc_selfplay_runner(
        batch, plies, sims, *net, mesh, dtype=args.dtype
    )
    arms = {"mmc_jax": (run, state)}
    if args.vs_pgx:  # the same network dtype in every arm
        arms["pgx"] = bench_programs.pgx_selfplay_runner(
            batch, plies, sims, *net, mesh=mesh, dtype=args.dtype
        )
        # pgx under our batch-first search loop: how much of the ratio is the loop.
        arms["pgx_mcts"] = bench_programs.pgx_selfplay_runner(
            batch, plies, sims, *net, "mcts", mesh, dtype=args.dtype
        )
    timed = time_scans_interleaved(arms, args.repeats, verbose=not args.json)
    moves = {name: plies * batch / float(np.median(t["seconds"])) for name, t in timed.items()}
    result.update(moves_per_s=moves["mmc_jax"], compile_s=timed["mmc_jax"]["compile_s"])
    if not args.json:
        print(
            f"mmc_jax: {moves['mmc_jax']:,.1f} self-play moves/s "
            f"(compile {timed['mmc_jax']['compile_s']:.1f} s)",
            flush=True,
        )
    if args.vs_pgx:
        ratios = {name: round_ratios(timed, name) for name in ("pgx", "pgx_mcts")}
        result.update(
            pgx_moves_per_s=moves["pgx"],
            pgx_compile_s=timed["pgx"]["compile_s"],
            ratio=float(np.median(ratios["pgx"])),
            ratio_min=float(np.min(ratios["pgx"])),
            ratio_max=float(np.max(ratios["pgx"])),
            pgx_mcts_moves_per_s=moves["pgx_mcts"],
            ratio_vs_pgx_mcts=float(np.median(ratios["pgx_mcts"])),
            rounds=args.repeats,
            seconds_per_scan_rounds={name: t["seconds"] for name, t in timed.items()},
        )
        if not args.json:
            print(
                f"pgx:     {moves['pgx']:,.1f} self-play moves/s "
                f"(compile {timed['pgx']['compile_s']:.1f} s) | ratio {result['ratio']:.2f}x "
                f"(median of {args.repeats} rounds; {result['ratio_min']:.2f}-"
                f"{result['ratio_max']:.2f}x)",
                flush=True,
            )
            print(
                f"pgx with mmc_jax.search.mcts: {moves['pgx_mcts']:,.1f} self-play moves/s | "
                f"ratio {result['ratio_vs_pgx_mcts']:.2f}x",
                flush=True,
            )
    return network, params, rules, (run, state)


def _selfplay_breakdown(args, result: dict, network, params, rules, scan) -> None:
    """The --breakdown row: seconds per scan of the network, the rules, the search's
    bookkeeping and the rest, timed alone, into `result["seconds_per_scan"]`."""
    batch, plies, sims = args.batch, args.plies, args.simulations
    parts = _time_parts(network, params, rules, batch, plies, sims, args.repeats, scan)
    total = parts["total"]
    bookkeeping = parts["search_bookkeeping_slots"]
    result["seconds_per_scan"] = {
        "total": total,
        "network": parts["network"],
        "rules": parts["rules"],
        "search_bookkeeping": bookkeeping,
        "glue": max(total - parts["network"] - parts["rules"] - bookkeeping, 0.0),
        "search_bookkeeping_if_1225_actions": parts["search_bookkeeping_all_actions"],
        "search_bookkeeping_with_node_state": parts["search_bookkeeping_node_state"],
    }
    if not args.json:
        print(
            f"where the time goes, seconds per scan of {plies} plies: "
            + ", ".join(f"{k} {v:.3f}" for k, v in result["seconds_per_scan"].items()),
            flush=True,
        )


def _selfplay_memory(args, result: dict, mesh) -> None:
    """The --memory-batch row: the compiler's memory estimate of one searched ply at that
    batch, and of mctx alone over 160 slots and over 1225 actions, into `result["memory"]`."""
    sims = args.simulations
    run, state, _ = bench_programs.mmc_selfplay_runner(
        args.memory_batch, 1, sims, args.blocks, args.channels, mesh, dtype=args.dtype
    )
    analysis = run.lower(state, jax.random.key(0)).compile().memory_analysis()
    if analysis is not None:
        peak = (
            analysis.temp_size_in_bytes
            + analysis.argument_size_in_bytes
            + analysis.output_size_in_bytes
        )
        result["memory"] = {
            "batch": args.memory_batch,
            "peak_bytes_one_ply": int(peak),
            "temp_bytes": int(analysis.temp_size_in_bytes),
            "node_embedding_bytes": _node_bytes(),
            "tree_state_bytes": _node_bytes() * args.memory_batch * (sims + 1),
        }
        from mmc_jax.search import MAX_LEGAL_MOVES

        for name, width in (("slots", MAX_LEGAL_MOVES), ("all_actions", R.NUM_ACTIONS)):
            run, embedding = _bookkeeping_runner(args.memory_batch, sims, width)
            tree = run.lower(embedding, jax.random.key(0)).compile().memory_analysis()
            result["memory"][f"search_alone_temp_bytes_{name}"] = int(tree.temp_size_in_bytes)
        if not args.json:
            print(
                f"memory at B={args.memory_batch}: peak {peak / 2**20:.1f} MiB for one "
                f"searched ply (compiler's estimate); tree states "
                f"{result['memory']['tree_state_bytes'] / 2**20:.1f} MiB "
                f"({result['memory']['node_embedding_bytes']} bytes per node); mctx alone "
                f"over 160 slots "
                f"{result['memory']['search_alone_temp_bytes_slots'] / 2**20:.1f} MiB, "
                f"over 1225 actions "
                f"{result['memory']['search_alone_temp_bytes_all_actions'] / 2**20:.1f} MiB",
                flush=True,
            )


# ----------------------------------------------------------------------------- learner


def _learner_config(args):
    """The 2x32 net and Adam learner of `configs/gardner.py:cpu` / `configs/joat.py:quick`."""
    import ml_collections

    return ml_collections.ConfigDict(
        dict(
            network=dict(
                num_blocks=args.blocks, channels=args.channels, policy_channels=16, value_hidden=64
            ),
            learner=dict(
                optimizer="adam",
                learning_rate=1e-3,
                weight_decay=1e-4,
                max_grad_norm=1.0,
                batch_size=args.batch,
            ),
            meta=dict(num_tasks=args.tasks, inner_steps=args.inner_steps),
        )
    )


def _random_batch(key, num_samples: int):
    """Samples shaped like self-play's: observations, sparse legal masks, targets on them."""
    from mmc_jax.training import learner

    k_obs, k_mask, k_policy, k_value = jax.random.split(key, 4)
    obs = (jax.random.uniform(k_obs, (num_samples, *R.OBS_SHAPE)) < 0.1).astype(jnp.float32)
    legal = jax.random.bernoulli(k_mask, 0.02, (num_samples, R.NUM_ACTIONS)).at[:, 0].set(True)
    weights = jnp.where(legal, jax.random.uniform(k_policy, legal.shape), 0.0)
    return learner.Batch(
        obs=obs,
        legal_action_mask=legal,
        policy_target=weights / weights.sum(-1, keepdims=True),
        value_target=jnp.sign(jax.random.normal(k_value, (num_samples,))),
        value_mask=jnp.ones((num_samples,), bool),
    )


def _before_adapt_tasks(params, opt_state, rings, keys, config):
    """The inner loop as it was before issue 10: vmapped over the tasks, with JAX's own
    convolution gradient (`config.network.xla_conv_grad` set by the caller)."""
    import functools

    from mmc_jax.algorithms import meta

    minibatches = jax.vmap(functools.partial(meta.task_minibatches, config=config))(rings, keys)
    inner = functools.partial(meta.inner_updates, config=config)
    return jax.vmap(inner, in_axes=(None, None, 0))(params, opt_state, minibatches)


def bench_learner(args) -> dict:
    """Seconds per call of each learner path, arms interleaved, medians of `repeats`."""
    arms = _learner_arms(args)
    seconds, first_call = _interleaved(arms, args.repeats, verbose=not args.json)
    steps, batch_size, tasks, inner = args.steps, args.batch, args.tasks, args.inner_steps
    result = {
        "benchmark": "learner",
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "network": f"{args.blocks}x{args.channels}",
        "batch": batch_size,
        "learner_steps": steps,
        "tasks": tasks,
        "inner_steps": inner,
        "repeats": args.repeats,
        "seconds": seconds,
        "first_call_seconds": first_call,
        "learner_steps_per_s": steps / seconds["learner"],
        "learner_limit_steps_per_s": steps / seconds["learner_limit"],
        "inner_loop_steps_per_s": tasks * inner / seconds["inner_loop"],
        "inner_loop_limit_steps_per_s": tasks * inner / seconds["inner_loop_limit"],
        "learner_vs_limit": seconds["learner"] / seconds["learner_limit"],
        "inner_loop_vs_limit": seconds["inner_loop"] / seconds["inner_loop_limit"],
        "learner_speedup_vs_scan": seconds["learner_scan_before"] / seconds["learner"],
        "inner_loop_speedup_vs_before": seconds["inner_loop_before"] / seconds["inner_loop"],
    }
    if not args.json:
        for name, value in seconds.items():
            print(f"{name:>20}: {value * 1e3:9.1f} ms per call", flush=True)
        print(
            f"learner {result['learner_steps_per_s']:.1f} steps/s = "
            f"{result['learner_vs_limit']:.2f}x the limit's time, "
            f"{result['learner_speedup_vs_scan']:.1f}x faster than the scan before; "
            f"inner loop {result['inner_loop_steps_per_s']:.1f} steps/s = "
            f"{result['inner_loop_vs_limit']:.2f}x the limit's time, "
            f"{result['inner_loop_speedup_vs_before']:.1f}x faster than before",
            flush=True,
        )
    return Rows(args, result).finish()  # one row: with --json-out, a file as the others write


def _learner_arms(args) -> dict:
    """{arm: a function that runs it once}: the learner epoch and the JOAT inner loop as they
    are, as they were before (a scan; vmapped tasks with XLA's convolution gradient) and their
    limit (a Python loop of jitted steps), on random samples shaped like self-play's."""
    import functools

    import ml_collections

    from mmc_jax.algorithms import meta
    from mmc_jax.model import network as network_lib
    from mmc_jax.training import learner

    config = _learner_config(args)
    before = _learner_config(args)
    before.network.xla_conv_grad = True
    frozen, frozen_before = (ml_collections.FrozenConfigDict(c) for c in (config, before))
    network = network_lib.make_network(config.network)
    optimizer = learner.make_optimizer(config.learner)
    params = network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)
    # Away from the zero-initialised last convolutions, as after some training.
    params = jax.tree.map(
        lambda x: x + 0.05 * jax.random.normal(jax.random.key(1), x.shape), params
    )
    opt_state = optimizer.init(params)
    steps, batch_size, tasks, inner = args.steps, args.batch, args.tasks, args.inner_steps
    calls = max(steps, tasks * inner)
    pool = _random_batch(jax.random.key(2), calls * batch_size)
    samples = jax.tree.map(lambda x: x[: steps * batch_size], pool)
    minibatches = [
        jax.tree.map(lambda x, i=i: x[i * batch_size : (i + 1) * batch_size], pool)
        for i in range(calls)
    ]
    capacity = 2 * inner * batch_size
    rings = jax.vmap(
        lambda key: learner.replay_add(
            learner.replay_init(samples, capacity), _random_batch(key, capacity)
        )
    )(jax.random.split(jax.random.key(4), tasks))
    keys = jax.random.split(jax.random.key(5), tasks)
    key = jax.random.key(6)

    step = jax.jit(
        functools.partial(
            learner.train_step, network=network, optimizer=optimizer, config=config.learner
        )
    )
    epoch = jax.jit(learner.train_epoch, static_argnames="config")
    adapt = jax.jit(meta.adapt_tasks, static_argnames=("config", "sequential"))
    old_adapt = jax.jit(_before_adapt_tasks, static_argnames="config")

    def loop(calls):
        def run():
            p, s = params, opt_state
            for i in range(calls):
                p, s, _ = step(p, s, minibatches[i])
            return p

        return run

    arms = {
        "learner": lambda: epoch(params, opt_state, samples, key, config=frozen)[0],
        "learner_limit": loop(steps),
        "learner_scan_before": lambda: epoch(params, opt_state, samples, key, config=frozen_before)[
            0
        ],
        "inner_loop": lambda: adapt(params, opt_state, rings, keys, config=frozen)[0],
        "inner_loop_limit": loop(tasks * inner),
        "inner_loop_vmap": lambda: adapt(
            params, opt_state, rings, keys, config=frozen, sequential=False
        )[0],
        "inner_loop_before": lambda: old_adapt(
            params, opt_state, rings, keys, config=frozen_before
        )[0],
    }
    return arms


# ----------------------------------------------------------------------------- iteration


def _filled_preset(name: str, preset: str):
    """(config, mesh) of `configs/<name>.py:<preset>` prepared by its algorithm, with the
    fill-the-device batch resolved as `train` resolves it (`runloop.fill_batch`: a `full`
    preset's batch field is 0 until then)."""
    from mmc_jax.algorithms import alphazero, meta
    from mmc_jax.training import runloop

    algorithm = alphazero.ALGORITHM if name == "gardner" else meta.ALGORITHM
    config = algorithm.prepare_config(cli.load_preset(name, preset))
    mesh = algorithm.make_mesh(config)
    config, _ = runloop.fill_batch(algorithm, config, mesh)
    return config, mesh


def _with_xla_conv_grad(config):
    """A copy of a (locked) run config whose network uses JAX's own convolution gradient."""
    import ml_collections

    copy = ml_collections.ConfigDict(config.to_dict())
    copy.network.xla_conv_grad = True
    return copy


def _checkpoint_seconds(saved) -> float:
    import tempfile

    from mmc_jax.infra import checkpoint as checkpoint_lib

    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        checkpoint_lib.save_checkpoint(workdir, 1, saved, max_to_keep=1)
        return time.perf_counter() - start


def _interleaved(arms: dict, repeats: int, verbose: bool) -> tuple[dict, dict]:
    """(median seconds, first-call seconds) per arm; arms run round-robin `repeats` times."""
    first, times = {}, {name: [] for name in arms}
    for name, fn in arms.items():
        start = time.perf_counter()
        jax.block_until_ready(fn())
        first[name] = time.perf_counter() - start
        if verbose:
            print(f"  {name}: first call (compile) {first[name]:.1f} s", flush=True)
    for _ in range(repeats):
        for name, fn in arms.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}, first


def _iteration_gardner(args) -> dict:
    """One `configs/gardner.py:cpu` iteration, whole and in separately jitted parts."""
    import ml_collections

    from mmc_jax.algorithms import alphazero
    from mmc_jax.model import network as network_lib
    from mmc_jax.training import games as games_lib
    from mmc_jax.training import learner, runloop, selfplay

    config, mesh = _filled_preset("gardner", args.gardner_preset)
    before_dict = _with_xla_conv_grad(config)
    before = ml_collections.FrozenConfigDict(before_dict)
    batch = int(config.selfplay.batch_size)
    rules_b = R.batch(list(config.variants), batch)
    state = alphazero.init_train_state(config, rules_b, jax.random.key(0), mesh)
    network = network_lib.make_network(config.network)
    # Not donating: the arms call them again on the same state.
    iteration = alphazero.make_iteration(config, mesh, donate=False)
    iteration_before = alphazero.make_iteration(before_dict, mesh, donate=False)
    key = jax.random.key(1)

    # The parts, in the order iteration_step runs them (mirroring is a no-op in Gardner).
    play = jax.jit(
        lambda p, g, k: games_lib.play_games(network, p, rules_b, g, k, config, False, mesh)
    )
    num_samples = int(config.learner.batch_size) * int(config.learner.steps_per_iteration)

    @jax.jit
    def targets(trajectory, replay, key):
        batch = selfplay.compute_targets(trajectory)
        replay, _ = alphazero.add_to_replay(replay, trajectory, batch, config)
        return replay, learner.replay_sample(replay, key, num_samples)

    frozen = ml_collections.FrozenConfigDict(config)
    epoch = jax.jit(
        lambda p, o, s, k, config: learner.train_epoch(p, o, s, k, config, mesh),
        static_argnames="config",
    )
    # A state with a full replay and played positions, as in a running training.
    for i in range(2):
        state = iteration(state, rules_b, jax.random.key(10 + i))[0]
    _, trajectory = play(state.params, state.game_state, key)
    _, samples = targets(trajectory, state.replay, key)
    saved = runloop.checkpoint_state(alphazero.ALGORITHM, state, 1, 1, 1, save_replay=True)
    arms = {
        "total": lambda: iteration(state, rules_b, key)[1],
        "total_before": lambda: iteration_before(state, rules_b, key)[1],
        "selfplay": lambda: play(state.params, state.game_state, key)[1].obs,
        "targets": lambda: targets(trajectory, state.replay, key)[1].obs,
        "learner": lambda: epoch(state.params, state.opt_state, samples, key, config=frozen)[0],
        "learner_before": lambda: epoch(state.params, state.opt_state, samples, key, config=before)[
            0
        ],
        "checkpoint": lambda: _checkpoint_seconds(saved),
    }
    seconds, first = _interleaved(arms, args.repeats, not args.json)
    return _split("gardner:" + args.gardner_preset, seconds, first, batch)


def _split(name: str, seconds: dict, first: dict, games: int) -> dict:
    parts = seconds["selfplay"] + seconds["targets"] + seconds["learner"]
    parts_before = seconds["selfplay"] + seconds["targets"] + seconds["learner_before"]
    return {
        "config": name,
        "games": games,
        "seconds": seconds,
        "first_call_seconds": first,
        "split_after": {
            "selfplay": seconds["selfplay"],
            "targets": seconds["targets"],
            "learner": seconds["learner"],
            "checkpoint": seconds["checkpoint"],
            "other": max(seconds["total"] - parts, 0.0),
            "iteration_with_checkpoint": seconds["total"] + seconds["checkpoint"],
        },
        "split_before": {
            "selfplay": seconds["selfplay"],
            "targets": seconds["targets"],
            "learner": seconds["learner_before"],
            "checkpoint": seconds["checkpoint"],
            "other": max(seconds["total_before"] - parts_before, 0.0),
            "iteration_with_checkpoint": seconds["total_before"] + seconds["checkpoint"],
        },
        "iteration_speedup": seconds["total_before"] / seconds["total"],
    }


def _iteration_joat(args) -> dict:
    """One outer iteration of `configs/joat.py:quick`, whole and in separately jitted parts."""
    import ml_collections

    from mmc_jax.algorithms import meta
    from mmc_jax.model import network as network_lib
    from mmc_jax.training import games as games_lib
    from mmc_jax.training import learner, runloop, selfplay

    config, mesh = _filled_preset("joat", args.joat_preset)
    before_dict = _with_xla_conv_grad(config)
    before = ml_collections.FrozenConfigDict(before_dict)
    variants = list(config.variants)
    table = R.batch(variants, len(variants))
    weights = jnp.ones((len(variants),), jnp.float32)
    state = meta.init_meta_state(config, table, jax.random.key(0), mesh)
    step = meta.make_meta_step(config, mesh, donate=False)  # the arms reuse the state
    eps = jnp.float32(float(config.meta.outer_lr))
    for i in range(2):
        state = step(state, table, weights, jax.random.key(10 + i), eps)[0]
    key = jax.random.key(1)
    network = network_lib.make_network(config.network)
    num_tasks, games = int(config.meta.num_tasks), int(config.meta.games_per_task)
    tasks = jnp.arange(num_tasks, dtype=jnp.int32) % len(variants)
    game_variant = jnp.repeat(tasks, games)
    slots = (tasks[:, None] * games + jnp.arange(games)[None, :]).reshape(-1)
    rules_b = jax.tree.map(lambda x: x[game_variant], table)
    games_in = jax.tree.map(lambda x: x[slots], state.game_state)
    fog = games_lib.fair_fog(config)  # a batch with a fog variant plays PIMC, as meta_step
    play = jax.jit(
        lambda p, g, k: games_lib.play_games(network, p, rules_b, g, k, config, fog, mesh)
    )
    _, trajectory = play(state.params, games_in, key)

    @jax.jit
    def targets(trajectory, replay):
        per_task = jax.tree.map(
            lambda x: x.reshape(x.shape[0], num_tasks, games, *x.shape[2:]), trajectory
        )
        batches = learner.pack(jax.vmap(selfplay.compute_targets, in_axes=1)(per_task))
        return jax.vmap(learner.replay_add)(jax.tree.map(lambda x: x[tasks], replay), batches)

    rings = targets(trajectory, state.replay)
    frozen = ml_collections.FrozenConfigDict(config)
    update = jax.jit(meta.meta_update, static_argnames=("config", "mesh"))
    keys = jax.random.split(key, num_tasks)
    step_before = meta.make_meta_step(before_dict, mesh, donate=False)
    saved = runloop.checkpoint_state(meta.ALGORITHM, state, 1, 1, 1, save_replay=True)
    rounds = int(config.meta.updates_per_iteration)
    arms = {
        "total": lambda: step(state, table, weights, key, eps)[1],
        "total_before": lambda: step_before(state, table, weights, key, eps)[1],
        "selfplay": lambda: play(state.params, games_in, key)[1].obs,
        "targets": lambda: targets(trajectory, state.replay).size,
        "learner": lambda: [
            update(state.params, state.opt_state, rings, keys, eps, config=frozen, mesh=mesh)[2]
            for _ in range(rounds)
        ],
        "learner_before": lambda: [
            update(state.params, state.opt_state, rings, keys, eps, config=before, mesh=mesh)[2]
            for _ in range(rounds)
        ],
        "checkpoint": lambda: _checkpoint_seconds(saved),
    }
    seconds, first = _interleaved(arms, args.repeats, not args.json)
    return _split("joat:" + args.joat_preset, seconds, first, num_tasks * games)


def _iteration_recon(args) -> dict:
    """One `configs/recon.py` iteration (with `--recon-replay` iterations of replay), whole
    and in separately jitted parts; "before": the minibatch rows drawn with Gumbel noise over
    the whole pool (`learner.sampler = "gumbel"`, the runs before 2026-11-28), "after": by
    inverse CDF. Self-play writes its own targets (no separate part)."""
    import functools

    import ml_collections

    from mmc_jax.algorithms import recon as recon_algorithm
    from mmc_jax.training import runloop

    config = ml_collections.ConfigDict(cli.load_preset("recon", args.recon_preset).to_dict())
    config.replay.iterations = args.recon_replay
    config.selfplay.games = args.recon_games or config.selfplay.games
    config = recon_algorithm.prepare_config(config)
    after = recon_algorithm.train_config(config)._replace(sampler="inverse_cdf", refill=False)
    before = after._replace(sampler="gumbel")
    algorithm = recon_algorithm.ALGORITHM
    rules = algorithm.setup(config, algorithm.make_mesh(config))
    state = recon_algorithm.init_train_state(after)
    if args.recon_model:  # trained play: games as long as a run's (a fresh net's differ)
        from mmc_jax import algorithms

        model = algorithms.open_model(args.recon_model)
        params, search = model.params, model.network
        if search != after.search:
            raise SystemExit(f"--recon-model {args.recon_model}: its sizes {search} are not "
                             f"the preset's {after.search}")  # fmt: skip
        state = state.replace(params=params)
    key = jax.random.key(1)
    play = jax.jit(functools.partial(recon_algorithm.selfplay, config=after))
    play_refilled = jax.jit(
        functools.partial(recon_algorithm.selfplay, config=after._replace(refill=True))
    )
    examples, off_stats = play(state.params, rules, key)
    refilled = {}

    def play_refill():  # keeps its stats (the same key and parameters every call)
        refilled["stats"] = play_refilled(state.params, rules, key)[1]
        return refilled["stats"]

    whole = {
        c: jax.jit(functools.partial(recon_algorithm.iteration, config=c)) for c in (after, before)
    }
    learn = {
        c: jax.jit(functools.partial(recon_algorithm.learn, config=c)) for c in (after, before)
    }
    saved = runloop.checkpoint_state(algorithm, state, 1, 1, 1, save_replay=True)
    arms = {
        "total": lambda: whole[after](state, rules, key)[1],
        "total_before": lambda: whole[before](state, rules, key)[1],
        "selfplay": lambda: play(state.params, rules, key)[1],
        "selfplay_refill": play_refill,
        "learner": lambda: learn[after](state, examples, key)[1],
        "learner_before": lambda: learn[before](state, examples, key)[1],
        "checkpoint": lambda: _checkpoint_seconds(saved),
    }
    seconds, first = _interleaved(arms, args.repeats, not args.json)
    seconds["targets"] = 0.0
    name = f"recon:{args.recon_preset} (replay {args.recon_replay})"
    run = _split(name, seconds, first, int(config.selfplay.games))
    run["refill"] = _refill_split(seconds, off_stats, refilled["stats"])
    run["model"] = args.recon_model or "fresh parameters"
    return run


def _refill_split(seconds: dict, off: dict, on: dict) -> dict:
    """Self-play without and with refilled slots (`selfplay.refill`): seconds, the turns that
    train (of whole games) and the games finished per iteration, and trained turns per second
    on / off."""
    arms = (("off", off, "selfplay"), ("on", on, "selfplay_refill"))
    rate = {label: float(stats["turns"]) / seconds[arm] for label, stats, arm in arms}
    return {
        "seconds": {"off": seconds["selfplay"], "on": seconds["selfplay_refill"]},
        "trained_turns": {"off": float(off["turns"]), "on": float(on["turns"])},
        "games": {"off": float(off["games"]), "on": float(on["games"])},
        "mean_game_length": {"off": float(off["plies"]), "on": float(on["plies"])},
        "trained_turns_per_second_ratio": rate["on"] / rate["off"],
    }


def bench_iteration(args) -> dict:
    """Seconds per training iteration, split into self-play / targets / learner / checkpoint /
    other, before and after (gardner, joat: XLA's convolution gradient; recon: the Gumbel
    minibatch sampler)."""
    result = {
        "benchmark": "iteration",
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "repeats": args.repeats,
        "runs": [],
    }
    rows = Rows(args, result)
    for which in args.configs:
        if not rows.may_start(which):
            continue
        run = {"gardner": _iteration_gardner, "joat": _iteration_joat, "recon": _iteration_recon}[
            which
        ](args)
        result["runs"].append(run)
        rows.record()
        if not args.json:
            for label in ("before", "after"):
                split = run[f"split_{label}"]
                print(
                    f"{run['config']} ({run['games']} games) {label}: "
                    + ", ".join(f"{k} {v:.2f} s" for k, v in split.items()),
                    flush=True,
                )
            print(f"{run['config']}: iteration {run['iteration_speedup']:.1f}x faster", flush=True)
            if "refill" in run:
                refill = run["refill"]
                print(
                    f"{run['config']} self-play, refill off / on: "
                    + ", ".join(
                        f"{k} {v['off']:.1f} / {v['on']:.1f}"
                        for k, v in refill.items()
                        if isinstance(v, dict)
                    )
                    + f"; trained turns per second {refill['trained_turns_per_second_ratio']:.2f}x"
                    + f" ({run['model']})",
                    flush=True,
                )
    return rows.finish()


# ----------------------------------------------------------------------------- memory


def memory_of_iteration(name: str, preset: str) -> dict:
    """Replay bytes and XLA's memory analysis of one compiled iteration of `configs/<name>.py:
    <preset>`, lowered from the abstract state (shapes only: nothing of its size is allocated,
    and the iteration is compiled, never run)."""
    from mmc_jax.algorithms import alphazero, meta
    from mmc_jax.infra import sharding
    from mmc_jax.training import runloop

    algorithm = alphazero.ALGORITHM if name == "gardner" else meta.ALGORITHM
    config, mesh = _filled_preset(name, preset)  # a preset that fills the device
    estimate = runloop.estimate_memory(algorithm, config, mesh)
    state = algorithm.abstract_state(config, mesh)
    key = sharding.put_key(jax.random.key(0), mesh)
    if name == "gardner":
        rules_b = jax.eval_shape(lambda: R.batch(list(config.variants), config.selfplay.batch_size))
        lowered = alphazero.make_iteration(config, mesh).lower(state, rules_b, key)
    else:
        table = jax.eval_shape(lambda: meta.rules_table(tuple(config.variants)))
        weights = jax.ShapeDtypeStruct((len(config.variants),), jnp.float32)
        eps = jax.ShapeDtypeStruct((), jnp.float32)
        lowered = meta.make_meta_step(config, mesh).lower(state, table, weights, key, eps)
    started = time.perf_counter()
    analysis = lowered.compile().memory_analysis()
    compile_seconds = time.perf_counter() - started

    def nbytes(tree) -> int:
        return sum(
            int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)
        )

    ring = state.replay
    capacity = int(ring.data.value_target.shape[-1])
    rings = int(np.prod(ring.data.value_target.shape[:-1], dtype=np.int64))  # JOAT: per variant
    fields = ("argument", "output", "alias", "temp", "generated_code")
    compiled = {f: int(getattr(analysis, f"{f}_size_in_bytes")) for f in fields}
    # What the iteration holds at its peak: inputs, outputs not written over donated inputs, and
    # XLA's temporaries.
    compiled["peak"] = compiled["argument"] + compiled["output"] - compiled["alias"]
    compiled["peak"] += compiled["temp"]
    return {
        "config": f"{name}:{preset}",
        "batch": {algorithm.batch_field: runloop.batch_size(config, algorithm.batch_field)},
        # `mmc_jax.training.memory`'s estimate (what a run prints and checks before it
        # allocates) beside the compiler's figure.
        "estimate_bytes": {
            "state": estimate.state,
            "selfplay": estimate.selfplay,
            "learner": estimate.learner,
            "total": estimate.total,
        },
        "estimate_over_peak": estimate.total / compiled["peak"],
        "replay_bytes_per_sample": nbytes(ring) / (rings * capacity),
        "replay_samples": rings * capacity,
        "replay_bytes": nbytes(ring),
        "state_bytes": nbytes(state),
        "compiled_bytes": compiled,
        "compile_seconds": compile_seconds,
    }


def bench_memory(args) -> dict:
    """Bytes per replay sample and the compiled memory of one iteration of each `--configs`
    (one row each)."""
    for spec in args.configs:
        name, _, preset = spec.partition(":")
        if name not in ("gardner", "joat") or not preset:
            raise SystemExit(f"error: --configs {spec!r}: expected gardner:PRESET or joat:PRESET")
    result = {
        "benchmark": "memory",
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "runs": [],
    }
    rows = Rows(args, result)
    for spec in args.configs:
        if not rows.may_start(spec):
            continue
        name, _, preset = spec.partition(":")
        run = memory_of_iteration(name, preset)
        result["runs"].append(run)
        if not args.json:
            mib = {k: v / 2**20 for k, v in run["compiled_bytes"].items()}
            print(
                f"{run['config']}: replay {run['replay_bytes_per_sample']:.0f} bytes per sample "
                f"x {run['replay_samples']:,} = {run['replay_bytes'] / 2**20:.1f} MiB; state "
                f"{run['state_bytes'] / 2**20:.1f} MiB; compiled iteration: arguments "
                f"{mib['argument']:.1f} MiB, outputs {mib['output']:.1f} MiB (aliased to "
                f"donated arguments {mib['alias']:.1f} MiB), temporaries {mib['temp']:.1f} MiB, "
                f"peak {mib['peak']:.1f} MiB (compiled in {run['compile_seconds']:.0f} s); "
                f"estimate {run['estimate_bytes']['total'] / 2**20:.1f} MiB = "
                f"{run['estimate_over_peak']:.2f} x the peak ({run['batch']})",
                flush=True,
            )
        rows.record()
    return rows.finish()


def _engine_positions(engine, variant: str, plies: int) -> list:
    """The start and the positions after the engine's own moves (8 simulations each), up to
    `plies` of them: the positions every model of `bench move` is timed on."""
    position = engine.position(variant)
    positions = [position]
    while len(positions) < plies and not position.over:
        move = engine.search(position, 8).move
        position = engine.position(variant, moves=[*position.moves, move])
        if not position.over:
            positions.append(position)
    return positions


def bench_compile(args) -> dict:
    """A row per `--programs` entry: its compile seconds by stage and sizes, each measured in a
    fresh process from an empty cache (`mmc_jax.compile_bench`); `vs_pgx` beside the programs
    that have a pgx peer, once both are measured."""
    from mmc_jax import compile_bench

    result = {
        "benchmark": "compile",
        "xla_flags": args.xla_flags,
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "programs": {},
    }
    rows = Rows(args, result)
    for name in args.programs:
        if not rows.may_start(name):
            continue
        if not args.json:
            print(f"{name}: {compile_bench.PROGRAMS[name][0]} ...", flush=True)
        row = compile_bench.run_child(name, float(args.program_timeout), args.xla_flags)
        result["programs"][name] = row
        compile_bench.add_ratios(result["programs"])
        if not args.json:
            print("  " + compile_bench.format_row(row), flush=True)
            for mine, (_, peer) in compile_bench.PROGRAMS.items():
                if peer == name and "vs_pgx" in result["programs"].get(mine, {}):
                    ratio = result["programs"][mine]["vs_pgx"]
                    print(f"  {mine} compiles in {ratio:.2f}x the time of {peer}", flush=True)
        rows.record()
    return rows.finish()


def bench_move(args) -> dict:
    """Seconds per engine move (`ModelEngine.search`, one game, B = 1: what `engine`, `serve`
    and `play` wait for) of each `--models` at each `--simulations`, on the same positions,
    round-robin over the models; `ratio` is a model's median over the first model's."""
    from mmc_jax.evaluation import model_engine

    engines = []
    for model in args.models:
        try:
            engines.append(model_engine.load_engine(model))
        except (ValueError, OSError) as error:
            raise SystemExit(f"error: --models {model}: {error}") from None
    compile_seconds = []
    for engine in engines:  # the first search compiles the engine's program (shared by sizes)
        started = time.perf_counter()
        engine.search(engine.position(args.variant), args.simulations[0])
        compile_seconds.append(time.perf_counter() - started)
    positions = _engine_positions(engines[0], args.variant, args.positions)
    result = {
        "benchmark": "move",
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "variant": args.variant,
        "models": list(args.models),
        "positions": len(positions),
        "first_search_seconds": dict(zip(args.models, compile_seconds, strict=True)),
        "rows": [],
    }
    rows = Rows(args, result)
    if not args.json:
        firsts = ", ".join(f"{m} {t:.1f} s" for m, t in result["first_search_seconds"].items())
        print(f"first search (compiling): {firsts}; {len(positions)} positions", flush=True)
    for simulations in args.simulations:
        if not rows.may_start(f"{simulations} simulations"):
            continue
        times = [[] for _ in engines]
        for engine in engines:  # a size past the shared program's capacity compiles its own
            engine.search(positions[0], simulations)
        for _ in range(args.repeats):
            for i, engine in enumerate(engines):
                for position in positions:
                    started = time.perf_counter()
                    engine.search(position, simulations)
                    times[i].append(time.perf_counter() - started)
        medians = [float(np.median(t)) for t in times]
        row = {
            "simulations": simulations,
            "models": [
                {
                    "model": model,
                    "seconds_per_move": median,
                    "moves_per_second": 1.0 / median,
                    "ratio": median / medians[0],
                }
                for model, median in zip(args.models, medians, strict=True)
            ],
        }
        result["rows"].append(row)
        if not args.json:
            cells = [
                f"{m['model']} {m['seconds_per_move']:.3f} s/move ({m['ratio']:.2f}x)"
                for m in row["models"]
            ]
            print(f"{simulations} simulations: " + ", ".join(cells), flush=True)
        rows.record()
    return rows.finish()


PROCESS_LAYOUTS = (("1 process x 2 devices", 1, 2), ("2 processes x 1 device", 2, 1))


def _iteration_seconds(config: str, iterations: int, processes: int, devices: int) -> dict:
    """Runs `python -m mmc_jax.train --config CONFIG` for `iterations` iterations as
    `processes` local processes (`launch.start_local`) and reads the iteration times that the
    run itself recorded (`perf/iteration_seconds`; the first, with any lazy compile, is
    dropped)."""
    import tempfile

    from mmc_jax import launch
    from mmc_jax.infra import metrics

    with tempfile.TemporaryDirectory(prefix="mmc_bench_processes_") as folder:
        workdir = os.path.join(folder, "run")
        command = [
            sys.executable,
            "-m",
            "mmc_jax.train",
            "--config",
            config,
            f"--config.num_iterations={iterations}",
            "--config.eval.every=0",
            f"--config.checkpoint.every={iterations}",
            "--workdir",
            workdir,
        ]
        started = time.time()
        codes = launch.wait_local(launch.start_local(command, processes, devices, folder))
        wall = time.time() - started
        if any(codes):
            with open(os.path.join(folder, "process_0.log")) as handle:
                log = handle.read()
            raise SystemExit(f"error: the {processes}-process run failed:\n{log[-2000:]}")
        seconds = [r["perf/iteration_seconds"] for r in metrics.read_metrics(workdir)][1:]
    return {
        "iteration_s": float(np.median(seconds)),
        "iterations_timed": len(seconds),
        "wall_s": wall,
    }


def bench_processes(args) -> dict:
    """Multi-process overhead on this machine: seconds per training iteration of 2 processes x
    1 CPU device (joined by gloo over 127.0.0.1) against 1 process x 2 devices, the same
    global batch, alternated `--repeats` times (each run a row)."""
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in PROCESS_LAYOUTS}
    (one_label, _, _), (two_label, _, _) = PROCESS_LAYOUTS
    result = {"benchmark": "processes", "config": args.config, "iteration_s": {}, "runs": runs}
    rows = Rows(args, result)
    for repeat in range(args.repeats):
        for label, processes, devices in PROCESS_LAYOUTS:
            if not rows.may_start(f"{label} #{repeat + 1}"):
                continue
            row = _iteration_seconds(args.config, args.iterations, processes, devices)
            runs[label].append(row)
            # The summary of the runs so far, so that every record holds a usable result.
            result["iteration_s"] = {
                name: float(np.median([r["iteration_s"] for r in rs]))
                for name, rs in runs.items()
                if rs
            }
            medians = result["iteration_s"]
            if one_label in medians and two_label in medians:
                result["two_processes_vs_one"] = medians[two_label] / medians[one_label]
            result["load_average"] = os.getloadavg()
            rows.record()
            if not args.json:
                print(
                    f"{label}: {row['iteration_s']:.2f} s per iteration (median of "
                    f"{row['iterations_timed']}, run wall {row['wall_s']:.0f} s)",
                    flush=True,
                )
    if not args.json and "two_processes_vs_one" in result:
        print(
            f"{two_label} / {one_label}: {result['two_processes_vs_one']:.2f}x the time per "
            f"iteration (load average {result['load_average'][0]:.1f})",
            flush=True,
        )
    return rows.finish()


XLA_FLAG_ARMS = ("xla defaults", "project flags")


def _child_json(argv: list[str], environ: dict) -> dict:
    """Runs `python -m mmc_jax.bench ARGV --json` in a child process; its JSON object."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "mmc_jax.bench", *argv, "--json"],
        env=environ,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: bench {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_xla_flags(args, environ: dict) -> dict:
    """Self-play moves/s and learner seconds with XLA's defaults against the project's flags
    (`startup.XLA_CPU_FLAGS`), each a child process started from `environ` (this process's
    environment before `startup.apply_xla_flags`), alternated `args.rounds` times; each child
    run is a row."""
    flagged = startup.xla_flags_value(environ)
    if flagged is None:
        raise SystemExit(
            "error: the project adds no XLA flags here (MMC_XLA_FLAGS is off, they are already "
            f"in XLA_FLAGS, or jaxlib {startup.jaxlib_version()} is not one of "
            f"{startup.XLA_CPU_FLAGS_JAXLIB}): nothing to compare"
        )
    envs = {
        XLA_FLAG_ARMS[0]: {**environ, startup.XLA_FLAGS_ENV: "off"},
        XLA_FLAG_ARMS[1]: {**environ, "XLA_FLAGS": flagged},
    }
    jobs = {f"selfplay B={b}": ["selfplay", "--batch", str(b)] for b in args.batch_sizes}
    jobs["learner"] = ["learner"]
    raw: dict[str, dict[str, list[dict]]] = {job: {arm: [] for arm in envs} for job in jobs}
    result = {
        "benchmark": "xla-flags",
        "flags": list(startup.XLA_CPU_FLAGS),
        "jaxlib": ".".join(map(str, startup.jaxlib_version() or ())),
        "rounds": args.rounds,
        "rows": {},
        "runs": raw,
    }
    rows = Rows(args, result)
    total = args.rounds * len(jobs) * len(envs)
    started, done = time.time(), 0
    for round_ in range(args.rounds):
        for job, argv in jobs.items():
            for arm, env in envs.items():
                if not rows.may_start(f"{job}, {arm} #{round_ + 1}"):
                    continue
                raw[job][arm].append(_child_json(argv, env))
                done += 1
                result["rows"] = _xla_flag_rows(raw)
                result["load_average"] = os.getloadavg()
                rows.record()
                if not args.json:
                    left = (time.time() - started) / done * (total - done)
                    print(f"[{done}/{total}] {job}, {arm} (ETA {left:.0f} s)", flush=True)
    if not args.json:
        print(f"flags: {' '.join(startup.XLA_CPU_FLAGS)}")
        for name, row in result["rows"].items():
            print(
                f"{name:>24}: {XLA_FLAG_ARMS[0]} {row[XLA_FLAG_ARMS[0]]:.4g}, "
                f"{XLA_FLAG_ARMS[1]} {row[XLA_FLAG_ARMS[1]]:.4g}: {row['speedup']:.2f}x"
            )
    return rows.finish()


def _xla_flag_rows(raw: dict) -> dict:
    """The medians of each job's runs under each arm and their speedup, for the jobs that have
    runs under both arms so far."""

    def median(runs, read):
        return float(np.median([read(r) for r in runs]))

    rows = {}
    for job, arms in raw.items():
        if not all(arms.get(arm) for arm in XLA_FLAG_ARMS):
            continue
        if job == "learner":
            for part in ("learner", "inner_loop", "inner_loop_vmap"):
                seconds = {
                    arm: median(arms[arm], lambda r, p=part: r["seconds"][p])
                    for arm in XLA_FLAG_ARMS
                }
                rows[f"{part} s"] = {
                    **seconds,
                    "speedup": seconds[XLA_FLAG_ARMS[0]] / seconds[XLA_FLAG_ARMS[1]],
                }
        else:
            rate = {arm: median(arms[arm], lambda r: r["moves_per_s"]) for arm in XLA_FLAG_ARMS}
            rows[f"{job} moves/s"] = {
                **rate,
                "speedup": rate[XLA_FLAG_ARMS[1]] / rate[XLA_FLAG_ARMS[0]],
            }
    return rows


def _print_row(row):
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
    print(line, flush=True)


# argparse types (argparse prefixes the flag to their one-line errors).
POSITIVE, NON_NEGATIVE = cli.integer_arg("the value", 1), cli.integer_arg("the value", 0)


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0, else a one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not np.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


_seconds.__name__ = "seconds"


def _add_output_flags(parser, rows: str | None) -> None:
    """--json and --json-out on a subcommand; --time-limit too when it measures several `rows`
    (e.g. "batch size"), each printed and written out as soon as it is measured."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=(
            "print JSON instead of text: one line after every row, the whole result so far "
            "(the last line is the most complete; 'complete' says whether the run finished)"
        ),
    )
    parser.add_argument(
        "--json-out",
        metavar="PATH",
        help="also write the result as JSON to PATH, rewritten after every row",
    )
    if rows is not None:
        parser.add_argument(
            "--time-limit",
            type=_seconds,
            metavar="SECONDS",
            help=(
                f"start no new row (one per {rows}) once SECONDS have passed since the "
                "benchmark started; the first row always runs, finished rows are kept, and a "
                "note names the rows skipped (default: no limit)"
            ),
        )


def _add_list(parser, flag: str, default: list, help: str, **kwargs) -> None:
    """A flag taking one or more values (one row or arm each), e.g. --batch-sizes 64 256."""
    parser.add_argument(flag, nargs="+", default=default, help=help, **kwargs)


def _add_rounds(parser, default: int, what: str) -> None:
    """--repeats: how many timed rounds `what` (their median or fastest is reported)."""
    parser.add_argument(
        "--repeats", type=POSITIVE, default=default, help=f"{what} (default {default})"
    )


def _add_network_flags(parser) -> None:
    """--blocks and --channels of the benchmarked network."""
    parser.add_argument("--blocks", type=POSITIVE, default=2, help="residual blocks (default 2)")
    parser.add_argument("--channels", type=POSITIVE, default=32, help="network width (default 32)")


def _check_json_out(parser, path: str | None) -> None:
    """Refuses, in one line, a --json-out that cannot be written, before minutes of work."""
    if path is None:
        return
    if os.path.isdir(path):
        parser.error(f"--json-out {path}: is a folder; give a file path")
    try:
        write_json(path, {"complete": False})
    except OSError as error:
        parser.error(f"--json-out {path}: cannot write it ({error.strerror or error})")


def _has_pgx() -> bool:
    try:
        import pgx  # noqa: F401
    except ImportError:
        return False
    return True


def _env_flags(p) -> None:
    """The `env` subcommand: random-play env steps per second."""
    _add_list(
        p,
        "--batch-sizes",
        [1, 64, 512, 4096],
        "games in parallel, one row each (default 1 64 512 4096)",
        type=POSITIVE,
    )
    _add_list(
        p,
        "--variants",
        ["gardner"],
        "variants in the batch (several = a mixed batch); default gardner",
    )
    p.add_argument("--scan-length", type=POSITIVE, default=32, help="plies per jitted scan")
    _add_rounds(p, 5, "timed rounds per batch size, one scan of every arm each, round-robin")
    p.add_argument(
        "--movegen-batch",
        type=NON_NEGATIVE,
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


def _selfplay_flags(p) -> None:
    """The `selfplay` subcommand: self-play moves/s with mctx search."""
    p.add_argument("--batch", type=POSITIVE, default=64, help="games in parallel (default 64)")
    p.add_argument("--plies", type=POSITIVE, default=8, help="plies per timed scan (default 8)")
    p.add_argument(
        "--simulations", type=POSITIVE, default=32, help="search simulations per move (default 32)"
    )
    _add_network_flags(p)
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the network's computation dtype in every arm (default float32; the accelerator "
        "presets compute in bfloat16)",
    )
    _add_rounds(p, 5, "timed rounds, one scan of every arm each, round-robin")
    p.add_argument(
        "--breakdown",
        action="store_true",
        help=(
            "time the scan and its parts alone, interleaved (fastest of --repeats rounds): "
            "network, rules, mctx bookkeeping, and the rest (glue)"
        ),
    )
    p.add_argument(
        "--memory-batch",
        type=NON_NEGATIVE,
        default=0,
        help="also report peak memory of one searched ply at this batch (e.g. 1024; 0 skips)",
    )
    p.add_argument("--vs-pgx", action="store_true", help="same search over pgx gardner_chess")


def _learner_flags(p) -> None:
    """The `learner` subcommand: learner and JOAT inner-loop steps/s."""
    p.add_argument("--batch", type=POSITIVE, default=128, help="minibatch size (default 128)")
    p.add_argument(
        "--steps", type=POSITIVE, default=8, help="minibatches of the learner epoch (default 8)"
    )
    p.add_argument("--tasks", type=POSITIVE, default=4, help="JOAT tasks (default 4)")
    p.add_argument(
        "--inner-steps", type=POSITIVE, default=4, help="JOAT inner steps per task (default 4)"
    )
    _add_network_flags(p)
    _add_rounds(p, 5, "timed rounds over all arms")


def _iteration_flags(p) -> None:
    """The `iteration` subcommand: one training iteration split into parts."""
    _add_list(
        p,
        "--configs",
        ["gardner", "joat"],
        "which runs to time (default gardner and joat; recon: the learned recon agent's "
        "iteration, before/after the inverse-CDF minibatch sampler)",
        choices=("gardner", "joat", "recon"),
    )
    p.add_argument("--gardner-preset", default="cpu", help="configs/gardner.py preset (cpu)")
    p.add_argument("--joat-preset", default="quick", help="configs/joat.py preset (quick)")
    p.add_argument("--recon-preset", default="cpu", help="configs/recon.py preset (cpu)")
    p.add_argument(
        "--recon-replay",
        type=int,
        default=4,
        help="iterations of replay in the recon run (default 4: the registered run 3's)",
    )
    p.add_argument(
        "--recon-games",
        type=int,
        default=0,
        help="self-play games per recon iteration (default: the preset's)",
    )
    p.add_argument(
        "--recon-model",
        default="",
        help="recon model whose parameters play (e.g. experiments/recon/no_collapse_run3/model; "
        "default fresh parameters, whose games are not a trained run's length)",
    )
    _add_rounds(p, 3, "timed rounds")


def _memory_flags(p) -> None:
    """The `memory` subcommand: bytes per replay sample, memory of one iteration."""
    _add_list(
        p,
        "--configs",
        ["gardner:full"],
        "NAME:PRESET of configs/NAME.py, one row each (default gardner:full)",
    )


def _processes_flags(p) -> None:
    """The `processes` subcommand: the overhead of several processes."""
    p.add_argument(
        "--config",
        default="configs/gardner.py:cpu",
        help="train config (default configs/gardner.py:cpu)",
    )
    p.add_argument(
        "--iterations",
        type=cli.integer_arg("the value", 2),
        default=6,
        help="iterations per run (default 6)",
    )
    _add_rounds(p, 2, "runs per layout")


def _xla_flags_flags(p) -> None:
    """The `xla-flags` subcommand: XLA's defaults vs the project's flags."""
    _add_list(
        p,
        "--batch-sizes",
        [64, 256],
        "self-play batches, one row each (default 64 256)",
        type=POSITIVE,
    )
    p.add_argument("--rounds", type=POSITIVE, default=2, help="alternated runs per arm (default 2)")


def _move_flags(p) -> None:
    """The `move` subcommand: seconds per engine move of models side by side."""
    _add_list(
        p,
        "--models",
        ["gardner-cpu"],
        "shipped names, exported models or runs; ratios are to the first (default gardner-cpu)",
    )
    p.add_argument("--variant", default="gardner", help="the variant played (default gardner)")
    _add_list(
        p,
        "--simulations",
        [256],
        "simulations per move, one row each (default 256: the engine's default)",
        type=POSITIVE,
    )
    p.add_argument("--positions", type=POSITIVE, default=8, help="positions timed (default 8)")
    _add_rounds(p, 3, "rounds")


def _compile_flags(p) -> None:
    """The `compile` subcommand: compile seconds and program sizes from an empty cache."""
    from mmc_jax import compile_bench

    _add_list(
        p,
        "--programs",
        list(compile_bench.PROGRAMS),
        "the programs measured, each in its own process (default: all, pgx's peers included): "
        + ", ".join(compile_bench.PROGRAMS),
        choices=list(compile_bench.PROGRAMS),
        metavar="NAME",
    )
    p.add_argument(
        "--xla-flags",
        default="",
        metavar="FLAGS",
        help=(
            "XLA flags added to every measured process, e.g. the tests' "
            "'--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true' "
            "(default: none beyond the commands' own)"
        ),
    )
    p.add_argument(
        "--program-timeout",
        type=POSITIVE,
        default=900,
        help="seconds one program may take before it is reported as timed out (default 900)",
    )


# The subcommands: (name, help, the function adding its flags, what one row of its output is:
# --time-limit skips rows past the limit; None: no rows, no --time-limit).
_SUBCOMMANDS = (
    (
        "env",
        "random-play env steps per second (mask + step + reset)",
        _env_flags,
        "batch size, then move generation",
    ),
    (
        "selfplay",
        "self-play moves/s with mctx search (gardner)",
        _selfplay_flags,
        "measurement: moves/s of every arm, then --breakdown, then --memory-batch",
    ),
    (
        "learner",
        "learner and JOAT inner-loop steps/s against a Python loop of steps",
        _learner_flags,
        None,
    ),
    (
        "iteration",
        "one training iteration split into self-play/targets/learner/checkpoint/other",
        _iteration_flags,
        "config",
    ),
    (
        "memory",
        "bytes per replay sample and XLA's memory analysis of one iteration",
        _memory_flags,
        "config",
    ),
    (
        "processes",
        "multi-process overhead: 2 processes x 1 device vs 1 process x 2 devices (gloo)",
        _processes_flags,
        "training run",
    ),
    (
        "xla-flags",
        "self-play and learner with XLA's defaults vs the project's flags (processes)",
        _xla_flags_flags,
        "child run",
    ),
    (
        "move",
        "seconds per engine move (one game, B = 1) of models side by side",
        _move_flags,
        "simulation count",
    ),
    (
        "compile",
        "trace, lowering and XLA seconds and program sizes of every program, empty cache",
        _compile_flags,
        "program",
    ),
)


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per benchmark."""
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.bench",
        description="Speed and memory benchmarks of mmc_jax (see the module docstring).",
    )
    sub = parser.add_subparsers(dest="benchmark", required=True)
    for name, help, add_flags, rows in _SUBCOMMANDS:
        subparser = sub.add_parser(name, help=help)
        add_flags(subparser)
        _add_output_flags(subparser, rows)
    return parser


def _check_args(parser, args) -> None:
    """Refuses (one usage line) what cannot run, before any work; drops --vs-pgx without pgx."""
    if args.benchmark == "env":
        try:
            args.variants = [R.check_variant(v) for v in args.variants]
        except ValueError as e:
            parser.error(str(e))
        if args.vs_pgx and args.variants != ["gardner"]:
            parser.error("--vs-pgx compares gardner only (pgx has no other variant)")
    if getattr(args, "recon_replay", 1) < 1:
        parser.error(f"--recon-replay must be at least 1 (1: no replay), got {args.recon_replay}")
    if getattr(args, "recon_games", 0) < 0:
        parser.error(f"--recon-games must be at least 1 (0: the preset's), got {args.recon_games}")
    if getattr(args, "recon_model", "") and not os.path.exists(args.recon_model):
        parser.error(f"--recon-model {args.recon_model}: no such file or folder")
    _check_json_out(parser, args.json_out)
    if getattr(args, "vs_pgx", False) and not _has_pgx():
        # pgx is a test/benchmark extra: without it, measure our arms and say so.
        print(
            "note: pgx is not installed (pip install 'mmc_jax[test]'); --vs-pgx ignored",
            file=sys.stderr,
        )
        args.vs_pgx = False


def main(argv=None):
    """Runs the benchmark named on the command line; each prints and writes its own rows."""
    started = time.monotonic()  # what --time-limit counts from
    parser = _parser()
    args = parser.parse_args(argv)
    args.started = started
    _check_args(parser, args)
    environ = dict(os.environ)
    startup.apply_xla_flags()  # every benchmark runs with the flags the commands use
    # Each benchmark prints and writes its rows itself, as it measures them (`Rows`).
    if args.benchmark == "xla-flags":
        bench_xla_flags(args, environ)
        return
    if args.benchmark == "env" and not args.json:
        print(
            f"mmc_jax env benchmark on {jax.default_backend()} "
            f"({jax.devices()[0].device_kind}), variants {args.variants}",
            flush=True,
        )
    benchmarks = {
        "env": bench_env,
        "memory": bench_memory,
        "processes": bench_processes,
        "iteration": bench_iteration,
        "learner": bench_learner,
        "selfplay": bench_selfplay,
        "move": bench_move,
        "compile": bench_compile,
    }
    benchmarks[args.benchmark](args)


if __name__ == "__main__":
    main()
