"""Fair play under fog, the search and the self-play: determinized (PIMC) search over sampled
worlds, on which AlphaZero and JOAT train under fog (`fog_selfplay`) and every fair fog player
searches (`mmc_jax.evaluation.pimc`: the fog players and their arena).

`search.run_search` steps the true state, so under fog its tree reads hidden squares (the
opponent's replies, king captures by hidden pieces, every child's value). What is here reads
only what `mmc_jax.search.belief` allows (the fairness contract in its docstring):

  fair_search         PIMC: sample K worlds per game from the mover's `Belief`
                      (`belief.sample_worlds`), run one batched Gumbel MuZero search over the
                      B x K worlds (the root prior and value come from the real observation,
                      the same for all K; inside the tree `search.make_recurrent_fn` steps the
                      world), and combine the K root results: the move most often chosen by the
                      K searches, ties broken by the mean improved policy; the policy target is
                      that mean (`action_weights`), the value the mean root value.
  observation_policy  the raw network on the observation (argmax of the legal logits): no
                      search, fair by construction.
  omniscient_search   the old behaviour, `search.run_search` on the true state: an UPPER BOUND
                      only, never a fair player; label it that way wherever it is reported.

Perfect-information variants keep `search.run_search` (nothing here runs for them:
`uses_fog(variants)` is the static switch a caller needs).

Games under fog carry both players' beliefs: `FogGames` (state and White's / Black's `Belief`).
`fog_selfplay` is `selfplay.selfplay` with the fair search (same `Trajectory`, same targets).
It lives in `training/` so that a learner's self-play does not import the evaluation floor.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mctx
import ml_collections
import numpy as np
from flax import struct

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD, BoardGame
from mmc_jax.search import belief as B
from mmc_jax.search import mcts

NUM_ACTIONS = T.NUM_ACTIONS


def uses_fog(variants) -> bool:
    """Whether any of the named variants (or `Rules`) has fog: the static switch between
    `search.run_search` and `fair_search`."""
    if isinstance(variants, (str, R.Rules)):
        variants = [variants]
    return any(bool(np.any((R.get(v) if isinstance(v, str) else v).fog)) for v in variants)


class FairSearchOutput(NamedTuple):
    """`fair_search` results, all batched [B].

    action: int32 [B] the move played (0 for finished games).
    action_weights: float32 [B, 1225] mean of the K worlds' improved policies (the policy
      target; zero on illegal moves).
    value: float32 [B] mean of the K worlds' root values (mover's view).
    world_actions: int32 [B, K] each world's chosen move.
    num_consistent: int32 [B] consistent candidate worlds (0: sampling failed).
    """

    action: jax.Array
    action_weights: jax.Array
    value: jax.Array
    world_actions: jax.Array
    num_consistent: jax.Array


def fair_search(
    network,
    params: Any,
    rules: R.Rules,
    observation: B.Observation,
    belief: B.Belief,
    key: jax.Array,
    *,
    num_worlds: int,
    num_simulations: int,
    num_candidates: int = 32,
    gumbel_scale: float = 1.0,
    max_num_considered_actions: int = 16,
    game: BoardGame = BOARD,
) -> FairSearchOutput:
    """PIMC search of B games of `game` (the Game contract's board game) from the mover's
    `observation` [B] and updated `belief` [B].

    Runs `num_simulations` Gumbel MuZero simulations in each of `num_worlds` (K) sampled
    worlds per game: K x (num_simulations + 1) network evaluations per move, in one mctx
    call over B x K roots. Reads no `State`. Consumes `key`.
    """
    batch, k = observation.own.shape[0], num_worlds
    sample_key, search_key = jax.random.split(key)
    worlds = B.sample_worlds_batch(
        sample_key, rules, observation, belief, num_worlds, num_candidates
    )
    states = jax.tree.map(
        lambda x: x.reshape(batch * k, *x.shape[2:]), B.world_states(worlds, observation)
    )

    def repeat(x):
        return jnp.repeat(x, k, axis=0)

    rules_k = jax.tree.map(repeat, rules)
    legal = game.planes_to_mask(observation.planes)
    logits, value = network.apply({"params": params}, observation.tensor, legal)
    # Every consistent world has the observed legal moves (equal planes is the consistency
    # check), so all K trees share the root's slots.
    planes = repeat(observation.planes)
    actions, valid = search.all_slot_actions(planes)
    invalid = ~(valid | (jnp.arange(search.MAX_LEGAL_MOVES) == 0))
    root = mctx.RootFnOutput(
        prior_logits=search.compact(repeat(logits), actions, valid),
        value=repeat(value),
        embedding=(states, planes),
    )
    output = mcts.gumbel_muzero_policy(
        params,
        search_key,
        root,
        search.make_recurrent_fn(network, rules_k, game),
        num_simulations=num_simulations,
        invalid_actions=invalid,
        max_num_considered_actions=max_num_considered_actions,
        gumbel_scale=gumbel_scale,
    )
    weights = search.expand(output.action_weights, actions, valid).reshape(batch, k, -1)
    chosen = jnp.take_along_axis(actions, output.action[:, None].astype(jnp.int32), axis=1)
    chosen = chosen.reshape(batch, k)
    mean_weights = weights.mean(axis=1)
    votes = jax.nn.one_hot(chosen, NUM_ACTIONS, dtype=jnp.float32).sum(axis=1)
    score = jnp.where(legal, votes + 0.5 * mean_weights, -1.0)
    has_move = jnp.any(legal, axis=-1)
    action = jnp.where(has_move, jnp.argmax(score, axis=-1), 0).astype(jnp.int32)
    root_value = output.search_tree.summary().value.reshape(batch, k).mean(axis=1)
    return FairSearchOutput(
        action=action,
        action_weights=jnp.where(legal, mean_weights, 0.0),
        value=root_value,
        world_actions=chosen,
        num_consistent=worlds.num_consistent,
    )


def observation_policy(
    network, params: Any, observation: B.Observation, game: BoardGame = BOARD
) -> jax.Array:
    """int32 [B]: the raw network's best legal move from the observation (no search)."""
    legal = game.planes_to_mask(observation.planes)
    logits, _ = network.apply({"params": params}, observation.tensor, legal)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def omniscient_search(network, params, rules, state, key, *, num_simulations, **kwargs):
    """UPPER BOUND, NOT FAIR: `search.run_search` on the true state (it reads hidden squares
    under fog). Kept only for comparison; report it labelled as an upper bound."""
    return search.run_search(
        network, params, rules, state, key, num_simulations=num_simulations, **kwargs
    )


# ----------------------------------------------------------------------------- games with beliefs


@struct.dataclass(kw_only=True)
class FogGames:
    """B games under fog with both players' beliefs.

    Fields: state State [B]; white, black Belief [B] (each in its owner's view).
    """

    state: R.State
    white: B.Belief
    black: B.Belief


def start_games(state: R.State, *, exact: bool = True) -> FogGames:
    """`FogGames` from states [B] with no history before them (`exact`: the positions are
    public, as a game's start position is; see `belief.initial_belief`)."""
    white, black = jax.vmap(functools.partial(B.initial_beliefs, exact=exact))(state)
    return FogGames(state=state, white=white, black=black)


def _select(condition, a, b):
    def pick(x, y):
        return jnp.where(condition.reshape(condition.shape + (1,) * (x.ndim - 1)), x, y)

    return jax.tree.map(pick, a, b)


def mover_belief(games: FogGames) -> B.Belief:
    """Belief [B] of the side to move in each game."""
    return _select(games.state.turn == 0, games.white, games.black)


def with_mover_belief(games: FogGames, belief: B.Belief) -> FogGames:
    """`games` with the side to move's belief replaced by `belief` [B]."""
    white_moves = games.state.turn == 0
    return games.replace(
        white=_select(white_moves, belief, games.white),
        black=_select(white_moves, games.black, belief),
    )


def observe_and_update(rules: R.Rules, games: FogGames, planes: jax.Array):
    """(Observation [B], the mover's updated Belief [B]) at the present ply."""
    observation = B.observe_batch(rules, games.state, planes)
    return observation, B.update_batch(mover_belief(games), observation)


def mover_fair_search(
    network,
    params: Any,
    rules: R.Rules,
    games: FogGames,
    planes: jax.Array,
    key: jax.Array,
    *,
    num_worlds: int,
    num_simulations: int,
    num_candidates: int,
) -> tuple[B.Observation, FairSearchOutput]:
    """The side to move's fair search of the present ply, as the UCI engine and
    `mmc_jax.analyse` choose a move under fog: its observation updates its belief
    (`observe_and_update`), then `fair_search` over worlds sampled from that belief, without
    Gumbel noise (deterministic for a key). Returns (Observation [B], `FairSearchOutput`)."""
    observation, belief = observe_and_update(rules, games, planes)
    out = decision_search(
        network,
        params,
        rules,
        observation,
        belief,
        key,
        num_worlds=num_worlds,
        num_simulations=num_simulations,
        num_candidates=num_candidates,
    )
    return observation, out


def decision_search(network, params, rules, observation, belief, key, **sizes):
    """`fair_search` as a player decides (not as self-play explores): without Gumbel noise,
    deterministic for a key; `sizes` are its num_worlds, num_simulations, num_candidates."""
    return fair_search(network, params, rules, observation, belief, key, gumbel_scale=0.0, **sizes)


def play(
    rules: R.Rules, games: FogGames, observation, belief, action, planes, game: BoardGame = BOARD
):
    """Plays `action` [B]: the mover's belief records its move, the state of `game` steps.

    Returns (FogGames after the move, next legal planes [B, 49]).
    """
    belief = B.after_move_batch(belief, rules, observation, action)
    games = with_mover_belief(games, belief)
    state, next_planes = game.step_with_planes(rules, games.state, action, planes)
    return games.replace(state=state), next_planes


def fog_selfplay(
    network,
    params,
    rules_b: R.Rules,
    games: FogGames,
    key: jax.Array,
    config: ml_collections.ConfigDict,
    game: BoardGame = BOARD,
):
    """`selfplay.selfplay` under fog (of `game`, the Game contract's board game): the same
    scan, targets and `Trajectory`, with the moves
    and policy targets from `fair_search` (K = `config.selfplay.num_worlds`, default 4;
    `config.selfplay.num_candidates`, default 32) and both players' beliefs carried in
    `FogGames` (reset with the game). As in `selfplay.selfplay`, the scan carries the legal
    planes `play` hands on: one move generation a ply outside the search, not two.

    Returns (FogGames [B] after the last ply, `selfplay.Trajectory` [T, B]).
    """
    from mmc_jax.training import selfplay

    sp = config.selfplay
    temperature = float(sp.get("temperature", 1.0))
    planes, start_state, start_planes = selfplay.planes_and_starts(rules_b, games.state, game)
    start = start_games(start_state)

    def one_ply(carry, ply_key):
        games, planes = carry
        search_key, sample_key = jax.random.split(ply_key)
        state = games.state
        valid = ~state.terminated
        observation, belief = observe_and_update(rules_b, games, planes)
        legal = game.planes_to_mask(planes)
        output = fair_search(
            network,
            params,
            rules_b,
            observation,
            belief,
            search_key,
            num_worlds=int(sp.get("num_worlds", 4)),
            num_simulations=int(sp.num_simulations),
            num_candidates=int(sp.get("num_candidates", 32)),
            gumbel_scale=float(sp.gumbel_scale),
            max_num_considered_actions=int(sp.max_num_considered_actions),
            game=game,
        )
        weights = jnp.where(legal, output.action_weights, 0.0)
        explore = state.ply < int(sp.temperature_plies)
        sampled = selfplay.sample_action(sample_key, weights, legal, temperature)
        action = jnp.where(explore, sampled, output.action)
        games, next_planes = play(rules_b, games, observation, belief, action, planes, game)
        done = games.state.terminated
        record = selfplay.ply_record(
            state,
            games.state,
            obs=observation.tensor,
            legal_action_mask=legal,
            action_weights=weights,
            action=action,
            valid=valid,
            root_value=output.value,
        )
        next_planes = jnp.where(done[:, None], start_planes, next_planes)
        return (_select(done, start, games), next_planes), record

    keys = jax.random.split(key, int(sp.num_plies))
    (games, _), trajectory = jax.lax.scan(one_ply, (games, planes), keys)
    return games, trajectory


# ----------------------------------------------------------------------------- fair arena
