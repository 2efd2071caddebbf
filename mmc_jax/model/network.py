"""Policy-value network: a small pre-activation ResNet over the 5x5 board.

`PolicyValueNet` maps observations `[B, 5, 5, C]` to policy logits `[B, A]` (A = 1225 actions)
and a value `[B]` in [-1, 1], from the side to move's point of view. The default policy head
is fully convolutional: 49 move planes per square, flattened into the engine's action numbering
(`square_planes_to_actions`).

Every convolution goes through `conv_nhwc`, whose gradient is written as canonical NHWC/HWIO
convolutions: XLA's CPU backend only rewrites non-canonical convolutions (the ones JAX's
transpose rule produces for the gradient) into its fast Eigen form in the entry computation, so
inside a `lax.scan` or `while_loop` body they fell back to a naive loop, 14-25x slower
(experiments/bench/README.md).

There is no BatchNorm: the parameters are one plain pytree (no mutable `batch_stats`
collection), so the network is applied identically in training and in search, and parameter
trees of several tasks can be averaged directly (JOAT / Reptile). An optional LayerNorm keeps
deeper nets well conditioned; the last convolution of every residual block starts at zero, so
each block is the identity at initialisation and depth does not blow up the activations.

Typical use:

    network = make_network(config.network)
    params = init_params(network, jax.random.key(0), obs_shape=(5, 5, C))
    logits, value = network.apply({"params": params}, obs, legal_action_mask)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from mmc_jax.rules import game as _game

NUM_ACTIONS = 1225
# Observation channels before the rules descriptor (pieces, hidden, colour, clocks, repetition,
# ply). A network built with `rule_planes="none"` reads only these: it is not told the rules.
BOARD_CHANNELS = _game.BOARD_CHANNELS
RULE_PLANES = ("none", "descriptor")
# The observation layout this code produces; checkpoints record `obs_layout(config)` and
# loading calls `check_obs_layout`.
OBS_LAYOUT = _game.OBS_LAYOUT

# Logit given to illegal actions. A large finite negative rather than -inf (or finfo.min):
# softmax still gives them exactly zero probability, while `0 * log_softmax` stays finite, so a
# cross-entropy against a target that is zero on illegal moves never produces NaN.
MASKED_LOGIT = -1e9


_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x: jax.Array, kernel: jax.Array, padding: tuple) -> jax.Array:
    return jax.lax.conv_general_dilated(x, kernel, (1, 1), padding, dimension_numbers=_NHWC)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv_canonical_grad(x: jax.Array, kernel: jax.Array, padding: tuple) -> jax.Array:
    return _conv(x, kernel, padding)


def _conv_forward(x, kernel, padding):
    return _conv(x, kernel, padding), (x, kernel)


def _conv_backward(padding, residuals, dy):
    """Both gradients as stride-1 NHWC x HWIO convolutions (what XLA:CPU runs with Eigen).

    d/dx: dy correlated with the spatially flipped kernel, its in/out features swapped, padded
    by `k - 1 - pad`. d/dkernel: the input with batch and features swapped ([C, H, W, B], B as
    the contracted feature) correlated with dy as a kernel ([H', W', B, O]), same padding.
    """
    x, kernel = residuals
    kh, kw = kernel.shape[:2]
    (top, bottom), (left, right) = padding
    flipped = jnp.flip(kernel, (0, 1)).transpose(0, 1, 3, 2)
    dx = _conv(dy, flipped, ((kh - 1 - top, kh - 1 - bottom), (kw - 1 - left, kw - 1 - right)))
    dkernel = _conv(x.transpose(3, 1, 2, 0), dy.transpose(1, 2, 0, 3), padding)
    return dx.astype(x.dtype), dkernel.transpose(1, 2, 0, 3).astype(kernel.dtype)


_conv_canonical_grad.defvjp(_conv_forward, _conv_backward)


def conv_nhwc(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    precision: Any = None,
    **kwargs: Any,
) -> jax.Array:
    """`jax.lax.conv_general_dilated` for `nn.Conv(conv_general_dilated=...)`, the same values,
    with a gradient made of canonical convolutions (see the module docstring).

    lhs `[B, H, W, C]`, rhs `[kh, kw, C, O]` -> `[B, H', W', O]`. Strided, dilated, grouped or
    precision-constrained convolutions go to `jax.lax.conv_general_dilated` unchanged.
    """
    plain = (
        all(s == 1 for s in window_strides)
        and all(d == 1 for d in (lhs_dilation or ()))
        and all(d == 1 for d in (rhs_dilation or ()))
        and feature_group_count == 1
        and precision is None
        and not kwargs
        and lhs.ndim == 4
        and jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
        == jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC)
    )
    if not plain:
        return jax.lax.conv_general_dilated(
            lhs,
            rhs,
            window_strides,
            padding,
            lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation,
            dimension_numbers=dimension_numbers,
            feature_group_count=feature_group_count,
            precision=precision,
            **kwargs,
        )
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], (1, 1), padding)
    padding = tuple((int(low), int(high)) for low, high in padding)
    return _conv_canonical_grad(lhs, rhs, padding)


def _conv_module(xla_conv_grad: bool) -> Any:
    """`nn.Conv`, with `conv_nhwc` unless `xla_conv_grad`: same parameters, names and values."""
    return nn.Conv if xla_conv_grad else functools.partial(nn.Conv, conv_general_dilated=conv_nhwc)


class ResidualBlock(nn.Module):
    """Pre-activation residual block: `x + conv(relu(norm(conv(relu(norm(x))))))`.

    Input and output `[B, 5, 5, channels]`.
    """

    channels: int
    layer_norm: bool = False
    dtype: Any = jnp.float32
    xla_conv_grad: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        Conv = _conv_module(self.xla_conv_grad)
        y = x
        if self.layer_norm:
            y = nn.LayerNorm(dtype=self.dtype)(y)
        y = nn.relu(y)
        y = Conv(self.channels, (3, 3), dtype=self.dtype)(y)
        if self.layer_norm:
            y = nn.LayerNorm(dtype=self.dtype)(y)
        y = nn.relu(y)
        # Zero init: the block starts as the identity (no normalisation layer to tame depth).
        y = Conv(self.channels, (3, 3), kernel_init=nn.initializers.zeros, dtype=self.dtype)(y)
        return x + y


def square_planes_to_actions(planes: jax.Array) -> jax.Array:
    """Flattens per-square move planes into action ids.

    The rules engine (like pgx `gardner_chess`) numbers actions `49 * square + plane` with
    `square = 5 * file + rank`, both from the mover's view, and observations are indexed
    `[rank, file]` from the same view. So the planes predicted at observation cell `[r, f]` are
    the moves starting on that square.

    Args:
      planes: `[B, 5 (rank), 5 (file), P]` (P = 49 move planes per square).

    Returns:
      `[B, 25 * P]` with `out[:, P * (5 * f + r) + p] == planes[:, r, f, p]`.
    """
    batch_size = planes.shape[0]
    return planes.transpose(0, 2, 1, 3).reshape(batch_size, -1)


class PolicyValueNet(nn.Module):
    """AlphaZero-style policy-value ResNet for 5x5 boards.

    Attributes:
      num_blocks: number of residual blocks in the trunk.
      channels: width of the trunk.
      num_actions: size of the policy output (1225 for the minichess action space).
      policy_head: "conv" (default): a 3x3 convolution then a 1x1 convolution to
        `num_actions / 25` move planes per square, laid out by `square_planes_to_actions`
        (AlphaZero's fully convolutional head; it relies on the engine's action numbering).
        "dense": a 1x1 convolution then a dense layer to all actions (layout-agnostic, but the
        dense layer holds most of the parameters of a small net).
      policy_channels: width of the policy head's first convolution.
      value_channels: channels of the 1x1 convolution before the value MLP.
      value_hidden: hidden units of the value MLP.
      layer_norm: use LayerNorm inside the blocks and before the heads.
      dtype: computation dtype (parameters stay float32; outputs are always float32).
      xla_conv_grad: differentiate the convolutions with JAX's own transpose rule instead of
        `conv_nhwc`'s (same values; 14-25x slower inside loops on XLA:CPU). For comparisons.
      input_channels: read only the first `input_channels` observation channels (None: all).
        `BOARD_CHANNELS` drops the variant one-hot, so the net is not told which variant it
        plays; the first convolution's kernel then has that many input channels.
    """

    num_blocks: int = 4
    channels: int = 64
    num_actions: int = NUM_ACTIONS
    policy_head: str = "conv"
    policy_channels: int = 32
    value_channels: int = 8
    value_hidden: int = 64
    layer_norm: bool = False
    dtype: Any = jnp.float32
    input_channels: int | None = None
    xla_conv_grad: bool = False

    @nn.compact
    def __call__(
        self, obs: jax.Array, legal_action_mask: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Evaluates a batch of positions.

        Args:
          obs: `[B, H, W, C]` observations (H = W = 5), indexed `[rank, file]`.
          legal_action_mask: optional `[B, A]` bool; illegal actions get logit `MASKED_LOGIT`.

        Returns:
          logits `[B, A]` float32 and value `[B]` float32 in [-1, 1].
        """
        batch_size, height, width = obs.shape[:3]
        if self.input_channels is not None:
            obs = obs[..., : self.input_channels]
        x = obs.astype(self.dtype)
        Conv = _conv_module(self.xla_conv_grad)
        x = Conv(self.channels, (3, 3), dtype=self.dtype)(x)
        for _ in range(self.num_blocks):
            x = ResidualBlock(self.channels, self.layer_norm, self.dtype, self.xla_conv_grad)(x)
        if self.layer_norm:
            x = nn.LayerNorm(dtype=self.dtype)(x)
        x = nn.relu(x)

        if self.policy_head == "conv":
            planes_per_square, remainder = divmod(self.num_actions, height * width)
            if remainder:
                raise ValueError(
                    f"policy_head='conv' needs num_actions divisible by {height * width} squares, "
                    f"got {self.num_actions}"
                )
            p = nn.relu(Conv(self.policy_channels, (3, 3), dtype=self.dtype)(x))
            p = Conv(planes_per_square, (1, 1), dtype=self.dtype)(p)
            logits = square_planes_to_actions(p)
        elif self.policy_head == "dense":
            p = nn.relu(Conv(self.policy_channels, (1, 1), dtype=self.dtype)(x))
            logits = nn.Dense(self.num_actions, dtype=self.dtype)(p.reshape(batch_size, -1))
        else:
            raise ValueError(f"policy_head must be 'conv' or 'dense', got {self.policy_head!r}")
        logits = logits.astype(jnp.float32)
        if legal_action_mask is not None:
            logits = jnp.where(legal_action_mask, logits, MASKED_LOGIT)

        v = nn.relu(Conv(self.value_channels, (1, 1), dtype=self.dtype)(x))
        v = v.reshape(batch_size, -1)
        v = nn.relu(nn.Dense(self.value_hidden, dtype=self.dtype)(v))
        value = jnp.tanh(nn.Dense(1, dtype=self.dtype)(v)[:, 0].astype(jnp.float32))
        return logits, value


