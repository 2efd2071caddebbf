"""AlphaZero on one variant as an `Algorithm`: self-play -> targets -> replay -> learner.

One training iteration is one jitted function (`make_iteration`): a self-play scan of
`selfplay.num_plies` plies over `selfplay.batch_size` games, the targets, a write into the replay
ring (the last `replay.iterations` iterations) and `learner.steps_per_iteration` minibatch
updates on samples drawn from it. `ALGORITHM` hands it to `mmc_jax.training.runloop.run`, which
logs, evaluates and checkpoints around it.

Games run on from one scan to the next, so a scan ends with most games unfinished (a Gardner
game lasts about 50 plies; the `:cpu` scan is 32). With `replay.backfill_outcomes` (the `cpu`
and `full` presets of configs/gardner.py) their samples wait in the ring (`pending_mover`) and
get their game's result when it ends in a later iteration (`learner.replay_resolve`), so every
sample whose game ends within the ring's window trains the value head, exactly as if each game
had been played in one scan. Without it they train only the policy (`value_mask` False), or take
the search's value at the cut (`selfplay.value_bootstrap`).

Data parallelism (`mmc_jax.infra.sharding`): the games, their rules, the replay ring and the
self-play state are sharded along `data`, parameters and optimizer state are replicated.
`selfplay.batch_size` must be divisible by the number of devices.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.evaluation import match
from mmc_jax.infra import sharding
from mmc_jax.model import network as network_lib
from mmc_jax.training import learner, memory, selfplay
from mmc_jax.training.algorithm import CompiledStep, SelfPlayAlgorithm
from mmc_jax.training.games import (
    board_state,
    check_keep_period,
    check_positive,
    check_value_q_weight,
    example_batch,
    fair_fog,
    init_games,
    play_games,
    probe_params,
    value_q_weight,
)


def prepare_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A validated, locked copy of a run config with `variants` derived from `variant`.

    Raises:
      ValueError: unknown variant (the message lists the valid ones), a non-positive size,
        an unknown search algorithm or a `variants` list that disagrees with `variant`.
    """
    config = ml_collections.ConfigDict(config.to_dict())  # a copy; FieldReferences resolved
    config.variant = R.check_variant(config.variant)  # recorded in its canonical spelling
    variants = tuple(config.get("variants") or ())
    if variants and variants != (config.variant,):
        raise ValueError(
            f"config.variants={list(variants)} disagrees with config.variant="
            f"{config.variant!r}; leave variants empty (it is derived from variant)"
        )
    config.variants = (config.variant,)
    check_positive(
        config,
        "num_iterations selfplay.num_plies selfplay.num_simulations "
        "selfplay.max_num_considered_actions network.channels learner.batch_size "
        "learner.learning_rate replay.iterations checkpoint.every checkpoint.max_to_keep "
        + (
            "learner.steps"
            if config.learner.get("fresh_state", False)
            else "learner.steps_per_iteration"
        ),
    )
    check_positive(
        config,
        # selfplay.batch_size = 0: as many games as fit (`runloop.fill_batch`).
        "selfplay.batch_size network.num_blocks selfplay.temperature_plies "
        "selfplay.temperature eval.every",
        allow_zero=True,
    )
    check_keep_period(config)
    check_value_q_weight(config)
    if config.eval.every:
        check_positive(config, "eval.num_games eval.num_simulations")
        if config.eval.num_games % 2:
            raise ValueError(
                f"config.eval.num_games must be even (half the games per colour), "
                f"got {config.eval.num_games}"
            )
    if backfill_outcomes(config) and (
        config.learner.get("fresh_state", False) or config.selfplay.get("value_bootstrap", False)
    ):
        raise ValueError(
            "config.replay.backfill_outcomes needs a learner that trains from the replay ring "
            "(no learner.fresh_state) and no selfplay.value_bootstrap (which already gives "
            "cut-off games a value); set --config.replay.backfill_outcomes=False"
        )
    if config.selfplay.algorithm not in search.ALGORITHMS:
        raise ValueError(
            f"config.selfplay.algorithm must be one of {search.ALGORITHMS}, "
            f"got {config.selfplay.algorithm!r}"
        )
    config.lock()
    return config


def _mirror_enabled(config: ml_collections.ConfigDict) -> bool:
    """Whether the iteration mirrors samples: `selfplay.mirror_augment` and some variant of the
    run has a file-symmetric start (none today). A compile key carries it as `mirror`."""
    if "mirror" in config:
        return bool(config.mirror)
    return bool(config.selfplay.get("mirror_augment", False)) and any(
        selfplay.is_file_symmetric(v) for v in config.variants
    )


