"""AlphaZero training of one variant: self-play -> targets -> replay -> learner, data-parallel.

    python -m mmc_jax.train --config configs/gardner.py --workdir runs/gardner
    python -m mmc_jax.train --config configs/gardner.py:cpu --workdir runs/gardner_cpu \\
        --config.variant=atomic
    python -m mmc_jax.train --config configs/joat.py:cpu --workdir runs/joat   # meta-training

A config with a `meta` section (configs/joat.py) is handed to `mmc_jax.meta.train_meta`
(JOAT / Reptile meta-training over several variants, same workdir conventions).

One training iteration is one jitted function (`make_iteration`): a self-play scan of
`selfplay.num_plies` plies over `selfplay.batch_size` games, the targets, a write into the replay
ring (the last `replay.iterations` iterations) and `learner.steps_per_iteration` minibatch
updates on samples drawn from it. A short Python loop around it logs (`metrics.jsonl`,
TensorBoard, PNG plots, a progress line), evaluates every `eval.every` iterations and
checkpoints every `checkpoint.every` iterations.

Data parallelism: a `Mesh` over all devices with one axis `data`; the games, their rules, the
replay ring and the self-play state are sharded along it (`P('data')`), parameters and optimizer
state are replicated, and XLA inserts the gradient all-reduce. The same code runs on one CPU,
several GPUs or a TPU slice (one host; several hosts would need `jax.distributed.initialize()`
and process-local data loading, not done here). `selfplay.batch_size` must be divisible by the
number of devices.

Resuming: running the same command on a workdir with checkpoints continues from the latest one
(params, optimizer state, the games in progress, the replay ring when
`checkpoint.save_replay`, counters). Iteration keys are `fold_in(key, iteration)`, so a resumed
run replays the same random stream; with `checkpoint.every = 1` a SIGKILL loses at most the
iteration it interrupted. A non-finite loss stops the run with `FloatingPointError` before
anything of that iteration is saved, so the last checkpoint stays the last good one.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
import time
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from mmc_jax import checkpoint as checkpoint_lib
from mmc_jax import learner, search, selfplay
from mmc_jax import metrics as metrics_lib
from mmc_jax import network as network_lib
from mmc_jax import rules as R

DATA_AXIS = "data"


# ---------------------------------------------------------------------------------------------
# Config


def _positive(config: ml_collections.ConfigDict, names: str, allow_zero: bool = False) -> None:
    for name in names.split():
        node = config
        for part in name.split("."):
            node = node[part]
        ok = isinstance(node, int | float) and not isinstance(node, bool)
        ok = ok and (node >= 0 if allow_zero else node > 0)
        if not ok:
            bound = "non-negative" if allow_zero else "positive"
            raise ValueError(f"config.{name} must be {bound}, got {node!r}")


def prepare_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A validated, locked copy of a run config with `variants` derived from `variant`.

    Raises:
      ValueError: unknown variant (the message lists the valid ones), a non-positive size,
        an unknown search algorithm or a `variants` list that disagrees with `variant`.
    """
    config = ml_collections.ConfigDict(config.to_dict())  # a copy; FieldReferences resolved
    R.check_variant(config.variant)
    variants = tuple(config.get("variants") or ())
    if variants and variants != (config.variant,):
        raise ValueError(
            f"config.variants={list(variants)} disagrees with config.variant="
            f"{config.variant!r}; leave variants empty (it is derived from variant)"
        )
    config.variants = (config.variant,)
    _positive(
        config,
        "num_iterations selfplay.batch_size selfplay.num_plies selfplay.num_simulations "
        "selfplay.max_num_considered_actions network.channels learner.batch_size "
        "learner.steps_per_iteration learner.learning_rate replay.iterations checkpoint.every "
        "checkpoint.max_to_keep",
    )
    _positive(
        config,
        "network.num_blocks selfplay.temperature_plies selfplay.temperature eval.every",
        allow_zero=True,
    )
    if config.eval.every:
        _positive(config, "eval.num_games eval.num_simulations")
        if config.eval.num_games % 2:
            raise ValueError(
                f"config.eval.num_games must be even (half the games per colour), "
                f"got {config.eval.num_games}"
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
    game_state: `R.State` [B], the self-play games in progress (sharded along `data`).
    replay: `learner.ReplayBuffer`, the last `replay.iterations` iterations' samples.
    """

    params: Any
    opt_state: Any
    game_state: R.State
    replay: learner.ReplayBuffer


def make_mesh(devices=None) -> Mesh:
    """A one-axis (`data`) mesh over `devices` (default: all devices)."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def check_batch_divisible(batch_size: int, num_devices: int) -> None:
    """Raises ValueError unless the game batch splits evenly over the devices."""
    if batch_size % num_devices:
        raise ValueError(
            f"config.selfplay.batch_size={batch_size} is not divisible by the {num_devices} "
            f"devices of the data mesh; use a multiple of {num_devices}"
        )


def _sharded_leaves(tree: Any, mesh: Mesh) -> Any:
    """NamedShardings: leading axis along `data` for arrays with one, replicated scalars."""
    return jax.tree.map(lambda x: NamedSharding(mesh, P(DATA_AXIS) if np.ndim(x) else P()), tree)


def _replicated(tree: Any, mesh: Mesh) -> Any:
    return jax.tree.map(lambda _: NamedSharding(mesh, P()), tree)


def state_shardings(state: TrainState, mesh: Mesh) -> TrainState:
    """The sharding of every leaf of a `TrainState` (shapes or arrays)."""
    return TrainState(
        params=_replicated(state.params, mesh),
        opt_state=_replicated(state.opt_state, mesh),
        game_state=_sharded_leaves(state.game_state, mesh),
        replay=_sharded_leaves(state.replay, mesh),
    )


def samples_per_iteration(config: ml_collections.ConfigDict) -> int:
    """Self-play positions recorded per iteration: num_plies * batch_size."""
    return int(config.selfplay.num_plies) * int(config.selfplay.batch_size)


def _example_batch() -> learner.Batch:
    num_actions = R.NUM_ACTIONS
    return learner.Batch(
        obs=jax.ShapeDtypeStruct((1, *R.OBS_SHAPE), jnp.float32),
        legal_action_mask=jax.ShapeDtypeStruct((1, num_actions), jnp.bool_),
        policy_target=jax.ShapeDtypeStruct((1, num_actions), jnp.float32),
        value_target=jax.ShapeDtypeStruct((1,), jnp.float32),
        value_mask=jax.ShapeDtypeStruct((1,), jnp.bool_),
    )


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
            game_state=R.init(rules_b),
            replay=learner.replay_init(_example_batch(), capacity),
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


def iteration_step(
    state: TrainState, rules_b: R.Rules, key: jax.Array, config: ml_collections.ConfigDict
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One training iteration (pure): self-play, targets, replay write, learner updates.

    Returns the new state and scalar metrics: `train/*` (learner, averaged over the
    minibatches) and `selfplay/*` (`selfplay.trajectory_stats`).
    """
    network = network_lib.make_network(config.network)
    play_key, mirror_key, sample_key, learn_key = jax.random.split(key, 4)
    game_state, trajectory = selfplay.selfplay(
        network, state.params, rules_b, state.game_state, play_key, config
    )
    batch = selfplay.compute_targets(trajectory)
    if _mirror_enabled(config):
        per_game = jnp.asarray(
            [selfplay.is_file_symmetric(R.VARIANTS[i]) for i in range(len(R.VARIANTS))]
        )[rules_b.variant_id]
        per_sample = jnp.tile(per_game, int(config.selfplay.num_plies))  # ply-major as batch
        batch = selfplay.random_mirror(mirror_key, batch, per_sample)
    replay = learner.replay_add(state.replay, batch)

    num_samples = int(config.learner.batch_size) * int(config.learner.steps_per_iteration)
    samples = learner.replay_sample(replay, sample_key, num_samples)
    params, opt_state, train_metrics = learner.train_epoch(
        state.params, state.opt_state, samples, learn_key, config
    )
    metrics = {f"train/{k}": v for k, v in train_metrics.items()}
    metrics.update({f"selfplay/{k}": v for k, v in selfplay.trajectory_stats(trajectory).items()})
    metrics["replay/size"] = replay.size
    new_state = TrainState(params=params, opt_state=opt_state, game_state=game_state, replay=replay)
    return new_state, metrics


@functools.lru_cache(maxsize=8)
def _jitted_iteration(compile_key: ml_collections.FrozenConfigDict, mesh: Mesh):
    """`iteration_step` jitted with its shardings on `mesh` (one per config and mesh)."""
    rules_b = _abstract_rules(compile_key)
    state = jax.eval_shape(_init_fn(compile_key), jax.random.key(0), rules_b)
    replicated = NamedSharding(mesh, P())
    state_sh = state_shardings(state, mesh)
    return jax.jit(
        functools.partial(iteration_step, config=compile_key),
        in_shardings=(state_sh, _sharded_leaves(rules_b, mesh), replicated),
        out_shardings=(state_sh, replicated),
    )


def make_iteration(config: ml_collections.ConfigDict, mesh: Mesh):
    """The jitted iteration `(state, rules_b, key) -> (state, metrics)` on `mesh`.

    Built once per process, config and mesh; `.lower(...).compile()` on it compiles ahead of
    time (and is cached by JAX, so a second `train` in the same process does not recompile).
    """
    return _jitted_iteration(_compile_key(config), mesh)


# ---------------------------------------------------------------------------------------------
# Evaluation (mmc_jax.evaluate, when present)


def _play_match_fn():
    """`mmc_jax.evaluate.play_match`, or None while that module does not exist."""
    try:
        module = importlib.import_module("mmc_jax.evaluate")
    except ModuleNotFoundError as error:
        if error.name != "mmc_jax.evaluate":
            raise
        return None
    return getattr(module, "play_match", None)


def _metric_name(opponent: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in str(opponent))


def evaluate_params(
    config: ml_collections.ConfigDict,
    params: Any,
    key: jax.Array,
    play_match,
    variant: str | None = None,
    prefix: str = "eval/",
) -> dict[str, float]:
    """Plays `eval.num_games` against every `eval.opponents` entry; returns `eval/*` metrics.

    `variant` defaults to `config.variant`; `prefix` starts every metric name (meta-training
    uses `eval/<variant>/`).

    `play_match(network, params, variant, opponent, num_games, num_simulations, key)` (from
    `mmc_jax.evaluate`) returns a dict with `score` (W + D/2 per game), its 95% interval
    `score_ci95` [low, high], `wins`, `draws`, `losses` and `elo`.
    """
    network = network_lib.make_network(config.network)
    host_params = jax.device_get(params)
    metrics = {}
    for index, opponent in enumerate(config.eval.opponents):
        result = play_match(
            network,
            host_params,
            config.variant if variant is None else variant,
            opponent,
            int(config.eval.num_games),
            int(config.eval.num_simulations),
            jax.random.fold_in(key, index),
        )
        name = _metric_name(opponent)
        score = float(result["score"])
        metrics[f"{prefix}score_vs_{name}"] = score
        interval = result.get("score_ci95", result.get("ci95"))
        if isinstance(interval, list | tuple) and len(interval) == 2:
            metrics[f"{prefix}score_low_vs_{name}"] = float(interval[0])
            metrics[f"{prefix}score_high_vs_{name}"] = float(interval[1])
        elif interval is not None:  # a half-width
            metrics[f"{prefix}score_low_vs_{name}"] = max(0.0, score - float(interval))
            metrics[f"{prefix}score_high_vs_{name}"] = min(1.0, score + float(interval))
        for field in ("wins", "draws", "losses", "elo", "mean_plies"):
            if result.get(field) is not None:
                metrics[f"{prefix}{field}_vs_{name}"] = result[field]
    return metrics


# ---------------------------------------------------------------------------------------------
# The loop


def _checkpoint_state(
    state: TrainState, iteration: int, frames: int, games: int, save_replay: bool
) -> dict[str, Any]:
    saved = {
        "params": state.params,
        "opt_state": state.opt_state,
        "game_state": state.game_state,
        "iteration": np.asarray(iteration, np.int64),
        "frames": np.asarray(frames, np.int64),
        "games": np.asarray(games, np.int64),
    }
    if save_replay:
        saved["replay"] = state.replay
    return saved


def _check_finite(metrics: dict[str, Any], iteration: int, checkpoint_note: str) -> None:
    """Raises FloatingPointError naming the non-finite `train/*` metrics, if any."""
    bad = {
        k: v for k, v in metrics.items() if k.startswith("train/") and not math.isfinite(float(v))
    }
    if bad:
        raise FloatingPointError(
            f"non-finite training metrics at iteration {iteration}: {bad}. Stopping; nothing "
            f"of this iteration was saved ({checkpoint_note}). Lower learner.learning_rate or "
            f"set learner.max_grad_norm."
        )


def _progress_line(
    iteration: int,
    num_iterations: int,
    record: dict[str, Any],
    seconds: float,
    latest_eval: dict[str, Any],
) -> str:
    games_per_s = record["selfplay/games"] / seconds
    frames_per_s = record["selfplay/frames"] / seconds
    parts = [
        f"it {iteration}/{num_iterations}",
        f"frames {metrics_lib._compact_number(record['frames'])}",
        f"games {record['games']}",
        f"{games_per_s:.2f} games/s {frames_per_s:.0f} frames/s ({seconds:.1f} s)",
        f"loss pi {record['train/policy_loss']:.3f} v {record['train/value_loss']:.3f}",
        f"white/draw/black {record['selfplay/white_wins']}/{record['selfplay/draws']}/"
        f"{record['selfplay/black_wins']} len {record['selfplay/mean_game_length']:.0f}",
    ]
    if latest_eval:
        scores = []
        for key, score in latest_eval.items():
            if "/score_vs_" in key:
                low = latest_eval.get(key.replace("/score_vs_", "/score_low_vs_"), score)
                high = latest_eval.get(key.replace("/score_vs_", "/score_high_vs_"), score)
                scores.append(f"{key.split('/score_vs_')[1]} {score:.2f} [{low:.2f},{high:.2f}]")
        parts.append(f"eval@{latest_eval['iteration']} " + " ".join(scores))
    return " | ".join(parts)


def _start_params(template: Any, params: Any, mesh: Mesh) -> Any:
    """`params` checked against the shapes of `template` and replicated on `mesh`."""
    want, got = checkpoint_lib._leaf_shapes(template), checkpoint_lib._leaf_shapes(params)
    if want != got:
        differ = sorted(p for p in set(want) | set(got) if want.get(p) != got.get(p))
        raise ValueError(
            "init_params do not fit config.network: "
            + "; ".join(f"{p}: expected {want.get(p)}, got {got.get(p)}" for p in differ[:6])
        )
    params = jax.tree.map(lambda t, p: jnp.asarray(p, t.dtype), template, params)
    return jax.device_put(params, _replicated(params, mesh))


def _latest_eval(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The `eval/*` entries of the last record that has them, with its `iteration`."""
    for record in reversed(records):
        found = {k: v for k, v in record.items() if k.startswith("eval/")}
        if found:
            return dict(found, iteration=record.get("step"))
    return {}


def train(
    config: ml_collections.ConfigDict,
    workdir: str | os.PathLike,
    *,
    devices=None,
    stream=sys.stdout,
    init_params: Any = None,
) -> dict[str, Any]:
    """Trains (or resumes training) until `config.num_iterations` iterations are done.

    Args:
      config: run config (see `configs/gardner.py`); validated by `prepare_config`.
      workdir: run directory: `checkpoints/`, `metrics.jsonl`, `tensorboard/`, `plots/`.
        Checkpoints found there are resumed from.
      devices: devices of the data mesh (default: all).
      stream: where the progress lines go (None: silent).
      init_params: parameters to start from instead of a fresh initialisation when the workdir
        has no checkpoint yet (adaptation from a pretrained model); the optimizer state starts
        fresh. They must have the shapes of `config.network`. A resumed run ignores them.

    Returns:
      The last iteration's metrics (as written to `metrics.jsonl`) plus `iteration` (completed
      iterations), `start_iteration` (where this call started) and `compile_seconds`.

    Raises:
      ValueError: invalid config, batch not divisible by the device count, or a checkpoint
        that does not match the config.
      FloatingPointError: a non-finite loss.
    """
    config = prepare_config(config)
    mesh = make_mesh(devices)
    batch_size = int(config.selfplay.batch_size)
    check_batch_divisible(batch_size, mesh.size)
    is_chief = jax.process_index() == 0

    def log(line: str) -> None:
        if is_chief and stream is not None:
            print(line, file=stream, flush=True)

    replicated = NamedSharding(mesh, P())
    rules_b = R.batch(list(config.variants), batch_size)
    rules_b = jax.device_put(rules_b, _sharded_leaves(rules_b, mesh))
    init_key, run_key, eval_key = jax.random.split(jax.random.key(int(config.seed)), 3)
    state = init_train_state(config, rules_b, init_key, mesh)
    if bool(jax.device_get(state.game_state.terminated).all()):
        raise ValueError(
            f"the start position of {config.variant!r} is already over (no legal move): "
            "self-play has nothing to play"
        )
    save_replay = bool(config.checkpoint.save_replay)

    ckpt = checkpoint_lib.Checkpointer(workdir, max_to_keep=int(config.checkpoint.max_to_keep))
    writer = None
    try:
        start, frames, games = 0, 0, 0
        restored = ckpt.restore_or_none(
            _checkpoint_state(state, 0, 0, 0, save_replay), config=config
        )
        if restored is not None:
            start = int(restored["iteration"])
            frames, games = int(restored["frames"]), int(restored["games"])
            state = TrainState(
                params=restored["params"],
                opt_state=restored["opt_state"],
                game_state=restored["game_state"],
                replay=restored["replay"] if save_replay else state.replay,
            )
            state = jax.device_put(state, state_shardings(state, mesh))
            log(f"resumed from {ckpt.directory}/{start}: {start} iterations, {frames} frames")
        elif init_params is not None:
            state = state.replace(params=_start_params(state.params, init_params, mesh))
        writer = metrics_lib.MetricsWriter(
            workdir, resume_step=start, enabled=is_chief, stream=None
        )

        num_iterations = int(config.num_iterations)
        compile_seconds = 0.0
        record: dict[str, Any] = {}
        if start < num_iterations:
            network = network_lib.make_network(config.network)
            num_params = network_lib.num_params(state.params)
            log(
                f"{config.variant}: {mesh.size} device(s) ({jax.devices()[0].platform}), "
                f"{batch_size} games x {config.selfplay.num_plies} plies x "
                f"{config.selfplay.num_simulations} simulations per iteration, "
                f"net {config.network.num_blocks}x{config.network.channels} "
                f"({num_params:,} params; {type(network).__name__})"
            )
            started = time.time()
            example_key = jax.device_put(jax.random.fold_in(run_key, start), replicated)
            iteration_fn = make_iteration(config, mesh).lower(state, rules_b, example_key)
            iteration_fn = iteration_fn.compile()
            compile_seconds = time.time() - started
            log(f"compiled the iteration in {compile_seconds:.1f} s")

        play_match = _play_match_fn() if config.eval.every else None
        if config.eval.every and play_match is None:
            log("mmc_jax.evaluate.play_match not available: evaluation skipped")
        latest_eval = _latest_eval(metrics_lib.read_metrics(workdir)) if is_chief else {}
        for iteration in range(start, num_iterations):
            started = time.time()
            key = jax.device_put(jax.random.fold_in(run_key, iteration), replicated)
            state, metrics = iteration_fn(state, rules_b, key)
            metrics = {k: v.item() for k, v in jax.device_get(metrics).items()}
            seconds = time.time() - started
            done = iteration + 1
            _check_finite(
                metrics,
                iteration,
                f"last good checkpoint: step {ckpt.latest_step()} in {ckpt.directory}",
            )
            frames += int(metrics["selfplay/frames"])
            games += int(metrics["selfplay/games"])
            record = dict(metrics)
            record.update(
                frames=frames,
                games=games,
                iteration=done,
                **{
                    "perf/iteration_seconds": seconds,
                    "perf/games_per_s": metrics["selfplay/games"] / seconds,
                    "perf/frames_per_s": metrics["selfplay/frames"] / seconds,
                },
            )
            if play_match is not None and (done % config.eval.every == 0 or done == num_iterations):
                eval_started = time.time()
                latest_eval = evaluate_params(
                    config, state.params, jax.random.fold_in(eval_key, iteration), play_match
                )
                latest_eval["perf/eval_seconds"] = time.time() - eval_started
                record.update(latest_eval)
                latest_eval["iteration"] = done
            record = writer.write(done, record)
            log(_progress_line(done, num_iterations, record, seconds, latest_eval))
            if is_chief:
                try:
                    metrics_lib.plot_metrics(workdir)
                except Exception as error:  # a plot must never stop a training run
                    log(f"plotting failed: {error!r}")
            if done % int(config.checkpoint.every) == 0 or done == num_iterations:
                ckpt.save(
                    done,
                    _checkpoint_state(state, done, frames, games, save_replay),
                    config=config,
                    extra={"frames": frames, "games": games},
                )
        if not record:
            records = metrics_lib.read_metrics(workdir)
            record = dict(records[-1]) if records else {}
        record.update(
            iteration=max(start, num_iterations),
            start_iteration=start,
            compile_seconds=compile_seconds,
        )
        return record
    finally:
        ckpt.close()
        if writer is not None:
            writer.close()


# ---------------------------------------------------------------------------------------------
# CLI


def main(argv) -> None:
    """absl entry point: `train(FLAGS.config, FLAGS.workdir)`."""
    from absl import app, flags, logging

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    config = flags.FLAGS.config
    if is_meta_config(config):
        from mmc_jax import meta  # meta-training (configs/joat.py): same workdir conventions

        try:
            meta.prepare_meta_config(config)
        except ValueError as error:
            raise app.UsageError(str(error)) from None
        meta.train_meta(config, flags.FLAGS.workdir)
        return
    try:
        prepare_config(config)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    train(config, flags.FLAGS.workdir)


def is_meta_config(config: ml_collections.ConfigDict) -> bool:
    """A meta-training config (it has a `meta` section, e.g. configs/joat.py)."""
    return "meta" in config


def define_flags(flag_values=None) -> None:
    """Defines `--config` (an ml_collections config file, locked) and `--workdir`."""
    from absl import flags
    from ml_collections import config_flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Run config file, e.g. configs/gardner.py or configs/gardner.py:cpu; fields are "
        "overridden with --config.<field>=<value>.",
        flag_values=flag_values,
        lock_config=True,
    )
    flags.DEFINE_string(
        "workdir",
        None,
        "Run directory (checkpoints, metrics, plots); re-running resumes.",
        flag_values=flag_values,
    )
    flags.mark_flags_as_required(["config", "workdir"], flag_values=flag_values)


if __name__ == "__main__":
    from absl import app

    define_flags()
    app.run(main)