_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# "auto" (the accelerator presets): bfloat16 where it pays (a GPU or TPU: 1.47x the frames of
# float32 on one H200, experiments/bench/README.md), float32 on a CPU, which has no fast
# bfloat16 convolutions. Parameters and optimizer state are float32 either way.
AUTO_DTYPE = "auto"


def compute_dtype(name: str, backend: str | None = None) -> str:
    """The computation dtype that `network.dtype` = `name` means on `backend` (default: JAX's
    default backend): "auto" is "bfloat16" on an accelerator and "float32" on a CPU; any other
    name is itself. ValueError for a name that is neither "auto" nor in `_DTYPES`."""
    if name == AUTO_DTYPE:
        backend = backend or jax.default_backend()
        return "float32" if backend == "cpu" else "bfloat16"
    if name not in _DTYPES:
        raise ValueError(
            f"network.dtype must be one of {sorted([AUTO_DTYPE, *_DTYPES])}, got {name!r}"
        )
    return name


def make_network(config: ml_collections.ConfigDict) -> PolicyValueNet:
    """Builds the network from its config (the `network` part of a run config).

    Required fields: `num_blocks`, `channels`. Optional: `num_actions` (1225), `policy_head`
    ("conv" | "dense", default "conv"), `policy_channels` (32), `value_channels` (8),
    `value_hidden` (64), `layer_norm` (False), `dtype` ("float32" | "bfloat16" | "float16" |
    "auto": `compute_dtype`), `rule_planes` ("descriptor": the observation's rules
    descriptor (capture, goal, fog, colour one-hots) is an input; "none": the net reads only
    the `BOARD_CHANNELS` board channels and is not told the rules; the retired
    `variant_planes` field is still read, `rule_planes_of`), `xla_conv_grad` (False; True
    only to compare with JAX's own convolution gradient).
    """
    dtype = compute_dtype(config.get("dtype", "float32"))
    return PolicyValueNet(
        num_blocks=int(config.num_blocks),
        channels=int(config.channels),
        num_actions=int(config.get("num_actions", NUM_ACTIONS)),
        policy_head=str(config.get("policy_head", "conv")),
        policy_channels=int(config.get("policy_channels", 32)),
        value_channels=int(config.get("value_channels", 8)),
        value_hidden=int(config.get("value_hidden", 64)),
        layer_norm=bool(config.get("layer_norm", False)),
        dtype=_DTYPES[dtype],
        input_channels=None if rule_planes_of(config) == "descriptor" else BOARD_CHANNELS,
        xla_conv_grad=bool(config.get("xla_conv_grad", False)),
    )


