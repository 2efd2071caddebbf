"""Policy-value network: a small pre-activation ResNet over the 5x5 board.

`PolicyValueNet` maps observations `[B, 5, 5, C]` to policy logits `[B, A]` (A = 1225 actions)
and a value `[B]` in [-1, 1], from the side to move's point of view. The default policy head
is fully convolutional: 49 move planes per square, flattened into the engine's action numbering
(`square_planes_to_actions`).

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


class ResidualBlock(nn.Module):
    """Pre-activation residual block: `x + conv(relu(norm(conv(relu(norm(x))))))`.

    Input and output `[B, 5, 5, channels]`.
    """

    channels: int
    layer_norm: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = x
        if self.layer_norm:
            y = nn.LayerNorm(dtype=self.dtype)(y)
        y = nn.relu(y)
        y = nn.Conv(self.channels, (3, 3), dtype=self.dtype)(y)
        if self.layer_norm:
            y = nn.LayerNorm(dtype=self.dtype)(y)
        y = nn.relu(y)
        # Zero init: the block starts as the identity (no normalisation layer to tame depth).
        y = nn.Conv(self.channels, (3, 3), kernel_init=nn.initializers.zeros, dtype=self.dtype)(y)
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
        x = nn.Conv(self.channels, (3, 3), dtype=self.dtype)(x)
        for _ in range(self.num_blocks):
            x = ResidualBlock(self.channels, self.layer_norm, self.dtype)(x)
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
            p = nn.relu(nn.Conv(self.policy_channels, (3, 3), dtype=self.dtype)(x))
            p = nn.Conv(planes_per_square, (1, 1), dtype=self.dtype)(p)
            logits = square_planes_to_actions(p)
        elif self.policy_head == "dense":
            p = nn.relu(nn.Conv(self.policy_channels, (1, 1), dtype=self.dtype)(x))
            logits = nn.Dense(self.num_actions, dtype=self.dtype)(p.reshape(batch_size, -1))
        else:
            raise ValueError(f"policy_head must be 'conv' or 'dense', got {self.policy_head!r}")
        logits = logits.astype(jnp.float32)
        if legal_action_mask is not None:
            logits = jnp.where(legal_action_mask, logits, MASKED_LOGIT)

        v = nn.relu(nn.Conv(self.value_channels, (1, 1), dtype=self.dtype)(x))
        v = v.reshape(batch_size, -1)
        v = nn.relu(nn.Dense(self.value_hidden, dtype=self.dtype)(v))
        value = jnp.tanh(nn.Dense(1, dtype=self.dtype)(v)[:, 0].astype(jnp.float32))
        return logits, value


_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def make_network(config: ml_collections.ConfigDict) -> PolicyValueNet:
    """Builds the network from its config (the `network` part of a run config).

    Required fields: `num_blocks`, `channels`. Optional: `num_actions` (1225), `policy_head`
    ("conv" | "dense", default "conv"), `policy_channels` (32), `value_channels` (8),
    `value_hidden` (64), `layer_norm` (False), `dtype` ("float32" | "bfloat16" | "float16"),
    `rule_planes` ("descriptor": the observation's rules descriptor (capture, goal, fog,
    colour one-hots) is an input; "none": the net reads only the `BOARD_CHANNELS` board
    channels and is not told the rules). The retired `variant_planes` field is still read
    (`rule_planes_of`).
    """
    dtype = config.get("dtype", "float32")
    if dtype not in _DTYPES:
        raise ValueError(f"network.dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
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
    )


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
