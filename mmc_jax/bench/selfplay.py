"""`python -m mmc_jax.bench selfplay`: self-play moves per second.

B games (default 64) each searched with Gumbel MuZero (32 simulations, a 2-block x 32-channel
net) and stepped, inside one jitted scan, with the project's search (`mmc_jax.search` over the
batch-first loop `mmc_jax.search.mcts`: the rules inside the tree, a compact action space of 160
slots). `--vs-pgx` runs the same search, same network shape, over pgx `gardner_chess` in the
same process (pgx carries its observation and mask in its state; the tree spans its 1225
actions), once with `mctx.gumbel_muzero_policy` (pgx as people use it: the ratio the targets
name) and once with `mmc_jax.search.mcts` (so the rest of the ratio is the engine, not the
loop). The arms are timed round-robin, one scan of `--plies` plies each per round for
`--repeats` rounds (default 5), each carrying its own games on; moves/s come from the median
scan time, and `ratio` is the median of the rounds' ratios (`ratio_min`, `ratio_max`: their
range), so a slow moment of a shared machine lands on one round of every arm. `--breakdown`
times the whole scan and its parts alone (network, rules, the search's bookkeeping over 160
slots and over 1225 actions), all arms in one rotation, the fastest of `--repeats` rounds each;
the glue is the whole less the parts. `--memory-batch 1024` reports the compiler's peak-memory
estimate of one searched ply at that batch. On several devices (`MMC_CPU_DEVICES=2`: one per
core) every arm runs under `sharding.map_games`, each device searching its share of the games
as training does, pgx's arms included, so the ratio compares the engines on the same devices;
`--breakdown` needs one.

Rows: the moves/s of every arm, then `--breakdown`, then `--memory-batch`.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import mctx
import numpy as np

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.bench import common, programs
from mmc_jax.infra import sharding
from mmc_jax.search import mcts

NAME = "selfplay"
HELP = "self-play moves/s with mctx search (gardner)"
ROWS = "measurement: moves/s of every arm, then --breakdown, then --memory-batch"


def add_flags(p) -> None:
    """The `selfplay` subcommand's flags."""
    p.add_argument(
        "--batch", type=common.POSITIVE, default=64, help="games in parallel (default 64)"
    )
    p.add_argument(
        "--plies", type=common.POSITIVE, default=8, help="plies per timed scan (default 8)"
    )
    p.add_argument(
        "--simulations",
        type=common.POSITIVE,
        default=32,
        help="search simulations per move (default 32)",
    )
    common.add_network_flags(p)
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the network's computation dtype in every arm (default float32; the accelerator "
        "presets compute in bfloat16)",
    )
    common.add_rounds(p, 5, "timed rounds, one scan of every arm each, round-robin")
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
        type=common.NON_NEGATIVE,
        default=0,
        help="also report peak memory of one searched ply at this batch (e.g. 1024; 0 skips)",
    )
    p.add_argument("--vs-pgx", action="store_true", help="same search over pgx gardner_chess")


def node_bytes() -> int:
    """Bytes of one search-tree node's embedding: the engine State and its 49 legal-move plane
    words (`mmc_jax.search`)."""
    return R.state_bytes() + 4 * 49


