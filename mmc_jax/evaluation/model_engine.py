"""A trained model with its search, one game at a time: the engine behind the UCI command
(`python -m mmc_jax.engine`) and the web page (`python -m mmc_jax.serve`).

    engine = ModelEngine(network, params, name="gardner-cpu")    # or load_engine("gardner-cpu")
    position = engine.position("gardner", moves=["a2a3", "e4e3"])   # GamePosition
    result = engine.search(position, simulations=64)                  # SearchResult

A position is the game replayed from its start through its moves, as a referee would; under fog
the side to move's belief is updated only from its own observations at its own plies
(`fog.observe_and_update`, as in `pimc.fog_match`), and the search is the mover's fair search
(`fog.mover_fair_search`) over worlds sampled from that belief, so every number it returns is
computed from the observation history alone. Without fog the search keeps its tree: the next
search of the same game, moves later, goes on from the subtree under those moves (`reuse_tree`,
`ModelEngine.grow`). The scores follow Lc0: cp = 90 tan(1.5637541897 v)
and `wdl` the split of the expected score with the most draws (the network has no draw head).
The protocol, the options and the timing are `mmc_jax.engine`'s.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mctx
import numpy as np

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.evaluation import arena, policies
from mmc_jax.rules import notation
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD
from mmc_jax.search import mcts
from mmc_jax.training import fog as fog_lib
from mmc_jax.training import memory

DEFAULT_SIMULATIONS = 256
DEFAULT_MAX_SIMULATIONS = 8192
# Nodes of the grown search's tree. Every simulation costs more in a larger tree (on the 2-core
# CPU, 200 simulations took 0.18 s in a tree of 256 nodes and 1.5 s in one of 8192: the loop
# seems to copy the tree once per simulation), so the default covers the common sizes and a
# second or two of search; `--capacity` (engine) raises it.
DEFAULT_CAPACITY = 1024
DEFAULT_WORLDS = 8
DEFAULT_CANDIDATES = 32
MAX_SIMULATIONS_OPTION = 65536
GROW_SHARE = 0.9  # of a timed search's time that its budget is planned to fill
PV_LENGTH = 16  # longest principal variation read from the tree
TOP_MOVES = 5  # moves in the `info string visits` line
LC0_CP_SCALE, LC0_CP_STRETCH = 90.0, 1.5637541897


def uci_variant_names() -> dict[str, str]:
    """{name a GUI may send: the project's canonical variant}: Fairy-Stockfish's names of the
    variants it plays, then the project's names of all the named variants."""
    names = {fsf: variant for variant, fsf in R.FAIRY_STOCKFISH_NAMES.items()}
    for variant in R.VARIANTS:
        names.setdefault(variant, variant)
    return names


def parse_uci_variant(name: str) -> str:
    """The canonical variant of a UCI_Variant value: a Fairy-Stockfish name of
    `uci_variant_names()` or any spelling of the rule space. ValueError naming the problem."""
    text = name.strip()
    names = uci_variant_names()
    if text.lower() in names:
        return names[text.lower()]
    return R.check_variant(text)


def score_cp(value: float) -> int:
    """Centipawns of a value in [-1, 1] (side to move), as Lc0 writes them: 90 tan(1.5638 v)."""
    clipped = min(max(float(value), -0.999), 0.999)
    return int(round(LC0_CP_SCALE * math.tan(LC0_CP_STRETCH * clipped)))


def wdl(value: float) -> tuple[int, int, int]:
    """(W, D, L) per mille of a value in [-1, 1]: the split of the expected score (1 + v) / 2
    with the most draws (the network has no draw head)."""
    clipped = min(max(float(value), -1.0), 1.0)
    win, loss = round(1000 * max(clipped, 0.0)), round(1000 * max(-clipped, 0.0))
    return win, 1000 - win - loss, loss


# ---------------------------------------------------------------------------------------------
# Compiled pieces (batch of one game; rules are data, so one program serves every variant)


@jax.jit
def _legal(rules, state):
    """The legal planes [1, 49] of a game's first position (a start or a FEN); every later
    position's come with it from `_advance`, so each ply generates its moves once."""
    return BOARD.legal_planes(rules, state)


@functools.partial(jax.jit, static_argnames=("fog",))
def _advance(rules, state, games, white_reward, action, planes, *, fog):
    """One ply of the game, `action` [1] played in `state` whose legal planes are `planes`:
    (state, beliefs, White's reward so far, legal planes [1, 49] of the position reached).
    Under fog the mover's belief is updated from its observation first, exactly as
    `pimc.fog_match` does at every ply."""
    if fog:
        observation, belief = fog_lib.observe_and_update(rules, games, planes)
        games, next_planes = fog_lib.play(rules, games, observation, belief, action, planes)
        state = games.state
    else:
        state, next_planes = BOARD.step_with_planes(rules, state, action, planes)
    return state, games, white_reward + state.rewards[:, 0], next_planes


@functools.partial(jax.jit, static_argnames=("exact",))
def _start_beliefs(state, *, exact):
    return fog_lib.start_games(state, exact=exact)


class _SearchArrays(NamedTuple):
    action: jax.Array  # int32 [] the search's move
    weights: jax.Array  # float32 [1225] visit shares (fog: mean improved policy)
    value: jax.Array  # float32 [] root value, side to move
    pv_actions: jax.Array  # int32 [L]
    pv_valid: jax.Array  # bool [L]
    pv_pieces: jax.Array  # uint32 [L, 6] boards the PV moves are played in (mover's view)
    pv_own: jax.Array  # uint32 [L]
    pv_turn: jax.Array  # int32 [L]
    consistent: jax.Array  # int32 [] fog: consistent candidate worlds (-1 without fog)


def _principal_variation(output, planes):
    """The chosen move, then the most visited child down the tree (at most PV_LENGTH moves):
    (actions [L], valid [L], pieces [L, 6], own [L], turn [L]). One `lax.scan` over the plies,
    not PV_LENGTH unrolled copies of its tree reads and slot decoding (compile time)."""
    tree = output.search_tree
    states, node_planes = tree.embeddings
    slot_actions, valid = search.all_slot_actions(planes)
    chosen = jnp.argmax(valid[0] & (slot_actions[0] == output.action[0])).astype(jnp.int32)

    def ply(carry, _):
        node, slot, alive = carry
        here = jax.tree.map(lambda x: x[0, node], states)
        alive = alive & ~here.terminated
        action, _ = search.slot_actions(node_planes[0, node][None], slot[None, None])
        read = (action[0, 0], alive, here.pieces, here.own, here.turn)
        child = tree.children_index[0, node, slot]
        alive = alive & (child >= 0)
        node = jnp.maximum(child, 0).astype(jnp.int32)
        visits = tree.children_visits[0, node]
        slot = jnp.argmax(visits).astype(jnp.int32)
        alive = alive & (visits[slot] > 0)
        return (node, slot, alive), read

    start = (jnp.int32(0), chosen, valid[0, 0])
    return jax.lax.scan(ply, start, None, length=PV_LENGTH)[1]


@functools.partial(
    jax.jit, static_argnames=("network", "simulations", "fog", "worlds", "candidates")
)
def _search(params, rules, state, games, key, *, network, simulations, fog, worlds, candidates):
    """One search of the position (batch of one): `_SearchArrays`. Under fog it reads the
    observation and the mover's belief only (never `state`'s hidden squares)."""
    planes = BOARD.legal_planes(rules, state)
    if fog:
        observation, out = fog_lib.mover_fair_search(
            network,
            params,
            rules,
            games,
            planes,
            key,
            num_worlds=worlds,
            num_simulations=simulations,
            num_candidates=candidates,
        )
        length = PV_LENGTH
        first = jnp.arange(length) == 0
        return _SearchArrays(
            action=out.action[0],
            weights=out.action_weights[0],
            value=out.value[0],
            pv_actions=jnp.where(first, out.action[0], 0),
            pv_valid=first & jnp.any(observation.planes[0] != 0),
            # Moves are written from the mover's own pieces and the opponent pieces it sees.
            pv_pieces=jnp.broadcast_to(
                observation.own_pieces[0] | observation.seen[0], (length, 6)
            ),
            pv_own=jnp.broadcast_to(observation.own[0], (length,)),
            pv_turn=jnp.broadcast_to(observation.turn[0], (length,)),
            consistent=out.num_consistent[0],
        )
    out = search.run_search(
        network,
        params,
        rules,
        state,
        key,
        num_simulations=simulations,
        gumbel_scale=0.0,
        planes=planes,
    )
    summary = out.search_tree.summary()
    slot_actions, valid = search.all_slot_actions(planes)
    visits = search.expand(summary.visit_counts, slot_actions, valid)[0]
    shares = visits / jnp.maximum(visits.sum(), 1.0)
    pv = _principal_variation(out, planes)
    return _SearchArrays(out.action[0], shares, summary.value[0], *pv, consistent=jnp.int32(-1))


# ---------------------------------------------------------------------------------------------
# The grown search: one compiled tree of `capacity` nodes that any number of simulations up to
# it fills, in chunks. A search of N simulations compiled as its own program (`_search`)
# costs a compile per N (about a minute on a busy 2-core CPU); here the count is data, so one
# compile serves every `go nodes N` up to the capacity, and a timed search grows chunk by chunk
# until its time is used. It is `mcts.gumbel_muzero_policy` with gumbel_scale 0 (the engine's
# search), with two differences: sequential halving's schedule (mctx's table of considered
# visits for the budget) is an argument, computed on the host for the budget; and the walk
# stops at GROWN_MAX_DEPTH (the one-shot search's bound is its number of simulations, so the
# two are equal up to that many simulations: tests/commands/test_uci_serve.py checks it).

GROWN_MAX_DEPTH = 64
MAX_CONSIDERED_ACTIONS = 16  # run_search's default


def _considered_visits(considered: int, budget: int) -> list[int]:
    """mctx's `seq_halving.get_sequence_of_considered_visits(considered, budget)`."""
    if considered <= 1:
        return list(range(budget))
    log2max = int(math.ceil(math.log2(considered)))
    sequence: list[int] = []
    visits = [0] * considered
    num_considered = considered
    while len(sequence) < budget:
        extra = max(1, int(budget / (log2max * num_considered)))
        for _ in range(extra):
            sequence.extend(visits[:num_considered])
            for i in range(num_considered):
                visits[i] += 1
        num_considered = max(2, num_considered // 2)
    return sequence[:budget]


@functools.lru_cache(maxsize=64)
def considered_visits_table(budget: int, capacity: int) -> np.ndarray:
    """int32 [17, capacity]: mctx's table of considered visits for a budget of `budget`
    simulations (row m: m considered actions), padded to the tree's capacity."""
    table = np.zeros((MAX_CONSIDERED_ACTIONS + 1, capacity), np.int32)
    for m in range(MAX_CONSIDERED_ACTIONS + 1):
        table[m, :budget] = _considered_visits(m, min(budget, capacity))
    return table


class _Grown(NamedTuple):
    """A search in progress: the tree [1, capacity + 1, ...], each node's depth, the key."""

    tree: Any
    node_depth: jax.Array
    key: jax.Array


class _RootData(NamedTuple):
    """The grown tree's `extra_data`: the root's Gumbel noise [1, 160] (zeros: the engine's
    search has gumbel_scale 0) and `base_visits` int32 [1, 160], each root child's visits kept
    from the previous search (zeros in a new tree). Sequential halving runs on the visits above
    the base: its schedule is this search's, while the kept values and subtrees are reused."""

    root_gumbel: jax.Array
    base_visits: jax.Array


def _mask_invalid(logits, invalid):
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(invalid, jnp.finfo(logits.dtype).min, logits)


def _root_invalid(planes):
    _, valid = search.all_slot_actions(planes)
    # A finished game has no legal action; one slot keeps the masking defined (as run_search).
    return ~(valid | (jnp.arange(search.MAX_LEGAL_MOVES) == 0))


@functools.partial(jax.jit, static_argnames=("network", "capacity"))
def _grow_start(params, rules, state, planes, key, *, network, capacity):
    """The tree of an empty search of the position (batch of one) with its legal planes
    (carried from the replay: no move generation here): `_Grown`."""
    logits, value, _ = search.evaluate(network, params, rules, state, planes)
    actions, valid = search.all_slot_actions(planes)
    invalid = _root_invalid(planes)
    prior = _mask_invalid(search.compact(logits, actions, valid), invalid)
    root = mctx.RootFnOutput(prior_logits=prior, value=value, embedding=(state, planes))
    extra = _RootData(jnp.zeros_like(prior), jnp.zeros(prior.shape, jnp.int32))
    tree = mcts.instantiate_tree(root, capacity, invalid, extra)
    key, _ = jax.random.split(key)  # as gumbel_muzero_policy: its second key draws the gumbel
    return _Grown(tree, jnp.zeros(tree.node_visits.shape, jnp.int32), key)


def _root_selection(key, tree, node_index, *, table, qtransform):
    """mctx's Gumbel root rule (sequential halving) with its schedule `table` given, over this
    search's visits (those above the kept tree's `base_visits`)."""
    del key
    visits = tree.children_visits[node_index] - tree.extra_data.base_visits
    logits = tree.children_prior_logits[node_index]
    completed = qtransform(tree, node_index)
    considered = jnp.minimum(
        MAX_CONSIDERED_ACTIONS, jnp.sum(1 - tree.root_invalid_actions, axis=-1).astype(jnp.int32)
    )
    considered_visit = table[considered, jnp.sum(visits, -1)]
    logits = logits - jnp.max(logits, keepdims=True, axis=-1)
    penalty = jnp.where(visits == considered_visit, 0, -jnp.inf)
    score = jnp.maximum(-1e9, tree.extra_data.root_gumbel + logits + completed) + penalty
    return jnp.argmax(jnp.where(tree.root_invalid_actions, -jnp.inf, score)).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("network",), donate_argnames=("grown",))
def _grow(params, rules, grown, table, start, stop, *, network):
    """Simulations `start` .. `stop` - 1 (int32 scalars, data) of the search `grown`."""
    qtransform = mctx.qtransform_completed_by_mix_value
    root_selection = functools.partial(_root_selection, table=table, qtransform=qtransform)
    interior = functools.partial(mcts.gumbel_interior_action_selection, qtransform=qtransform)
    recurrent_fn = search.make_recurrent_fn(network, rules)

    def body(sim, carry):  # mcts.search's loop body
        key, tree, node_depth = carry
        key, simulate_key, expand_key = jax.random.split(key, 3)
        parent, action, path, depth = mcts.simulate(
            simulate_key, tree, root_selection, interior, GROWN_MAX_DEPTH, node_depth
        )
        node = mcts.get_per_game(tree.children_index, parent, action)
        node = jnp.where(node == mctx.Tree.UNVISITED, sim + 1, node)
        tree = mcts.expand(params, expand_key, tree, recurrent_fn, parent, action, node)
        path = mcts.set_per_game(path, depth, value=node)
        node_depth = mcts.set_per_game(node_depth, node, value=depth)
        return key, mcts.backward(tree, path, depth), node_depth

    key, tree, node_depth = jax.lax.fori_loop(
        start, stop, body, (grown.key, grown.tree, grown.node_depth)
    )
    return _Grown(tree, node_depth, key)


@jax.jit
def _grow_result(grown):
    """The search's move, visit shares, value and principal variation: `_SearchArrays`."""
    tree = grown.tree
    planes = jax.tree.map(lambda x: x[:, 0], tree.embeddings)[1]
    qtransform = mctx.qtransform_completed_by_mix_value
    visits = tree.summary().visit_counts
    completed = jax.vmap(qtransform, in_axes=(0, None))(tree, mctx.Tree.ROOT_INDEX)
    logits = tree.children_prior_logits[:, mctx.Tree.ROOT_INDEX]
    # The move is one of those sequential halving kept: the most visited by this search (a
    # kept tree's visits are below its halving); the shares are of all the visits.
    searched = visits - tree.extra_data.base_visits
    most_visited = searched == jnp.max(searched, axis=-1, keepdims=True)
    score = jnp.maximum(-1e9, logits - jnp.max(logits, axis=-1, keepdims=True) + completed)
    score = score + jnp.where(most_visited, 0.0, -jnp.inf)
    score = jnp.where(tree.root_invalid_actions, -jnp.inf, score)
    slot = jnp.argmax(score, axis=-1).astype(jnp.int32)
    actions, valid = search.all_slot_actions(planes)
    action = jnp.where(valid[:, 0], jnp.take_along_axis(actions, slot[:, None], axis=1)[:, 0], 0)
    shares = search.expand(visits, actions, valid)[0]
    shares = shares / jnp.maximum(shares.sum(), 1.0)
    output = mctx.PolicyOutput(action=action, action_weights=None, search_tree=tree)
    pv = _principal_variation(output, planes)
    return _SearchArrays(action[0], shares, tree.summary().value[0], *pv, jnp.int32(-1))


# ---------------------------------------------------------------------------------------------
# Tree reuse: the subtree under the moves played since the last search is kept for the next.

REUSE_MAX_PLIES = 8  # moves since the kept search that the re-root follows (one program)


class _Reused(NamedTuple):
    """`_reroot`'s result: the search to go on with, the subtree's nodes, the root's kept
    visits (through its children), and whether the walk found the position (else start anew)."""

    grown: _Grown
    kept_nodes: jax.Array  # int32 []
    kept_visits: jax.Array  # int32 []
    found: jax.Array  # bool []


@functools.partial(jax.jit, donate_argnames=("grown",))
def _reroot(grown, actions, state, key):
    """The search `grown` re-rooted at the node its tree reached through `actions` int32
    [REUSE_MAX_PLIES] (the moves played since, padded with -1), for the new search of `state`
    (batch of one) with `key`: `_Reused`. Each action is mapped to its slot by the node's legal
    planes (`search.all_slot_actions`, as the tree numbers them); `found` is False when a move
    leads out of the tree or the node's position is not `state` (then search anew). The new
    root gets its invalid-actions mask and masked priors as `_grow_start` makes them, and its
    children's visits become `base_visits` (`_RootData`)."""
    tree = grown.tree
    states, planes = tree.embeddings

    def walk(carry, action):
        node, found = carry
        slot_actions, valid = search.all_slot_actions(planes[:, node])
        match = valid[0] & (slot_actions[0] == action)
        child = tree.children_index[0, node, jnp.argmax(match)]
        play = action >= 0
        found = found & (~play | (jnp.any(match) & (child >= 0)))
        return (jnp.where(play & found, child, node).astype(jnp.int32), found), None

    (root, found), _ = jax.lax.scan(walk, (jnp.int32(0), jnp.bool_(True)), actions)
    tree, node_depth, kept = mcts.reroot(tree, root[None], grown.node_depth)
    states, planes = tree.embeddings
    same = [
        jnp.all(kept_leaf[:, 0] == leaf)
        for kept_leaf, leaf in zip(jax.tree.leaves(states), jax.tree.leaves(state), strict=True)
    ]
    invalid = _root_invalid(planes[:, 0])
    prior = tree.children_prior_logits
    prior = prior.at[:, 0].set(_mask_invalid(prior[:, 0], invalid))
    base = tree.children_visits[:, 0]
    tree = tree.replace(
        children_prior_logits=prior,
        root_invalid_actions=invalid,
        extra_data=_RootData(jnp.zeros(prior[:, 0].shape, prior.dtype), base),
    )
    key, _ = jax.random.split(key)  # as `_grow_start`
    found = found & functools.reduce(jnp.logical_and, same)
    return _Reused(_Grown(tree, node_depth, key), kept[0], jnp.sum(base), found)


@dataclasses.dataclass(frozen=True)
class _Kept:
    """The tree of the last grown search, with the position and the model it belongs to."""

    variant: str
    start_fen: str
    moves: tuple[str, ...]
    params: Any
    grown: _Grown


def _position_arrays(fen: str):
    """The position of `fen` as a batch of one (not committed to a device: the replay's
    programs, whose inputs are all uncommitted, give uncommitted outputs, as `precompile`
    expects)."""
    return jax.tree.map(lambda x: jnp.asarray(x)[None], R.from_fen(fen))


def _spec(x, committed: bool = True):
    """The shape of `x` for `lower`: committed to the device as a jitted program's output is
    (else another cache key: the call would not find the program compiled)."""
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0]) if committed else None
    weak = getattr(x, "weak_type", False)
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding, weak_type=weak)


