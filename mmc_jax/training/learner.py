"""Learner: AlphaZero loss, optax optimizer, minibatch scan, and a replay ring buffer.

Everything here is pure and jittable. The learner config (`config.learner`) fields read here:

  optimizer          "adam" | "adamw" | "sgd"                  (default "adam")
  learning_rate      peak learning rate                        (required)
  lr_schedule        "constant" | "cosine" | "warmup_cosine" | "linear"   (default "constant")
  warmup_steps       warmup length for "warmup_cosine"        (default 0)
  decay_steps        length of the decay for the non-constant schedules (required for them)
  end_lr_factor      final lr = learning_rate * end_lr_factor  (default 0.0)
  momentum, nesterov SGD momentum                              (default 0.9, False)
  b1, b2, eps        Adam moments                              (optax defaults)
  max_grad_norm      global-norm gradient clipping, 0 = off    (default 0)
  weight_decay       strength, 0 = off                         (default 0)
  weight_decay_mode  "decoupled" (AdamW style, in the optimizer) | "l2" (penalty in the loss)
                     (default "decoupled"; "adamw" is "adam" with decoupled decay)
  weight_decay_mask  "kernels" | "all": what decoupled decay applies to (default "kernels")
  value_loss_weight  weight of the value MSE in the total loss (default 1.0)
  batch_size         minibatch size used by `train_epoch`      (required there)
  sampler            how `draw_rows` draws minibatch rows (recon, TD(λ)): "inverse_cdf" |
                     "gumbel" (`configured_sampler`; absent: "gumbel", the older runs' draws)

Weight decay applies to kernels only (ndim > 1), not to biases or LayerNorm scales, unless
`weight_decay_mask` is "all" (TD(λ)'s and recon's, as their runs were trained). Every learner
builds its optimizer here (`make_optimizer`), so a schedule or a clip set in its `learner`
section is honoured whatever the algorithm; one whose defaults differ gives them to
`optimizer_config`.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import chex
import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.infra import sharding
from mmc_jax.model import network as network_lib

Params = Any


class Batch(NamedTuple):
    """Training samples, leading dimension N (one sample per searched position).

    obs: `[N, 5, 5, C]` float32 observation from the side to move's view.
    legal_action_mask: `[N, A]` bool; the policy is a softmax over legal actions only.
    policy_target: `[N, A]` float32, the search's action weights (sum to 1 over legal actions).
    value_target: `[N]` float32 in [-1, 1], final outcome from the side to move's view (mixed
      with the search's value under `selfplay.value_q_weight`: `selfplay.compute_targets`).
    value_mask: `[N]` bool; False for games cut off by the end of a self-play scan, whose
      outcome is unknown: those samples still train the policy but not the value.
    """

    obs: jax.Array
    legal_action_mask: jax.Array
    policy_target: jax.Array
    value_target: jax.Array
    value_mask: jax.Array


class PackedBatch(NamedTuple):
    """Training samples as the replay ring stores them (`pack`): about 950 bytes a sample where
    a `Batch` takes 8.8 kB (mostly its 1225-wide policy target and legal mask). Leading
    dimension N; `unpack` gives back the `Batch`, bit for bit.

    obs: `[N, C]` uint32, the observation packed by `rules.pack_observation`.
    legal_planes: `[N, 49]` uint32 legal-move planes (`rules.legal_planes`): the legal mask, and
      the numbering of the position's slots (`search.all_slot_actions`).
    policy_target: `[N, search.MAX_LEGAL_MOVES]` float32, the policy target over the slots
      (0 in the empty ones).
    value_target, value_mask: as in `Batch`.
    """

    obs: jax.Array
    legal_planes: jax.Array
    policy_target: jax.Array
    value_target: jax.Array
    value_mask: jax.Array


def _flat_slots(planes: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`search.all_slot_actions` of planes [..., 49] with any leading axes, flattened to [M].

    Row by row (`vmap`: the same values), so that the scatter inside is one whose batch axis
    XLA sees: a minibatch split over devices then unpacks on each device. Over the whole batch
    at once, the partitioner gathered every device's legal planes in every learner step
    (`tests/runs_support.py` looks for gathers inside loops)."""
    rows = planes.reshape(-1, planes.shape[-1])
    actions, valid = jax.vmap(lambda row: search.all_slot_actions(row[None]))(rows)
    return actions[:, 0], valid[:, 0]


