"""TD(λ) on a value network with afterstate play (the Phutball bot's method), on the Algorithm
contract.

Play (`play`, one compiled scan over a batch of games to the end): at each position every legal
move's next position is evaluated in one batched network call (the value head of
`configs/gardner.py`'s network, from the view of the side to move there: the opponent; a move
that ends the game is scored by its result instead), and the move the opponent likes least is
played; with probability `td.epsilon` a uniformly random legal move is played instead
(exploration). The same network plays both sides.

Targets (`lambda_returns`): the forward view of the seed's "alternating" TD(λ), computed over the
stored games (one reverse scan). With V_t the value of position t for its mover and r_t the
reward the move at t earns its mover (non-zero only when it ends the game):

    G_t = r_t                                              if the move at t ends the game
    G_t = -((1 - λ_t) V_{t+1} + λ_t G_{t+1})               otherwise,  λ_t = 0 if the move at t
                                                           was exploratory, else λ

(the sign flips each ply because the next position belongs to the other side). Its offline
equivalence with the seed's backward view (eligibility trace e_t = -λ e_{t-1} + ∇V(s_t), the
update δ_t e_t with δ_t = r_t - V_{t+1} - V_t, the trace reset after an exploratory move's update)
is the identity G_t - V_t = Σ_{k=t..K} (-λ)^{k-t} δ_k, K the first exploratory or last move from t
on: `tests/algorithms/test_td_lambda.py` checks it on a hand-computed game, tabular. λ-returns
are what the seed's traces would follow with the weights held fixed over a game; this module
implements the forward view (the natural batched form), not the online trace.

Learning: `learner.updates` Adam steps per iteration on the squared error of V(s_t) to G_t over
the live positions of that iteration's games (minibatches drawn uniformly with replacement).
The policy head is left as initialised; the trained network plays as a one-ply value player
(`search.one_ply`: the player table's `one-ply` entry, `evaluate`/`ladder --search one-ply`)
and, as a value for the search, wherever a gardner model is accepted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from mmc_jax import rules as R
from mmc_jax.evaluation import match
from mmc_jax.infra import sharding
from mmc_jax.model import network as network_lib
from mmc_jax.search import one_ply
from mmc_jax.training import learner
from mmc_jax.training.algorithm import (
    ReplicatedAlgorithm,
    ReplicatedState,
    check_at_least_one,
    check_ranges,
    compile_step,
)


def lambda_returns(reward, ends, next_value, explored, live, lam: float):
    """float32 [T, B] λ-returns (module doc) of games stored as [T, B] arrays: `reward` of the
    move at t to its mover, `ends` (that move ended the game), `next_value` V_{t+1} (for the
    mover at t+1), `explored` (the move at t was random), `live` (position t was played)."""

    def back(later, step):
        reward, ends, next_value, explored, live = step
        trace = jnp.where(explored, 0.0, lam)
        value = -((1.0 - trace) * next_value + trace * later)
        value = jnp.where(ends, reward, value)
        value = jnp.where(live, value, 0.0)
        return value, value

    last = jnp.zeros_like(reward[0])
    _, returns = jax.lax.scan(back, last, (reward, ends, next_value, explored, live), reverse=True)
    return returns


class Games(struct.PyTreeNode):
    """What a batch of played games leaves for learning, [T, B] (obs [T, B, 5, 5, C])."""

    obs: jax.Array
    reward: jax.Array
    ends: jax.Array
    next_value: jax.Array
    explored: jax.Array
    live: jax.Array


def play(network, params, rules, key, *, epsilon: float, num_plies: int) -> Games:
    """A batch of games of `rules` [B] from the start, `num_plies` plies (a game ends by the
    ply cap at the latest: the caller sets `rules.max_plies` <= `num_plies`)."""

    def ply(state, key):
        planes = R.legal_planes(rules, state)
        obs = R.observe(rules, state, planes)
        _, explored, next_value, nxt = one_ply.action(network, params, rules, state, key, epsilon)
        live = ~state.terminated
        mover = state.turn
        reward = jnp.take_along_axis(nxt.rewards, mover[:, None], axis=-1)[:, 0]
        nxt = jax.tree.map(lambda a, b: jnp.where(_expand(live, a), a, b), nxt, state)
        record = Games(
            obs=obs,
            reward=reward,
            ends=nxt.terminated & live,
            next_value=next_value,
            explored=explored,
            live=live,
        )
        return nxt, record

    _, games = jax.lax.scan(ply, R.init(rules), jax.random.split(key, num_plies))
    return games


def _expand(mask, like):
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


def _network(config):
    return network_lib.make_network(config.network)


# TD(λ)'s optimizer where its config says nothing (the runs before its `learner` section had
# the optimizer fields): AdamW with decoupled decay 1e-4 on every parameter.
OPTIMIZER_DEFAULTS = {"optimizer": "adamw", "weight_decay": 1e-4, "weight_decay_mask": "all"}


def _optimizer(config):
    return learner.make_optimizer(learner.optimizer_config(config.learner, OPTIMIZER_DEFAULTS))


def _compile_key(config: ml_collections.ConfigDict) -> ml_collections.FrozenConfigDict:
    """The part of the config that shapes the compiled iteration (a hashable cache key): not
    the run's length, seed or evaluation, so a resumed run in the same process, or a longer
    one, reuses the program."""
    return ml_collections.FrozenConfigDict(
        {"network": config.network, "td": config.td, "learner": config.learner}
    )


def iteration(state: ReplicatedState, rules, key, *, config):
    """One iteration (jittable): play, λ-returns, `learner.updates` Adam steps. (state,
    metrics)."""
    network, optimizer = _network(config), _optimizer(config)
    play_key, learn_key = jax.random.split(key)
    games = play(
        network,
        state.params,
        rules,
        play_key,
        epsilon=float(config.td.epsilon),
        num_plies=int(config.td.max_plies),
    )
    returns = lambda_returns(
        games.reward, games.ends, games.next_value, games.explored, games.live,
        float(config.td.lam),
    )  # fmt: skip
    obs = games.obs.reshape((-1,) + games.obs.shape[2:])
    targets, weight = returns.reshape(-1), games.live.reshape(-1).astype(jnp.float32)
    mask = jnp.ones((config.learner.batch_size, R.NUM_ACTIONS), bool)
    sampler = learner.configured_sampler(config.learner)

    def loss_fn(params, rows):
        _, value = network.apply({"params": params}, obs[rows], mask)
        return jnp.mean(jnp.square(value - targets[rows]))

    def update(carry, key):
        params, opt_state = carry
        rows = learner.draw_rows(key, weight, int(config.learner.batch_size), sampler)
        loss, grads = jax.value_and_grad(loss_fn)(params, rows)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    (params, opt_state), losses = jax.lax.scan(
        update,
        (state.params, state.opt_state),
        jax.random.split(learn_key, int(config.learner.updates)),
    )
    ended = games.ends.any(axis=0)
    metrics = {
        "value_loss": losses.mean(),
        "positions": weight.sum(),
        "explored": (games.explored & games.live).sum() / jnp.maximum(weight.sum(), 1.0),
        "length": games.live.sum(axis=0).astype(jnp.float32).mean(),
        "decided": jnp.mean(ended & (jnp.abs(games.reward) > 0).any(axis=0)),
    }
    return ReplicatedState(params=params, opt_state=opt_state), metrics


def prepare_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A validated, locked copy of a TD(λ) run config (ValueError naming the field)."""
    config = ml_collections.ConfigDict(config.to_dict())
    config.variant = R.check_variant(config.variant)
    check_at_least_one(config, ("num_iterations", "td.games", "td.max_plies", "learner.updates",
                                "learner.batch_size", "checkpoint.every"))  # fmt: skip
    check_ranges(config, (("td.lam", 0.0, 1.0), ("td.epsilon", 0.0, 1.0),
                          ("learner.learning_rate", 1e-9, 10.0)))  # fmt: skip
    learner.configured_sampler(config.learner)
    if R.has_fog(config.variant):
        raise ValueError(
            f"config.variant={config.variant!r} has fog: the one-ply value player reads the "
            "true next positions, which is not fair there"
        )
    config.lock()
    return config