# ---------------------------------------------------------------------------------------------
# Positions and searches


@dataclasses.dataclass(frozen=True)
class _Ply:
    """A position of the replayed game (device arrays, batch of one) and its host facts."""

    state: Any
    games: Any
    white_reward: Any
    planes: Any
    legal: dict[str, int]
    fen: str
    over: bool
    action: int = -1  # the action played to reach it (-1: the game's start)


@dataclasses.dataclass(frozen=True)
class GamePosition:
    """A game replayed from `start_fen` through `moves`: the position to search.

    `legal` maps the legal moves (UCI) to action ids (empty once the game is over); `fen` is
    the true position (the referee's). Under fog, `view` is what the side to move sees and is
    all a client of the mover may be shown. `actions` are the action ids of `moves`.
    """

    variant: str
    start_fen: str
    moves: tuple[str, ...]
    fog: bool
    fen: str
    legal: dict[str, int]
    over: bool
    result: str | None
    ply: _Ply = dataclasses.field(repr=False)
    actions: tuple[int, ...] = ()

    @property
    def turn(self) -> int:
        """0 when White is to move, 1 for Black."""
        return 0 if self.fen.split()[1] == "w" else 1

    @property
    def view(self) -> str:
        """The FEN the side to move sees (the true FEN without fog)."""
        return notation.fog_view(self.fen, list(self.legal)) if self.fog else self.fen


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """One search of a position.

    move: the move chosen (UCI; Temperature applied); policy: {move: share} of every legal
    move, largest first (visit shares; under fog the worlds' mean improved policy); value: the
    root value in [-1, 1] for the side to move; pv: principal variation (UCI); nodes: network
    evaluations; simulations: per world under fog; worlds: 0 without fog; seconds: wall time;
    consistent: fog only, candidate worlds consistent with the observation (0: sampling
    failed, the worlds are then only plausible); kept_visits: the root's visits kept from the
    previous search (tree reuse; 0 for a new tree): the root's children have `nodes` +
    `kept_visits` visits in all.
    """

    move: str
    policy: dict[str, float]
    value: float
    pv: tuple[str, ...]
    nodes: int
    simulations: int
    worlds: int
    seconds: float
    consistent: int | None = None
    kept_visits: int = 0

    @property
    def score_cp(self) -> int:
        return score_cp(self.value)

    @property
    def wdl(self) -> tuple[int, int, int]:
        return wdl(self.value)

    def info_line(self, show_wdl: bool = True) -> str:
        """The UCI `info` line of this search."""
        millis = max(int(round(1000 * self.seconds)), 1)
        parts = [
            f"info depth {max(len(self.pv), 1)} nodes {self.nodes}",
            f"nps {int(self.nodes * 1000 / millis)} time {millis}",
            f"score cp {self.score_cp}",
        ]
        if show_wdl:
            parts.append("wdl {} {} {}".format(*self.wdl))
        if self.pv:
            parts.append("pv " + " ".join(self.pv))
        return " ".join(parts)

    def visits_line(self, top: int = TOP_MOVES) -> str:
        """`info string visits <move> <share> ...` of the top moves."""
        best = list(self.policy.items())[:top]
        return "info string visits " + " ".join(f"{m} {p:.3f}" for m, p in best)