def pack(batch: Batch) -> PackedBatch:
    """A `Batch` (any leading axes) in the replay ring's layout.

    Exact, `unpack(pack(batch)) == batch` bit for bit, for every batch self-play makes: the
    observations in `rules.observe`'s layout, a policy target that is zero off the legal mask,
    at most `search.MAX_LEGAL_MOVES` legal moves per position (true of every position).
    """
    lead = batch.value_target.shape
    planes = R.mask_to_planes(batch.legal_action_mask)
    actions, valid = _flat_slots(planes)
    policy = batch.policy_target.reshape(-1, batch.policy_target.shape[-1])
    policy = search.compact(policy, actions, valid, fill=0.0).astype(batch.policy_target.dtype)
    return PackedBatch(
        obs=R.pack_observation(batch.obs),
        legal_planes=planes,
        policy_target=policy.reshape(*lead, search.MAX_LEGAL_MOVES),
        value_target=batch.value_target,
        value_mask=batch.value_mask,
    )


def unpack(packed: PackedBatch) -> Batch:
    """The `Batch` of packed samples (any leading axes): what the loss reads."""
    lead = packed.value_target.shape
    actions, valid = _flat_slots(packed.legal_planes)
    policy = packed.policy_target.reshape(-1, search.MAX_LEGAL_MOVES)
    policy = search.expand(policy, actions, valid)
    return Batch(
        obs=R.unpack_observation(packed.obs),
        legal_action_mask=R.planes_to_mask(packed.legal_planes),
        policy_target=policy.reshape(*lead, policy.shape[-1]),
        value_target=packed.value_target,
        value_mask=packed.value_mask,
    )


def example_batch() -> Batch:
    """One sample of `Batch` as `ShapeDtypeStruct`s (leading axis 1): what the loss reads, and
    the replay rings' layout before 2026-11-26."""
    return Batch(
        obs=jax.ShapeDtypeStruct((1, *R.OBS_SHAPE), jnp.float32),
        legal_action_mask=jax.ShapeDtypeStruct((1, R.NUM_ACTIONS), jnp.bool_),
        policy_target=jax.ShapeDtypeStruct((1, R.NUM_ACTIONS), jnp.float32),
        value_target=jax.ShapeDtypeStruct((1,), jnp.float32),
        value_mask=jax.ShapeDtypeStruct((1,), jnp.bool_),
    )


def example_packed() -> PackedBatch:
    """One sample of `PackedBatch` as `ShapeDtypeStruct`s: the replay rings' layout."""
    return jax.eval_shape(pack, example_batch())


def as_batch(samples: Batch | PackedBatch) -> Batch:
    """`samples` as a `Batch`: unpacked if packed (a static, Python-level choice)."""
    return unpack(samples) if isinstance(samples, PackedBatch) else samples


def sample_bytes(samples: Batch | PackedBatch) -> int:
    """Bytes of one sample of `samples` (arrays or `ShapeDtypeStruct`s, leading axis N)."""
    return sum(
        int(np.prod(x.shape[1:], dtype=np.int64)) * np.dtype(x.dtype).itemsize
        for x in jax.tree.leaves(samples)
    )


# ---------------------------------------------------------------------------------------------
# Loss


def _decay_mask(params: Params) -> Params:
    """True for leaves that receive weight decay: kernels, not biases or norm scales."""
    return jax.tree.map(lambda p: p.ndim > 1, params)


def _weight_decay_mode(config: ml_collections.ConfigDict) -> str:
    if config.get("optimizer", "adam") == "adamw":
        return "decoupled"
    mode = config.get("weight_decay_mode", "decoupled")
    if mode not in ("decoupled", "l2"):
        raise ValueError(f"learner.weight_decay_mode must be 'decoupled' or 'l2', got {mode!r}")
    return mode


