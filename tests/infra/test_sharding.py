"""`mmc_jax.infra.sharding`'s per-game random draws: the same values as JAX's own draws.

Self-play runs under `sharding.map_games` (each device its own games) and draws its randomness
with `sharding.draw_for_games` / `sharding.categorical`. Here, in one process with one device,
they must equal the plain draws; the 4-device child of tests/training/test_runloop.py
(runs_support.py) checks that a sharded draw (on a (`task`, `data`) mesh) and sharded self-play
equal the unsharded ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax.infra import sharding


@pytest.mark.parametrize("shape", [(1, 7), (5, 160), (64, 1225)])
def test_categorical_equals_jax_random_categorical(shape):
    for seed in range(3):
        key, logits_key = jax.random.split(jax.random.key(seed))
        logits = jax.random.normal(logits_key, shape)
        # Masked entries, as self-play's illegal moves.
        logits = jnp.where(jax.random.bernoulli(logits_key, 0.3, shape), -jnp.inf, logits)
        logits = logits.at[:, 0].set(0.0)
        ours = jax.jit(sharding.categorical)(key, logits)
        theirs = jax.jit(lambda k, x: jax.random.categorical(k, x, axis=-1))(key, logits)
        np.testing.assert_array_equal(ours, theirs)
        assert np.isfinite(np.take_along_axis(logits, ours[:, None], axis=1)).all()


def test_draws_outside_map_games_are_the_plain_draws():
    key = jax.random.key(4)
    np.testing.assert_array_equal(
        jax.random.key_data(sharding.draw_for_games(jax.random.split, key, 6)),
        jax.random.key_data(jax.random.split(key, 6)),
    )
    alpha = jnp.full((5,), 0.3)
    np.testing.assert_array_equal(
        sharding.draw_for_games(lambda k, b: jax.random.dirichlet(k, alpha, (b,)), key, 4),
        jax.random.dirichlet(key, alpha, (4,)),
    )


def test_map_games_on_one_device_is_the_plain_function():
    mesh = sharding.make_mesh()

    def fn(key, x, scalar):
        noise = sharding.draw_for_games(lambda k, b: jax.random.uniform(k, (b, 3)), key, x.shape[0])
        return x[:, None] * noise + scalar, sharding.categorical(key, noise)

    key, x = jax.random.key(1), jnp.arange(8.0)
    mapped = jax.jit(sharding.map_games(fn, mesh, in_axes=(None, 0, 0), out_axes=(0, 0)))
    for ours, plain in zip(mapped(key, x, 2.0), fn(key, x, 2.0), strict=True):
        np.testing.assert_array_equal(ours, plain)
    assert sharding.map_games(fn, None, (None, 0, 0), (0, 0)) is fn
