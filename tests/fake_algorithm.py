"""A stand-in training method for tests of the run loop (`mmc_jax.training.runloop.run`) itself.

No games, no network: the state is a few small arrays and the "iteration" a jitted update, so a
test of the loop's own duties (the workdir lock, signals, the NaN guard, checkpoints, resume)
takes seconds instead of a minute of compilation. Its parameters drift with the iteration's
key, so a resumed run must replay the same random stream to end equal to an unbroken one.

    config = fake_config(num_iterations=5)
    runloop.run(FakeAlgorithm(), config, workdir)
    runloop.run(FakeAlgorithm(explode_after=3), config, workdir)   # parameters x 1e30 after 3

Faults it can inject: `explode_after=k` multiplies the parameters by 1e30 at the end of
iteration k (its losses stay finite; the next iteration's are not: what a learning rate that
blows up in the last learner step does), `bad_opt_state_after=k` leaves an infinite optimizer
moment after iteration k, `on_compile` runs inside `compile` (e.g. a signal), and
`seconds_per_iteration` slows the loop down for tests that need it running. Its config's
`learning_rate` scales each step; one of 1e20 or more gives NaN losses at once (what 1e30 does
to a real learner: its first step explodes and the iteration's mean loss is NaN).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mmc_jax.infra import sharding
from mmc_jax.training import algorithm as algorithm_lib

PARAM = 0.7  # every parameter's start: x 1e30 gives the 7e29 of the probe
PARAMS_TEMPLATE = {"w": np.zeros((2, 3), np.float32), "b": np.zeros((3,), np.float32)}


@flax.struct.dataclass
class FakeState:
    params: Any
    opt_state: Any
    game_state: Any
    replay: Any


def fake_config(num_iterations: int = 3, **checkpoint) -> ml_collections.ConfigDict:
    """The config `FakeAlgorithm` runs: a checkpoint after every iteration by default."""
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.num_iterations = num_iterations
    config.batch_size = 2
    config.learning_rate = 0.01
    config.eval = ml_collections.ConfigDict({"every": 0})
    config.checkpoint = ml_collections.ConfigDict(
        {"every": 1, "max_to_keep": 3, "keep_period": 0, "save_replay": True, **checkpoint}
    )
    return config


def _host_state(batch_size: int) -> FakeState:
    return FakeState(
        params={"w": np.full((2, 3), PARAM, np.float32), "b": np.zeros((3,), np.float32)},
        opt_state={"moment": np.zeros((2, 3), np.float32)},
        game_state={"ply": np.zeros((batch_size,), np.int32)},
        replay={"seen": np.zeros((4,), np.float32)},
    )


def _update(state: FakeState, key, explode, bad_opt_state, learning_rate):
    params = state.params
    # Losses of the parameters the iteration starts from: infinite once they have exploded,
    # or when the learning rate explodes them in the iteration's first step.
    scale = jnp.max(jnp.abs(params["w"]))
    loss = jnp.where((scale < 1e20) & (learning_rate < 1e20), 1.0 + 0.01 * scale, jnp.nan)
    step = learning_rate * jax.random.normal(key, params["w"].shape)
    w = (params["w"] + step) * jnp.where(explode, 1e30, 1.0)
    moment = jnp.where(bad_opt_state, jnp.inf, state.opt_state["moment"] + step)
    new = state.replace(
        params={"w": w, "b": params["b"] + 0.001},
        opt_state={"moment": moment},
        game_state={"ply": state.game_state["ply"] + 1},
        replay={"seen": state.replay["seen"] + 1.0},
    )
    return new, loss


class FakeAlgorithm(algorithm_lib.SelfPlayAlgorithm):
    """See the module docstring."""

    name = "fake"
    batch_field = "batch_size"

    def __init__(
        self,
        *,
        explode_after: int | None = None,
        bad_opt_state_after: int | None = None,
        on_compile: Callable[[], None] | None = None,
        seconds_per_iteration: float = 0.0,
    ):
        self.explode_after = explode_after
        self.bad_opt_state_after = bad_opt_state_after
        self.on_compile = on_compile
        self.seconds_per_iteration = seconds_per_iteration

    def prepare_config(self, config):
        config = ml_collections.ConfigDict(config.to_dict())
        config.lock()
        return config

    def setup(self, config, mesh):
        return None

    def init_state(self, config, mesh, data, key):
        return sharding.put_replicated(_host_state(int(config.batch_size)), mesh)

    def abstract_state(self, config, mesh):
        host = _host_state(int(config.batch_size))
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), host)
        return sharding.abstract_with_shardings(abstract, sharding.replicated(host, mesh))

    def describe(self, config, mesh, state):
        return f"fake algorithm, {config.num_iterations} iterations"

    def compile(self, config, mesh, state, data, start):
        if self.on_compile is not None:
            self.on_compile()
        update = jax.jit(_update)

        def step(state, data, key, iteration):
            time.sleep(self.seconds_per_iteration)
            done = iteration + 1
            state, loss = update(
                state,
                key,
                done == self.explode_after,
                done == self.bad_opt_state_after,
                np.float32(config.get("learning_rate", 0.01)),
            )
            loss = float(loss)
            record = {
                "selfplay/frames": 10,
                "selfplay/games": 1,
                "train/policy_loss": loss,
                "train/value_loss": loss,
            }
            return state, record

        return algorithm_lib.CompiledStep(step)

    def evaluate(self, config, params, key):
        return {}