def loss_fn(
    params: Params,
    network: network_lib.PolicyValueNet,
    batch: Batch,
    config: ml_collections.ConfigDict,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """AlphaZero loss on one minibatch.

    total = policy cross-entropy + value_loss_weight * masked value MSE (+ L2 penalty when
    `weight_decay_mode == "l2"`).

    Args:
      params: network parameters.
      network: the `PolicyValueNet`.
      batch: a `Batch` or `PackedBatch` (unpacked first: the same loss) with leading
        dimension N.
      config: the learner config.

    Returns:
      (total loss scalar, metrics dict of scalars: policy_loss, value_loss, l2_loss, total,
      policy_entropy, value_mask_fraction).
    """
    batch = as_batch(batch)
    chex.assert_rank(batch.obs, 4)
    num_samples = batch.obs.shape[0]
    chex.assert_shape(batch.policy_target, (num_samples, network.num_actions))
    chex.assert_shape([batch.value_target, batch.value_mask], (num_samples,))

    logits, value = network.apply({"params": params}, batch.obs, batch.legal_action_mask)
    log_probs = jax.nn.log_softmax(logits)
    policy_loss = -jnp.mean(jnp.sum(batch.policy_target * log_probs, axis=-1))

    value_mask = batch.value_mask.astype(jnp.float32)
    # Zero the masked targets before the subtraction, not just the masked errors after it: a
    # NaN target would otherwise reach the gradient as NaN * 0 = NaN.
    value_target = jnp.where(batch.value_mask, batch.value_target, 0.0)
    squared_error = jnp.where(batch.value_mask, jnp.square(value - value_target), 0.0)
    value_loss = jnp.sum(squared_error) / jnp.maximum(jnp.sum(value_mask), 1.0)

    weight_decay = float(config.get("weight_decay", 0.0))
    if weight_decay > 0.0 and _weight_decay_mode(config) == "l2":
        kernels = [p for p in jax.tree.leaves(params) if p.ndim > 1]  # as _decay_mask
        l2_loss = 0.5 * weight_decay * sum(jnp.sum(jnp.square(p)) for p in kernels)
    else:
        l2_loss = jnp.zeros((), jnp.float32)

    total = policy_loss + config.get("value_loss_weight", 1.0) * value_loss + l2_loss
    probs = jnp.exp(log_probs)
    policy_entropy = -jnp.mean(jnp.sum(jnp.where(probs > 0, probs * log_probs, 0.0), axis=-1))
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "l2_loss": l2_loss,
        "total": total,
        "policy_entropy": policy_entropy,
        "value_mask_fraction": jnp.mean(value_mask),
    }
    return total, metrics


# ---------------------------------------------------------------------------------------------
# Optimizer


def make_schedule(config: ml_collections.ConfigDict) -> optax.Schedule:
    """Learning-rate schedule from the learner config (see the module docstring)."""
    peak = float(config.learning_rate)
    name = config.get("lr_schedule", "constant")
    end = peak * float(config.get("end_lr_factor", 0.0))
    if name == "constant":
        return optax.constant_schedule(peak)
    decay_steps = int(config.decay_steps)
    if name == "cosine":
        return optax.cosine_decay_schedule(peak, decay_steps, alpha=end / peak if peak else 0.0)
    if name == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=peak,
            warmup_steps=int(config.get("warmup_steps", 0)),
            decay_steps=decay_steps,
            end_value=end,
        )
    if name == "linear":
        return optax.linear_schedule(peak, end, decay_steps)
    raise ValueError(
        f"learner.lr_schedule must be constant|cosine|warmup_cosine|linear, got {name!r}"
    )


# The learner fields `make_optimizer` reads.
OPTIMIZER_FIELDS = (
    "optimizer", "learning_rate", "lr_schedule", "warmup_steps", "decay_steps", "end_lr_factor",
    "momentum", "nesterov", "b1", "b2", "eps", "max_grad_norm", "weight_decay",
    "weight_decay_mode", "weight_decay_mask",
)  # fmt: skip


