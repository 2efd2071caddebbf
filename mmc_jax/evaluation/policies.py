"""Pure players: `(key, rules, state[, planes]) -> actions int32 [B]`.

  random_policy         a uniformly random legal move.
  greedy_policy         the move that wins the most material (see `material_gain`), ties broken
                        at random; with nothing to win, a random legal move. Fair under fog:
                        it ranks legal moves only, and every capture target of a legal move is
                        visible to the mover.
  make_model_policy     a network: Gumbel MuZero search with `gumbel_scale=0` (deterministic
                        sequential halving) and a given number of simulations, or the argmax of
                        the raw policy when `num_simulations=0`.

The built-in ones also take the positions' `legal_planes` [B, 49] as an optional `planes`, so
that an arena that carries them does not generate the moves again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.model import network as network_lib
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD
from mmc_jax.search import one_ply as one_ply_lib

Policy = Callable[[jax.Array, R.Rules, R.State], jax.Array]

# Material values of P, N, B, R, Q, K. The king's value only matters where kings can be
# captured (dark, extinction, ...): taking it wins the game, so it outranks everything.
PIECE_VALUES = (1.0, 3.0, 3.0, 5.0, 9.0, 100.0)
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
    promoted = T.PROMOTION_PIECE[actions % T.NUM_PLANES]
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
    the blast's other victims and the capturer's own loss are ignored. In dark the greedy player
    is fair: it ranks legal moves only, and every capture target of a legal move is a visible
    square, so it reads nothing hidden. Legality is not considered here.
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
    promotes = R.capturer_lands(rules)[:, None] | (captured == 0)
    return captured + jnp.where(promotes, own_pawn_from * _PROMOTION_GAIN, 0.0)


def _mask(rules: R.Rules, state: R.State, planes: jax.Array | None) -> jax.Array:
    if planes is None:
        planes = BOARD.legal_planes(rules, state)
    return BOARD.planes_to_mask(planes)


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
    return greedy_from_mask(key, rules, state, _mask(rules, state, planes))


def greedy_from_mask(key, rules, state, legal):
    """int32 [B]: among the legal moves (`legal` bool [B, 1225]) one of largest material gain."""
    gain = jnp.where(legal, material_gain(rules, state), -1.0)
    best = legal & (gain == gain.max(axis=-1, keepdims=True))
    return R.random_legal_action(key, best)


def make_model_policy(
    network, params: Any, num_simulations: int, gumbel_scale: float = 0.0, one_ply: bool = False
) -> Policy:
    """A network as a policy: deterministic Gumbel MuZero search (`gumbel_scale=0`) with
    `num_simulations` simulations, or the raw policy's argmax over legal moves when 0; with
    `one_ply`, the one-ply value player (`search.one_ply`: no tree, the value head of every
    next position; `num_simulations` and `gumbel_scale` unused).

    `gumbel_scale=1` samples like self-play does (the Gumbel noise picks among the moves the
    search considers); the raw policy then samples from its softmax."""
    if one_ply:

        def value_policy(key, rules, state, planes=None):
            del planes  # every next position is generated anyway
            return one_ply_lib.action(network, params, rules, state, key)[0].astype(jnp.int32)

        return value_policy
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
