"""The jitted arena: colour-balanced matches between two players, as one compiled loop.

`play_match` plays a colour-balanced match (the model is White in the first half of the games
and Black in the second) as ONE jitted `lax.while_loop` over plies. All games start together,
so at every ply the model is to move in exactly one half of the batch (the first at even plies,
the second at odd ones): each side's policy runs on its own half only, never on the games where
the other side is to move. Finished games idle until the last one ends (the rules' ply cap
bounds the loop). With `opening_plies > 0` both sides first play that many plies, uniformly
random or (`opening="policy"`) sampled from each mover's own search policy, the same ones in
game `i` and game `i + N/2`: paired openings, each played once from either side. A start
without any legal move (monochromatic: White is stalemated at once) is scored a draw at ply 0.
Calls with the same players and number of games share one compiled arena (variant, key,
parameters, ply cap and opening length are data); all pairings of built-in players
(`mmc_jax.evaluation.players`: random, greedy, ...) share one.
Games lost by an illegal move are counted per side (`illegal_moves`; 0 for built-in policies).
Statistics (score, intervals, Elo) come from `mmc_jax.evaluation.elo`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax.evaluation import elo as elo_lib
from mmc_jax.evaluation import pimc, players
from mmc_jax.evaluation.policies import Policy, UniformPriorNetwork, make_model_policy
from mmc_jax.model import network as network_lib
from mmc_jax.rules import game
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD
from mmc_jax.training import memory

# Paired random plies opening a match between two networks by default: their searches are
# deterministic, so without them every game of a colour would be the same game.
NETWORK_OPENING_PLIES = 4


@dataclasses.dataclass(frozen=True)
class _Player:
    """Static (hashable) description of one side; its `params` travel as jit arguments.

    kind "builtin": one of the built-in players `kinds`, chosen by `params` (an int32 index
    into `kinds`, data) so that every pairing of built-in players shares one compiled arena;
    "network": `network` with `num_simulations`; "policy": a user policy `(key, rules, state)`;
    "either": a built-in player or `network`, chosen by data, `params` (index, network
    params) with index -1 for the network, so that matches against the built-in players and
    against that network share one compiled arena (`play_match(mixed_opponents=True)`).
    """

    kind: str
    network: Any = None
    num_simulations: int = 0
    policy: Any = None
    gumbel_scale: float = 0.0  # 1: sample from the search's policy (the "policy" openings)
    kinds: tuple[str, ...] = ()  # "builtin": the registry's kinds when the arena was built

    def act(self, params, key, rules, state, planes):
        if self.kind == "builtin":
            legal = BOARD.planes_to_mask(planes)
            return players.act(self.kinds, params, key, rules, state, legal)
        if self.kind == "network":
            policy = make_model_policy(
                self.network, params, self.num_simulations, self.gumbel_scale
            )
            return policy(key, rules, state, planes)
        if self.kind == "either":
            index, network_params = params
            as_network = dataclasses.replace(self, kind="network")
            as_builtin = dataclasses.replace(self, kind="builtin")
            return jax.lax.cond(
                index < 0,
                lambda: as_network.act(network_params, key, rules, state, planes),
                lambda: as_builtin.act(jnp.maximum(index, 0), key, rules, state, planes),
            )
        return self.policy(key, rules, state)

    @property
    def searches(self) -> bool:
        """Whether this side runs a network's search (its tree takes memory)."""
        return self.kind in ("network", "either")

    def plays(self, spec) -> str:
        """The kind that plays for `play_match` argument `spec`: "either" plays "network" for
        "checkpoint", else the built-in player."""
        if self.kind == "either":
            return "network" if spec == "checkpoint" else "builtin"
        return self.kind


def _player(
    spec, network, params, num_simulations: int, role: str, either: bool = False
) -> tuple[_Player, Any]:
    """(static player, its jit-argument params) of a `play_match` argument; with `either`,
    a built-in player or "checkpoint" is the "either" player of `network`."""
    if isinstance(spec, str):
        kinds = players.kinds()
        if spec not in (*kinds, "checkpoint"):
            raise ValueError(
                f"unknown {role} {spec!r}; expected one of {', '.join((*kinds, 'checkpoint'))} "
                "or a policy function (key, rules, state) -> actions"
            )
        if (either or spec == "checkpoint") and (network is None or params is None):
            needs = "mixed_opponents" if either else f"{role} 'checkpoint'"
            raise ValueError(f"{needs} needs a network and its params")
        index = jnp.int32(kinds.index(spec) if spec in kinds else -1)
        if either:
            return _Player("either", network, num_simulations, kinds=kinds), (index, params)
        if spec == "checkpoint":
            return _Player("network", network, num_simulations), params
        return _Player("builtin", kinds=kinds), index
    if callable(spec) and not hasattr(spec, "apply"):
        if either:
            raise ValueError("mixed_opponents needs a built-in opponent or 'checkpoint'")
        return _Player("policy", policy=spec), None
    raise ValueError(f"{role} must be a name or a policy function, got {spec!r}")