def optimizer_config(config, defaults: dict[str, Any]) -> ml_collections.ConfigDict:
    """The optimizer fields of the learner section `config` (a ConfigDict or a mapping) over an
    algorithm's own `defaults` (what its configs recorded before they had these fields)."""
    fields = {name: config[name] for name in OPTIMIZER_FIELDS if name in config}
    return ml_collections.ConfigDict({**defaults, **fields})


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """Builds the optax optimizer: [clip] -> adam|sgd -> [decoupled decay] -> -lr * schedule."""
    name = config.get("optimizer", "adam")
    parts = []
    max_grad_norm = float(config.get("max_grad_norm", 0.0) or 0.0)
    if max_grad_norm > 0.0:
        parts.append(optax.clip_by_global_norm(max_grad_norm))
    if name in ("adam", "adamw"):
        parts.append(
            optax.scale_by_adam(
                b1=config.get("b1", 0.9), b2=config.get("b2", 0.999), eps=config.get("eps", 1e-8)
            )
        )
    elif name == "sgd":
        momentum = float(config.get("momentum", 0.9) or 0.0)
        if momentum > 0.0:
            parts.append(optax.trace(decay=momentum, nesterov=config.get("nesterov", False)))
    else:
        raise ValueError(f"learner.optimizer must be adam|adamw|sgd, got {name!r}")
    weight_decay = float(config.get("weight_decay", 0.0))
    if weight_decay > 0.0 and _weight_decay_mode(config) == "decoupled":
        mask = config.get("weight_decay_mask", "kernels")
        if mask not in ("kernels", "all"):
            raise ValueError(f"learner.weight_decay_mask must be 'kernels' or 'all', got {mask!r}")
        parts.append(
            optax.add_decayed_weights(weight_decay, mask=_decay_mask if mask == "kernels" else None)
        )
    parts.append(optax.scale_by_learning_rate(make_schedule(config)))
    return optax.chain(*parts)


# ---------------------------------------------------------------------------------------------
# Updates


def _global_norm(tree: Any) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def train_step(
    params: Params,
    opt_state: optax.OptState,
    minibatch: Batch | PackedBatch,
    network: network_lib.PolicyValueNet,
    optimizer: optax.GradientTransformation,
    config: ml_collections.ConfigDict,
) -> tuple[Params, optax.OptState, dict[str, jax.Array]]:
    """One gradient step on a minibatch. Returns (params, opt_state, metrics incl. grad_norm)."""
    grads, metrics = jax.grad(loss_fn, has_aux=True)(params, network, minibatch, config)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = dict(metrics, grad_norm=_global_norm(grads))
    return params, opt_state, metrics


def split_minibatches(minibatches: Batch, mesh: Mesh | None) -> Batch:
    """Minibatches [k, b, ...] split along b over every device of `mesh`: data parallelism, XLA
    adds the gradient all-reduce. Without this constraint the partitioner kept each minibatch
    whole on every device, which then computed the same full-batch gradient. Unchanged without
    a mesh, or when b does not divide by the devices (then every device computes the whole
    minibatch: the same values, slower)."""
    if mesh is None or jax.tree.leaves(minibatches)[0].shape[1] % mesh.size:
        return minibatches
    return sharding.constrain(minibatches, mesh, P(None, *sharding.batch_spec(mesh)))


def train_epoch(
    params: Params,
    opt_state: optax.OptState,
    batch: Batch,
    key: jax.Array,
    config: ml_collections.ConfigDict,
    mesh: Mesh | None = None,
) -> tuple[Params, optax.OptState, dict[str, jax.Array]]:
    """One shuffled pass over a flat batch of N samples, minibatch updates in `lax.scan`.

    N // batch_size minibatches are used; the remainder of the shuffle is dropped. On `mesh`
    every minibatch is split over the devices (`split_minibatches`).

    Args:
      params, opt_state: current parameters and `make_optimizer(config.learner)` state.
      batch: `Batch` or `PackedBatch` with leading dimension N >= batch_size (a packed batch
        is unpacked one minibatch at a time, in the loss).
      key: consumed for the shuffle.
      config: the run config, with `config.network` and `config.learner` sub-configs.
        Jit with the config closed over (`functools.partial`) or as a static argument
        (a `FrozenConfigDict` is hashable).

    Returns:
      (params, opt_state, metrics averaged over the minibatches).
    """
    network = network_lib.make_network(config.network)
    optimizer = make_optimizer(config.learner)
    batch_size = int(config.learner.batch_size)
    num_samples = batch.obs.shape[0]
    num_minibatches = num_samples // batch_size
    if num_minibatches == 0:
        raise ValueError(
            f"train_epoch needs at least batch_size={batch_size} samples, got {num_samples}"
        )

    permutation = jax.random.permutation(key, num_samples)[: num_minibatches * batch_size]
    minibatches = jax.tree.map(
        lambda x: x[permutation].reshape(num_minibatches, batch_size, *x.shape[1:]), batch
    )
    minibatches = split_minibatches(minibatches, mesh)
    step = functools.partial(
        train_step, network=network, optimizer=optimizer, config=config.learner
    )

    def body(carry, minibatch):
        params, opt_state = carry
        params, opt_state, metrics = step(params, opt_state, minibatch)
        return (params, opt_state), metrics

    (params, opt_state), metrics = jax.lax.scan(body, (params, opt_state), minibatches)
    return params, opt_state, jax.tree.map(jnp.mean, metrics)


