"""JOAT / Reptile meta-training across minichess variants: one jitted outer iteration.

    python -m mmc_jax.train --config configs/joat.py:cpu --workdir runs/joat
    python -m mmc_jax.train --config configs/joat.py:cpu --workdir runs/joint \\
        --config.meta.inner_steps=1 --config.meta.fresh_inner_state=False \\
        --config.meta.updates_per_iteration=8                     # the joint (k = 1) control

A task is a variant. With `task_space.size` > 0 (configs/joat.py) the training variants are
that many playable points drawn once (seed `task_space.seed`) from a declared region of the
rule space (`task_space.starts`, `captures`, `goal_fogs`, `colours`), never one of `holdout` or
`eval.variants` (compared as rule-space points: another spelling of a held-out variant is held
out too); with `task_space.size` = 0, the registered variants with a positive `task_weights`
entry minus `holdout` (the first JOAT's distribution). `holdout` lists specs separated by ";"
(or registered names by ","). One outer iteration (`meta_step`, a single jitted function) does:

1. Sample a meta-batch of n = `meta.num_tasks` distinct training variants, with probabilities
   proportional to their weights (`jax.random.choice` without replacement).
2. Self-play ONE call over a mixed-variant batch of n x G games (G = `meta.games_per_task`,
   `selfplay.num_plies` plies, search with the shared parameters phi; under fog the fair
   search of `mmc_jax.training.fog`). Every training variant keeps its own G games in progress in
   a pool [V * G]; a game cut off by the end of the scan continues the next time its variant is
   drawn, and with `selfplay.value_bootstrap` its samples take the search's value at the cut.
3. Per-task targets (`selfplay.compute_targets` vmapped over the task axis), written into the
   variant's own replay ring (its last `replay.iterations` draws; 1 for Reptile).
4. Inner loop over the n tasks (`lax.map` on a CPU, `vmap` on accelerators):
   - Reptile (`meta.fresh_inner_state`, the default of configs/joat.py): per task
     `learner.inner_procedure` on the data of its draw: k = `inner.steps` steps of the `inner`
     optimizer (Adam with b1 = 0) started FRESH for the task -> theta_i. `mmc_jax.adapt` runs
     exactly this procedure per adaptation iteration (`learner.fresh_state`), so
     meta-training optimises what adaptation does.
   - the first JOAT (`fresh_inner_state` False): from phi and the shared optimizer state S,
     k = `meta.inner_steps` steps of `learner` on minibatches of the ring -> theta_i, S_i.
5. Outer update: phi <- phi + eps * (mean_i theta_i - phi); for the first JOAT also
   S <- mean_i S_i (Reptile keeps no shared inner state). eps comes from `meta.outer_lr` with
   `meta.outer_lr_schedule`: "constant", or "linear" from `outer_lr` to `outer_lr_end` over
   the run (Reptile's anneal). eps = 1 is the plain parameter averaging of JOAT.

Steps 4-5 run `meta.updates_per_iteration` times per self-play call (fresh minibatches each
time), so one self-play batch can feed several meta-updates.

What k = 1 means here, precisely: with `inner_steps == 1` each task's gradient is taken at phi
on one minibatch of its own data, the n gradients are averaged, and the optimizer takes ONE
step on that average from (phi, S): exactly one step of joint multi-task training on the mean
of the task losses (every drawn task weighted equally), then phi <- phi + eps * step. For an
optimizer that is linear in the gradient (SGD, with or without momentum, no clipping) this is
identical to the JOAT/Reptile recipe above with k = 1, the average of n one-step-adapted
parameter sets (a test checks it); with Adam or gradient clipping it is the joint step, not
the average of n per-task steps.
To give the control the same number of gradient evaluations as a k-step JOAT run, run it with
`updates_per_iteration = k` (k joint steps per self-play batch).

The network is told the rules only with `network.rule_planes = "descriptor"` (the rules
descriptor planes, capture / goal / fog / colour, become inputs; "none" by default, so a
held-out variant is not an unseen input). The switch changes the first convolution's input
channels and the recorded observation layout; resuming a run with the other setting is refused
with a message naming `network.rule_planes`.

Data parallelism follows `mmc_jax.train`: a one-axis `data` mesh; the game pool and the
self-play batch are sharded along it, each replay ring along its sample axis, parameters and
optimizer state replicated; the tasks themselves are vmapped on every device. G must be
divisible by the number of devices. With the tasks in sequence (the CPU default) each
inner minibatch is split over the devices; vmapped tasks (elsewhere) keep theirs replicated
(see `adapt_tasks`: XLA cannot partition the grouped convolutions of per-task parameters), so
there only self-play, the dominant cost, is data-parallel. With `meta.task_parallel` = t > 1
the mesh is (`task`, `data`) = (t, devices / t): self-play still splits the whole batch over
every device, and the inner loop splits the n tasks over the t device groups (n / t tasks
each, `shard_map`), so a pod adapts many tasks at once; n must be a multiple of t, and t
divide the devices.

`ALGORITHM` (a `SelfPlayAlgorithm`) hands `meta_step` to `mmc_jax.training.runloop.run`, the loop
shared with AlphaZero: a progress line per iteration, `metrics.jsonl` (aggregates `train/*`, per
task `train/<variant>/*` and `selfplay/<variant>/*`), TensorBoard, PNG plots (per-task losses and
per-variant scores), evaluation against `eval.opponents` on `eval.variants` every `eval.every`
iterations, orbax checkpoints, resume from the latest, and a stop on a non-finite loss.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.evaluation import match
from mmc_jax.infra import sharding, storage
from mmc_jax.model import network as network_lib
from mmc_jax.training import games as games_lib
from mmc_jax.training import learner, memory, selfplay
from mmc_jax.training.algorithm import CompiledStep, SelfPlayAlgorithm

OUTER_LR_SCHEDULES = ("constant", "linear")
# Per-task learner metrics reported by the inner loop (means over the inner steps).
TASK_METRICS = ("policy_loss", "value_loss", "total", "policy_entropy", "grad_norm")
STAT_KEYS = ("frames", "games", "white_wins", "black_wins", "draws")


# ---------------------------------------------------------------------------------------------
# Config


def parse_variants(value: Any, field: str) -> tuple[str, ...]:
    """Canonical variant spellings from a list/tuple of specs, or a string: specs separated by
    ";" (composed specs contain commas), or registered names separated by commas ("dark,atomic").
    Registered names come in registry order, composed ones after them in the order given; no
    duplicates.

    Raises:
      ValueError: a spec that does not parse (the message names the component).
    """
    if value is None:
        return ()
    if isinstance(value, str):
        pieces = [v.strip() for v in value.split(";")]
        if len(pieces) == 1 and all(
            p.strip() in R.VARIANTS for p in pieces[0].split(",") if p.strip()
        ):
            pieces = [p.strip() for p in pieces[0].split(",")]
    else:
        pieces = [str(v).strip() for v in value]
    specs = []
    for piece in (p for p in pieces if p):
        try:
            spec = R.check_variant(piece)
        except ValueError as error:
            raise ValueError(f"config.{field}: {error}") from None
        if spec not in specs:
            specs.append(spec)
    named = [v for v in R.VARIANTS if v in specs]
    return tuple(named + [v for v in specs if v not in R.VARIANTS])


def task_space(config: ml_collections.ConfigDict) -> R.Space | None:
    """The declared region of the rule space tasks come from (`task_space`), or None when the
    run draws from the registered variants by `task_weights`."""
    section = config.get("task_space")
    if section is None or not int(section.get("size", 0)):
        return None
    return R.Space(
        starts=tuple(section.starts),
        captures=tuple(section.captures),
        goal_fogs=tuple(tuple(pair.split("/")) for pair in section.goal_fogs),
        colours=tuple(section.colours),
    )


def task_weights(config: ml_collections.ConfigDict) -> dict[str, float]:
    """{variant: weight} of every training candidate: every registered variant (0 where
    `task_weights` omits it), or with a `task_space` its sampled points, weight 1 each."""
    space = task_space(config)
    if space is not None:
        return dict.fromkeys(space_variants(config), 1.0)
    given = dict(config.task_weights.to_dict()) if "task_weights" in config else {}
    for name, weight in given.items():
        try:
            R.check_variant(name)
        except ValueError as error:
            raise ValueError(f"config.task_weights: {error}") from None
        if not isinstance(weight, int | float) or isinstance(weight, bool) or weight < 0:
            raise ValueError(f"config.task_weights.{name} must be >= 0, got {weight!r}")
    return {v: float(given.get(v, 0.0)) for v in R.VARIANTS}


def space_variants(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """`task_space.size` playable points drawn once (seed `task_space.seed`) from the declared
    region, never one of the held-out or evaluation variants (compared as rule-space points),
    uniformly per point or per component (`task_space.sampling`, `R.sample_variants`)."""
    space = task_space(config)
    per = config.task_space.get("sampling", "point")
    if per not in R.SAMPLING:
        raise ValueError(f"config.task_space.sampling must be one of {R.SAMPLING}, got {per!r}")
    excluded = parse_variants(config.get("holdout", ""), "holdout") + parse_variants(
        config.eval.get("variants", ""), "eval.variants"
    )
    return tuple(
        R.sample_variants(
            int(config.task_space.get("seed", 0)),
            int(config.task_space.size),
            space=space,
            exclude=excluded,
            per=per,
        )
    )


def training_variants(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """The variants meta-training draws from: positive weight, not held out."""
    weights = task_weights(config)
    holdout = set(parse_variants(config.get("holdout", ""), "holdout"))
    return tuple(v for v, w in weights.items() if w > 0 and v not in holdout)


def prepare_meta_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A validated, locked copy of a meta-training config.

    `variants` is derived (the training variants, registry order) and `holdout` normalised to
    a comma-separated string in registry order; checkpoints are checked against `variants`.

    Raises:
      ValueError: unknown variants, no training variant left, more tasks per meta-batch than
        training variants, non-positive sizes, an unknown schedule or search algorithm.
    """
    config = ml_collections.ConfigDict(config.to_dict())
    variants = training_variants(config)
    holdout = parse_variants(config.get("holdout", ""), "holdout")
    if not variants:
        raise ValueError(
            f"no training variant left: task_weights {task_weights(config)} minus holdout "
            f"{list(holdout)}"
        )
    given = tuple(config.get("variants") or ())
    if given and given != variants:
        raise ValueError(
            f"config.variants={list(given)} disagrees with task_weights and holdout, which give "
            f"{list(variants)}; leave variants empty (it is derived)"
        )
    config.variants = variants
    named = all(v in R.VARIANTS for v in holdout)
    config.holdout = (",".join if named else ";".join)(holdout)
    games_lib.check_positive(
        config,
        "num_iterations meta.num_tasks meta.inner_steps "
        "meta.updates_per_iteration selfplay.num_plies selfplay.num_simulations "
        "selfplay.max_num_considered_actions network.channels learner.batch_size "
        "learner.learning_rate replay.iterations checkpoint.every checkpoint.max_to_keep",
    )
    games_lib.check_positive(
        config,
        # meta.games_per_task = 0: as many games as fit (`runloop.fill_batch`).
        "meta.games_per_task network.num_blocks selfplay.temperature_plies "
        "selfplay.temperature eval.every meta.outer_lr meta.outer_lr_end",
        allow_zero=True,
    )
    games_lib.check_keep_period(config)
    games_lib.check_value_q_weight(config)
    if config.meta.num_tasks > len(variants):
        raise ValueError(
            f"config.meta.num_tasks={config.meta.num_tasks} exceeds the {len(variants)} training "
            f"variants {list(variants)} (tasks in a meta-batch are distinct variants)"
        )
    task_parallel = config.meta.get("task_parallel", 1)
    if isinstance(task_parallel, bool) or not isinstance(task_parallel, int) or task_parallel < 1:
        raise ValueError(
            f"config.meta.task_parallel must be a positive integer, got {task_parallel!r}"
        )
    if config.meta.num_tasks % task_parallel:
        raise ValueError(
            f"config.meta.num_tasks={config.meta.num_tasks} does not split over "
            f"config.meta.task_parallel={task_parallel} device groups; use a multiple of "
            f"{task_parallel} tasks"
        )
    if config.meta.outer_lr_schedule not in OUTER_LR_SCHEDULES:
        raise ValueError(
            f"config.meta.outer_lr_schedule must be one of {OUTER_LR_SCHEDULES}, "
            f"got {config.meta.outer_lr_schedule!r}"
        )
    if config.selfplay.algorithm not in search.ALGORITHMS:
        raise ValueError(
            f"config.selfplay.algorithm must be one of {search.ALGORITHMS}, "
            f"got {config.selfplay.algorithm!r}"
        )
    parse_variants(config.eval.get("variants", ""), "eval.variants")
    adapt = config.get("adapt")
    if adapt is not None and "selfplay" in adapt and int(adapt.selfplay.get("batch_size", 1)) == 0:
        # configs/joat.py:full fills the device (G = 0 until `runloop.fill_batch`): adaptation
        # then plays one draw of the size a task gets in meta-training, as in every preset.
        adapt.selfplay.batch_size = int(config.meta.games_per_task)
    if fresh_inner(config):
        if "inner" not in config:
            raise ValueError("config.meta.fresh_inner_state needs an `inner` section")
        games_lib.check_positive(config, "inner.steps inner.batch_size inner.learning_rate")
        if int(config.replay.iterations) != 1:
            raise ValueError(
                "config.meta.fresh_inner_state adapts every task on the data of its own draw "
                f"(as adapt does): set config.replay.iterations=1, got {config.replay.iterations}"
            )
    if config.eval.every:
        games_lib.check_positive(config, "eval.num_games eval.num_simulations")
        if config.eval.num_games % 2:
            raise ValueError(
                f"config.eval.num_games must be even (half the games per colour), "
                f"got {config.eval.num_games}"
            )
    config.lock()
    return config


