"""A tiny policy-value network for tests that need a network but not its strength: its config,
and random parameters of its shapes without compiling its initialisation."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mmc_jax import rules as R
from mmc_jax.model import network

TINY = dict(
    num_blocks=1,
    channels=8,
    policy_channels=4,
    value_channels=2,
    value_hidden=8,
    policy_head="conv",
    layer_norm=False,
    dtype="float32",
    rule_planes="none",
)


def tiny_network():
    """The network of `TINY`."""
    return network.make_network(ml_collections.ConfigDict(TINY))


def random_params(net, seed):
    """Random values of `net`'s parameter shapes: `init_params` would compile for seconds."""
    shapes = jax.eval_shape(lambda k: network.init_params(net, k, R.OBS_SHAPE), jax.random.key(0))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.standard_normal(s.shape), s.dtype), shapes)