# ---------------------------------------------------------------------------------------------
# Replay buffer


@flax.struct.dataclass(kw_only=True)
class ReplayBuffer:
    """Fixed-capacity ring of samples; the oldest are overwritten first.

    With `capacity = N * samples_per_iteration` it holds exactly the last N iterations.

    data: `PackedBatch` (the rings of the algorithms: `pack`) or `Batch`, leading dimension
      `capacity`.
    position: int32 scalar, the slot the next sample goes to.
    size: int32 scalar, how many slots hold samples (min(total added, capacity)); the filled
      slots are always `[0, size)`.
    total_added: int32 scalar, samples ever added.
    """

    data: PackedBatch | Batch
    position: jax.Array
    size: jax.Array
    total_added: jax.Array

    @property
    def capacity(self) -> int:
        """Static number of slots."""
        return self.data.obs.shape[0]


@flax.struct.dataclass(kw_only=True)
class PendingReplayBuffer(ReplayBuffer):
    """A `ReplayBuffer` (`replay_init(..., pending=True)`) that also remembers which samples
    still wait for their game's result. A subclass, not an optional field, so that a plain
    ring's pytree (and so every checkpoint written before it existed) is unchanged.

    pending_mover: `[capacity]` int32: for a sample whose game was still running when it was
      added, the colour to move in it (0 White, 1 Black), so that `replay_resolve` can give it
      the game's result once that is known; -1 for every other slot.
    """

    pending_mover: jax.Array


def replay_init(example: Batch, capacity: int, pending: bool = False) -> ReplayBuffer:
    """An empty buffer of `capacity` samples shaped like `example` (leading dim ignored).

    `example` may hold arrays or `jax.ShapeDtypeStruct`s. With `pending` the ring also keeps
    `pending_mover`, for samples whose result `replay_resolve` fills in later.
    """
    data = jax.tree.map(lambda x: jnp.zeros((capacity, *x.shape[1:]), x.dtype), example)
    zero = jnp.zeros((), jnp.int32)
    if pending:
        return PendingReplayBuffer(
            data=data,
            position=zero,
            size=zero,
            total_added=zero,
            pending_mover=jnp.full((capacity,), -1, jnp.int32),
        )
    return ReplayBuffer(data=data, position=zero, size=zero, total_added=zero)


def replay_add(
    buffer: ReplayBuffer, batch: Batch, pending_mover: jax.Array | None = None
) -> ReplayBuffer:
    """Writes the `[S]` samples of `batch` at the ring position, overwriting the oldest.

    If S > capacity only the last `capacity` samples are kept. A ring with `pending_mover`
    takes the `[S]` int32 `pending_mover` of the new samples (-1 where the result is known;
    None: all known).
    """
    capacity = buffer.capacity
    num_new = batch.obs.shape[0]
    pending = isinstance(buffer, PendingReplayBuffer)
    if pending_mover is not None and not pending:
        raise ValueError("pending_mover given for a replay ring made without pending=True")
    if pending and pending_mover is None:
        pending_mover = jnp.full((num_new,), -1, jnp.int32)
    if num_new > capacity:
        skipped = num_new - capacity
        batch = jax.tree.map(lambda x: x[skipped:], batch)
        if pending:
            pending_mover = pending_mover[skipped:]
        buffer = buffer.replace(
            position=(buffer.position + skipped) % capacity,
            total_added=buffer.total_added + skipped,
        )
        num_new = capacity
    slots = (buffer.position + jnp.arange(num_new)) % capacity
    data = jax.tree.map(lambda stored, new: stored.at[slots].set(new), buffer.data, batch)
    buffer = buffer.replace(
        data=data,
        position=(buffer.position + num_new) % capacity,
        size=jnp.minimum(buffer.size + num_new, capacity),
        total_added=buffer.total_added + num_new,
    )
    if pending:
        buffer = buffer.replace(
            pending_mover=buffer.pending_mover.at[slots].set(pending_mover.astype(jnp.int32))
        )
    return buffer


