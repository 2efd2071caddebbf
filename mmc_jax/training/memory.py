"""How much memory one training iteration needs, estimated from the config before anything is
built, and the batch size that fills a device (issue 38).

An iteration holds its state (parameters, optimizer state, games in progress, replay ring:
exact, from the abstract state, `runloop.state_bytes_per_device`) and, while it runs, two
working sets that are not part of the state:

  self-play   the trajectory of the scan (per ply and game the dense sample: the observation,
              the 1225-wide legal mask and search policy, a few scalars), the search tree of
              one ply (`num_simulations + 1` nodes per root, each with its 160 slots of
              statistics and its embedding: a `State` and its legal planes; under fog
              `num_worlds` roots per game) and the network's activations at one evaluation of
              every root;
  learner     one minibatch unpacked to the dense layout, the activations the backward pass
              keeps (per convolution its output, normalised and rectified copies), the policy
              head's 1225-wide logits and their gradients, and the parameters' gradients and
              update (JOAT: every task of a device's share adapts its own copy at once).

The learner runs after the scan, in the memory the search has released, so an iteration needs
its state and the larger of the two (`Estimate.total`). The formulas count those arrays
(`selfplay_bytes`, `learner_bytes`); XLA fuses some and keeps others alive longer, so the
estimate is checked against XLA's memory analysis of the compiled iteration on the CPU
(`python -m mmc_jax.bench memory` prints both and their ratio;
tests/training/test_memory_estimate.py holds it within a factor of two at the smoke sizes).
It is a planning number, not a bound: `runloop.check_memory` refuses a run whose estimate
exceeds the device's memory (one line, before anything is allocated), and `fill_batch` picks
the largest power-of-two game batch whose estimate fits in `FILL_FRACTION` of it.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import ml_collections
import numpy as np

from mmc_jax import rules as R
from mmc_jax.model import network as network_lib
from mmc_jax.rules import tables as T
from mmc_jax.search import MAX_LEGAL_MOVES

F32 = 4
# Per slot of a tree node: children index, prior logit, visits, reward, discount, value.
SLOT_FIELDS = 6
# Per node: parent, action from parent, visits, raw value, value, and a little slack.
NODE_SCALARS = 8
PLANE_WORDS = 49  # the legal-move planes an embedding carries (`mmc_jax.search`)
# A batch size chosen by `fill_batch` leaves this share of the device for what the estimate
# does not see (XLA's fusion choices differ per backend, fragmentation, the evaluation).
FILL_FRACTION = 0.5
FILL_MIN, FILL_MAX = 64, 16384


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Bytes per device of one iteration: its state and its two working sets."""

    state: int
    selfplay: int
    learner: int

    @property
    def total(self) -> int:
        # The learner runs after the scan, in the memory the scan's search has released.
        return self.state + max(self.selfplay, self.learner)

    def describe(self) -> str:
        return (
            f"about {gib(self.total)} per device (state {gib(self.state)}, self-play "
            f"{gib(self.selfplay)}, learner {gib(self.learner)})"
        )


def gib(size: float) -> str:
    """`size` bytes in the largest binary unit that keeps it >= 1."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 2**10:.1f} KiB"


def dense_sample_bytes() -> int:
    """One position as the learner reads it (`learner.Batch`): observation, legal mask, policy
    target and the scalars beside them."""
    return math.prod(R.OBS_SHAPE) * F32 + T.NUM_ACTIONS * (1 + F32) + 4 * F32


def node_bytes() -> int:
    """One search-tree node: its slots' statistics, its scalars, its embedding."""
    embedding = R.state_bytes() + PLANE_WORDS * 4
    return MAX_LEGAL_MOVES * SLOT_FIELDS * F32 + NODE_SCALARS * F32 + embedding


def param_bytes(net: ml_collections.ConfigDict) -> int:
    """Bytes of the network's parameters (shapes only: nothing is initialised)."""
    network = network_lib.make_network(net)
    shapes = jax.eval_shape(
        lambda key: network_lib.init_params(network, key, R.OBS_SHAPE), jax.random.key(0)
    )
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(shapes))


def _activation_bytes(net: ml_collections.ConfigDict) -> int:
    """Per position: one feature map of the trunk (5 x 5 x channels, float32)."""
    return 25 * int(net.channels) * F32


def inference_bytes(net: ml_collections.ConfigDict, positions: int) -> int:
    """The network evaluating `positions` at once: a few live trunk maps, the heads' maps and
    the 1225-wide logits (masked and normalised copies)."""
    heads = 25 * (int(net.policy_channels) + int(net.value_channels)) * F32
    return positions * (4 * _activation_bytes(net) + heads + 3 * T.NUM_ACTIONS * F32)


def training_bytes(net: ml_collections.ConfigDict, samples: int) -> int:
    """One gradient step on `samples` positions, the parameters' own gradients aside: the
    unpacked minibatch, what the backward pass keeps per convolution (output, normalised,
    rectified) and one map of gradient at a time, and the policy logits with their
    gradients."""
    convolutions = 2 * int(net.num_blocks) + 1
    trunk = (3 * convolutions + 2) * _activation_bytes(net)
    heads = 3 * 25 * (int(net.policy_channels) + int(net.value_channels)) * F32
    return samples * (dense_sample_bytes() + trunk + heads + 4 * T.NUM_ACTIONS * F32)


def selfplay_bytes(
    selfplay: ml_collections.ConfigDict,
    net: ml_collections.ConfigDict,
    games: int,
    fog: bool,
) -> int:
    """The self-play scan of `games` games on one device (see the module docstring)."""
    plies, simulations = int(selfplay.num_plies), int(selfplay.num_simulations)
    roots = games * (int(selfplay.get("num_worlds", 1)) if fog else 1)
    trajectory = plies * games * dense_sample_bytes()
    tree = roots * (simulations + 1) * node_bytes()
    return trajectory + tree + inference_bytes(net, roots)


def learner_bytes(
    net: ml_collections.ConfigDict, samples: int, param_bytes: int, copies: int = 1
) -> int:
    """`copies` gradient steps at once (JOAT's tasks on one device) of `samples` each, with
    their gradients and updates (two parameter-sized arrays each)."""
    return copies * (training_bytes(net, samples) + 2 * param_bytes)


def fill_batch(
    estimate_at,
    limit: int,
    devices: int,
    fraction: float = FILL_FRACTION,
    maximum: int = FILL_MAX,
) -> int:
    """The largest power of two B (a multiple of `devices`, within [FILL_MIN, `maximum`]
    games) with `estimate_at(B).total <= fraction * limit`; FILL_MIN when none fits (the run's
    memory check then says why). `estimate_at(B)` gives the per-device `Estimate` at B games
    (per task, for an algorithm whose batch field counts games per task: it passes
    `maximum` = FILL_MAX / tasks, so the device plays at most FILL_MAX games in all)."""
    best = None
    batch = FILL_MIN
    while batch <= max(maximum, FILL_MIN):
        size = max(batch, devices) // devices * devices
        if estimate_at(size).total > fraction * limit:
            break
        best = size
        batch *= 2
    return best if best is not None else max(FILL_MIN, devices) // devices * devices