def _compile_key(config: ml_collections.ConfigDict) -> ml_collections.FrozenConfigDict:
    """The part of the config that shapes the compiled iteration (a hashable cache key).

    The variant is data (the `Rules` argument), not part of the key: runs on different variants
    with the same sizes share one compiled iteration (adaptation runs several in one process).
    """
    return ml_collections.FrozenConfigDict(
        {
            "mirror": _mirror_enabled(config),
            "fog": fair_fog(config),
            "network": config.network,
            "selfplay": config.selfplay,
            "learner": config.learner,
            "replay": config.replay,
        }
    )


# ---------------------------------------------------------------------------------------------
# State and shardings


@flax.struct.dataclass(kw_only=True)
class TrainState:
    """Everything the jitted iteration carries from one iteration to the next.

    params, opt_state: network parameters and optimizer state (replicated).
    game_state: `R.State` [B], the self-play games in progress (sharded along `data`);
      `fog.FogGames` (the state and both players' beliefs) under fair fog self-play.
    replay: `learner.ReplayBuffer`, the last `replay.iterations` iterations' samples.
    """

    params: Any
    opt_state: Any
    game_state: R.State
    replay: learner.ReplayBuffer


def state_shardings(state: TrainState, mesh: Mesh) -> TrainState:
    """The sharding of every leaf of a `TrainState` (shapes or arrays)."""
    return TrainState(
        params=sharding.replicated(state.params, mesh),
        opt_state=sharding.replicated(state.opt_state, mesh),
        game_state=sharding.sharded_leaves(state.game_state, mesh),
        replay=sharding.sharded_leaves(state.replay, mesh),
    )


def backfill_outcomes(config: ml_collections.ConfigDict) -> bool:
    """Whether the replay ring keeps the samples of games cut off by the end of a scan pending
    and gives them their game's result when it ends in a later iteration
    (`replay.backfill_outcomes`; `learner.replay_resolve`)."""
    return bool(config.replay.get("backfill_outcomes", False))


def samples_per_iteration(config: ml_collections.ConfigDict) -> int:
    """Self-play positions recorded per iteration: num_plies * batch_size."""
    return int(config.selfplay.num_plies) * int(config.selfplay.batch_size)


def _init_fn(config: ml_collections.ConfigDict):
    """`(key, rules_b) -> TrainState`: the pure initialisation."""
    network = network_lib.make_network(config.network)
    optimizer = learner.make_optimizer(config.learner)
    capacity = int(config.replay.iterations) * samples_per_iteration(config)

    def init(key, rules_b):
        params = network_lib.init_params(network, key, R.OBS_SHAPE)
        return TrainState(
            params=params,
            opt_state=optimizer.init(params),
            game_state=init_games(rules_b, fair_fog(config)),
            replay=learner.replay_init(
                example_batch(), capacity, pending=backfill_outcomes(config)
            ),
        )

    return init


def init_train_state(
    config: ml_collections.ConfigDict, rules_b: R.Rules, key: jax.Array, mesh: Mesh
) -> TrainState:
    """Fresh parameters (from `key`), optimizer state, start positions and an empty replay,
    placed on `mesh` with `state_shardings`."""
    return _jitted_init(_compile_key(config), mesh)(key, rules_b)


@functools.lru_cache(maxsize=8)
def _jitted_init(compile_key: ml_collections.FrozenConfigDict, mesh: Mesh):
    """`_init_fn` jitted with output shardings (the replay ring is created in place on every
    device), once per config and mesh."""
    init = _init_fn(compile_key)
    rules_b = _abstract_rules(compile_key)
    shardings = state_shardings(jax.eval_shape(init, jax.random.key(0), rules_b), mesh)
    return jax.jit(init, out_shardings=shardings)


def _abstract_rules(compile_key: ml_collections.FrozenConfigDict) -> R.Rules:
    # Shapes only: every variant's Rules has the same leaves.
    return jax.eval_shape(lambda: R.batch(R.VARIANTS[0], int(compile_key.selfplay.batch_size)))


# ---------------------------------------------------------------------------------------------
# The jitted iteration