def replay_resolve(
    buffer: PendingReplayBuffer, finished: jax.Array, outcome: jax.Array, q_weight: float = 0.0
) -> tuple[PendingReplayBuffer, jax.Array]:
    """Gives the pending samples of every game that has now finished its result.

    The ring must be filled game-slot-major the way AlphaZero fills it: every `replay_add`
    writes whole plies of the same B game slots (`[T * B]`, ply-major), so ring slot k holds a
    sample of game slot `k % B`. The pending samples of game slot b (`pending_mover >= 0`)
    then all belong to the game slot b is still playing: a game's samples stay pending only
    while it runs, and it runs on in the same slot from one self-play scan to the next.

    Args:
      buffer: a ring made with `pending=True`, its capacity a multiple of B.
      finished: `[B]` bool, the game that slot b was playing has ended.
      outcome: `[B, 2]` float32 [White, Black] result of that game.
      q_weight: `selfplay.value_q_weight` w: a pending sample already holds w * its search
        value (`selfplay.compute_targets`), to which (1 - w) * the result is added.

    Returns:
      The ring with those samples' `value_target` (the result for their mover, mixed with the
      search value when w > 0) and `value_mask` set and their `pending_mover` cleared, and the
      int32 number resolved.
    """
    if not isinstance(buffer, PendingReplayBuffer):
        raise ValueError("replay_resolve needs a replay ring made with pending=True")
    num_slots = finished.shape[0]
    if buffer.capacity % num_slots:
        raise ValueError(
            f"replay capacity {buffer.capacity} is not a multiple of the {num_slots} game slots"
        )
    game = jnp.arange(buffer.capacity) % num_slots
    mover = buffer.pending_mover
    hit = (mover >= 0) & finished[game]
    result = jnp.take_along_axis(outcome[game], jnp.maximum(mover, 0)[:, None], axis=1)[:, 0]
    result = result.astype(buffer.data.value_target.dtype)
    if q_weight:  # a Python-level branch: w = 0 compiles the program it always did
        result = (1.0 - q_weight) * result + buffer.data.value_target
    data = buffer.data._replace(
        value_target=jnp.where(hit, result, buffer.data.value_target),
        value_mask=buffer.data.value_mask | hit,
    )
    resolved = buffer.replace(data=data, pending_mover=jnp.where(hit, -1, mover))
    return resolved, jnp.sum(hit, dtype=jnp.int32)


def replay_sample(
    buffer: ReplayBuffer, key: jax.Array, num_samples: int, replace: bool = False
) -> Batch:
    """Draws `num_samples` (static) samples uniformly from the filled slots.

    Without replacement (the default) every filled slot appears at most once as long as
    `num_samples <= size`; beyond that the draw wraps around and repeats slots. Sampling from an
    empty buffer returns zeros (slot 0), never an error: check `buffer.size` before training.

    Returns a `Batch` with leading dimension `num_samples`.
    """
    size = jnp.maximum(buffer.size, 1)
    if replace:
        indices = jax.random.randint(key, (num_samples,), 0, size)
    else:
        # Random priorities, unfilled slots last: the first `size` of the order are a uniform
        # random permutation of the filled slots.
        priorities = jax.random.uniform(key, (buffer.capacity,))
        priorities = jnp.where(jnp.arange(buffer.capacity) < buffer.size, priorities, 2.0)
        order = jnp.argsort(priorities)
        positions = jnp.arange(num_samples) % size
        indices = order[positions]
    return jax.tree.map(lambda x: x[indices], buffer.data)


# How `draw_rows` draws (`config.learner.sampler` of the recon and TD(λ) algorithms).
SAMPLERS = ("inverse_cdf", "gumbel")