class TDLambda(ReplicatedAlgorithm):
    """TD(λ) with afterstate play (configs/td_lambda.py)."""

    def setup(self, config, mesh):
        rules = R.batch(config.variant, int(config.td.games))
        rules = rules.replace(max_plies=jnp.full_like(rules.max_plies, int(config.td.max_plies)))
        return sharding.put_replicated(jax.device_get(rules), mesh)

    def fresh_state(self, config, key):
        params = network_lib.init_params(_network(config), key, R.OBS_SHAPE)
        return ReplicatedState(params=params, opt_state=_optimizer(config).init(params))

    def describe(self, config, mesh, state):
        return (
            f"td_lambda ({config.variant}): {mesh.size} device(s) "
            f"({jax.devices()[0].platform}), {config.td.games} games x up to "
            f"{config.td.max_plies} plies per iteration, every legal move evaluated, "
            f"lambda {config.td.lam}, epsilon {config.td.epsilon}, net "
            f"{config.network.num_blocks}x{config.network.channels} "
            f"({network_lib.num_params(state.params):,} params)"
        )

    def compile(self, config, mesh, state, data, start):
        del start
        games = int(config.td.games)

        def record(metrics):
            return {
                "selfplay/frames": int(round(metrics["positions"])),
                "selfplay/games": games,
                "selfplay/mean_game_length": metrics["length"],
                "selfplay/decided": metrics["decided"],
                "selfplay/explored": metrics["explored"],
                "train/value_loss": metrics["value_loss"],
            }

        return compile_step(iteration, _compile_key(config), state, data, record)

    def progress_fields(self, record):
        return [
            f"len {record['selfplay/mean_game_length']:.0f} decided "
            f"{record['selfplay/decided']:.2f} explored {record['selfplay/explored']:.2f}"
        ]

    def evaluate(self, config, params, key):
        return match.evaluate_run_params(config, params, key)


ALGORITHM = TDLambda("td_lambda", batch_field="td.games", prepare=prepare_config, section="td")
