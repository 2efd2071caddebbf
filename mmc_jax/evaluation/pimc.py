"""Fair players under fog and their arena: the fog players of the one player table
(`players.FogPlayer`: the fair PIMC search, the raw policy, the omniscient upper bound, the
built-in players on what they observe) and `fog_match`, a colour-balanced jitted arena between
any two of them, which tracks the beliefs of both sides and counts sampling failures. The fair
search itself and fog self-play are `mmc_jax.training.fog`'s.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from mmc_jax import rules as R
from mmc_jax.evaluation import players
from mmc_jax.rules.contract import BOARD
from mmc_jax.training.fog import (
    decision_search,
    observation_policy,
    observe_and_update,
    omniscient_search,
    play,
    start_games,
)

FogPlayer = players.FogPlayer  # a player of this arena: an entry of the one player table


def fog_act(player: FogPlayer, network, params, rules, state, observation, belief, key):
    """(actions int32 [n], consistent-world counts int32 [n] (-1: no sampling)) of `player`."""
    n = observation.own.shape[0]
    none = jnp.full((n,), -1, jnp.int32)
    if player.kind == "pimc":
        out = decision_search(
            network,
            params,
            rules,
            observation,
            belief,
            key,
            num_worlds=player.num_worlds,
            num_simulations=player.num_simulations,
            num_candidates=player.num_candidates,
        )
        return out.action, out.num_consistent
    if player.kind == "raw":
        return observation_policy(network, params, observation), none
    if player.kind == "omniscient":
        out = omniscient_search(
            network,
            params,
            rules,
            state,
            key,
            num_simulations=player.num_simulations,
            gumbel_scale=0.0,
            planes=observation.planes,
        )
        return out.action.astype(jnp.int32), none
    # A built-in player sees only its observation, whether or not it is fair_under_fog.
    legal = BOARD.planes_to_mask(observation.planes)
    policy = players.builtin(player.kind).policy
    return policy(key, rules, players.observed_board(observation), legal), none


class FogMatchOutput(NamedTuple):
    """Per game [N]: player A's reward, length, finished; and A's sampling counters."""

    a_reward: jax.Array
    plies: jax.Array
    finished: jax.Array
    a_searches: jax.Array  # int32 [N] A's moves that sampled worlds
    a_failures: jax.Array  # int32 [N] of which no candidate was consistent


@functools.partial(jax.jit, static_argnames=("network", "player_a", "player_b"))
def _fog_arena(params, rules, key, opening_plies, *, network, player_a, player_b):
    num_games = rules.variant_id.shape[0]
    half = num_games // 2
    a_colour = (jnp.arange(num_games) >= half).astype(jnp.int32)
    limit = jnp.max(rules.max_plies) + 1

    def halves(tree, first):
        """The half of the batch starting at game `first * half`."""
        return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, first * half, half), tree)

    def body(carry):
        games, planes, ply, rewards, searches, failures = carry
        ply_key = jax.random.fold_in(key, ply)
        a_key, b_key, opening_key = jax.random.split(ply_key, 3)
        observation, belief = observe_and_update(rules, games, planes)
        # All games move in step: at ply t colour t % 2 moves, so A moves in one half.
        a_half = ply % 2
        args = (rules, games.state, observation, belief)
        a_args = (halves(x, a_half) for x in args)
        a_act, a_seen = fog_act(player_a, network, params, *a_args, a_key)
        b_args = (halves(x, 1 - a_half) for x in args)
        b_act, _ = fog_act(player_b, network, params, *b_args, b_key)
        actions = jnp.where(
            a_half == 0, jnp.concatenate([a_act, b_act]), jnp.concatenate([b_act, a_act])
        )
        a_seen = jnp.where(
            a_half == 0,
            jnp.concatenate([a_seen, jnp.full_like(a_seen, -1)]),
            jnp.concatenate([jnp.full_like(a_seen, -1), a_seen]),
        )
        # Paired random openings: the same key on both halves.
        legal = BOARD.planes_to_mask(planes)
        opening = jnp.concatenate(
            [
                R.random_legal_action(opening_key, legal[:half]),
                R.random_legal_action(opening_key, legal[half:]),
            ]
        )
        in_opening = ply < opening_plies
        actions = jnp.where(in_opening, opening, actions)
        live = ~games.state.terminated & ~in_opening
        searches = searches + (live & (a_seen >= 0))
        failures = failures + (live & (a_seen == 0))
        games, planes = play(rules, games, observation, belief, actions, planes)
        rewards = rewards + games.state.rewards
        return games, planes, ply + 1, rewards, searches, failures

    def cond(carry):
        return ~jnp.all(carry[0].state.terminated) & (carry[2] < limit)

    state = BOARD.init(rules)
    planes = BOARD.legal_planes(rules, state)
    zeros = jnp.zeros(num_games, jnp.int32)
    carry = (start_games(state), planes, jnp.int32(0), jnp.zeros((num_games, 2)), zeros, zeros)
    games, _, _, rewards, searches, failures = jax.lax.while_loop(cond, body, carry)
    return FogMatchOutput(
        a_reward=jnp.take_along_axis(rewards, a_colour[:, None], axis=1)[:, 0],
        plies=games.state.ply,
        finished=games.state.terminated,
        a_searches=searches,
        a_failures=failures,
    )


def fog_match(
    network,
    params,
    variant: str,
    player_a: FogPlayer,
    player_b: FogPlayer,
    num_games: int,
    key: jax.Array,
    *,
    opening_plies: int = 2,
    max_plies: int | None = None,
) -> dict[str, Any]:
    """Colour-balanced match of A against B under `variant` (A is White in games [0, N/2)).

    Both sides' beliefs are tracked from the (public) start position. Returns
    `elo.match_statistics` of A's results plus A's sampling counters
    (`sampling_failures` / `searches`: moves with no consistent candidate world).
    """
    from mmc_jax.evaluation import elo

    if num_games <= 0 or num_games % 2:
        raise ValueError(f"num_games must be a positive even integer, got {num_games}")
    single = R.get(variant) if max_plies is None else R.get(variant, max_plies=max_plies)
    out = jax.device_get(
        _fog_arena(
            params,
            R.batch(single, num_games),
            key,
            jnp.int32(opening_plies),
            network=network,
            player_a=player_a,
            player_b=player_b,
        )
    )
    result = elo.match_statistics(out.a_reward, out.plies)
    result.update(
        variant=variant,
        player=player_a.name,
        opponent=player_b.name,
        searches=int(out.a_searches.sum()),
        sampling_failures=int(out.a_failures.sum()),
        unfinished=int((~out.finished).sum()),
        opening_plies=opening_plies,
    )
    return result