def configured_sampler(learner_config: ml_collections.ConfigDict) -> str:
    """`learner_config.sampler`, validated (ValueError naming the field); a config recorded
    before the field existed drew with "gumbel", and reads so."""
    sampler = str(learner_config.get("sampler", "gumbel"))
    if sampler not in SAMPLERS:
        raise ValueError(f"config.learner.sampler={sampler!r}: one of {SAMPLERS}")
    return sampler


def draw_rows(key: jax.Array, weight: jax.Array, size: int, sampler: str = "inverse_cdf"):
    """`size` (static) row indices of `weight` [N], drawn with replacement, row r with
    probability weight[r] / sum(weight); a row of weight 0 is never drawn (weights >= 0, not
    all 0).

    "inverse_cdf": one uniform per draw looked up in the running sum of the weights,
    O(N + size log N). "gumbel": `jax.random.categorical` over log-weights, which draws
    [size, N] Gumbel noise, O(size x N): with 32 minibatches of 256 over recon's 14k pooled
    rows, a quarter of a recon iteration on the CPU. The same distribution, other draws: the
    runs made before 2026-11-28 drew with "gumbel", and set it to be reproduced."""
    if sampler == "gumbel":
        return jax.random.categorical(key, jnp.log(weight), shape=(size,))
    if sampler != "inverse_cdf":
        raise ValueError(f"sampler {sampler!r}: one of {SAMPLERS}")
    total = jnp.cumsum(weight)
    point = jax.random.uniform(key, (size,), weight.dtype) * total[-1]
    # The first row whose running sum passes the point: a weight-0 row adds nothing, so it is
    # never that row. A point rounded up to the total passes none: it takes the last row of
    # positive weight.
    last = weight.shape[0] - 1 - jnp.argmax(weight[::-1] > 0)
    return jnp.minimum(jnp.searchsorted(total, point, side="right"), last)


def replay_contents(buffer: ReplayBuffer) -> tuple[Batch, jax.Array]:
    """All slots in ring order, oldest first, with a `[capacity]` bool mask of filled slots."""
    capacity = buffer.capacity
    # When not yet full the oldest sample is slot 0; once full it is the write position.
    start = jnp.where(buffer.size < capacity, 0, buffer.position)
    order = (start + jnp.arange(capacity)) % capacity
    data = jax.tree.map(lambda x: x[order], buffer.data)
    return data, jnp.arange(capacity) < buffer.size


# ---------------------------------------------------------------------------------------------
# The inner procedure: what JOAT meta-trains for and what `adapt` runs, defined once


def inner_procedure(
    params: Params,
    batch: Batch,
    key: jax.Array,
    network_config: ml_collections.ConfigDict,
    inner: ml_collections.ConfigDict,
    mesh: Mesh | None = None,
) -> tuple[Params, dict[str, jax.Array]]:
    """k optimizer steps on one task's data from a FRESH optimizer state.

    The minibatches are `inner.steps` draws of `inner.batch_size` samples without replacement
    from the flat `batch` [N] (wrapping around when N < k * b). The optimizer is
    `make_optimizer(inner)` (Reptile's: Adam with `inner.b1` = 0), initialised here, so no
    state carries over between tasks or adaptation iterations.

    Meta-training (`mmc_jax.algorithms.meta`, per task) and adaptation
    (`mmc_jax.algorithms.alphazero` with `learner.fresh_state`, the learner of `mmc_jax.adapt`) both
    call this function. On `mesh` every minibatch is split over the devices (`split_minibatches`).

    Returns:
      (adapted params, metrics of every step [k]).
    """
    network = network_lib.make_network(network_config)
    optimizer = make_optimizer(inner)
    steps, batch_size = int(inner.steps), int(inner.batch_size)
    num_samples = batch.obs.shape[0]
    order = jax.random.permutation(key, num_samples)
    index = order[jnp.arange(steps * batch_size) % num_samples]
    minibatches = jax.tree.map(lambda x: x[index].reshape(steps, batch_size, *x.shape[1:]), batch)
    minibatches = split_minibatches(minibatches, mesh)
    step = functools.partial(train_step, network=network, optimizer=optimizer, config=inner)

    def body(carry, minibatch):
        params, opt_state = carry
        params, opt_state, metrics = step(params, opt_state, minibatch)
        return (params, opt_state), metrics

    (params, _), metrics = jax.lax.scan(body, (params, optimizer.init(params)), minibatches)
    return params, metrics
