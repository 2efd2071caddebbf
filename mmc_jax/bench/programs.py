"""The programs the benchmarks time and compile: random play and self-play over mmc_jax and
over pgx `gardner_chess`, each a jitted `run(state, key) -> state` with its first state
(`python -m mmc_jax.bench env|selfplay|compile`). pgx is a test and benchmark extra: it is
imported only by the runners that play it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mctx
import ml_collections

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.infra import sharding
from mmc_jax.model.network import init_params, make_network
from mmc_jax.search import mcts
from mmc_jax.training import selfplay


def where_done(done, fresh, state):
    """`fresh` where a game is `done` [B], `state` elsewhere, leaf by leaf."""

    def pick(f, s):
        return jnp.where(done.reshape(done.shape + (1,) * (s.ndim - 1)), f, s)

    return jax.tree.map(pick, fresh, state)


def mmc_env_runner(variants: list[str], batch: int, scan_length: int):
    """Random play that carries each position's legal planes, as pgx carries its mask."""
    rules = R.batch(variants, batch)

    def body(carry, key):
        state, planes = carry
        mask = R.planes_to_mask(planes)
        action = R.random_legal_action(key, mask)
        state, planes = R.step_with_planes(rules, state, action, planes)
        fresh = R.init(rules)
        fresh_planes = R.legal_planes(rules, fresh)  # start positions: constant-folded
        done = state.terminated
        return (where_done(done, fresh, state), where_done(done, fresh_planes, planes)), None

    @jax.jit
    def run(carry, key):
        return jax.lax.scan(body, carry, jax.random.split(key, scan_length))[0]

    state = R.init(rules)
    return run, (state, R.legal_planes(rules, state))


def pgx_env_runner(batch: int, scan_length: int):
    """pgx `gardner_chess` random play under the same protocol as `mmc_env_runner`."""
    import pgx  # the optional extra

    env = pgx.make("gardner_chess")
    init = jax.vmap(env.init)
    step = jax.vmap(env.step)

    def body(state, key):
        k_act, k_init = jax.random.split(key)
        action = R.random_legal_action(k_act, state.legal_action_mask)
        state = step(state, action)
        fresh = init(jax.random.split(k_init, batch))
        return where_done(state.terminated, fresh, state), None

    @jax.jit
    def run(state, key):
        return jax.lax.scan(body, state, jax.random.split(key, scan_length))[0]

    return run, init(jax.random.split(jax.random.key(0), batch))


def selfplay_network(channels_in: int, blocks: int, channels: int, dtype: str = "float32"):
    """The benchmarks' policy-value network over `channels_in` input planes and its
    parameters."""
    cfg = ml_collections.ConfigDict(dict(num_blocks=blocks, channels=channels, dtype=dtype))
    network = make_network(cfg)
    return network, init_params(network, jax.random.key(0), (5, 5, channels_in))


def mapped_scan(scan, mesh, batched_args: tuple = ()):
    """`jax.jit` of `run(state, key) = scan(*batched_args, state, key)`; on a mesh under
    `sharding.map_games`, every device playing its share of the games (as training does)."""
    axes = (0,) * len(batched_args) + (0, None)
    mapped = sharding.map_games(lambda *args: (scan(*args),), mesh, axes, (0,))
    return jax.jit(lambda state, key: mapped(*batched_args, state, key)[0])


def mmc_selfplay_runner(
    batch: int,
    plies: int,
    simulations: int,
    blocks: int,
    channels: int,
    mesh=None,
    dtype: str = "float32",
):
    """Self-play plies of `batch` Gardner games with the project's own search (search.py);
    with `mesh`, each device plays its share of the games under `shard_map`. Like training's
    self-play (`selfplay.selfplay`) it carries each position's legal planes from one ply to the
    next (`step_with_planes`) and generates the start positions' once per scan
    (`selfplay.planes_and_starts`): one move generation a ply outside the search, as pgx
    carries its legal mask in its state."""
    rules = R.batch("gardner", batch)
    network, params = selfplay_network(R.OBS_CHANNELS, blocks, channels, dtype)

    def scan(rules, state, key):
        planes, start, start_planes = selfplay.planes_and_starts(rules, state)

        def body(carry, key):
            state, planes = carry
            out = search.run_search(
                network, params, rules, state, key, num_simulations=simulations, planes=planes
            )
            state, planes = R.step_with_planes(rules, state, out.action, planes)
            done = state.terminated
            return (where_done(done, start, state), where_done(done, start_planes, planes)), None

        return jax.lax.scan(body, (state, planes), jax.random.split(key, plies))[0][0]

    return mapped_scan(scan, mesh, (rules,)), R.init(rules), (network, params, rules)


def pgx_selfplay_runner(
    batch: int,
    plies: int,
    simulations: int,
    blocks: int,
    channels: int,
    loop: str = "mctx",
    mesh=None,
    dtype: str = "float32",
):
    """The same search (Gumbel MuZero, same net shape) over pgx `gardner_chess`, run by
    `mctx.gumbel_muzero_policy` (`loop="mctx"`: pgx as people use it) or by the project's
    batch-first `mcts.gumbel_muzero_policy` (`loop="mcts"`: the same loop as ours); with
    `mesh`, mapped over the devices like ours (each device searches its own games)."""
    import pgx  # the optional extra

    policy = {"mctx": mctx.gumbel_muzero_policy, "mcts": mcts.gumbel_muzero_policy}[loop]

    env = pgx.make("gardner_chess")
    network, params = selfplay_network(115, blocks, channels, dtype)
    step = jax.vmap(env.step)

    def evaluate(state):
        return network.apply({"params": params}, state.observation, state.legal_action_mask)

    def recurrent_fn(params_, key, action, state):
        del params_, key
        mover = state.current_player
        state = step(state, action)
        reward = jnp.take_along_axis(state.rewards, mover[:, None], axis=1)[:, 0]
        logits, value = evaluate(state)
        done = state.terminated
        output = mctx.RecurrentFnOutput(
            reward=reward,
            discount=jnp.where(done, 0.0, -1.0),
            prior_logits=logits,
            value=jnp.where(done, 0.0, value),
        )
        return output, state

    def body(state, key):
        k_search, k_init = jax.random.split(key)
        logits, value = evaluate(state)
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
        out = policy(
            params,
            k_search,
            root,
            recurrent_fn,
            num_simulations=simulations,
            invalid_actions=~state.legal_action_mask,
            max_num_considered_actions=16,
        )
        state = step(state, out.action)
        fresh = jax.vmap(env.init)(jax.random.split(k_init, state.terminated.shape[0]))
        return where_done(state.terminated, fresh, state), None

    def scan(state, key):
        return jax.lax.scan(body, state, jax.random.split(key, plies))[0]

    return mapped_scan(scan, mesh), jax.vmap(env.init)(jax.random.split(jax.random.key(0), batch))