def bookkeeping_runner(batch: int, simulations: int, num_actions: int, node_size: int = 4):
    """The search alone (`mcts.gumbel_muzero_policy`, as self-play runs it): a no-op
    recurrent_fn over `num_actions` actions, whose nodes carry an embedding of `node_size`
    bytes (ours: a State and its legal planes). Its flat priors give shallower trees than a
    network's, so this is a lower bound on the search's own time."""
    width = max(node_size // 4, 1)

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


def time_parts(network, params, rules, batch, plies, simulations, repeats, selfplay):
    """Seconds per self-play scan of `plies` plies, in all and in each part timed alone: the
    whole scan (`selfplay`: the jitted runner and its state), the network (plies x
    (simulations + 1) evaluations), the rules (as many steps with observation and legal
    moves), and mctx's tree bookkeeping (the search with a no-op recurrent_fn) over the
    project's slots and over all 1225 actions.

    The glue is a difference of these, so they are timed in one rotation, each arm once per
    round for `repeats` rounds, and each reports its fastest round: a slow moment of a shared
    machine then slows one round of every arm rather than one arm.
    """
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
            state = programs.where_done(done, fresh, state)
            planes = programs.where_done(done, R.legal_planes(rules, fresh), planes)
            return (state, planes), obs.sum()  # all of it: none pruned

        carry = (state, R.legal_planes(rules, state))
        return jax.lax.scan(body, carry, jax.random.split(key, n))[1].sum()

    arms = {  # name: (jitted fn, its first argument, calls per scan)
        "total": (*selfplay, 1),
        "network": (net_only, R.observe(rules, state), 1),
        "rules": (rules_only, state, 1),
    }
    for name, width in (("slots", search.MAX_LEGAL_MOVES), ("all_actions", R.NUM_ACTIONS)):
        run, embedding = bookkeeping_runner(batch, simulations, width)
        arms[f"search_bookkeeping_{name}"] = (run, embedding, plies)
    # The same over slots with nodes as large as ours: what carrying the State costs mctx.
    run, embedding = bookkeeping_runner(batch, simulations, search.MAX_LEGAL_MOVES, node_bytes())
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


def run(args) -> dict:
    """Self-play moves/s of every arm (the first row), then `--breakdown` and `--memory-batch`
    (a row each)."""
    mesh = selfplay_mesh(args)
    result = {
        "benchmark": "selfplay",
        **common.machine(),
        "devices": jax.device_count(),
        "batch": args.batch,
        "plies_per_scan": args.plies,
        "simulations": args.simulations,
        "network": f"{args.blocks}x{args.channels}",
        "dtype": args.dtype,
        "repeats": args.repeats,
    }
    rows = common.Rows(args, result)
    rows.may_start("moves/s")  # the first row always runs
    network, params, rules, scan = moves(args, result, mesh)
    rows.record()
    if args.breakdown and rows.may_start("breakdown"):
        breakdown(args, result, network, params, rules, scan)
        rows.record()
    if args.memory_batch and rows.may_start(f"memory at B={args.memory_batch}"):
        memory(args, result, mesh)
        rows.record()
    return rows.finish()


def moves(args, result: dict, mesh):
    """The first row: self-play moves/s of mmc_jax (and, with --vs-pgx, of pgx under its own
    and under our search loop, arms interleaved) into `result`. Returns the network, its
    parameters, the rules and the (run, state) of the scan timed, for the breakdown."""
    batch, plies, sims = args.batch, args.plies, args.simulations
    net = (args.blocks, args.channels)
    run, state, (network, params, rules) = programs.mmc_selfplay_runner(
        batch, plies, sims, *net, mesh, dtype=args.dtype
    )
    arms = {"mmc_jax": (run, state)}
    if args.vs_pgx:  # the same network dtype in every arm
        arms["pgx"] = programs.pgx_selfplay_runner(
            batch, plies, sims, *net, mesh=mesh, dtype=args.dtype
        )
        # pgx under our batch-first search loop: how much of the ratio is the loop.
        arms["pgx_mcts"] = programs.pgx_selfplay_runner(
            batch, plies, sims, *net, "mcts", mesh, dtype=args.dtype
        )
    timed = common.time_scans_interleaved(arms, args.repeats, verbose=not args.json)
    rate = {name: plies * batch / float(np.median(t["seconds"])) for name, t in timed.items()}
    result.update(moves_per_s=rate["mmc_jax"], compile_s=timed["mmc_jax"]["compile_s"])
    common.say(
        args,
        f"mmc_jax: {rate['mmc_jax']:,.1f} self-play moves/s "
        f"(compile {timed['mmc_jax']['compile_s']:.1f} s)",
    )
    if args.vs_pgx:
        ratios = {name: common.round_ratios(timed, name) for name in ("pgx", "pgx_mcts")}
        result.update(
            pgx_moves_per_s=rate["pgx"],
            pgx_compile_s=timed["pgx"]["compile_s"],
            ratio=float(np.median(ratios["pgx"])),
            ratio_min=float(np.min(ratios["pgx"])),
            ratio_max=float(np.max(ratios["pgx"])),
            pgx_mcts_moves_per_s=rate["pgx_mcts"],
            ratio_vs_pgx_mcts=float(np.median(ratios["pgx_mcts"])),
            rounds=args.repeats,
            seconds_per_scan_rounds={name: t["seconds"] for name, t in timed.items()},
        )
        common.say(
            args,
            f"pgx:     {rate['pgx']:,.1f} self-play moves/s "
            f"(compile {timed['pgx']['compile_s']:.1f} s) | ratio {result['ratio']:.2f}x "
            f"(median of {args.repeats} rounds; {result['ratio_min']:.2f}-"
            f"{result['ratio_max']:.2f}x)",
        )
        common.say(
            args,
            f"pgx with mmc_jax.search.mcts: {rate['pgx_mcts']:,.1f} self-play moves/s | "
            f"ratio {result['ratio_vs_pgx_mcts']:.2f}x",
        )
    return network, params, rules, (run, state)


def breakdown(args, result: dict, network, params, rules, scan) -> None:
    """The --breakdown row: seconds per scan of the network, the rules, the search's
    bookkeeping and the rest, timed alone, into `result["seconds_per_scan"]`."""
    batch, plies, sims = args.batch, args.plies, args.simulations
    parts = time_parts(network, params, rules, batch, plies, sims, args.repeats, scan)
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
    common.say(
        args,
        f"where the time goes, seconds per scan of {plies} plies: "
        + ", ".join(f"{k} {v:.3f}" for k, v in result["seconds_per_scan"].items()),
    )


def memory(args, result: dict, mesh) -> None:
    """The --memory-batch row: the compiler's memory estimate of one searched ply at that
    batch, and of mctx alone over 160 slots and over 1225 actions, into `result["memory"]`."""
    sims, batch = args.simulations, args.memory_batch
    run, state, _ = programs.mmc_selfplay_runner(
        batch, 1, sims, args.blocks, args.channels, mesh, dtype=args.dtype
    )
    analysis = run.lower(state, jax.random.key(0)).compile().memory_analysis()
    if analysis is None:
        return
    peak = sum(
        getattr(analysis, f"{part}_size_in_bytes") for part in ("temp", "argument", "output")
    )
    found = result["memory"] = {
        "batch": batch,
        "peak_bytes_one_ply": int(peak),
        "temp_bytes": int(analysis.temp_size_in_bytes),
        "node_embedding_bytes": node_bytes(),
        "tree_state_bytes": node_bytes() * batch * (sims + 1),
    }
    for name, width in (("slots", search.MAX_LEGAL_MOVES), ("all_actions", R.NUM_ACTIONS)):
        run, embedding = bookkeeping_runner(batch, sims, width)
        tree = run.lower(embedding, jax.random.key(0)).compile().memory_analysis()
        found[f"search_alone_temp_bytes_{name}"] = int(tree.temp_size_in_bytes)
    common.say(
        args,
        f"memory at B={batch}: peak {peak / 2**20:.1f} MiB for one "
        f"searched ply (compiler's estimate); tree states "
        f"{found['tree_state_bytes'] / 2**20:.1f} MiB "
        f"({found['node_embedding_bytes']} bytes per node); mctx alone "
        f"over 160 slots {found['search_alone_temp_bytes_slots'] / 2**20:.1f} MiB, "
        f"over 1225 actions {found['search_alone_temp_bytes_all_actions'] / 2**20:.1f} MiB",
    )
