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
import os

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
        if not self.selfplay and not self.learner:  # the algorithm has no working-set formula
            return (
                f"about {gib(self.total)} per device for its state (its working memory is "
                "not estimated)"
            )
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


# ---------------------------------------------------------------------------------------------
# One search of a chosen size (the page, the UCI engine, evaluate, analyse; issue 52)

# XLA's memory analysis of a compiled search (`model_engine._search`, one game) holds about
# 1.5-2 tree-sized buffers at every size (the loop's carry and the arrays it updates; the
# table in docs/engine.md): the estimate counts two.
SEARCH_TREE_COPIES = 2
# A search of a chosen size may take at most this share of the device's memory: the process
# also holds the model, its compiled programs and, for the page, everyone else's games.
SEARCH_FRACTION = 0.5


def device_limit(devices=None) -> tuple[int, int, str]:
    """(bytes, devices sharing them, what) of `devices` (default: the first device): an
    accelerator's own memory, or the host's (physical, or the container's limit, cgroup v2)
    shared by this process's CPU devices among them."""
    devices = list(devices) if devices is not None else jax.devices()[:1]
    device = devices[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), 1, f"memory of one {device.device_kind}"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:  # a container's limit (cgroup v2), when lower
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as handle:
            text = handle.read().strip()
        total = min(total, int(text)) if text.isdigit() else total
    except OSError:
        pass
    local = sum(1 for d in devices if d.process_index == jax.process_index())
    return total, max(local, 1), "memory of this host"


def search_bytes(roots: int, simulations: int, net: ml_collections.ConfigDict | None = None):
    """One search of `roots` trees (games, or games x worlds under fog) of `simulations + 1`
    nodes each: `SEARCH_TREE_COPIES` trees, and with `net` the network evaluating every root at
    once. Linear in the simulations (tests/search/test_search_memory.py checks the compiled
    search's memory is)."""
    tree = SEARCH_TREE_COPIES * roots * (simulations + 1) * node_bytes()
    return tree + (inference_bytes(net, roots) if net is not None else 0)


def search_budget() -> tuple[int, str]:
    """(bytes, what) a search may use: `SEARCH_FRACTION` of the first device's memory
    (`device_limit`; on the CPU the host's, per CPU device)."""
    limit, sharing, what = device_limit()
    limit //= sharing
    return int(SEARCH_FRACTION * limit), f"half the {gib(limit)} of {what}"


def max_search_simulations(roots: int = 1, net=None) -> int:
    """The most simulations a search of `roots` trees may run within `search_budget()` (0
    when not even one fits)."""
    budget, _ = search_budget()
    per_simulation = search_bytes(roots, 1, net) - search_bytes(roots, 0, net)
    return max((budget - search_bytes(roots, 0, net)) // per_simulation, 0)


def check_search(simulations: int, roots: int = 1, *, name: str = "simulations", net=None) -> int:
    """`search_bytes` of the search, or ValueError (one line, before anything is compiled)
    when it does not fit in `search_budget()`, naming the most simulations that do."""
    need = search_bytes(roots, simulations, net)
    budget, what = search_budget()
    if need > budget:
        trees = f" x {roots} trees" if roots > 1 else ""
        most = max_search_simulations(roots, net)
        raise ValueError(
            f"{name} {simulations}{trees}: the search tree needs about {gib(need)}, more than "
            f"{what}; at most {most} fit"
        )
    return need