# The fields of a network config that decide its parameters' shapes, with `make_network`'s
# defaults (`dtype` and `xla_conv_grad` change only how it computes).
SHAPE_DEFAULTS = {
    "num_blocks": None,
    "channels": None,
    "num_actions": NUM_ACTIONS,
    "policy_head": "conv",
    "policy_channels": 32,
    "value_channels": 8,
    "value_hidden": 64,
    "layer_norm": False,
}


def shape_of(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The fields of network config `config` that decide its parameters (`SHAPE_DEFAULTS`,
    defaults filled in) and its `rule_planes` (`rule_planes_of`): two configs with the same
    `shape_of` take each other's parameters."""
    shape = {name: config.get(name, default) for name, default in SHAPE_DEFAULTS.items()}
    shape["rule_planes"] = rule_planes_of(config)
    return shape


def rule_planes_of(config: ml_collections.ConfigDict) -> str:
    """`network.rule_planes` of a network config: "none" or "descriptor".

    The retired boolean `variant_planes` is mapped (True -> "descriptor", False -> "none": the
    descriptor replaces the variant one-hot); giving both with different meanings, or an
    unknown value, raises ValueError.
    """
    rule_planes = config.get("rule_planes", None)
    old = config.get("variant_planes", None)
    if old is not None:
        mapped = "descriptor" if old else "none"
        if rule_planes is not None and rule_planes != mapped:
            raise ValueError(
                f"network.variant_planes={old} (retired; it means rule_planes={mapped!r}) "
                f"contradicts network.rule_planes={rule_planes!r}: set only rule_planes"
            )
        rule_planes = mapped
    rule_planes = "descriptor" if rule_planes is None else rule_planes
    if rule_planes not in RULE_PLANES:
        raise ValueError(
            f"network.rule_planes must be one of {', '.join(RULE_PLANES)}, got {rule_planes!r}"
        )
    return rule_planes


def obs_layout(config: ml_collections.ConfigDict) -> str:
    """The observation layout a network of this config reads, to record in checkpoints:
    `OBS_LAYOUT` and which channels it reads (e.g. `...;rule_planes=none`)."""
    return f"{OBS_LAYOUT};rule_planes={rule_planes_of(config)}"


def input_channels(params: Any) -> int:
    """Observation channels the first convolution of a `PolicyValueNet` parameter tree reads."""
    return int(params["Conv_0"]["kernel"].shape[2])


def check_obs_layout(saved_layout: str | None, config: ml_collections.ConfigDict, params=None):
    """Refuse a checkpoint whose observation layout differs from this code's.

    Args:
      saved_layout: the `obs_layout(...)` string the checkpoint recorded (None: a checkpoint
        from before the rules descriptor, which recorded none).
      config: the network config the checkpoint is loaded into.
      params: optionally the checkpoint's parameters, to check the first kernel's width.

    Raises ValueError saying why: the old layout had a variant one-hot (channels 17-25), an
    observed ply fraction relative to the ply cap, and clocks visible under fog, so a network
    trained on it reads today's observations wrongly.
    """
    expected = obs_layout(config)
    if saved_layout != expected:
        raise ValueError(
            f"checkpoint observation layout {saved_layout or 'unrecorded (pre-descriptor)'!r} "
            f"differs from this code's {expected!r}: observations changed (the rules "
            f"descriptor replaced the variant one-hot at channels 17+, ply is observed as "
            f"ply / {_game.PLY_SCALE:g} instead of ply / max_plies, and under fog the 50-move "
            f"clock and repetition flag are hidden), so the network would misread them; "
            f"retrain, or load with a matching network.rule_planes"
        )
    if params is not None:
        want = _game.OBS_CHANNELS if rule_planes_of(config) == "descriptor" else BOARD_CHANNELS
        have = input_channels(params)
        if have != want:
            raise ValueError(
                f"checkpoint's first convolution reads {have} observation channels, this "
                f"layout gives {want} (network.rule_planes={rule_planes_of(config)!r})"
            )


def init_params(network: PolicyValueNet, key: jax.Array, obs_shape: Sequence[int]) -> Any:
    """Initialises the parameters for per-sample observations of shape `obs_shape` ([5, 5, C]).

    Returns the plain `params` pytree (apply with `network.apply({"params": params}, ...)`).
    """
    dummy_obs = jnp.zeros((1, *obs_shape), jnp.float32)
    return network.init(key, dummy_obs)["params"]


def num_params(params: Any) -> int:
    """Total number of scalars in a parameter pytree."""
    return sum(int(x.size) for x in jax.tree.leaves(params))