class _Carry(NamedTuple):
    state: R.State  # [B]
    planes: jax.Array  # uint32 [B, 49] legal planes of `state`
    ply: jax.Array  # int32 loop counter
    rewards: jax.Array  # float32 [B, 2] summed rewards by colour
    illegal: jax.Array  # bool [B, 2] the model / the opponent ended the game by an illegal move
    record: Any = None  # with `record_plies`: the moves and the boards they were played on


class GameLog(NamedTuple):
    """Every ply of every game ([P, B, ...], P = `record_plies`): the action played and the
    position it was played in (mover's-view bitboards). Ply t of every game has colour
    t % 2 to move (all games start at the start position); game g's moves are the first
    `plies[g]` entries."""

    actions: jax.Array  # int32 [P, B]
    pieces: jax.Array  # uint32 [P, B, 6]
    own: jax.Array  # uint32 [P, B]


class ArenaOutput(NamedTuple):
    """Per-game results of `_arena`, all [B]: the model's reward (+1 / 0 / -1), the game length
    in plies, whether it finished, and whether the model / the opponent played illegal moves;
    `record` a `GameLog` when recording."""

    model_reward: jax.Array
    plies: jax.Array
    finished: jax.Array
    model_illegal: jax.Array
    opponent_illegal: jax.Array
    record: Any = None