def add_to_replay(
    replay: learner.ReplayBuffer,
    trajectory: selfplay.Trajectory,
    batch: learner.Batch,
    config: ml_collections.ConfigDict,
) -> tuple[learner.ReplayBuffer, dict[str, jax.Array]]:
    """Writes one scan's samples (`batch`, from `trajectory`) into the ring, packed
    (`learner.pack`).

    With `replay.backfill_outcomes`, first the games carried in from the last scan that ended
    in this one give their earlier samples the result (`learner.replay_resolve`); then this
    scan's cut-off games become the pending ones. Returns the ring and its `replay/resolved`
    and `replay/pending_fraction` metrics (none without the back-fill).
    """
    if not backfill_outcomes(config):
        return learner.replay_add(replay, learner.pack(batch)), {}
    replay, resolved = learner.replay_resolve(
        replay, *selfplay.carried_results(trajectory), q_weight=value_q_weight(config)
    )
    pending = selfplay.pending_movers(trajectory, batch)
    replay = learner.replay_add(replay, learner.pack(batch), pending)
    filled = jnp.arange(replay.capacity) < replay.size
    pending = jnp.sum(filled & (replay.pending_mover >= 0)) / jnp.maximum(replay.size, 1)
    return replay, {"replay/resolved": resolved, "replay/pending_fraction": pending}


