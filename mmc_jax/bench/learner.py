"""`python -m mmc_jax.bench learner`: the learner's steps per second against their limit.

Times the AlphaZero learner (`learner.train_epoch`, a `lax.scan` of minibatch steps) and the
JOAT inner loop (`meta.adapt_tasks`) against their limit, the same number of steps of one jitted
`learner.train_step` called in a Python loop, and against the paths before issue 10 (XLA's own
convolution gradient; the inner loop vmapped over the tasks), all arms interleaved in one
process, medians of `--repeats` rounds, on random samples shaped like self-play's. One row.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections

from mmc_jax import rules as R
from mmc_jax.algorithms import meta
from mmc_jax.bench import common
from mmc_jax.model import network as network_lib
from mmc_jax.training import learner

NAME = "learner"
HELP = "learner and JOAT inner-loop steps/s against a Python loop of steps"
ROWS = None  # one row: no --time-limit


def add_flags(p) -> None:
    """The `learner` subcommand's flags."""
    p.add_argument(
        "--batch", type=common.POSITIVE, default=128, help="minibatch size (default 128)"
    )
    p.add_argument(
        "--steps",
        type=common.POSITIVE,
        default=8,
        help="minibatches of the learner epoch (default 8)",
    )
    p.add_argument("--tasks", type=common.POSITIVE, default=4, help="JOAT tasks (default 4)")
    p.add_argument(
        "--inner-steps",
        type=common.POSITIVE,
        default=4,
        help="JOAT inner steps per task (default 4)",
    )
    common.add_network_flags(p)
    common.add_rounds(p, 5, "timed rounds over all arms")


def learner_config(args, xla_conv_grad: bool = False) -> ml_collections.ConfigDict:
    """The 2x32 net and Adam learner of `configs/gardner.py:cpu` / `configs/joat.py:quick`
    (with `xla_conv_grad`: JAX's own convolution gradient, the path before issue 10)."""
    network = dict(
        num_blocks=args.blocks, channels=args.channels, policy_channels=16, value_hidden=64
    )
    if xla_conv_grad:
        network["xla_conv_grad"] = True
    return ml_collections.ConfigDict(
        dict(
            network=network,
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


def random_batch(key, num_samples: int) -> learner.Batch:
    """Samples shaped like self-play's: observations, sparse legal masks, targets on them."""
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


def adapt_tasks_before(params, opt_state, rings, keys, config):
    """The inner loop as it was before issue 10: vmapped over the tasks, with JAX's own
    convolution gradient (`config.network.xla_conv_grad` set by the caller)."""
    minibatches = jax.vmap(functools.partial(meta.task_minibatches, config=config))(rings, keys)
    inner = functools.partial(meta.inner_updates, config=config)
    return jax.vmap(inner, in_axes=(None, None, 0))(params, opt_state, minibatches)


def run(args) -> dict:
    """Seconds per call of each learner path, arms interleaved, medians of `repeats`."""
    seconds, first_call = common.time_calls_interleaved(
        arms(args), args.repeats, verbose=not args.json
    )
    steps, tasks, inner = args.steps, args.tasks, args.inner_steps
    result = {
        "benchmark": "learner",
        **common.machine(),
        "network": f"{args.blocks}x{args.channels}",
        "batch": args.batch,
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
    for name, value in seconds.items():
        common.say(args, f"{name:>20}: {value * 1e3:9.1f} ms per call")
    common.say(
        args,
        f"learner {result['learner_steps_per_s']:.1f} steps/s = "
        f"{result['learner_vs_limit']:.2f}x the limit's time, "
        f"{result['learner_speedup_vs_scan']:.1f}x faster than the scan before; "
        f"inner loop {result['inner_loop_steps_per_s']:.1f} steps/s = "
        f"{result['inner_loop_vs_limit']:.2f}x the limit's time, "
        f"{result['inner_loop_speedup_vs_before']:.1f}x faster than before",
    )
    return common.Rows(args, result).finish()  # one row: with --json-out, a file as others write


def arms(args) -> dict:
    """{arm: a function that runs it once}: the learner epoch and the JOAT inner loop as they
    are, as they were before (a scan; vmapped tasks with XLA's convolution gradient) and their
    limit (a Python loop of jitted steps), on random samples shaped like self-play's."""
    config = learner_config(args)
    frozen = ml_collections.FrozenConfigDict(config)
    frozen_before = ml_collections.FrozenConfigDict(learner_config(args, xla_conv_grad=True))
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
    pool = random_batch(jax.random.key(2), calls * batch_size)
    samples = jax.tree.map(lambda x: x[: steps * batch_size], pool)
    minibatches = [
        jax.tree.map(lambda x, i=i: x[i * batch_size : (i + 1) * batch_size], pool)
        for i in range(calls)
    ]
    capacity = 2 * inner * batch_size
    rings = jax.vmap(
        lambda key: learner.replay_add(
            learner.replay_init(samples, capacity), random_batch(key, capacity)
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
    old_adapt = jax.jit(adapt_tasks_before, static_argnames="config")

    def before(fn, *args):  # the paths before issue 10, XLA's own convolution gradient
        return lambda: fn(*args, config=frozen_before)[0]

    def loop(calls):
        def run():
            p, s = params, opt_state
            for i in range(calls):
                p, s, _ = step(p, s, minibatches[i])
            return p

        return run

    return {
        "learner": lambda: epoch(params, opt_state, samples, key, config=frozen)[0],
        "learner_limit": loop(steps),
        "learner_scan_before": before(epoch, params, opt_state, samples, key),
        "inner_loop": lambda: adapt(params, opt_state, rings, keys, config=frozen)[0],
        "inner_loop_limit": loop(tasks * inner),
        "inner_loop_vmap": lambda: adapt(
            params, opt_state, rings, keys, config=frozen, sequential=False
        )[0],
        "inner_loop_before": before(old_adapt, params, opt_state, rings, keys),
    }
