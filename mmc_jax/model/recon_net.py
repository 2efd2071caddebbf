"""The learned recon agent's network (`ReconNet`): a policy-value head over the recon
observation plus belief marginals, and a world-value MLP over a fully known board.

What the heads compute and why is told in `mmc_jax.search.recon_learned`, whose searches use it;
`config` below is anything with `blocks`, `channels` and `world_hidden` (its `SearchConfig`).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from mmc_jax.model.network import MASKED_LOGIT, ResidualBlock
from mmc_jax.rules import recon

MARGINAL_CHANNELS = 7  # per square: empty, opponent P, N, B, R, Q, K
OBS_CHANNELS = recon.RECON_OBS_CHANNELS + MARGINAL_CHANNELS
WORLD_FEATURES = 12 * 25 + 2 * 25 + 12 + 12 + 1 + recon.RECON_DESCRIPTOR_CHANNELS + 1


class ReconNet(nn.Module):
    """Policy-value network over the recon observation plus a world-value MLP (module doc)."""

    blocks: int = 2
    channels: int = 32
    world_hidden: int = 128

    def setup(self):
        self.stem = nn.Conv(self.channels, (3, 3))
        self.trunk = [ResidualBlock(self.channels) for _ in range(self.blocks)]
        self.policy_conv = nn.Conv(8, (1, 1))
        self.policy_out = nn.Dense(recon.NUM_ACTIONS)
        self.value_conv = nn.Conv(4, (1, 1))
        self.value_hidden = nn.Dense(64)
        self.value_out = nn.Dense(1)
        self.world_layers = [nn.Dense(self.world_hidden), nn.Dense(self.world_hidden)]
        self.world_out = nn.Dense(1, kernel_init=nn.initializers.zeros)
        self.prior_weight = self.param("prior_weight", nn.initializers.ones, ())

    def policy_value(self, obs, mask):
        """(logits float32[B, 1242] with illegal ones `MASKED_LOGIT`, value float32[B])."""
        x = self.stem(obs)
        for block in self.trunk:
            x = block(x)
        x = nn.relu(x)
        batch = x.shape[0]
        logits = self.policy_out(nn.relu(self.policy_conv(x)).reshape(batch, -1))
        v = nn.relu(self.value_hidden(nn.relu(self.value_conv(x)).reshape(batch, -1)))
        value = jnp.tanh(self.value_out(v)[:, 0])
        return jnp.where(mask, logits, MASKED_LOGIT), value

    def world_value(self, features):
        """float32[B] value of fully known boards for the side to move: tanh of the scaled
        hand-written prior (the last feature) times a learned weight (1 at first) plus the
        MLP's correction (0 at first: its output layer starts at zero)."""
        x = features
        for layer in self.world_layers:
            x = nn.relu(layer(x))
        return jnp.tanh(self.prior_weight * features[:, -1] + self.world_out(x)[:, 0])

    def __call__(self, obs, mask, features):
        return self.policy_value(obs, mask), self.world_value(features)


def make_net(config) -> ReconNet:
    """The network of a config."""
    return ReconNet(config.blocks, config.channels, config.world_hidden)


def init_params(config, key):
    """Fresh parameters of `make_net(config)`."""
    obs = jnp.zeros((1, 5, 5, OBS_CHANNELS))
    mask = jnp.ones((1, recon.NUM_ACTIONS), bool)
    return make_net(config).init(key, obs, mask, jnp.zeros((1, WORLD_FEATURES)))["params"]