def iteration_step(
    state: TrainState,
    rules_b: R.Rules,
    key: jax.Array,
    config: ml_collections.ConfigDict,
    mesh: Mesh | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One training iteration (pure): self-play, targets, replay write, learner updates.

    With `learner.fresh_state` the learner is `learner.inner_procedure` (a fresh optimizer,
    `learner.steps` steps on this iteration's samples: JOAT's inner procedure, which `adapt`
    runs); otherwise `learner.steps_per_iteration` minibatches from the replay ring with the
    optimizer state carried across iterations. `selfplay.value_bootstrap` gives games cut off
    by the end of the scan the search's value as their result (`selfplay.compute_targets`).

    Returns the new state and scalar metrics: `train/*` (learner, averaged over the
    minibatches), `selfplay/*` (`selfplay.trajectory_stats`) and
    `selfplay/value_target_fraction` (valid samples with a value target).
    """
    network = network_lib.make_network(config.network)
    play_key, mirror_key, sample_key, learn_key = jax.random.split(sharding.as_key(key), 4)
    game_state, trajectory = play_games(
        network, state.params, rules_b, state.game_state, play_key, config, fair_fog(config), mesh
    )
    bootstrap = bool(config.selfplay.get("value_bootstrap", False))
    batch = selfplay.compute_targets(
        trajectory, bootstrap=bootstrap, q_weight=value_q_weight(config)
    )
    if _mirror_enabled(config):
        per_game = jnp.asarray(
            [selfplay.is_file_symmetric(R.VARIANTS[i]) for i in range(len(R.VARIANTS))]
        )[rules_b.variant_id]
        per_sample = jnp.tile(per_game, int(config.selfplay.num_plies))  # ply-major as batch
        batch = selfplay.random_mirror(mirror_key, batch, per_sample)
    replay, backfill_metrics = add_to_replay(state.replay, trajectory, batch, config)

    if config.learner.get("fresh_state", False):
        # The inner procedure of JOAT (what meta-training optimised for): a fresh optimizer,
        # `learner.steps` steps on this iteration's samples.
        params, step_metrics = learner.inner_procedure(
            state.params, learner.pack(batch), learn_key, config.network, config.learner, mesh
        )
        opt_state = state.opt_state
        train_metrics = jax.tree.map(jnp.mean, step_metrics)
    else:
        num_samples = int(config.learner.batch_size) * int(config.learner.steps_per_iteration)
        samples = learner.replay_sample(replay, sample_key, num_samples)
        params, opt_state, train_metrics = learner.train_epoch(
            state.params, state.opt_state, samples, learn_key, config, mesh
        )
    metrics = {f"train/{k}": v for k, v in train_metrics.items()}
    valid = trajectory.valid.reshape(-1)
    metrics["selfplay/value_target_fraction"] = jnp.sum(batch.value_mask & valid) / jnp.maximum(
        jnp.sum(valid), 1
    )
    metrics.update({f"selfplay/{k}": v for k, v in selfplay.trajectory_stats(trajectory).items()})
    metrics["replay/size"] = replay.size
    metrics.update(backfill_metrics)
    new_state = TrainState(params=params, opt_state=opt_state, game_state=game_state, replay=replay)
    return new_state, metrics


@functools.lru_cache(maxsize=8)
def _jitted_iteration(compile_key: ml_collections.FrozenConfigDict, mesh: Mesh, donate: bool):
    """`iteration_step` jitted with its shardings on `mesh` (one per config and mesh); with
    `donate` the state argument's buffers become the new state's (the replay ring is held once,
    and updated in place), so the state passed in is deleted."""
    rules_b = _abstract_rules(compile_key)
    state = jax.eval_shape(_init_fn(compile_key), jax.random.key(0), rules_b)
    replicated = NamedSharding(mesh, P())
    state_sh = state_shardings(state, mesh)
    return jax.jit(
        functools.partial(iteration_step, config=compile_key, mesh=mesh),
        in_shardings=(state_sh, sharding.sharded_leaves(rules_b, mesh), replicated),
        out_shardings=(state_sh, replicated),
        donate_argnums=(0,) if donate else (),
    )


def make_iteration(config: ml_collections.ConfigDict, mesh: Mesh, donate: bool = True):
    """The jitted iteration `(state, rules_b, key) -> (state, metrics)` on `mesh`.

    It donates its state (`donate`): the state passed in is deleted, its memory reused for the
    new one; `donate=False` for a caller that calls it again on the same state (benchmarks).
    Built once per process, config, mesh and `donate`; `.lower(...).compile()` on it compiles
    ahead of time (and is cached by JAX, so a second `train` in the same process does not
    recompile).
    """
    return _jitted_iteration(_compile_key(config), mesh, donate)


# ---------------------------------------------------------------------------------------------
# The algorithm


class AlphaZero(SelfPlayAlgorithm):
    """AlphaZero on `config.variant` (configs/gardner.py)."""

    def setup(self, config, mesh):
        rules_b = R.batch(list(config.variants), int(config.selfplay.batch_size))
        return sharding.put_sharded(jax.device_get(rules_b), mesh)

    def init_state(self, config, mesh, data, key):
        return init_train_state(config, data, key, mesh)

    def abstract_state(self, config, mesh):
        compile_key = _compile_key(config)
        abstract = jax.eval_shape(
            _init_fn(compile_key), jax.random.key(0), _abstract_rules(compile_key)
        )
        return sharding.abstract_with_shardings(abstract, state_shardings(abstract, mesh))

    def probe(self, config, state):
        return probe_params(config, state.params)

    def restore_error(self, error, config):
        text = str(error)
        if "pending_mover" in text:
            flag = not backfill_outcomes(config)
            text += (
                "\n  (the replay ring was saved "
                + ("with" if flag else "without")
                + " replay.backfill_outcomes, the default of configs/gardner.py since "
                f"2026-11-24: resume it with --config.replay.backfill_outcomes={flag})"
            )
        return ValueError(text)

    def working_bytes(self, config, mesh):
        games = max(int(config.selfplay.batch_size) // mesh.size, 1)
        samples = max(int(config.learner.batch_size) // mesh.size, 1)
        play = memory.selfplay_bytes(config.selfplay, config.network, games, fair_fog(config))
        return play, memory.learner_bytes(
            config.network, samples, memory.param_bytes(config.network)
        )

    def check_start(self, config, state):
        if bool(np.all(sharding.to_host(board_state(state.game_state).terminated))):
            raise ValueError(
                f"the start position of {config.variant!r} is already over (no legal move): "
                "self-play has nothing to play"
            )

    def describe(self, config, mesh, state):
        network = network_lib.make_network(config.network)
        num_params = network_lib.num_params(state.params)
        return (
            f"{config.variant}: {mesh.size} device(s) ({jax.devices()[0].platform}), "
            f"{config.selfplay.batch_size} games x {config.selfplay.num_plies} plies x "
            f"{config.selfplay.num_simulations} simulations per iteration, "
            f"net {config.network.num_blocks}x{config.network.channels} "
            f"({num_params:,} params; {type(network).__name__})"
        )

    def compile(self, config, mesh, state, data, start):
        example_key = sharding.put_key(jax.random.key(0), mesh)
        compiled = make_iteration(config, mesh).lower(state, data, example_key).compile()

        def step(state, data, key, iteration):
            del iteration
            state, metrics = compiled(state, data, sharding.put_key(key, mesh))
            return state, {k: v.item() for k, v in jax.device_get(metrics).items()}

        return CompiledStep(step, compiled)

    def progress_fields(self, record):
        return [
            f"white/draw/black {record['selfplay/white_wins']}/{record['selfplay/draws']}/"
            f"{record['selfplay/black_wins']} len {record['selfplay/mean_game_length']:.0f}"
        ]

    def evaluate(self, config, params, key):
        return match.evaluate_run_params(config, params, key)


ALGORITHM = AlphaZero("alphazero", batch_field="selfplay.batch_size", prepare=prepare_config)