class ModelEngine:
    """A network with its search, for one game at a time (thread-safe).

    Args:
      network, params: the model (`checkpoint.load_model`); network None: the uniform-prior
        search (zero logits, zero value).
      name: shown in `id name` and on the web page.
      max_plies: the rules' ply cap (default 256, a draw by rule).
      candidates: candidate worlds sampled per kept world under fog.
      capacity: nodes of the grown search's tree (`grow`): searches without fog of up to this
        many simulations share one compiled program; larger ones compile their own.
      reuse_tree: keep the grown search's tree for the next search (`grow`): when the next
        position is this one with moves played since, the subtree under them is re-rooted and
        searched on. Off: every search starts from an empty tree.
    """

    def __init__(
        self,
        network,
        params,
        name: str = "model",
        *,
        max_plies: int | None = None,
        candidates: int = DEFAULT_CANDIDATES,
        capacity: int = DEFAULT_CAPACITY,
        reuse_tree: bool = True,
    ):
        if network is None:
            network, params = policies.UniformPriorNetwork(), {}
        self.network, self.params, self.name = network, params, name
        self.max_plies = max_plies
        self.candidates = candidates
        self.capacity = capacity
        self.nodes_per_second: float | None = None  # of the last grown search, compile excluded
        self._lock = threading.RLock()
        self._cache: dict[tuple[str, str], list[_Ply]] = {}
        self._cache_moves: dict[tuple[str, str], list[str]] = {}
        self._compiled: set[tuple] = set()
        self.compile_seconds: float | None = None  # of the last search that compiled
        self.reuse_tree = reuse_tree
        self._kept: _Kept | None = None  # the last grown search's tree (under `_lock`)
        self._searches_begun = 0  # a search keeps its tree only if no later one began
        # The re-root program's compile in the background (`precompile_reuse`): searches start
        # anew until it is done rather than wait for it.
        self._reroot_compile: threading.Thread | None = None

    def _start_shapes(self, variant: str):
        """(rules, state, planes, key, grown) of a first search of `variant`'s start for the
        precompiles: the position (batch of one), its legal planes and its key as a search
        gets them (uncommitted, as the replay gives them), and the grown search's tree as
        `_grow_start` makes it, committed to the device as a jitted program's outputs from the
        loaded parameters are (`_spec`: else the search's call would not find the programs)."""
        rules = self._rules(variant)
        state = _position_arrays(R.start_fen(variant))
        planes = jax.ShapeDtypeStruct((1, T.NUM_PLANES), jnp.uint32)
        key = jax.random.fold_in(jax.random.key(0), 0)
        grown = jax.eval_shape(
            functools.partial(_grow_start, network=self.network, capacity=self.capacity),
            self.params,
            rules,
            state,
            planes,
            key,
        )
        return rules, state, planes, key, jax.tree.map(_spec, grown)

    def precompile(self, variant: str = "gardner", workers: int = 2) -> bool:
        """Compile the programs a first move of `variant` runs (the first position's legal
        planes, the replay of a move, and the grown search's three: its start, its
        simulations, its result) side by side in
        `workers` threads, from their shapes alone. XLA:CPU already spreads one compile over
        more than one core, so on the 2-core CPU this saved 1-3 s of about 17 (the engine's
        start to its first `bestmove`, experiments/bench/README.md). Later calls with these
        shapes find them compiled. Fog searches (their own program) are not precompiled:
        returns False for them, True otherwise."""
        variant = R.check_variant(variant)
        if R.get(variant).fog:
            return False
        rules, state, planes, key, grown = self._start_shapes(variant)
        network, capacity = self.network, self.capacity
        table = considered_visits_table(capacity, capacity)
        reward, move = jnp.zeros(1), jnp.zeros(1, jnp.int32)
        programs = (  # the longest first, so that it never starts last
            lambda: _grow.lower(
                self.params, rules, grown, table, jnp.int32(0), jnp.int32(1), network=network
            ),
            lambda: _advance.lower(rules, state, None, reward, move, planes, fog=False),
            lambda: _legal.lower(rules, state),
            lambda: _grow_start.lower(
                self.params, rules, state, planes, key, network=network, capacity=capacity
            ),
            lambda: _grow_result.lower(grown),
        )
        with concurrent.futures.ThreadPoolExecutor(max(workers, 1)) as pool:
            for done in [pool.submit(lambda lower=lower: lower().compile()) for lower in programs]:
                done.result()
        return True

    # -- positions

    def _rules(self, variant: str):
        single = (
            R.get(variant) if self.max_plies is None else R.get(variant, max_plies=self.max_plies)
        )
        return R.stack([single])

    def _host(self, variant, state, planes) -> tuple[dict[str, int], str, bool]:
        s, p = jax.device_get((jax.tree.map(lambda x: x[0], state), planes[0]))
        turn = int(s.turn)
        legal = {} if bool(s.terminated) else arena.legal_uci(variant, turn, s.pieces, s.own, p)
        fen = notation.to_fen(s.pieces, s.own, turn, int(s.halfmove), int(s.fullmove))
        return dict(sorted(legal.items())), fen, bool(s.terminated)

    def _start(self, variant: str, fen: str) -> _Ply:
        fog = bool(R.get(variant).fog)
        if fen != R.start_fen(variant):
            R.validate_position(variant, fen)
        state = _position_arrays(fen)
        rules = self._rules(variant)
        games = _start_beliefs(state, exact=fen == R.start_fen(variant)) if fog else None
        planes, reward = _legal(rules, state), jnp.zeros(1)
        legal, true_fen, over = self._host(variant, state, planes)
        over = over or not legal
        return _Ply(state, games, reward, planes, legal, true_fen, over)

    def position(
        self, variant: str, fen: str | None = None, moves: Sequence[str] = ()
    ) -> GamePosition:
        """The game from `fen` (default: the variant's start) through `moves` (UCI).

        Raises ValueError naming the problem: an unknown variant, a malformed or impossible
        FEN, a malformed or illegal move (with the legal moves), a move after the game's end.
        Games that extend the previous one are replayed from where it stopped.
        """
        variant = R.check_variant(variant)
        start = R.start_fen(variant) if fen is None else " ".join(fen.split())
        if fen is not None:
            notation.parse_fen(start)  # syntax first: a clear error before any compile
        moves = [str(m) for m in moves]
        key = (variant, start)
        fog = bool(R.get(variant).fog)
        with self._lock:
            plies = self._cache.get(key)
            known = self._cache_moves.get(key, [])
            if plies is None:
                plies, known = [self._start(variant, start)], []
            common = 0
            while common < min(len(known), len(moves)) and known[common] == moves[common]:
                common += 1
            plies, known = plies[: common + 1], known[:common]
            rules = self._rules(variant)
            try:
                for i, move in enumerate(moves[common:], start=common):
                    here = plies[-1]
                    if here.over:
                        raise ValueError(
                            f"move {i + 1} ({move!r}): the game is already over after "
                            f"{' '.join(moves[:i]) or 'the start'}"
                        )
                    if move not in here.legal:
                        notation.uci_to_action(move, 0)  # malformed strings say so
                        raise ValueError(
                            f"illegal move {move!r} (move {i + 1}) in {here.fen}; legal moves: "
                            + " ".join(here.legal)
                        )
                    action = jnp.full((1,), here.legal[move], jnp.int32)
                    state, games, reward, planes = _advance(
                        rules, here.state, here.games, here.white_reward, action, here.planes,
                        fog=fog,
                    )  # fmt: skip
                    legal, true_fen, over = self._host(variant, state, planes)
                    played = here.legal[move]
                    plies.append(_Ply(state, games, reward, planes, legal, true_fen, over, played))
                    known.append(move)
            finally:
                self._cache = {key: plies}  # one game at a time: drop the others
                self._cache_moves = {key: known}
            here = plies[-1]
            return GamePosition(
                variant=variant,
                start_fen=start,
                moves=tuple(moves),
                fog=fog,
                fen=here.fen,
                legal=here.legal,
                over=here.over,
                result=self._result(variant, start, moves, here),
                ply=here,
                actions=tuple(p.action for p in plies[1:]),
            )

    @staticmethod
    def _result(variant, start, moves, here: _Ply) -> str | None:
        if not here.over:
            return None
        if not moves:  # over in the given position: mate, stalemate, a captured king ...
            return R.result(variant, start) or "1/2-1/2"
        reward = float(np.asarray(here.white_reward)[0])
        return "1-0" if reward > 0 else "0-1" if reward < 0 else "1/2-1/2"

    def forget(self) -> None:
        """Drop the cached game and the kept search tree (`ucinewgame`)."""
        with self._lock:
            self._cache, self._cache_moves = {}, {}
            self._kept = None
            self._searches_begun += 1  # a search still running keeps nothing either

    def precompile_reuse(self, variant: str = "gardner", wait: bool = True) -> None:
        """Compile the re-root program of tree reuse (`_reroot`) from its shapes: at once, or
        (`wait` False) in a background thread, during which searches start from a new tree
        rather than wait. `grow` starts it in the background after its first search, so that
        it is never on the path to a first move (issue 71); call it with `wait` for searches
        that reuse their tree from the second one on (reproducible matches, tests)."""
        with self._lock:
            thread = self._reroot_compile
            if thread is None:
                _, state, _, key, grown = self._start_shapes(R.check_variant(variant))
                # As `precompile`'s: the kept tree is committed to the device (the loaded
                # parameters are), the replayed position and the rest are not.
                specs = (
                    grown,
                    _spec(jnp.full(REUSE_MAX_PLIES, -1, jnp.int32), committed=False),
                    jax.tree.map(lambda x: _spec(x, committed=False), state),
                    _spec(key, committed=False),
                )
                thread = threading.Thread(
                    target=lambda: _reroot.lower(*specs).compile(),
                    name="compile-reroot",
                    # Not a daemon: Python joins it before it finalises, so a process that
                    # ends while it compiles waits for it (a daemon thread inside XLA's compile
                    # at exit aborts the process: "FATAL: exception not rethrown", or -11).
                    daemon=False,
                )
                self._reroot_compile = thread
                thread.start()
        if wait:
            thread.join()

    def _reuse(self, position: GamePosition, key, room: int) -> _Reused | None:
        """The kept tree re-rooted for `position` (`_reroot`), or None to search anew: reuse
        off, no kept tree, not this game and model, not moves since it, a walk out of the tree,
        or a subtree that leaves fewer than `room` free nodes in the capacity. Takes the kept
        tree (the re-root consumes it)."""
        with self._lock:
            kept, self._kept = self._kept, None
        compiling = self._reroot_compile is not None and self._reroot_compile.is_alive()
        if not self.reuse_tree or kept is None or compiling:
            return None
        done = len(kept.moves)
        since = position.moves[done:]
        if (
            kept.params is not self.params
            or (kept.variant, kept.start_fen) != (position.variant, position.start_fen)
            or position.moves[:done] != kept.moves
            or not 1 <= len(since) <= REUSE_MAX_PLIES
            or len(position.actions) != len(position.moves)
        ):
            return None
        actions = np.full(REUSE_MAX_PLIES, -1, np.int32)
        actions[: len(since)] = position.actions[done:]
        reused = _reroot(kept.grown, jnp.asarray(actions), position.ply.state, key)
        kept_nodes, found = jax.device_get((reused.kept_nodes, reused.found))
        if not found or self.capacity + 1 - int(kept_nodes) < room:
            return None
        return reused

    # -- searches

    def split(self, position: GamePosition, nodes: int, worlds: int) -> tuple[int, int]:
        """(simulations per search, worlds) for a budget of `nodes` network evaluations."""
        if position.fog:
            worlds = max(1, min(worlds, nodes))
            return max(1, nodes // worlds), worlds
        return max(1, nodes), 0

    def grows(self, position: GamePosition, nodes: int) -> bool:
        """Whether a search of `nodes` is a grown one (no fog, at most `capacity` nodes)."""
        return not position.fog and nodes <= self.capacity

    def tree_size(self, fog: bool, nodes: int, worlds: int) -> tuple[int, int]:
        """(trees, simulations each) of the search a budget of `nodes` runs: the grown tree of
        `capacity` nodes, one tree per sampled world under fog (`split`), or one of `nodes`."""
        if fog:
            worlds = max(1, min(worlds, nodes))
            return worlds, max(1, nodes // worlds)
        return 1, self.capacity if nodes <= self.capacity else nodes

    def check_size(self, fog: bool, nodes: int, worlds: int = DEFAULT_WORLDS) -> None:
        """ValueError (one line, before anything is compiled) when the search of `nodes`
        cannot fit in memory (`memory.search_budget`), naming the most nodes that can."""
        trees, simulations = self.tree_size(fog, nodes, worlds)
        need = memory.search_bytes(trees, simulations)
        budget, what = memory.search_budget()
        if need > budget:
            raise ValueError(
                f"a search of {nodes} nodes{' under fog' if fog else ''} needs about "
                f"{memory.gib(need)} for its tree, more than {what}; at most "
                f"{self.max_nodes(fog, worlds)} fit"
            )

    def max_nodes(self, fog: bool, worlds: int = DEFAULT_WORLDS) -> int:
        """The largest search (network evaluations) whose tree fits in memory
        (`memory.search_budget`; 0 without fog when not even the grown tree fits)."""
        if fog:
            worlds = max(worlds, 1)
            return memory.max_search_simulations(worlds) * worlds
        most = memory.max_search_simulations(1)
        return most if self.capacity <= most else 0

    def _signature(self, position: GamePosition, nodes: int, worlds: int) -> tuple:
        if self.grows(position, nodes):
            return ("grown", self.capacity)
        return (position.fog, *self.split(position, nodes, worlds))

    def is_compiled(self, position: GamePosition, nodes: int, worlds: int) -> bool:
        """Whether a search of this size has run in this process (else it compiles first):
        one program serves every size up to `capacity` without fog."""
        return self._signature(position, nodes, worlds) in self._compiled

    def search(
        self,
        position: GamePosition,
        nodes: int = DEFAULT_SIMULATIONS,
        *,
        worlds: int = DEFAULT_WORLDS,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> SearchResult:
        """Search `position` with about `nodes` network evaluations (split over `worlds`
        sampled worlds under fog). Deterministic for a seed. ValueError if the game is over."""
        if position.over:
            raise ValueError(f"the game is over ({position.result}); there is nothing to search")
        self.check_size(position.fog, nodes, worlds)
        if self.grows(position, nodes):
            *_, last = self.grow(position, nodes, temperature=temperature, seed=seed)
            return last
        simulations, worlds = self.split(position, nodes, worlds)
        ply = len(position.moves)
        key = jax.random.fold_in(jax.random.key(seed), ply)
        signature = (position.fog, simulations, worlds)
        # No lock around the search itself: a search abandoned by `stop` may still be
        # compiling in its thread while the next one runs.
        started = time.monotonic()
        out = _search(
            self.params,
            self._rules(position.variant),
            position.ply.state,
            position.ply.games,
            key,
            network=self.network,
            simulations=simulations,
            fog=position.fog,
            worlds=max(worlds, 1),
            candidates=self.candidates,
        )
        out = jax.device_get(out)
        seconds = time.monotonic() - started
        with self._lock:
            if signature not in self._compiled:
                self._compiled.add(signature)
                self.compile_seconds = seconds
        return self._search_result(position, out, simulations, worlds, seconds, temperature, seed)

    def grow(
        self,
        position: GamePosition,
        nodes: int,
        *,
        chunks: Sequence[int] = (),
        plan=None,
        temperature: float = 0.0,
        seed: int = 0,
    ):
        """The grown search of `position` (no fog, `nodes` <= `capacity`), chunk by chunk:
        yields a `SearchResult` after each chunk of simulations (`chunks`, then the rest in one).

        `plan(done, result)`, when given, is asked after each chunk for the next one: it
        returns (budget, chunk) -- the search's total (it sets sequential halving's schedule;
        within the first 16 simulations every budget's schedule is the same, so a timed search
        can choose it after a first chunk of 16) and the simulations to run now -- or None to
        stop. A search stopped before its budget is still a search: its move is the best of
        the actions visited most. Deterministic for a seed and a plan's choices.

        Tree reuse (`reuse_tree`): the tree is kept when the search ends (or is abandoned).
        When `position` is the kept one's game with 1 to `REUSE_MAX_PLIES` moves played since
        (same variant, start and parameters), the subtree under those moves is re-rooted
        (`_reroot`) and this search's simulations add to it: `nodes` new ones, whose
        sequential halving runs on this search's visits alone, while the kept values, priors
        and subtrees are used (`SearchResult.kept_visits` counts the root's kept visits). The
        new nodes go after the kept ones, so a fixed budget that no longer fits (kept nodes +
        `nodes` > capacity + 1) searches a new tree; a planned search grows into the room
        left. Otherwise, and until the re-root program is compiled (`precompile_reuse`), the
        search starts from an empty tree, exactly as with reuse off.
        """
        if not self.grows(position, nodes):
            raise ValueError(f"a grown search needs no fog and at most {self.capacity} nodes")
        self.check_size(False, nodes)
        signature = ("grown", self.capacity)
        rules = self._rules(position.variant)
        started = time.monotonic()
        compiling = signature not in self._compiled
        with self._lock:
            self._searches_begun += 1
            mine = self._searches_begun
        grown, offset, kept_visits = self._begin(position, nodes, plan is not None, seed)
        most = self.capacity - offset  # the simulations that fit in the tree
        budget, done, result, whole = min(nodes, most), 0, None, True
        pending = list(chunks)
        try:
            while done < budget:
                if plan is not None and done:
                    step = plan(done, result)
                    if step is None:
                        break
                    budget, chunk = min(step[0], most), step[1]
                else:
                    chunk = pending.pop(0) if pending else budget - done
                stop = min(done + max(chunk, 1), budget)
                if stop <= done:
                    break
                chunk_started, whole = time.monotonic(), False  # `_grow` consumes the tree
                grown = _grow(
                    self.params,
                    rules,
                    grown,
                    considered_visits_table(budget, self.capacity),
                    jnp.int32(offset + done),
                    jnp.int32(offset + stop),
                    network=self.network,
                )
                whole = True
                out = jax.device_get(_grow_result(grown))
                now = time.monotonic()
                if compiling:
                    with self._lock:
                        self._compiled.add(signature)
                        self.compile_seconds = now - started
                    compiling = False
                elif stop - done >= 64:  # small chunks are mostly per-call overhead
                    self.nodes_per_second = (stop - done) / max(now - chunk_started, 1e-6)
                done = stop
                result = self._search_result(
                    position, out, done, 0, now - started, temperature, seed
                )
                yield dataclasses.replace(result, kept_visits=kept_visits)
        finally:  # also when the caller stops early: kept only once no chunk is running on it
            if whole and done:
                self._keep(position, grown, mine)
        if self.reuse_tree and self._reroot_compile is None:
            self.precompile_reuse(position.variant, wait=False)  # off the first move's path

    def _begin(self, position: GamePosition, nodes: int, planned: bool, seed: int):
        """(tree, offset, kept visits) a grown search starts from: the kept tree re-rooted
        (`_reuse`; offset: its nodes less one, simulation s writing node s + 1) or an empty
        one (offset 0). A fixed budget needs room for all its nodes after the kept ones; a
        planned (timed) search, for at least one round of sequential halving."""
        key = jax.random.fold_in(jax.random.key(seed), len(position.moves))
        room = min(nodes, MAX_CONSIDERED_ACTIONS) if planned else nodes
        reused = self._reuse(position, key, room)
        if reused is not None:
            return reused.grown, int(reused.kept_nodes) - 1, int(reused.kept_visits)
        grown = _grow_start(
            self.params,
            self._rules(position.variant),
            position.ply.state,
            position.ply.planes,
            key,
            network=self.network,
            capacity=self.capacity,
        )
        return grown, 0, 0

    def grow_timed(
        self,
        position: GamePosition,
        top: int,
        deadline: float | None,
        *,
        stop: threading.Event | None = None,
        temperature: float = 0.0,
        seed: int = 0,
    ):
        """A timed search (`go movetime`, a clock, `go infinite`): `grow` of at most `top`
        simulations with `timed_plan`'s chunks and plan, yielding a `SearchResult` after each
        chunk until the `deadline` (`time.monotonic()`; None: none), `top` or `stop`."""
        chunks, plan = timed_plan(self, position, top, deadline, stop)
        return self.grow(
            position, top, chunks=chunks, plan=plan, temperature=temperature, seed=seed
        )

    def _keep(self, position: GamePosition, grown: _Grown, mine: int) -> None:
        """Keep `grown` as the tree of `position` (reuse on, and no later search began)."""
        with self._lock:
            if self.reuse_tree and mine == self._searches_begun:
                self._kept = _Kept(
                    position.variant, position.start_fen, position.moves, self.params, grown
                )

    def _search_result(self, position, out, simulations, worlds, seconds, temperature, seed):
        """The `SearchResult` of a search's `_SearchArrays` (on the host)."""
        ply = len(position.moves)
        rifle = R.parse(position.variant).capture == "rifle"
        weights = np.asarray(out.weights)
        policy = {m: float(weights[a]) for m, a in position.legal.items()}
        policy = dict(sorted(policy.items(), key=lambda kv: (-kv[1], kv[0])))
        pv = []
        for i in range(PV_LENGTH):
            if not out.pv_valid[i]:
                break
            pv.append(
                notation.action_to_uci(
                    int(out.pv_actions[i]),
                    int(out.pv_turn[i]),
                    out.pv_pieces[i],
                    out.pv_own[i],
                    rifle,
                )
            )
        by_action = {a: m for m, a in position.legal.items()}
        move = by_action[int(out.action)]
        if temperature > 0:
            move = _sample(policy, temperature, seed, ply) or move
        if pv and pv[0] != move:
            pv = [move]
        return SearchResult(
            move=move,
            policy=policy,
            value=float(out.value),
            pv=tuple(pv or [move]),
            nodes=simulations * max(worlds, 1),
            simulations=simulations,
            worlds=worlds,
            seconds=seconds,
            consistent=None if not position.fog else int(out.consistent),
        )


def timed_plan(engine, position: GamePosition, top: int, deadline: float | None, stop=None):
    """(chunks, plan) of a timed search for `ModelEngine.grow` (engine.py's `go movetime`, a
    clock, `go infinite`): a first chunk of one simulation per considered move (a move to
    answer with at once; sequential halving's first round, the same for every budget), then a
    budget of what the measured speed (`engine.nodes_per_second`, else this search's) fits into
    `GROW_SHARE` of the time left before `deadline` (`time.monotonic()`), run in chunks of
    about a quarter of it; without a deadline, doubling chunks up to `top`. The plan stops at
    `top`, at the deadline or once `stop` (a `threading.Event`) is set."""
    budget = 0

    def plan(done: int, result: SearchResult):
        nonlocal budget
        if (stop is not None and stop.is_set()) or done >= top:
            return None
        if deadline is None:  # infinite: doubling chunks up to `top`
            return top, done
        left = deadline - time.monotonic()
        speed = max(engine.nodes_per_second or 0.0, done / max(result.seconds, 1e-3))
        if not budget:  # fixed once: sequential halving's schedule depends on it
            budget = max(done, min(top, done + int(speed * left * GROW_SHARE)))
        chunk = min(budget - done, max(16, int(speed * left / 4)))
        if budget <= done or chunk < 1 or chunk / speed > left:
            return None
        return budget, chunk

    first = max(1, min(MAX_CONSIDERED_ACTIONS, top, len(position.legal)))
    return (first,), plan


def _sample(policy: dict[str, float], temperature: float, seed: int, ply: int) -> str | None:
    moves = [m for m, p in policy.items() if p > 0]
    if not moves:
        return None
    logits = np.log(np.array([policy[m] for m in moves])) / temperature
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    rng = np.random.default_rng((seed, ply))
    return moves[int(rng.choice(len(moves), p=probabilities))]


def load_engine(model: str, step: int | None = None, **kwargs: Any) -> ModelEngine:
    """A `ModelEngine` of the player table's model entry (`players`): a shipped model's name,
    an exported model, a run or a checkpoint (`none`: the uniform-prior search). Another entry
    of the table (`greedy`, `uci:...`, `one-ply:MODEL`, ...) is refused: the engine serves a
    model's search. Raises ValueError, FileNotFoundError or OSError with a message naming the
    problem."""
    from mmc_jax.evaluation import players

    try:
        entry = players.entry_for(model, "board", role="model")
    except ValueError:  # no entry takes it (a missing path): loading it names the problem
        entry = players.entry(players.NETWORK_KIND)
    if entry.name != players.NETWORK_KIND:
        raise ValueError(
            f"{model!r} is the player table's {entry.name!r} entry, not a model: the engine "
            "serves a network's search (a shipped model's name, an exported model, a run, "
            "'none')"
        )
    if model.lower() == "none":
        name = "uniform-prior"
    else:
        name = os.path.basename(os.path.normpath(model)) if os.path.exists(model) else model
    player = entry.build(model, players.Context(step=step, name=name))
    return ModelEngine(player.network, player.params, player.name, **kwargs)