def eval_variants(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """`eval.variants`, or by default the training variants followed by the held-out ones."""
    chosen = parse_variants(config.eval.get("variants", ""), "eval.variants")
    if chosen:
        return chosen
    return tuple(config.variants) + parse_variants(config.get("holdout", ""), "holdout")


def outer_lr(config: ml_collections.ConfigDict, iteration: int) -> float:
    """eps of outer iteration `iteration` (0-based): constant, or linear from `meta.outer_lr`
    at the first iteration to `meta.outer_lr_end` after the last (Reptile)."""
    start = float(config.meta.outer_lr)
    if config.meta.outer_lr_schedule == "constant":
        return start
    fraction = iteration / max(int(config.num_iterations), 1)
    return start + (float(config.meta.outer_lr_end) - start) * fraction


def _compile_key(config: ml_collections.ConfigDict) -> ml_collections.FrozenConfigDict:
    """The part of the config that shapes the compiled outer iteration (variants are data)."""
    return ml_collections.FrozenConfigDict(
        {
            "num_variants": len(config.variants),
            "fog": games_lib.fair_fog(config),
            "network": config.network,
            "selfplay": config.selfplay,
            "learner": config.learner,
            "replay": config.replay,
            "meta": {
                "num_tasks": int(config.meta.num_tasks),
                "games_per_task": int(config.meta.games_per_task),
                "inner_steps": int(config.meta.inner_steps),
                "updates_per_iteration": int(config.meta.updates_per_iteration),
                "fresh_inner_state": fresh_inner(config),
            },
            "inner": config.get("inner", {}),
        }
    )


# ---------------------------------------------------------------------------------------------
# State


@flax.struct.dataclass(kw_only=True)
class MetaState:
    """What the outer iteration carries.

    params, opt_state: phi and the shared inner-optimizer state S (replicated).
    game_state: `R.State` [V * G] (`fog.FogGames` when a training variant has fog); block v
      holds the G games in progress of training variant v.
    replay: `learner.ReplayBuffer` with a leading variant axis on every leaf ([V, capacity, ...]
      data, [V] counters): one ring per training variant.
    """

    params: Any
    opt_state: Any
    game_state: R.State
    replay: learner.ReplayBuffer


def rules_table(variants: tuple[str, ...]) -> R.Rules:
    """`Rules` [V] of the training variants, in order."""
    return R.stack([R.get(v) for v in variants])


def _capacity(config) -> int:
    return (
        int(config.replay.iterations)
        * int(config.selfplay.num_plies)
        * int(config.meta.games_per_task)
    )


def _init_fn(config):
    """`(key, table) -> MetaState`: fresh phi, optimizer state, start positions, empty rings."""
    network = network_lib.make_network(config.network)
    optimizer = learner.make_optimizer(config.learner)
    games = int(config.meta.games_per_task)
    capacity = _capacity(config)

    def init(key, table):
        num_variants = table.variant_id.shape[0]
        params = network_lib.init_params(network, key, R.OBS_SHAPE)
        pool_rules = jax.tree.map(
            lambda x: jnp.repeat(x, games, axis=0, total_repeat_length=num_variants * games), table
        )
        ring = learner.replay_init(games_lib.example_batch(), capacity)
        return MetaState(
            params=params,
            opt_state=optimizer.init(params),
            game_state=games_lib.init_games(pool_rules, bool(config.fog)),
            replay=jax.tree.map(lambda x: jnp.zeros((num_variants, *x.shape), x.dtype), ring),
        )

    return init


def state_shardings(state: MetaState, mesh: Mesh) -> MetaState:
    """Shardings of a `MetaState`: games along `data`, rings along their sample axis."""

    def ring_sharding(x):
        return NamedSharding(mesh, P(None, *sharding.batch_spec(mesh)) if np.ndim(x) >= 2 else P())

    return MetaState(
        params=sharding.replicated(state.params, mesh),
        opt_state=sharding.replicated(state.opt_state, mesh),
        game_state=sharding.sharded_leaves(state.game_state, mesh),
        replay=jax.tree.map(ring_sharding, state.replay),
    )


def _abstract_table(num_variants: int) -> R.Rules:
    return jax.eval_shape(lambda: R.batch(R.VARIANTS[0], num_variants))


@functools.lru_cache(maxsize=8)
def _jitted_init(compile_key: ml_collections.FrozenConfigDict, mesh: Mesh):
    init = _init_fn(compile_key)
    table = _abstract_table(compile_key.num_variants)
    shardings = state_shardings(jax.eval_shape(init, jax.random.key(0), table), mesh)
    return jax.jit(init, out_shardings=shardings)


def init_meta_state(config, table: R.Rules, key: jax.Array, mesh: Mesh) -> MetaState:
    """A fresh `MetaState` (phi from `key`) placed on `mesh`."""
    return _jitted_init(_compile_key(config), mesh)(key, table)


# ---------------------------------------------------------------------------------------------
# The pure pieces: task sampling, inner loop, outer update


def sample_tasks(key: jax.Array, weights: jax.Array, num_tasks: int) -> jax.Array:
    """int32 [n]: n distinct indices into the V training variants, drawn ∝ `weights` [V]."""
    probabilities = weights / jnp.sum(weights)
    return jax.random.choice(
        key, weights.shape[0], (num_tasks,), replace=False, p=probabilities
    ).astype(jnp.int32)


def task_minibatches(ring: learner.ReplayBuffer, key: jax.Array, config) -> learner.Batch:
    """[k, b] minibatches for one task's inner loop, drawn from its ring without replacement
    (k = `meta.inner_steps`, b = `learner.batch_size`; wraps around if the ring is smaller)."""
    steps, batch_size = int(config.meta.inner_steps), int(config.learner.batch_size)
    samples = learner.replay_sample(ring, key, steps * batch_size)
    return jax.tree.map(lambda x: x.reshape(steps, batch_size, *x.shape[1:]), samples)


def inner_loop(
    params: Any, opt_state: Any, ring: learner.ReplayBuffer, key: jax.Array, config
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One task's adaptation: k optimizer steps from (params, opt_state) on its own data.

    Args:
      params, opt_state: phi and the shared optimizer state S.
      ring: the task's replay ring (unbatched `ReplayBuffer`).
      key: consumed for the minibatch draw.
      config: the run config (`network`, `learner`, `meta.inner_steps`).

    Returns:
      (theta_i, S_i, metrics of every step, each [k]).
    """
    return inner_updates(params, opt_state, task_minibatches(ring, key, config), config)


def inner_updates(
    params: Any, opt_state: Any, minibatches: learner.Batch, config
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """`learner.train_step` over minibatches [k, b] in a scan: (params, opt_state, metrics [k])."""
    network = network_lib.make_network(config.network)
    optimizer = learner.make_optimizer(config.learner)
    step = functools.partial(
        learner.train_step, network=network, optimizer=optimizer, config=config.learner
    )

    def body(carry, minibatch):
        params, opt_state, metrics = step(*carry, minibatch)
        return (params, opt_state), metrics

    (params, opt_state), metrics = jax.lax.scan(body, (params, opt_state), minibatches)
    return params, opt_state, metrics


def adapt_tasks(
    params: Any,
    opt_state: Any,
    rings: learner.ReplayBuffer,
    keys: jax.Array,
    config,
    mesh: Mesh | None = None,
    sequential: bool | None = None,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """`inner_loop` over n tasks: rings [n] and keys [n] -> thetas [n], states [n], metrics
    [n, k]. phi and S are shared (not mapped).

    The tasks run one after the other (`lax.map`) when `sequential`, else side by side
    (`vmap`); None picks `lax.map` on the CPU backend and `vmap` elsewhere. Same values either
    way. vmapping over per-task parameters turns every convolution into a grouped one, which
    XLA:CPU runs with a naive loop (5x slower than the tasks in sequence there), while an
    accelerator wants the parallelism.

    With a one-axis `mesh` every device holds every task's data. Tasks in sequence split each
    minibatch over the devices (`learner.split_minibatches`, as the AlphaZero learner does).
    Vmapped tasks run replicated on every device: XLA's SPMD partitioner rejects the grouped
    convolutions of vmapped per-task parameters when their batch is sharded (jax 0.10: "output
    feature dimension ... not divisible by feature_group_count"); self-play, by far the larger
    cost, stays sharded. With a (`task`, `data`) mesh (`meta.task_parallel` > 1) the tasks are
    split over the `task` axis (`shard_map`): each group of devices adapts its own
    n / task_parallel tasks.
    """
    if sequential is None:
        sequential = jax.default_backend() == "cpu"
    local = functools.partial(_adapt_local, config=config, sequential=sequential)
    if mesh is None or sharding.TASK_AXIS not in mesh.axis_names:
        rings = sharding.constrain(rings, mesh, P())
        return local(params, opt_state, rings, keys, mesh=mesh if sequential else None)
    by_task = P(sharding.TASK_AXIS)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P(), by_task, by_task),
        out_specs=by_task,
        check_vma=False,
    )(params, opt_state, rings, keys)


def _adapt_local(params, opt_state, rings, keys, *, config, sequential: bool, mesh=None):
    """`adapt_tasks` on the tasks at hand (all of them, or one device group's share); on
    `mesh` (tasks in sequence only) every minibatch split over its devices."""
    if fresh_inner(config):

        def one_task(ring, key):
            batch, _ = learner.replay_contents(ring)  # replay.iterations = 1: this draw's data
            theta, metrics = learner.inner_procedure(
                params, batch, key, config.network, config.inner, mesh
            )
            return theta, opt_state, metrics

        if sequential:
            return jax.lax.map(lambda args: one_task(*args), (rings, keys))
        return jax.vmap(one_task)(rings, keys)
    minibatches = jax.vmap(functools.partial(task_minibatches, config=config))(rings, keys)
    if sequential:
        return jax.lax.map(
            lambda batches: inner_updates(
                params, opt_state, learner.split_minibatches(batches, mesh), config
            ),
            minibatches,
        )
    return jax.vmap(functools.partial(inner_updates, config=config), in_axes=(None, None, 0))(
        params, opt_state, minibatches
    )


def fresh_inner(config) -> bool:
    """Whether the inner loop is Reptile's (and `adapt`'s): `learner.inner_procedure` with the
    `inner` optimizer started afresh for every task (`meta.fresh_inner_state`), instead of k
    steps of the shared, averaged optimizer state S."""
    return bool(config.meta.get("fresh_inner_state", False))


def outer_update(params: Any, thetas: Any, eps: jax.Array | float) -> Any:
    """phi + eps (mean_i theta_i - phi), written `(1 - eps) phi + eps mean` so that eps = 1
    gives exactly the mean of the adapted parameters and eps = 0 exactly phi.

    `thetas` has the structure of `params` with a leading task axis [n].
    """
    eps = jnp.asarray(eps, jnp.float32)

    def lerp(phi, theta):
        mean = jnp.mean(theta, axis=0)
        return ((1.0 - eps) * phi + eps * mean).astype(phi.dtype)

    return jax.tree.map(lerp, params, thetas)


def average_opt_states(opt_states: Any) -> Any:
    """The mean over the task axis of floating leaves; integer leaves (step counts, equal in
    every task) are taken from the first task."""

    def average(x):
        if jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.mean(x, axis=0).astype(x.dtype)
        return x[0]

    return jax.tree.map(average, opt_states)


def _global_norm(tree: Any) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def meta_update(
    params: Any,
    opt_state: Any,
    rings: learner.ReplayBuffer,
    keys: jax.Array,
    eps,
    config,
    mesh: Mesh | None = None,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One meta-update from the task rings [n] (see the module docstring for k = 1).

    Returns (phi', S', metrics): per task [n] `first_total`, `last_total` (loss of the first and
    last inner step), the `TASK_METRICS` averaged over the inner steps, and scalars
    `update_norm` (|phi' - phi|) and `adapt_norm` (mean_i |theta_i - phi|).
    """
    network = network_lib.make_network(config.network)
    optimizer = learner.make_optimizer(config.learner)
    if int(config.meta.inner_steps) == 1:
        minibatches = jax.vmap(functools.partial(task_minibatches, config=config))(rings, keys)
        minibatches = sharding.constrain(minibatches, mesh, P())  # see adapt_tasks
        grad_fn = jax.grad(learner.loss_fn, has_aux=True)
        grads, metrics = jax.vmap(lambda batch: grad_fn(params, network, batch, config.learner))(
            jax.tree.map(lambda x: x[:, 0], minibatches)
        )
        metrics = dict(metrics, grad_norm=jax.vmap(_global_norm)(grads))
        mean_grads = jax.tree.map(lambda g: jnp.mean(g, axis=0), grads)
        updates, new_opt_state = optimizer.update(mean_grads, opt_state, params)
        theta = optax.apply_updates(params, updates)
        new_params = outer_update(params, jax.tree.map(lambda x: x[None], theta), eps)
        metrics = {k: v[:, None] for k, v in metrics.items()}  # [n, 1]: one inner step
        adapt_norm = _global_norm(updates)
    else:
        thetas, opt_states, metrics = adapt_tasks(params, opt_state, rings, keys, config, mesh)
        new_params = outer_update(params, thetas, eps)
        # Reptile proper: every task started from a fresh inner optimizer; there is no shared
        # state to carry. Otherwise (the first JOAT) the shared state S is averaged.
        new_opt_state = opt_state if fresh_inner(config) else average_opt_states(opt_states)
        deltas = jax.tree.map(lambda t, p: t - p[None], thetas, params)
        adapt_norm = jnp.mean(jax.vmap(_global_norm)(deltas))
    out = {name: jnp.mean(metrics[name], axis=1) for name in TASK_METRICS}
    out["first_total"] = metrics["total"][:, 0]
    out["last_total"] = metrics["total"][:, -1]
    out["update_norm"] = _global_norm(jax.tree.map(jnp.subtract, new_params, params))
    out["adapt_norm"] = adapt_norm
    return new_params, new_opt_state, out


def meta_step(
    state: MetaState,
    table: R.Rules,
    weights: jax.Array,
    key: jax.Array,
    eps: jax.Array,
    config,
    mesh: Mesh | None = None,
) -> tuple[MetaState, dict[str, jax.Array]]:
    """One outer iteration (pure; see the module docstring).

    Args:
      state: the `MetaState`.
      table: `Rules` [V] of the training variants.
      weights: float32 [V] task weights.
      key: consumed.
      eps: the outer step size of this iteration.
      config: the run config (static).
      mesh: when given, the self-play batch is split over its devices, each device playing
        its own games (`games_lib.play_games`).

    Returns:
      (new state, metrics): `tasks` int32 [n] (indices into `config.variants`), per task [n]
      the `meta_update` metrics and the self-play statistics, and scalars `update_norm`,
      `adapt_norm`.
    """
    network = network_lib.make_network(config.network)
    num_tasks, games = int(config.meta.num_tasks), int(config.meta.games_per_task)
    task_key, play_key, update_key = jax.random.split(sharding.as_key(key), 3)

    tasks = sample_tasks(task_key, weights, num_tasks)
    slots = (tasks[:, None] * games + jnp.arange(games)[None, :]).reshape(-1)  # [n * G]
    game_variant = jnp.repeat(tasks, games, total_repeat_length=num_tasks * games)
    rules_b = sharding.constrain_batch(jax.tree.map(lambda x: x[game_variant], table), mesh)
    games_in = sharding.constrain_batch(jax.tree.map(lambda x: x[slots], state.game_state), mesh)
    games_out, trajectory = games_lib.play_games(
        network, state.params, rules_b, games_in, play_key, config, bool(config.fog), mesh
    )
    game_state = jax.tree.map(lambda pool, g: pool.at[slots].set(g), state.game_state, games_out)

    # [T, n * G] -> per task [T, n, G]; targets and statistics vmapped over the task axis.
    per_task = jax.tree.map(
        lambda x: x.reshape(x.shape[0], num_tasks, games, *x.shape[2:]), trajectory
    )
    bootstrap = bool(config.selfplay.get("value_bootstrap", False))
    targets = functools.partial(
        selfplay.compute_targets, bootstrap=bootstrap, q_weight=games_lib.value_q_weight(config)
    )
    batches = learner.pack(jax.vmap(targets, in_axes=1)(per_task))  # PackedBatch [n, T * G]
    stats = jax.vmap(selfplay.trajectory_stats, in_axes=1)(per_task)  # [n] each
    rings = jax.vmap(learner.replay_add)(jax.tree.map(lambda x: x[tasks], state.replay), batches)
    replay = jax.tree.map(lambda all_, ring: all_.at[tasks].set(ring), state.replay, rings)

    def round_(carry, round_key):
        params, opt_state = carry
        task_keys = jax.random.split(round_key, num_tasks)
        params, opt_state, metrics = meta_update(
            params, opt_state, rings, task_keys, eps, config, mesh
        )
        return (params, opt_state), metrics

    rounds = jax.random.split(update_key, int(config.meta.updates_per_iteration))
    (params, opt_state), metrics = jax.lax.scan(round_, (state.params, state.opt_state), rounds)
    out = {k: jnp.mean(v, axis=0) for k, v in metrics.items() if k != "first_total"}
    out["first_total"] = metrics["first_total"][0]  # the loss at phi, before any update
    out["last_total"] = metrics["last_total"][-1]
    out["tasks"] = tasks
    out.update({f"selfplay_{k}": v for k, v in stats.items()})
    out["replay_size"] = rings.size
    new_state = MetaState(params=params, opt_state=opt_state, game_state=game_state, replay=replay)
    return new_state, out


@functools.lru_cache(maxsize=8)
def _jitted_meta_step(compile_key: ml_collections.FrozenConfigDict, mesh: Mesh, donate: bool):
    """`meta_step` jitted with its shardings on `mesh`, once per config and mesh; with `donate`
    the state argument's buffers become the new state's (the rings are held once)."""
    table = _abstract_table(compile_key.num_variants)
    state = jax.eval_shape(_init_fn(compile_key), jax.random.key(0), table)
    replicated = NamedSharding(mesh, P())
    state_sh = state_shardings(state, mesh)
    return jax.jit(
        functools.partial(meta_step, config=compile_key, mesh=mesh),
        in_shardings=(
            state_sh,
            sharding.replicated(table, mesh),
            replicated,
            replicated,
            replicated,
        ),
        out_shardings=(state_sh, replicated),
        donate_argnums=(0,) if donate else (),
    )


def make_meta_step(config, mesh: Mesh, donate: bool = True):
    """The jitted `(state, table, weights, key, eps) -> (state, metrics)` on `mesh`. It donates
    its state (the state passed in is deleted); `donate=False` for a caller that calls it again
    on the same state (benchmarks)."""
    return _jitted_meta_step(_compile_key(config), mesh, donate)


# ---------------------------------------------------------------------------------------------
# The algorithm


def _record(raw: dict[str, np.ndarray], variants: tuple[str, ...], eps: float) -> dict:
    """Flat metrics of one outer iteration: aggregates and `<group>/<variant>/<name>`."""
    tasks = [variants[int(i)] for i in raw["tasks"]]
    record: dict[str, Any] = {}
    for name in TASK_METRICS:
        record[f"train/{name}"] = float(np.mean(raw[name]))
        for task, value in zip(tasks, raw[name], strict=True):
            record[f"train/{task}/{name}"] = float(value)
    for task, first, last in zip(tasks, raw["first_total"], raw["last_total"], strict=True):
        record[f"meta/{task}/loss_before"] = float(first)
        record[f"meta/{task}/loss_after"] = float(last)
    record["meta/loss_before"] = float(np.mean(raw["first_total"]))
    record["meta/loss_after"] = float(np.mean(raw["last_total"]))
    for key in STAT_KEYS:
        values = raw[f"selfplay_{key}"]
        record[f"selfplay/{key}"] = int(np.sum(values))
        for task, value in zip(tasks, values, strict=True):
            record[f"selfplay/{task}/{key}"] = int(value)
    lengths, finished = raw["selfplay_mean_game_length"], raw["selfplay_games"]
    record["selfplay/mean_game_length"] = float(
        np.sum(lengths * finished) / max(int(np.sum(finished)), 1)
    )
    for task, value in zip(tasks, lengths, strict=True):
        record[f"selfplay/{task}/mean_game_length"] = float(value)
    record["meta/eps"] = eps
    # Samples in the rings of this iteration's tasks (after its writes): low after a resume
    # from a checkpoint without the rings (`checkpoint.save_replay`), until they refill.
    record["replay/size"] = int(np.sum(raw["replay_size"]))
    record["meta/update_norm"] = float(raw["update_norm"])
    record["meta/adapt_norm"] = float(raw["adapt_norm"])
    record["meta/tasks"] = ";".join(tasks)  # composed specs contain commas
    return record


def evaluate_meta(config, params, key) -> dict[str, float]:
    """`eval/<variant>/score_vs_<opponent>` (and CI bounds, W/D/L) for every eval variant."""
    metrics: dict[str, float] = {}
    for index, variant in enumerate(eval_variants(config)):
        metrics.update(
            match.evaluate_run_params(
                config,
                params,
                jax.random.fold_in(key, index),
                variant=variant,
                prefix=f"eval/{variant}/",
            )
        )
    return metrics


def _restore_error(error: ValueError, config) -> ValueError:
    text = str(error)
    if ("Conv_0" in text or "rule_planes" in text) and "network.rule_planes" not in text:
        text += (
            "\n  (the first convolution's input channels differ: was the run started with "
            "another network.rule_planes? this config has "
            f"{network_lib.rule_planes_of(config.network)!r})"
        )
    space = config.get("task_space")
    if space is not None and int(space.get("size", 0)) and space.get("sampling") == "component":
        text += (
            "\n  (workdirs written before 2026-11-23 drew their tasks uniformly per point: "
            "resume them with --config.task_space.sampling=point)"
        )
    return ValueError(text)


def _check_playable(state: MetaState, variants: tuple[str, ...]) -> None:
    terminated = games_lib.board_state(state.game_state).terminated
    over = np.asarray(sharding.to_host(terminated)).reshape(len(variants), -1)
    dead = [v for v, done in zip(variants, over.all(axis=1), strict=True) if done]
    if dead:
        raise ValueError(
            f"the start position of {dead} is already over (no legal move): give it task "
            "weight 0 or hold it out"
        )


def _first(names: list[str], shown: int) -> str:
    """The first `shown` of `names` and how many more ("a; b and 62 more": composed variants
    hold commas)."""
    text = "; ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


TASKS_FILE = "tasks.txt"


def write_task_list(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> str:
    """Writes a meta-training run's tasks (its variants after `prepare_config`, with their
    sampling weights), one a line, to `<workdir>/tasks.txt`; returns the file's path. The
    start-up and progress lines can then name a count and a few."""
    weights = task_weights(config)
    lines = [f"# {len(config.variants)} tasks of {storage.absolute(workdir)}: weight, variant"]
    lines += [f"{weights[variant]:.4g}\t{variant}" for variant in config.variants]
    path = storage.join(workdir, TASKS_FILE)
    storage.write_atomically(path, "\n".join(lines) + "\n")
    return path


class JOAT(SelfPlayAlgorithm):
    """JOAT / Reptile meta-training over several variants (configs/joat.py)."""

    def make_mesh(self, config, devices=None):
        return sharding.make_mesh(devices, int(config.meta.get("task_parallel", 1)))

    def setup(self, config, mesh):
        variants = tuple(config.variants)
        by_name = task_weights(config)
        table = jax.device_get(rules_table(variants))
        weights = np.asarray([by_name[v] for v in variants], np.float32)
        return sharding.put_replicated((table, weights), mesh)

    def init_state(self, config, mesh, data, key):
        table, _ = data
        return init_meta_state(config, table, key, mesh)

    def abstract_state(self, config, mesh):
        compile_key = _compile_key(config)
        abstract = jax.eval_shape(
            _init_fn(compile_key), jax.random.key(0), _abstract_table(compile_key.num_variants)
        )
        return sharding.abstract_with_shardings(abstract, state_shardings(abstract, mesh))

    def working_bytes(self, config, mesh):
        # Self-play splits every task's games over the devices; each device group of
        # `meta.task_parallel` adapts its share of the tasks at once (vmapped), each on a
        # whole minibatch.
        meta = config.meta
        games = max(int(meta.num_tasks) * int(meta.games_per_task) // mesh.size, 1)
        copies = max(int(meta.num_tasks) // int(meta.get("task_parallel", 1)), 1)
        play = memory.selfplay_bytes(
            config.selfplay, config.network, games, games_lib.fair_fog(config)
        )
        learn = memory.learner_bytes(
            config.network,
            int(config.learner.batch_size),
            memory.param_bytes(config.network),
            copies=copies,
        )
        return play, learn

    def fill_max(self, config) -> int:
        # Games per task: n tasks x G games play in one self-play batch, capped as AlphaZero's.
        return max(memory.FILL_MAX // int(config.meta.num_tasks), 1)

    def check_start(self, config, state):
        _check_playable(state, tuple(config.variants))

    def describe(self, config, mesh, state):
        meta = config.meta
        num_params = network_lib.num_params(state.params)
        planes = network_lib.rule_planes_of(config.network)
        variants = list(config.variants)
        held_out = [v for v in str(config.holdout or "").split(";") if v]
        lines = [
            f"meta-training on {len(variants)} variants: {_first(variants, 2)}"
            + (" (all in <workdir>/tasks.txt)" if len(variants) > 2 else ""),
            f"held out: {_first(held_out, 3)}" if held_out else "",
            f"per iteration: {meta.num_tasks} tasks x {meta.games_per_task} games x "
            f"{config.selfplay.num_plies} plies x {config.selfplay.num_simulations} "
            f"simulations, k={meta.inner_steps} inner steps x "
            f"{meta.updates_per_iteration} updates, eps {meta.outer_lr} "
            f"({meta.outer_lr_schedule})",
            f"net {config.network.num_blocks}x{config.network.channels} "
            f"({num_params:,} params, rule planes {planes}); {mesh.size} device(s)"
            + (
                f", tasks split over {mesh.shape[sharding.TASK_AXIS]} groups"
                if len(mesh.shape) > 1
                else ""
            ),
        ]
        # One fact a line, each short (a task list made lines of 500 characters).
        return "\n".join(line for line in lines if line)

    def compile(self, config, mesh, state, data, start):
        table, weights = data
        example_key = sharding.put_key(jax.random.key(0), mesh)
        example_eps = sharding.put_replicated(np.float32(outer_lr(config, start)), mesh)
        compiled = (
            make_meta_step(config, mesh)
            .lower(state, table, weights, example_key, example_eps)
            .compile()
        )
        variants = tuple(config.variants)

        def step(state, data, key, iteration):
            table, weights = data
            eps = outer_lr(config, iteration)
            state, raw = compiled(
                state,
                table,
                weights,
                sharding.put_key(key, mesh),
                sharding.put_replicated(np.float32(eps), mesh),
            )
            return state, _record(jax.device_get(raw), variants, eps)

        return CompiledStep(step, compiled)

    def probe(self, config, state):
        return games_lib.probe_params(config, state.params)

    def write_run_files(self, config, workdir):
        """The task list, `tasks.txt` (`write_task_list`)."""
        write_task_list(config, workdir)

    def next_command(self, config, workdir):
        held_out = list(parse_variants(config.get("holdout", ""), "holdout")) or ["dark"]
        return f"python -m mmc_jax.adapt --variant '{held_out[0]}' --init_from {workdir}"

    def progress_fields(self, record):
        tasks = str(record["meta/tasks"]).split(";")
        more = f" +{len(tasks) - 1}" if len(tasks) > 1 else ""
        return [
            f"tasks {tasks[0]}{more}",
            f"inner {record['meta/loss_before']:.3f}->{record['meta/loss_after']:.3f}",
            f"eps {record['meta/eps']:.2f}",
        ]

    def evaluate(self, config, params, key):
        return evaluate_meta(config, params, key)

    def restore_error(self, error, config):
        return _restore_error(error, config)


ALGORITHM = JOAT(
    "joat", batch_field="meta.games_per_task", prepare=prepare_meta_config, section="meta"
)