def _is_legal(planes: jax.Array, actions: jax.Array) -> jax.Array:
    """bool [B]: is `actions` [B] legal, by a bit test on the legal planes [B, 49]."""
    in_range = (actions >= 0) & (actions < R.NUM_ACTIONS)
    actions = jnp.clip(actions, 0, R.NUM_ACTIONS - 1)
    plane = jnp.take_along_axis(planes, (actions % T.NUM_PLANES)[:, None], axis=1)[:, 0]
    return in_range & ((plane >> (actions // T.NUM_PLANES).astype(jnp.uint32)) & 1 == 1)


OPENINGS = ("random", "policy")


@functools.partial(jax.jit, static_argnames=("model", "opponent", "record_plies", "opening"))
def _arena(
    model_params,
    opponent_params,
    rules,
    start_planes,
    key,
    opening_plies,
    *,
    model,
    opponent,
    record_plies: int = 0,
    opening: str = "random",
) -> ArenaOutput:
    """Plays a batch of games from the start; the model is White in the first half.

    The first `opening_plies` plies are paired: game i and game i + N/2 play the same moves.
    `opening` "random": uniformly random legal moves; "policy": each mover's own policy
    sampled (a network's search with Gumbel noise, `gumbel_scale` 1, as in self-play; random
    and greedy as they are), computed on the first half, where the model is White, and
    replayed in the second, so every opening is played once from either side.

    With `record_plies` > 0 (at least the ply cap) every move is kept in a `GameLog`; the
    games and their random streams are the same as without.

    `start_planes` [B, 49] are the start position's legal planes. The loop carries each
    position's planes, so a ply of two baselines costs one move generation: the one
    `step_with_planes` needs anyway to detect mate after the move (the start planes come from
    outside so that the compiled program has no second copy of the move generator).
    """
    carry = _start_carry(rules, start_planes, record_plies)
    sides = dict(model=model, opponent=opponent, record_plies=record_plies, opening=opening)
    start_turn = carry.state.turn[0]
    carry = _play_until(
        model_params, opponent_params, rules, carry, key, opening_plies, start_turn, None, **sides
    )
    return _arena_output(carry, _model_colour(rules.variant_id.shape[0]))


def _model_colour(num_games: int) -> jax.Array:
    """int32 [B]: the model's colour in each game (White, 0, in the first half)."""
    return (jnp.arange(num_games) >= num_games // 2).astype(jnp.int32)


def _arena_output(carry: _Carry, model_colour) -> ArenaOutput:
    return ArenaOutput(
        model_reward=jnp.take_along_axis(carry.rewards, model_colour[:, None], axis=1)[:, 0],
        plies=carry.state.ply,
        finished=carry.state.terminated,
        model_illegal=carry.illegal[:, 0],
        opponent_illegal=carry.illegal[:, 1],
        record=carry.record,
    )


def _play_until(
    model_params,
    opponent_params,
    rules,
    carry: _Carry,
    key,
    opening_plies,
    start_turn,
    stop_live,
    *,
    model,
    opponent,
    record_plies: int,
    opening: str,
) -> _Carry:
    """The arena's loop from `carry` until every game is over (or the ply cap), or, with
    `stop_live` (int32, traced; None: never), until the opening is over and each half of the
    batch has at most `stop_live` games still running. `start_turn`: the colour to move at
    ply 0 (the model is to move in the first half when `start_turn + ply` is even)."""
    num_games = rules.variant_id.shape[0]
    model_colour = _model_colour(num_games)
    loop_limit = jnp.max(rules.max_plies) + 1  # the rules end every game by then
    half = num_games // 2

    def policies(key, state, planes, ply, model=model, opponent=opponent):
        model_first = (start_turn + ply) % 2 == 0  # the model is White in the first half
        sides = ((model, model_params), (opponent, opponent_params))
        return _lockstep_actions(key, rules, state, planes, model_first, sides)

    sampling_model = dataclasses.replace(model, gumbel_scale=1.0)
    sampling_opponent = dataclasses.replace(opponent, gumbel_scale=1.0)

    def paired_policy(key, state, planes, ply):
        # Both halves hold the same positions during the opening (same start, same moves), so
        # the first half's sampled moves are legal in the second.
        actions = policies(key, state, planes, ply, sampling_model, sampling_opponent)
        return jnp.concatenate([actions[:half], actions[:half]])

    def paired_random(key, state, planes, ply):
        del state, ply
        return _paired_random_actions(key, planes)

    opening_moves = paired_policy if opening == "policy" else paired_random

    def cond(carry: _Carry):
        going = ~jnp.all(carry.state.terminated) & (carry.ply < loop_limit)
        if stop_live is None:
            return going
        live = ~carry.state.terminated
        most = jnp.maximum(jnp.sum(live[:half]), jnp.sum(live[half:]))
        return going & ((carry.ply < opening_plies) | (most > stop_live))

    def body(carry: _Carry) -> _Carry:
        ply_key = jax.random.fold_in(key, carry.ply)
        actions = jax.lax.cond(
            carry.ply < opening_plies,
            opening_moves,
            policies,
            ply_key,
            carry.state,
            carry.planes,
            carry.ply,
        )
        return _play_ply(rules, carry, actions, model_colour, record_plies)

    return jax.lax.while_loop(cond, body, carry)


# ---------------------------------------------------------------------------------------------
# The compacting arena: the batch shrinks as its games end


@functools.partial(jax.jit, static_argnames=("record_plies",))
def _arena_start(rules, start_planes, *, record_plies: int) -> _Carry:
    return _start_carry(rules, start_planes, record_plies)


# `_play_until` compiled for one buffer size of `_compacting_arena` (its `stop_live` traced).
_arena_stage = jax.jit(
    _play_until, static_argnames=("model", "opponent", "record_plies", "opening")
)


def _compact_rows(terminated: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, real): the rows of a batch (halves kept apart) that make a batch of `size`: each
    half's running games, then finished ones of the same half as padding (`real` False; they
    idle). Every half has at most size / 2 running games."""
    half, new_half = terminated.shape[0] // 2, size // 2
    rows, real = [], []
    for first in (0, half):
        ended = terminated[first : first + half]
        live, idle = np.flatnonzero(~ended) + first, np.flatnonzero(ended) + first
        rows += [live, idle[: new_half - live.size]]
        real += [np.ones(live.size, bool), np.zeros(new_half - live.size, bool)]
    return np.concatenate(rows), np.concatenate(real)


def _take_games(carry: _Carry, rules, rows: np.ndarray):
    """(carry, rules) of the games at `rows` (host arrays), on the device."""
    batch = lambda x: jnp.asarray(np.asarray(x)[rows])  # noqa: E731
    record = None
    if carry.record is not None:
        record = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[:, rows]), carry.record)
    taken = carry._replace(
        state=jax.tree.map(batch, carry.state),
        planes=batch(carry.planes),
        rewards=batch(carry.rewards),
        illegal=batch(carry.illegal),
        record=record,
    )
    return taken, jax.tree.map(batch, rules)


def _compacting_arena(
    model_params,
    opponent_params,
    rules,
    start_planes,
    key,
    opening_plies,
    *,
    model,
    opponent,
    record_plies: int,
    opening: str,
    bucket_min: int,
) -> ArenaOutput:
    """`_arena`'s match with a batch that shrinks as games end: once the opening is over and
    each half has at most a quarter of its games running, those games (halves kept apart, so
    the model still plays in one half a ply) go on in a buffer a quarter the size, down to
    `bucket_min` games; a ply then costs what the games still running cost. One compile per
    buffer size. The same players and openings; at a smaller buffer a network's or a random
    player's draws come from a smaller array, so the games differ from `_arena`'s (the same
    distribution) unless every player is deterministic. Host arrays, as `_arena`'s after
    `jax.device_get`."""
    total = rules.variant_id.shape[0]
    sides = dict(model=model, opponent=opponent, record_plies=record_plies, opening=opening)
    carry = _arena_start(rules, start_planes, record_plies=record_plies)
    start_turn, opening_plies = carry.state.turn[0], jnp.int32(opening_plies)
    games, real, out = np.arange(total), np.ones(total, bool), None
    while True:
        size = games.size
        smaller = size // 4 if size // 4 >= bucket_min and size % 8 == 0 else 0
        stop = jnp.int32(smaller // 2 if smaller else -1)
        carry = _arena_stage(
            model_params,
            opponent_params,
            rules,
            carry,
            key,
            opening_plies,
            start_turn,
            stop,
            **sides,
        )
        host, host_rules = jax.device_get((carry, rules))
        out = _store_games(out, host, games[real], real, total)
        ended = host.state.terminated
        if not smaller or ended.all() or host.ply > np.max(host_rules.max_plies):
            return out
        rows, real = _compact_rows(ended, smaller)
        games = games[rows]
        carry, rules = _take_games(host, host_rules, rows)


def _store_games(out, host: _Carry, games: np.ndarray, real: np.ndarray, total: int):
    """`out` (a whole match's host `ArenaOutput`, made at the first call) with the `real` rows
    of `host` written at their games' places `games`."""
    if out is None:
        one = lambda x: np.zeros(total, np.asarray(x).dtype)  # noqa: E731
        out = ArenaOutput(
            model_reward=np.zeros(total, np.float32),
            plies=one(host.state.ply),
            finished=np.zeros(total, bool),
            model_illegal=np.zeros(total, bool),
            opponent_illegal=np.zeros(total, bool),
            record=None
            if host.record is None
            else GameLog(
                *(np.zeros((x.shape[0], total, *x.shape[2:]), x.dtype) for x in host.record)
            ),
        )
    colour = (games >= total // 2).astype(np.int32)
    rewards = np.asarray(host.rewards)[real]
    out.model_reward[games] = np.take_along_axis(rewards, colour[:, None], axis=1)[:, 0]
    out.plies[games] = np.asarray(host.state.ply)[real]
    out.finished[games] = np.asarray(host.state.terminated)[real]
    out.model_illegal[games] = np.asarray(host.illegal)[real, 0]
    out.opponent_illegal[games] = np.asarray(host.illegal)[real, 1]
    if out.record is not None:
        for whole, part in zip(out.record, host.record, strict=True):
            whole[:, games] = np.asarray(part)[:, real]
    return out


def _start_carry(rules, start_planes: jax.Array, record_plies: int) -> _Carry:
    """The arena's loop state at ply 0: the start positions, no rewards, an empty `GameLog`
    when recording."""
    num_games = rules.variant_id.shape[0]
    state = BOARD.init(rules)
    # `init` does not look for moves: a start without any (monochromatic: White is stalemated
    # at once) is a finished, drawn game. Start positions are never in check, so never mate.
    state = state.replace(terminated=state.terminated | ~jnp.any(start_planes != 0, axis=-1))
    return _Carry(
        state=state,
        planes=start_planes,
        ply=jnp.int32(0),
        rewards=jnp.zeros((num_games, 2), jnp.float32),
        illegal=jnp.zeros((num_games, 2), bool),
        record=GameLog(
            jnp.zeros((record_plies, num_games), jnp.int32),
            jnp.zeros((record_plies, num_games, 6), jnp.uint32),
            jnp.zeros((record_plies, num_games), jnp.uint32),
        )
        if record_plies
        else None,
    )


def _half_of(tree, start, half: int):
    """Rows [start, start + half) of every leaf of a batch."""
    return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, half, axis=0), tree)


def _paired_random_actions(key: jax.Array, planes: jax.Array) -> jax.Array:
    """int32 [B]: uniformly random legal moves; the same key on both halves, so game i and
    game i + N/2 play the same opening moves."""
    half = planes.shape[0] // 2
    legal = BOARD.planes_to_mask(planes)
    return jnp.concatenate(
        [R.random_legal_action(key, legal[:half]), R.random_legal_action(key, legal[half:])]
    )


def _lockstep_actions(key, rules, state, planes, model_first, sides) -> jax.Array:
    """int32 [B]: every game's move, each side acting on its own half of the batch only.

    Every game has the same side to move at a given ply (one variant, one start, the same
    number of plies so far): the model in the first half when `model_first`, else in the
    second. `sides` is ((model, its params), (opponent, its params)).
    """
    (model, model_params), (opponent, opponent_params) = sides
    half = planes.shape[0] // 2
    model_key, opponent_key = jax.random.split(key)
    model_start = jnp.where(model_first, 0, half)
    opponent_start = half - model_start
    model_actions = model.act(
        model_params,
        model_key,
        _half_of(rules, model_start, half),
        _half_of(state, model_start, half),
        _half_of(planes, model_start, half),
    )
    opponent_actions = opponent.act(
        opponent_params,
        opponent_key,
        _half_of(rules, opponent_start, half),
        _half_of(state, opponent_start, half),
        _half_of(planes, opponent_start, half),
    )
    return jnp.where(
        model_first,
        jnp.concatenate([model_actions, opponent_actions]),
        jnp.concatenate([opponent_actions, model_actions]),
    )


def _play_ply(rules, carry: _Carry, actions, model_colour, record_plies: int) -> _Carry:
    """Plays `actions` [B] in every game: marks illegal ones against their mover (the rules
    end such a game), records the ply when recording, adds the rewards."""
    state, planes = carry.state, carry.planes
    illegal = ~state.terminated & ~_is_legal(planes, actions)
    model_moved = state.turn == model_colour
    illegal = jnp.stack([illegal & model_moved, illegal & ~model_moved], axis=1)
    record = carry.record
    if record_plies:
        record = GameLog(
            record.actions.at[carry.ply].set(actions, mode="drop"),
            record.pieces.at[carry.ply].set(state.pieces, mode="drop"),
            record.own.at[carry.ply].set(state.own, mode="drop"),
        )
    state, planes = BOARD.step_with_planes(rules, state, actions, planes)
    return _Carry(
        state,
        planes,
        carry.ply + 1,
        carry.rewards + state.rewards,
        carry.illegal | illegal,
        record,
    )


@functools.cache
def start_planes(variant: str) -> np.ndarray:
    """uint32 [49]: legal planes of the variant's start position.

    Computed op by op (`jax.disable_jit`, a few seconds once per variant and process) rather
    than compiled: a compiled move generator costs about 25 s of XLA time on 2 CPU cores.
    """
    rules = R.get(variant)
    with jax.disable_jit():
        return np.asarray(jax.device_get(game.legal_planes(rules, game.init(rules))))


def play_match(
    network,
    params: Any,
    variant: str,
    opponent: str | Policy,
    num_games: int,
    num_simulations: int,
    key: jax.Array,
    *,
    opponent_params: Any = None,
    opponent_network=None,
    opponent_simulations: int | None = None,
    max_plies: int | None = None,
    opening_plies: int = 0,
    opening: str = "random",
    games_out: list | None = None,
    num_worlds: int = 4,
    omniscient: bool = False,
    sampled: bool = False,
    mixed_opponents: bool = False,
    compact: int = 0,
) -> dict[str, Any]:
    """Plays `num_games` colour-balanced games of `variant`: model vs `opponent`.

    Every call with the same players (kind, network, simulations) and `num_games` reuses one
    compiled arena, whatever the variant, key, parameters, ply cap or opening length; all
    pairings of built-in players share one (`mixed_opponents`: and a network's).

    Args:
      network: the model's network (with `params`), None for `UniformPriorNetwork`, or a
        built-in player's kind ("random", "greedy", ...: `players.kinds()`) or a policy function
        `(key, rules, state) -> actions`.
      params: the model's parameters (ignored for built-in players and policy functions).
      variant: a registered variant name.
      opponent: a built-in player's kind, "checkpoint" (with `opponent_network` and
        `opponent_params`) or a policy function. An `opponent_network` alone means
        "checkpoint". Under fog a built-in player must be `fair_under_fog` (`players`).
      num_games: positive and even; the model is White in games [0, N/2), Black in the rest.
      num_simulations: the model's search simulations (0: raw policy argmax).
      key: PRNG key (random opponents, greedy ties, openings; the search is deterministic).
      opponent_simulations: the checkpoint opponent's simulations (default `num_simulations`).
      max_plies: ply cap after which a game is drawn (default: the rules' cap, 256).
      opening_plies: plies played by both sides first, paired across colours (game i and
        game i + N/2 play the same moves).
      opening: how the opening plies are chosen: "random" (uniformly) or "policy" (sampled
        from the mover's own search policy, so an opening does not hand either side a lost
        game; random and greedy players move as they always do).
      games_out: a list to which the games are appended as dicts (variant, white, black,
        start_fen, moves in UCI, result, termination, opening_plies) for `mmc_jax.evaluation.pgn`.
        The arena records every match anyway (a `GameLog` of max(256, ply cap) plies), so this
        costs no other compile and changes nothing in the games.
      sampled: every network side samples every move from its own policy (as self-play does;
        at 0 simulations the raw softmax), not one line per opening. Fog-free variants only.
      mixed_opponents: the opponent is compiled as "a built-in player or `opponent_network`"
        (given for a built-in `opponent` too), so that the model's matches against both share
        one arena (adapt's evaluation); the games are the same.
      compact: N > 0: the batch shrinks by quarters as games end, down to N games, so a ply
        costs what the games still running cost (`_compacting_arena`). Not under fair fog.

    Returns:
      A JSON-able dict: `num_games`, `wins`, `draws`, `losses`, `score`, `score_ci95`,
      `ci_method`, `score_ci95_wilson`, `elo`, `elo_ci95`, `mean_plies`, per-colour dicts
      `white` / `black` (the model's colour) with games, wins, draws, losses, score,
      mean_plies; `opening_decided` (the share of games over before the opening ended);
      `illegal_moves` {model, opponent} (games lost by an illegal move: always 0
      for the built-in policies); plus the match settings.
    """
    variant = R.check_variant(variant)  # the canonical spelling, recorded in the results
    opponent_simulations = _checked_match_counts(
        num_games, num_simulations, opening_plies, opening, opponent_simulations, compact
    )
    network, params, model_name, model, model_params = _model_side(network, params, num_simulations)
    opponent, opponent_player, opponent_params = _opponent_side(
        opponent, opponent_network, opponent_params, opponent_simulations, mixed_opponents
    )
    fair_fog = R.has_fog(variant) and model.kind == "network" and not omniscient
    trees = num_games * (num_worlds if fair_fog else 1)
    _check_search_memory(trees, (model, num_simulations), (opponent_player, opponent_simulations))
    if sampled:
        model, opponent_player = _sampling(variant, model, opponent_player)
    if compact and fair_fog:
        raise ValueError("compact: the fair fog arena does not shrink its batch; leave it 0")
    if fair_fog:
        return _fair_fog_match(
            network, params, variant, opponent, num_games, num_simulations, key,
            num_worlds=num_worlds, opening_plies=opening_plies, max_plies=max_plies,
        )  # fmt: skip
    _check_pairing(variant, (network, model), (opponent, opponent_player), opening_plies)
    opponent_name = opponent if isinstance(opponent, str) else getattr(opponent, "__name__", "?")
    return _arena_match(
        variant, max_plies, num_games, key,
        model=(model, model_params, model_name, num_simulations),
        opponent=(opponent_player, opponent_params, opponent_name, opponent_simulations),
        opening_plies=opening_plies, opening=opening, games_out=games_out, compact=compact,
    )  # fmt: skip


def _arena_match(
    variant: str,
    max_plies,
    num_games: int,
    key,
    *,
    model,
    opponent,
    opening_plies: int,
    opening: str,
    games_out,
    compact: int,
) -> dict[str, Any]:
    """`play_match` in the compiled arena (`compact` > 0: the compacting one, down to buffers
    of `compact` games); each side is (static player, its jit-argument params, display name,
    simulations)."""
    (model, model_params, model_name, num_simulations) = model
    (opponent, opponent_params, opponent_name, opponent_simulations) = opponent
    single = R.get(variant) if max_plies is None else R.get(variant, max_plies=max_plies)
    arguments = (
        model_params,
        opponent_params,
        R.batch(single, num_games),
        jnp.asarray(np.tile(start_planes(variant), (num_games, 1))),
        key,
        jnp.int32(opening_plies),
    )
    settings = dict(
        model=model,
        opponent=opponent,
        opening=opening if opening_plies else "random",
        # Always recorded (a few MB at most), so that `games_out` needs no other compile.
        record_plies=max(R.variants.DEFAULT_MAX_PLIES, int(single.max_plies)),
    )
    if compact:
        output = _compacting_arena(*arguments, **settings, bucket_min=compact)
    else:
        output = jax.device_get(_arena(*arguments, **settings))
    result = _match_statistics(output, opening_plies)
    if games_out is not None:
        games_out.extend(game_records(output, variant, model_name, opponent_name, opening_plies))
    result.update(
        variant=variant,
        model=model_name,
        opponent=opponent_name,
        num_simulations=num_simulations if model.kind == "network" else None,
        opponent_simulations=(
            opponent_simulations if opponent.plays(opponent_name) == "network" else None
        ),
        max_plies=int(single.max_plies),
        opening_plies=opening_plies,
        opening=opening,
        sampled=model.gumbel_scale > 0
        or (opponent.gumbel_scale > 0 and opponent.plays(opponent_name) == "network"),
    )
    return result


def _check_pairing(variant: str, model_side, opponent_side, opening_plies: int) -> None:
    """ValueError for a built-in player unfair under fog (this arena hands it the true state)
    or two deterministic networks without an opening; each side is (argument, static player).
    """
    kinds = [player.plays(spec) for spec, player in (model_side, opponent_side)]
    for (spec, _), kind in zip((model_side, opponent_side), kinds, strict=True):
        if kind == "builtin":  # this arena hands them the true state
            players.check_fair(spec, variant)
    if kinds == ["network", "network"] and not opening_plies:
        raise ValueError(
            "two networks with deterministic searches and opening_plies=0 would replay one "
            f"game per colour; give opening_plies > 0 (e.g. {NETWORK_OPENING_PLIES}) so that "
            "the games are independent"
        )


def _checked_match_counts(
    num_games, num_simulations, opening_plies, opening, opponent_simulations, compact=0
) -> int:
    """ValueError for a bad game count, opening, simulation, opening-ply or compacting count;
    returns the opponent's simulations (default the model's)."""
    if isinstance(compact, bool) or not isinstance(compact, int) or compact < 0:
        raise ValueError(f"compact must be a non-negative number of games, got {compact!r}")
    if isinstance(num_games, bool) or not isinstance(num_games, int) or num_games <= 0:
        raise ValueError(f"num_games must be a positive even integer, got {num_games!r}")
    if num_games % 2:
        raise ValueError(f"num_games must be even (half the games per colour), got {num_games}")
    if opening not in OPENINGS:
        raise ValueError(f"opening must be one of {OPENINGS}, got {opening!r}")
    for name, value in (("num_simulations", num_simulations), ("opening_plies", opening_plies)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if opponent_simulations is None:
        opponent_simulations = num_simulations
    if not isinstance(opponent_simulations, int) or opponent_simulations < 0:
        raise ValueError(
            f"opponent_simulations must be a non-negative integer, got {opponent_simulations!r}"
        )
    return opponent_simulations


def _check_search_memory(trees: int, model, opponent) -> None:
    """ValueError (one line, before anything compiles) when a network side's search, every
    game's tree at once (`trees`: a tree per world under fair fog search), cannot fit in
    memory (`memory.check_search`; issue 52). `model`, `opponent`: (player, simulations)."""
    for (player, simulations), name in zip(
        (model, opponent), ("num_simulations", "opponent_simulations"), strict=True
    ):
        if player.searches and simulations > 0:
            memory.check_search(simulations, trees, name=name)


def _sampling(variant: str, *sides: _Player) -> tuple[_Player, ...]:
    """`sides` sampling every move from their own policy (`play_match(sampled=True)`);
    ValueError under fog."""
    if R.parse(variant).fog != "off":
        raise ValueError(f"sampled matches are for fog-free variants; {variant} has fog")
    return tuple(dataclasses.replace(side, gumbel_scale=1.0) for side in sides)


def _model_side(network, params, num_simulations: int):
    """(network, params, display name, static player, its jit-argument params) of
    `play_match`'s model: a network (None: the uniform-prior search), a built-in player's
    kind or a policy function."""
    if network is None:
        network, params = UniformPriorNetwork(), {}
    if isinstance(network, str):
        model_name = network
    elif isinstance(network, UniformPriorNetwork):
        model_name = "uniform-prior search"
    elif hasattr(network, "apply"):
        model_name = "network"
    else:
        model_name = getattr(network, "__name__", "policy")
    if isinstance(network, str) or (callable(network) and not hasattr(network, "apply")):
        model, model_params = _player(network, None, None, 0, "model")
    else:
        if params is None:
            raise ValueError("a model network needs its params (None: only for baselines)")
        model, model_params = _Player("network", network, num_simulations), params
    return network, params, model_name, model, model_params


def _opponent_side(
    opponent, opponent_network, opponent_params, opponent_simulations: int, either: bool = False
):
    """(opponent, static player, its jit-argument params) of `play_match`'s opponent: an
    `opponent_network` alone means "checkpoint"; `either`: `_player`'s."""
    if opponent is None and opponent_network is not None:
        opponent = "checkpoint"
    opponent_player, opponent_params = _player(
        opponent, opponent_network, opponent_params, opponent_simulations, "opponent", either
    )
    return opponent, opponent_player, opponent_params


def _match_statistics(output: ArenaOutput, opening_plies: int) -> dict[str, Any]:
    """`elo.match_statistics` of an arena's output (host arrays), with the share of games
    decided during the opening and the games lost by illegal moves per side."""
    if not np.all(output.finished):  # unreachable while the rules enforce their ply cap
        raise RuntimeError(f"{int((~output.finished).sum())} games did not finish")
    result = elo_lib.match_statistics(output.model_reward, output.plies)
    num_games = len(output.plies)
    decided = output.plies <= opening_plies if opening_plies else np.zeros(num_games, bool)
    result["opening_decided"] = float(np.mean(decided))
    result["illegal_moves"] = {
        "model": int(output.model_illegal.sum()),
        "opponent": int(output.opponent_illegal.sum()),
    }
    return result


def _fair_fog_match(
    network,
    params,
    variant,
    opponent,
    num_games,
    num_simulations,
    key,
    *,
    num_worlds,
    opening_plies,
    max_plies,
) -> dict[str, Any]:
    """A network under fog plays from its observations only (`pimc.fog_match`: PIMC over
    `num_worlds` sampled worlds, or the raw policy at 0 simulations) against a built-in player
    (which plays from its observations too)."""
    if not isinstance(opponent, str) or opponent not in players.kinds():
        raise ValueError(
            f"under fog ({variant}) a network plays only the built-in players "
            f"({', '.join(players.kinds())}) fairly; a second "
            "network needs its own beliefs (pimc.fog_match plays one network); pass "
            "omniscient=True for the old search on the true state (an upper bound, not fair)"
        )
    if num_simulations:
        player = pimc.FogPlayer("pimc", num_simulations, num_worlds)
    else:
        player = pimc.FogPlayer("raw")
    result = pimc.fog_match(
        network,
        params,
        variant,
        player,
        pimc.FogPlayer(opponent),
        num_games,
        key,
        opening_plies=opening_plies,
        max_plies=max_plies,
    )
    result.update(
        model="network (fair: observation only)",
        num_simulations=num_simulations,
        num_worlds=num_worlds if num_simulations else None,
        opponent=opponent,
        max_plies=int(R.get(variant).max_plies if max_plies is None else max_plies),
        illegal_moves={"model": 0, "opponent": 0},
    )
    return result


def game_records(
    output: ArenaOutput, variant: str, model_name: str, opponent_name: str, opening_plies: int
) -> list[dict[str, Any]]:
    """The recorded games of an `_arena` output (host arrays) as dicts for
    `mmc_jax.evaluation.pgn`."""
    log = output.record
    num_games = len(output.plies)
    records = []
    for g in range(num_games):
        model_white = g < num_games // 2
        plies = int(output.plies[g])
        moves = [
            R.board_action_to_uci(
                variant, log.actions[t, g], t % 2, log.pieces[t, g], log.own[t, g]
            )
            for t in range(plies)
        ]
        reward = float(output.model_reward[g]) * (1 if model_white else -1)  # White's
        illegal = bool(output.model_illegal[g] or output.opponent_illegal[g])
        records.append(
            {
                "variant": variant,
                "white": model_name if model_white else opponent_name,
                "black": opponent_name if model_white else model_name,
                "start_fen": R.START_FENS[variant],
                "moves": moves,
                "result": "1-0" if reward > 0 else "0-1" if reward < 0 else "1/2-1/2",
                "termination": "rules infraction" if illegal else "normal",
                "opening_plies": min(opening_plies, plies),
            }
        )
    return records


def _metric_name(opponent: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in str(opponent))


def evaluate_params(
    settings,
    network,
    params: Any,
    variant: str,
    key: jax.Array,
    *,
    prefix: str = "eval/",
) -> dict[str, float]:
    """Plays `settings.num_games` against every `settings.opponents` entry on `variant`.

    `settings` is a run config's `eval` section (`num_games`, `num_simulations`, `opponents`).
    Returns `<prefix>score_vs_<opponent>`, its 95% bounds `<prefix>score_low_vs_<opponent>` /
    `<prefix>score_high_vs_<opponent>`, and wins, draws, losses, elo, mean_plies likewise.
    """
    host_params = jax.device_get(params)
    metrics: dict[str, float] = {}
    for index, opponent in enumerate(settings.opponents):
        result = play_match(
            network,
            host_params,
            variant,
            opponent,
            int(settings.num_games),
            int(settings.num_simulations),
            jax.random.fold_in(key, index),
            num_worlds=int(settings.get("num_worlds", 4)),
        )
        name = _metric_name(opponent)
        metrics[f"{prefix}score_vs_{name}"] = float(result["score"])
        low, high = result["score_ci95"]
        metrics[f"{prefix}score_low_vs_{name}"] = float(low)
        metrics[f"{prefix}score_high_vs_{name}"] = float(high)
        for field in ("wins", "draws", "losses", "elo", "mean_plies"):
            if result.get(field) is not None:
                metrics[f"{prefix}{field}_vs_{name}"] = result[field]
    return metrics


def evaluate_run_params(
    config, params: Any, key: jax.Array, variant: str | None = None, prefix: str = "eval/"
) -> dict[str, float]:
    """`evaluate_params` with a run config's network and `eval` section (on `config.variant`
    unless `variant`): the evaluation every learner's run loop calls."""
    network = network_lib.make_network(config.network)
    return evaluate_params(
        config.eval,
        network,
        params,
        config.variant if variant is None else variant,
        key,
        prefix=prefix,
    )
