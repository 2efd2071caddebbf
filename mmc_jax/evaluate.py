"""Arenas and opponents: how strong is a model, measured in games.

Opponents are pure, jittable policies `(key, rules, state) -> actions int32 [B]` (the built-in
ones also take the positions' `legal_planes` [B, 49] as an optional `planes`, so that an arena
that carries them does not generate the moves again):

  random_policy         a uniformly random legal move.
  greedy_policy         the move that wins the most material (see `material_gain`), ties broken
                        at random; with nothing to win, a random legal move.
  make_model_policy     a network: Gumbel MuZero search with `gumbel_scale=0` (deterministic
                        sequential halving) and a given number of simulations, or the argmax of
                        the raw policy when `num_simulations=0`.

`play_match` plays a colour-balanced match (the model is White in the first half of the games
and Black in the second) as ONE jitted `lax.while_loop` over plies: every ply both sides'
policies act on the whole batch and each game takes the action of its side to move; finished
games idle until the last one ends (the rules' ply cap bounds the loop). With
`opening_plies > 0` both sides first play that many uniformly random plies, the same ones in
game `i` and game `i + N/2`: paired openings, each played once from either side. A start
without any legal move (monochromatic: White is stalemated at once) is scored a draw at ply 0.
Calls with the same players and number of games share one compiled arena (variant, key,
parameters, ply cap and opening length are data); all random / greedy pairings share one.
Games lost by an illegal move are counted per side (`illegal_moves`; 0 for built-in policies).

Statistics: a game scores 1 / 0.5 / 0 for a model win / draw / loss; the match score is the
mean over N games. `score_ci95` is the normal approximation on the per-game scores with their
sample variance (ddof 1): mean +- 1.96 * sd / sqrt(N), clipped to [0, 1], as chess engine
testers report it; it uses the observed draw rate, which matters here: a drawish match has
per-game variance far below `p (1 - p)` (greedy vs random in gardner: 0.034 against 0.24).
When every game has the same result the sample variance is 0 and that interval would be a
point; then the Wilson score interval is used instead (`ci_method` says which). The Wilson
interval is always reported too (`score_ci95_wilson`): a proportion's interval at the score
over N games, conservative with draws (per-game variance <= p (1 - p)), never degenerate.
The Elo difference `400 log10(p / (1 - p))` and its interval are the same transformation of
the score and its bounds (None where infinite).

`load_model` rebuilds the network from the config saved with a checkpoint and restores only
its parameters. CLI (see `main`):

    python -m mmc_jax.evaluate --checkpoint runs/gardner --variant gardner --opponent greedy \\
        --games 400 [--simulations 32] [--seed 0] [--json]

`--pgn FILE` saves the games (`mmc_jax.pgn`; every match is recorded in the arena anyway).
Subcommands: `python -m mmc_jax.evaluate ladder ...` rates a checkpoint in Elo against random,
greedy and Fairy-Stockfish at increasing node limits, `... tournament ...` every checkpoint of
a run (`mmc_jax.ladder`; those games run in the stepwise `mmc_jax.arena`).

`--checkpoint none` (or omitting it) evaluates the uniform-prior search: a stand-in network
with zero logits and zero value, so the search sees only the game's terminal rewards (a
shallow mate-and-king-capture finder). `--opponent` is `random`, `greedy` or another run's
workdir.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mmc_jax import checkpoint, search
from mmc_jax import network as network_lib
from mmc_jax import rules as R
from mmc_jax.rules import game, notation
from mmc_jax.rules import tables as T

Policy = Callable[[jax.Array, R.Rules, R.State], jax.Array]

# Material values of P, N, B, R, Q, K. The king's value only matters where kings can be
# captured (dark, extinction, ...): taking it wins the game, so it outranks everything.
PIECE_VALUES = (1.0, 3.0, 3.0, 5.0, 9.0, 100.0)
NAMED_OPPONENTS = ("random", "greedy")
Z_95 = 1.959963984540054


# ---------------------------------------------------------------------------------------------
# Policies


def _action_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One-hot [25, 1225] to-square and from-square of every action, and [1225] the material a
    pawn gains by promoting with that action (0 unless it lands on the last rank)."""
    to_sq = T.TO_SQUARE.reshape(-1)  # [1225], -1 off the board
    actions = np.arange(T.NUM_ACTIONS)
    squares = np.arange(T.NUM_SQUARES)[:, None]
    to_one_hot = (squares == to_sq[None, :]).astype(np.float32)
    from_one_hot = (squares == (actions // T.NUM_PLANES)[None, :]).astype(np.float32)
    plane = actions % T.NUM_PLANES
    # Planes 0-8 are the under-promotions (rook, bishop, knight by thirds); any other pawn move
    # onto the last rank promotes to a queen (mirrors `game._apply`).
    under = np.array([T.ROOK, T.BISHOP, T.KNIGHT])[np.minimum(plane, 8) // 3]
    promoted = np.where(plane < 9, under, T.QUEEN)
    values = np.asarray(PIECE_VALUES, np.float32)
    promotion_gain = np.where((to_sq >= 0) & (to_sq % 5 == 4), values[promoted] - values[0], 0.0)
    return to_one_hot, from_one_hot, promotion_gain.astype(np.float32)


_TO_ONE_HOT, _FROM_ONE_HOT, _PROMOTION_GAIN = _action_tables()


def _square_bits(bitboards: jax.Array) -> jax.Array:
    """uint32 [...] -> float32 [..., 25]: bit s of each bitboard."""
    squares = jnp.arange(T.NUM_SQUARES, dtype=jnp.uint32)
    return ((bitboards[..., None] >> squares) & 1).astype(jnp.float32)


def material_gain(rules: R.Rules, state: R.State) -> jax.Array:
    """float32 [B, 1225]: material each action wins, from the board in the mover's view.

    The value of the enemy piece on the action's to-square (P 1, N 3, B 3, R 5, Q 9, K 100),
    plus the promotion gain (promoted piece minus the pawn) when a pawn reaches the last rank
    and stays there (no promotion on rifle or atomic captures). Deliberately simple: in atomic
    the blast's other victims and the capturer's own loss are ignored, and in dark the greedy
    player sees the whole board. Legality is not considered here.
    """
    pieces = state.pieces  # [B, 6] mover's view
    occupied = (
        pieces[:, 0] | pieces[:, 1] | pieces[:, 2] | pieces[:, 3] | pieces[:, 4] | pieces[:, 5]
    )
    enemy = occupied & ~state.own
    values = jnp.asarray(PIECE_VALUES, jnp.float32)
    square_value = jnp.einsum("bps,p->bs", _square_bits(pieces & enemy[:, None]), values)
    captured = square_value @ _TO_ONE_HOT  # [B, 1225]
    own_pawn_from = _square_bits(pieces[:, T.PAWN] & state.own) @ _FROM_ONE_HOT
    promotes = (rules.capture_mode == R.variants.CAPTURE_NORMAL)[:, None] | (captured == 0)
    return captured + jnp.where(promotes, own_pawn_from * _PROMOTION_GAIN, 0.0)


def _mask(rules: R.Rules, state: R.State, planes: jax.Array | None) -> jax.Array:
    if planes is None:
        planes = R.legal_planes(rules, state)
    return R.planes_to_mask(planes)


def random_policy(
    key: jax.Array, rules: R.Rules, state: R.State, planes: jax.Array | None = None
) -> jax.Array:
    """int32 [B]: a uniformly random legal action per game.

    `planes` (`legal_planes` [B, 49]) saves the move generation when the caller has them.
    """
    return R.random_legal_action(key, _mask(rules, state, planes))


def greedy_policy(
    key: jax.Array, rules: R.Rules, state: R.State, planes: jax.Array | None = None
) -> jax.Array:
    """int32 [B]: a legal action with the largest `material_gain`, ties broken at random.

    Without any capture (or promotion) every legal move ties at 0: a uniformly random move.
    """
    return _greedy_from_mask(key, rules, state, _mask(rules, state, planes))


def _greedy_from_mask(key, rules, state, legal):
    gain = jnp.where(legal, material_gain(rules, state), -1.0)
    best = legal & (gain == gain.max(axis=-1, keepdims=True))
    return R.random_legal_action(key, best)


def make_model_policy(
    network, params: Any, num_simulations: int, gumbel_scale: float = 0.0
) -> Policy:
    """A network as a policy: deterministic Gumbel MuZero search (`gumbel_scale=0`) with
    `num_simulations` simulations, or the raw policy's argmax over legal moves when 0.

    `gumbel_scale=1` samples like self-play does (the Gumbel noise picks among the moves the
    search considers); the raw policy then samples from its softmax."""
    if num_simulations == 0:

        def raw_policy(key, rules, state, planes=None):
            logits, _, _ = search.evaluate(network, params, rules, state, planes)
            if gumbel_scale:
                noise = gumbel_scale * jax.random.gumbel(key, logits.shape, logits.dtype)
                logits = logits + noise
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)

        return raw_policy

    def search_policy(key, rules, state, planes=None):
        output = search.run_search(
            network,
            params,
            rules,
            state,
            key,
            num_simulations=num_simulations,
            algorithm="gumbel_muzero",
            gumbel_scale=gumbel_scale,
            planes=planes,
        )
        return output.action.astype(jnp.int32)

    return search_policy


@dataclasses.dataclass(frozen=True)
class UniformPriorNetwork:
    """Stand-in network with zero logits on legal moves and zero value everywhere.

    Its search is guided only by the game's terminal rewards; its parameters are `{}`.
    """

    def apply(self, variables, obs, legal_action_mask=None):
        del variables
        batch_size = obs.shape[0]
        if legal_action_mask is None:
            logits = jnp.zeros((batch_size, R.NUM_ACTIONS), jnp.float32)
        else:
            logits = jnp.where(legal_action_mask, 0.0, network_lib.MASKED_LOGIT)
        return logits, jnp.zeros((batch_size,), jnp.float32)


# ---------------------------------------------------------------------------------------------
# Arena


@dataclasses.dataclass(frozen=True)
class _Player:
    """Static (hashable) description of one side; its `params` travel as jit arguments.

    kind "baseline": random or greedy, chosen by `params` (an int32 index into
    `NAMED_OPPONENTS`) so that every baseline pairing shares one compiled arena; "network":
    `network` with `num_simulations`; "policy": a user policy `(key, rules, state)`.
    """

    kind: str
    network: Any = None
    num_simulations: int = 0
    policy: Any = None

    def act(self, params, key, rules, state, planes):
        if self.kind == "baseline":
            legal = R.planes_to_mask(planes)
            random_key, greedy_key = jax.random.split(key)
            return jnp.where(
                params == NAMED_OPPONENTS.index("greedy"),
                _greedy_from_mask(greedy_key, rules, state, legal),
                R.random_legal_action(random_key, legal),
            )
        if self.kind == "network":
            policy = make_model_policy(self.network, params, self.num_simulations)
            return policy(key, rules, state, planes)
        return self.policy(key, rules, state)


def _player(spec, network, params, num_simulations: int, role: str) -> tuple[_Player, Any]:
    """(static player, its jit-argument params) of a `play_match` argument."""
    if isinstance(spec, str):
        if spec in NAMED_OPPONENTS:
            return _Player("baseline"), jnp.int32(NAMED_OPPONENTS.index(spec))
        if spec == "checkpoint":
            if network is None or params is None:
                raise ValueError(f"{role} 'checkpoint' needs a network and its params")
            return _Player("network", network, num_simulations), params
        raise ValueError(
            f"unknown {role} {spec!r}; expected one of {NAMED_OPPONENTS + ('checkpoint',)} "
            "or a policy function (key, rules, state) -> actions"
        )
    if callable(spec) and not hasattr(spec, "apply"):
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


@functools.partial(jax.jit, static_argnames=("model", "opponent", "record_plies"))
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
) -> ArenaOutput:
    """Plays a batch of games from the start; the model is White in the first half.

    With `record_plies` > 0 (at least the ply cap) every move is kept in a `GameLog`; the
    games and their random streams are the same as without.

    `start_planes` [B, 49] are the start position's legal planes. The loop carries each
    position's planes, so a ply of two baselines costs one move generation: the one
    `step_with_planes` needs anyway to detect mate after the move (the start planes come from
    outside so that the compiled program has no second copy of the move generator).
    """
    num_games = rules.variant_id.shape[0]
    half = num_games // 2
    model_colour = (jnp.arange(num_games) >= half).astype(jnp.int32)
    loop_limit = jnp.max(rules.max_plies) + 1  # the rules end every game by then

    def paired_random(key, state, planes):
        # The same key on both halves: game i and game i + N/2 play the same opening moves.
        legal = R.planes_to_mask(planes)
        return jnp.concatenate(
            [R.random_legal_action(key, legal[:half]), R.random_legal_action(key, legal[half:])]
        )

    def policies(key, state, planes):
        model_key, opponent_key = jax.random.split(key)
        model_actions = model.act(model_params, model_key, rules, state, planes)
        opponent_actions = opponent.act(opponent_params, opponent_key, rules, state, planes)
        return jnp.where(state.turn == model_colour, model_actions, opponent_actions)

    def cond(carry: _Carry):
        return ~jnp.all(carry.state.terminated) & (carry.ply < loop_limit)

    def body(carry: _Carry) -> _Carry:
        state, planes = carry.state, carry.planes
        ply_key = jax.random.fold_in(key, carry.ply)
        actions = jax.lax.cond(
            carry.ply < opening_plies, paired_random, policies, ply_key, state, planes
        )
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
        state, planes = R.step_with_planes(rules, state, actions, planes)
        return _Carry(
            state,
            planes,
            carry.ply + 1,
            carry.rewards + state.rewards,
            carry.illegal | illegal,
            record,
        )

    state = R.init(rules)
    # `init` does not look for moves: a start without any (monochromatic: White is stalemated
    # at once) is a finished, drawn game. Start positions are never in check, so never mate.
    state = state.replace(terminated=state.terminated | ~jnp.any(start_planes != 0, axis=-1))
    carry = _Carry(
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
    carry = jax.lax.while_loop(cond, body, carry)
    return ArenaOutput(
        model_reward=jnp.take_along_axis(carry.rewards, model_colour[:, None], axis=1)[:, 0],
        plies=carry.state.ply,
        finished=carry.state.terminated,
        model_illegal=carry.illegal[:, 0],
        opponent_illegal=carry.illegal[:, 1],
        record=carry.record,
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


def wilson_interval(score: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion `score` observed over `n` trials."""
    if n <= 0:
        raise ValueError(f"need at least one game, got {n}")
    denominator = 1.0 + z * z / n
    centre = (score + z * z / (2 * n)) / denominator
    half_width = z / denominator * math.sqrt(score * (1 - score) / n + z * z / (4 * n * n))
    return max(0.0, centre - half_width), min(1.0, centre + half_width)


def elo_difference(score: float) -> float | None:
    """Elo difference implied by a match score (None at 0 or 1, where it is infinite)."""
    if not 0.0 < score < 1.0:
        return None
    return 400.0 * math.log10(score / (1.0 - score))


def _tally(rewards: np.ndarray, plies: np.ndarray) -> dict[str, Any]:
    games = len(rewards)
    wins, draws, losses = (
        int(n) for n in ((rewards > 0).sum(), (rewards == 0).sum(), (rewards < 0).sum())
    )
    return {
        "games": games,
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "score": (wins + 0.5 * draws) / games,
        "mean_plies": float(plies.mean()),
    }


def normal_interval(scores: np.ndarray, z: float = Z_95) -> tuple[float, float]:
    """mean +- z * sd / sqrt(N) of per-game scores [N] (sample sd, ddof 1), clipped to [0, 1]."""
    scores = np.asarray(scores, np.float64)
    n = len(scores)
    sd = float(scores.std(ddof=1)) if n > 1 else 0.0
    mean = float(scores.mean())
    half_width = z * sd / math.sqrt(n)
    return max(0.0, mean - half_width), min(1.0, mean + half_width)


def match_statistics(model_rewards: np.ndarray, plies: np.ndarray) -> dict[str, Any]:
    """W/D/L overall and per colour (games [0, N/2) White, [N/2, N) Black), score, 95% CIs.

    `model_rewards` [N] are the model's game results (+1 / 0 / -1), `plies` [N] game lengths.
    See the module docstring for the intervals.
    """
    model_rewards, plies = np.asarray(model_rewards), np.asarray(plies)
    half = len(model_rewards) // 2
    overall = _tally(model_rewards, plies)
    num_games, score = overall.pop("games"), overall["score"]
    scores = (np.sign(model_rewards) + 1.0) / 2.0
    wilson = wilson_interval(score, num_games)
    degenerate = num_games < 2 or np.all(scores == scores[0])
    low, high = wilson if degenerate else normal_interval(scores)
    return {
        "num_games": num_games,
        **overall,
        "score_ci95": [low, high],
        "ci_method": "wilson" if degenerate else "normal",
        "score_ci95_wilson": list(wilson),
        "elo": elo_difference(score),
        "elo_ci95": [elo_difference(low), elo_difference(high)],
        "white": _tally(model_rewards[:half], plies[:half]),
        "black": _tally(model_rewards[half:], plies[half:]),
    }


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
    games_out: list | None = None,
) -> dict[str, Any]:
    """Plays `num_games` colour-balanced games of `variant`: model vs `opponent`.

    Every call with the same players (kind, network, simulations) and `num_games` reuses one
    compiled arena, whatever the variant, key, parameters, ply cap or opening length; all
    random / greedy pairings share one.

    Args:
      network: the model's network (with `params`), None for `UniformPriorNetwork`, or, for
        baselines, "random" / "greedy" / a policy function `(key, rules, state) -> actions`.
      params: the model's parameters (ignored for baselines).
      variant: a registered variant name.
      opponent: "random", "greedy", "checkpoint" (with `opponent_network` and
        `opponent_params`) or a policy function. An `opponent_network` alone means
        "checkpoint".
      num_games: positive and even; the model is White in games [0, N/2), Black in the rest.
      num_simulations: the model's search simulations (0: raw policy argmax).
      key: PRNG key (random opponents, greedy ties, openings; the search is deterministic).
      opponent_simulations: the checkpoint opponent's simulations (default `num_simulations`).
      max_plies: ply cap after which a game is drawn (default: the rules' cap, 256).
      opening_plies: uniformly random plies played by both sides first, paired across colours.
      games_out: a list to which the games are appended as dicts (variant, white, black,
        start_fen, moves in UCI, result, termination, opening_plies) for `mmc_jax.pgn`. The
        arena records every match anyway (a `GameLog` of max(256, ply cap) plies), so this
        costs no other compile and changes nothing in the games.

    Returns:
      A JSON-able dict: `num_games`, `wins`, `draws`, `losses`, `score`, `score_ci95`,
      `ci_method`, `score_ci95_wilson`, `elo`, `elo_ci95`, `mean_plies`, per-colour dicts
      `white` / `black` (the model's colour) with games, wins, draws, losses, score,
      mean_plies; `illegal_moves` {model, opponent} (games lost by an illegal move: always 0
      for the built-in policies); plus the match settings.
    """
    R.check_variant(variant)
    if isinstance(num_games, bool) or not isinstance(num_games, int) or num_games <= 0:
        raise ValueError(f"num_games must be a positive even integer, got {num_games!r}")
    if num_games % 2:
        raise ValueError(f"num_games must be even (half the games per colour), got {num_games}")
    for name, value in (("num_simulations", num_simulations), ("opening_plies", opening_plies)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if opponent_simulations is None:
        opponent_simulations = num_simulations
    if not isinstance(opponent_simulations, int) or opponent_simulations < 0:
        raise ValueError(
            f"opponent_simulations must be a non-negative integer, got {opponent_simulations!r}"
        )

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
    if opponent is None and opponent_network is not None:
        opponent = "checkpoint"
    opponent_player, opponent_params = _player(
        opponent, opponent_network, opponent_params, opponent_simulations, "opponent"
    )

    single = R.get(variant) if max_plies is None else R.get(variant, max_plies=max_plies)
    output = jax.device_get(
        _arena(
            model_params,
            opponent_params,
            R.batch(single, num_games),
            jnp.asarray(np.tile(start_planes(variant), (num_games, 1))),
            key,
            jnp.int32(opening_plies),
            model=model,
            opponent=opponent_player,
            # Always recorded (a few MB at most), so that `games_out` needs no other compile.
            record_plies=max(R.variants.DEFAULT_MAX_PLIES, int(single.max_plies)),
        )
    )
    if not np.all(output.finished):  # unreachable while the rules enforce their ply cap
        raise RuntimeError(f"{int((~output.finished).sum())} games did not finish")
    result = match_statistics(output.model_reward, output.plies)
    result["illegal_moves"] = {
        "model": int(output.model_illegal.sum()),
        "opponent": int(output.opponent_illegal.sum()),
    }
    opponent_name = opponent if isinstance(opponent, str) else getattr(opponent, "__name__", "?")
    if games_out is not None:
        games_out.extend(game_records(output, variant, model_name, opponent_name, opening_plies))
    result.update(
        variant=variant,
        model=model_name,
        opponent=opponent_name,
        num_simulations=num_simulations if model.kind == "network" else None,
        opponent_simulations=opponent_simulations if opponent_player.kind == "network" else None,
        max_plies=int(single.max_plies),
        opening_plies=opening_plies,
    )
    return result


def game_records(
    output: ArenaOutput, variant: str, model_name: str, opponent_name: str, opening_plies: int
) -> list[dict[str, Any]]:
    """The recorded games of an `_arena` output (host arrays) as dicts for `mmc_jax.pgn`."""
    log = output.record
    num_games = len(output.plies)
    rifle = variant == "rifle"
    records = []
    for g in range(num_games):
        model_white = g < num_games // 2
        plies = int(output.plies[g])
        moves = [
            notation.action_to_uci(
                int(log.actions[t, g]), t % 2, log.pieces[t, g], log.own[t, g], rifle
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


# ---------------------------------------------------------------------------------------------
# Loading models


def _split_checkpoint_path(path: str | os.PathLike, step: int | None) -> tuple[str, int | None]:
    """`<workdir>`, `<workdir>/checkpoints` or `<workdir>/checkpoints/<step>` -> (workdir, step)."""
    path = os.path.abspath(os.fspath(path))
    name, parent = os.path.basename(path), os.path.dirname(path)
    if name.isdigit() and os.path.basename(parent) == checkpoint.CHECKPOINT_SUBDIR:
        if step is not None and int(step) != int(name):
            raise ValueError(f"step {step} given for the checkpoint path {path} of step {name}")
        return os.path.dirname(parent), int(name)
    if name == checkpoint.CHECKPOINT_SUBDIR:
        return parent, step
    return path, step


def load_model(path: str | os.PathLike, step: int | None = None):
    """(network, params, config) of a checkpoint: the network is rebuilt from the saved config.

    `path` is a run's workdir, its `checkpoints` folder, or one step's folder in it; `step`
    defaults to the latest (or to the step folder given). Only the parameters are read.

    Raises:
      FileNotFoundError: no such directory, or no checkpoint (or not that step) in it.
      ValueError: the checkpoint has no network config, or its parameters do not fit it.
    """
    workdir, step = _split_checkpoint_path(path, step)
    if not os.path.isdir(workdir):
        raise FileNotFoundError(f"no such checkpoint directory: {workdir}")
    meta = checkpoint.load_metadata(workdir, step)
    saved = meta.get("config")
    if not isinstance(saved, dict) or not isinstance(saved.get("network"), dict):
        raise ValueError(
            f"checkpoint under {workdir} (step {meta.get('step')}) has no network config in its "
            "sidecar; cannot rebuild the network"
        )
    config = ml_collections.ConfigDict(saved)
    network = network_lib.make_network(config.network)
    shapes = jax.eval_shape(
        lambda k: network_lib.init_params(network, k, R.OBS_SHAPE), jax.random.key(0)
    )
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    template = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes
    )
    params = checkpoint.restore_subtree(workdir, "params", template, step=int(meta["step"]))
    return network, params, config


# ---------------------------------------------------------------------------------------------
# CLI


def _variant_arg(name: str) -> str:
    try:
        return R.check_variant(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _games_arg(text: str) -> int:
    try:
        games = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--games must be an integer, got {text!r}") from None
    if games <= 0:
        raise argparse.ArgumentTypeError(f"--games must be positive, got {games}")
    if games % 2:
        raise argparse.ArgumentTypeError(
            f"--games must be even (the model plays half the games as White), got {games}"
        )
    return games


def _integer_arg(flag: str, minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if value < minimum:
            kind = "positive" if minimum == 1 else "non-negative"
            raise argparse.ArgumentTypeError(f"{flag} must be {kind}, got {value}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.evaluate",
        description="Play a colour-balanced match of a checkpoint against an opponent.",
        epilog="Subcommands: `python -m mmc_jax.evaluate ladder ...` rates a checkpoint in Elo "
        "against random, greedy and Fairy-Stockfish at increasing node limits; "
        "`python -m mmc_jax.evaluate tournament ...` does it for every checkpoint of a run "
        "(see their --help).",
    )
    parser.add_argument(
        "--checkpoint",
        default="none",
        help="run workdir (or <workdir>/checkpoints/<step>); 'none' (default): uniform-prior "
        "search, i.e. zero logits and zero value, guided only by terminal rewards",
    )
    parser.add_argument("--step", type=_integer_arg("--step", 0), default=None)
    parser.add_argument(
        "--variant", type=_variant_arg, required=True, help=f"one of: {', '.join(R.VARIANTS)}"
    )
    parser.add_argument(
        "--opponent", default="random", help="random, greedy, or another run's workdir"
    )
    parser.add_argument("--games", type=_games_arg, default=400, help="positive, even")
    parser.add_argument(
        "--simulations", type=_integer_arg("--simulations", 0), default=32, help="0: raw policy"
    )
    parser.add_argument(
        "--opponent-simulations",
        type=_integer_arg("--opponent-simulations", 0),
        default=None,
        help="for a checkpoint opponent (default: --simulations)",
    )
    parser.add_argument("--opening-plies", type=_integer_arg("--opening-plies", 0), default=0)
    parser.add_argument(
        "--max-plies", type=_integer_arg("--max-plies", 1), default=None, help="draw after"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--pgn", default=None, help="write the games to this PGN file ([Variant], [FEN], UCI)"
    )
    return parser


def _load_or_fail(parser, path: str, step: int | None, flag: str):
    try:
        return load_model(path, step)
    except (FileNotFoundError, ValueError) as error:
        parser.error(f"{flag} {path}: {error}")


def _format(result: dict[str, Any], model_name: str) -> str:
    def row(label, d):
        return (
            f"{label:<9} {d['wins']:>6} {d['draws']:>6} {d['losses']:>6} "
            f"{d['score']:>7.3f} {d['mean_plies']:>7.1f}"
        )

    low, high = result["score_ci95"]
    wlow, whigh = result["score_ci95_wilson"]
    elo = result["elo"]
    elo_text = "n/a" if elo is None else f"{elo:+.0f}"
    sims = result["num_simulations"]
    lines = [
        f"{result['variant']}: {model_name} ({sims} simulations) vs {result['opponent']}, "
        f"{result['num_games']} games (opening plies {result['opening_plies']}, "
        f"ply cap {result['max_plies']})",
        f"{'model as':<9} {'W':>6} {'D':>6} {'L':>6} {'score':>7} {'plies':>7}",
        row("White", result["white"]),
        row("Black", result["black"]),
        row("total", result),
        f"score {result['score']:.3f}, 95% CI [{low:.3f}, {high:.3f}] ({result['ci_method']}; "
        f"Wilson [{wlow:.3f}, {whigh:.3f}]); Elo {elo_text}",
    ]
    return "\n".join(lines)


SUBCOMMANDS = ("ladder", "tournament")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    `ladder` and `tournament` as the first argument select those subcommands
    (`mmc_jax.ladder`); anything else is the match CLI, unchanged."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        from mmc_jax import ladder  # imports this module: load it only when asked

        return (ladder.ladder_main if argv[0] == "ladder" else ladder.tournament_main)(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)

    if args.checkpoint.lower() == "none":
        network, params, model_name = None, None, "uniform-prior search"
    else:
        network, params, config = _load_or_fail(parser, args.checkpoint, args.step, "--checkpoint")
        model_name = args.checkpoint
        trained_on = list(config.get("variants", None) or [])
        if trained_on and args.variant not in trained_on:
            print(
                f"note: {args.checkpoint} was trained on {', '.join(trained_on)}, "
                f"not on {args.variant}",
                file=sys.stderr,
            )
    opponent, opponent_network, opponent_params = args.opponent, None, None
    if args.opponent not in NAMED_OPPONENTS:
        if not os.path.isdir(args.opponent):
            parser.error(
                f"--opponent must be one of {', '.join(NAMED_OPPONENTS)} or a checkpoint "
                f"workdir; {args.opponent!r} is neither"
            )
        opponent_network, opponent_params, _ = _load_or_fail(
            parser, args.opponent, None, "--opponent"
        )
        opponent = "checkpoint"

    games = [] if args.pgn else None
    result = play_match(
        network,
        params,
        args.variant,
        opponent,
        args.games,
        args.simulations,
        jax.random.key(args.seed),
        opponent_params=opponent_params,
        opponent_network=opponent_network,
        opponent_simulations=args.opponent_simulations,
        max_plies=args.max_plies,
        opening_plies=args.opening_plies,
        games_out=games,
    )
    if opponent == "checkpoint":
        result["opponent"] = args.opponent
    if network is not None:
        result["model"] = model_name
    result["seed"] = args.seed
    if games is not None:
        from mmc_jax import pgn

        for g, record in enumerate(games):  # the model is White in the first half
            model_side, other = ("white", "black") if g < len(games) // 2 else ("black", "white")
            record[model_side], record[other] = model_name, args.opponent
        pgn.write_pgn(games, args.pgn, event="mmc_jax evaluate")
        result["pgn"] = args.pgn
    if args.json:
        print(json.dumps(result))
    else:
        print(_format(result, model_name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
