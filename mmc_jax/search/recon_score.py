"""A hand-written evaluation of a fully known recon board (one sampled from a belief).

`board_score(rules, pieces, mine)` scores a board for the side `mine` that has just moved, in
its own frame (its pawns move up): its material lead (`PIECE_VALUES`), less half the value of
the most valuable own piece the opponent now attacks, plus a little for the opponent pieces it
attacks (`PRESSURE_VALUES`) and for its pawns' advance; `WIN_SCORE` more if the opponent has
lost its king (or under extinction its last piece of a type). Two agents read it:

  - PIMC (`mmc_jax.evaluation.recon_agents.pimc_request`) requests the move of best mean score
    over boards drawn from its belief;
  - the learned agent (`mmc_jax.search.recon_learned`) feeds `prior`, the same score from the
    view of the side to move, to its world value as a starting point that learning corrects.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mmc_jax.rules import tables as T
from mmc_jax.rules.game import attacked_squares, mirror
from mmc_jax.search import recon_belief as RB

PIECE_VALUES = (1.0, 3.0, 3.0, 5.0, 9.0, 100.0)
PRESSURE_VALUES = (0.1, 0.3, 0.3, 0.5, 0.9, 3.0)  # per opponent piece the player attacks
PAWN_RANK_VALUE = 0.02  # per rank a pawn has advanced
WIN_SCORE = 1000.0


def lost(rules, pieces, side):
    """bool: `side` (uint32 squares) has lost its king, or under extinction a whole type."""
    missing = (pieces[T.KING] & side) == 0
    for p in range(5):
        missing = missing | (rules.extinction & ((pieces[p] & side) == 0))
    return missing


def pressure(rules, pieces, mine):
    """float32 `PRESSURE_VALUES` of the opponent's pieces the player's pieces attack, plus
    `PAWN_RANK_VALUE` per rank of pawn advance: what makes a quiet move better than a pass."""
    flip = mirror(pieces)
    attacks = mirror(attacked_squares(flip, mirror(mine), RB.occupied(flip), rules.vector_allowed))
    them = RB.occupied(pieces) & ~mine
    hit = jax.lax.population_count(pieces & them & attacks).astype(jnp.float32)
    ranks = [jax.lax.population_count(pieces[0] & mine & jnp.uint32(T.RANK_MASKS[r])) * r
             for r in range(5)]  # fmt: skip
    advance = sum(ranks).astype(jnp.float32)
    return jnp.sum(jnp.asarray(PRESSURE_VALUES) * hit) + PAWN_RANK_VALUE * advance


def material(pieces, mine):
    """float32 the material lead of `mine` (`PIECE_VALUES`; kings count alike on both sides)."""
    values = jnp.asarray(PIECE_VALUES, jnp.float32)
    them = RB.occupied(pieces) & ~mine
    counts = jax.lax.population_count(pieces & mine).astype(jnp.float32)
    theirs = jax.lax.population_count(pieces & them).astype(jnp.float32)
    return jnp.sum(values * (counts - theirs))


def quiet_score(rules, pieces, mine):
    """float32 the score of a board for `mine`, who has just moved (module docstring), without
    the win bonus."""
    values = jnp.asarray(PIECE_VALUES, jnp.float32)
    them = RB.occupied(pieces) & ~mine
    attacked = attacked_squares(pieces, them, RB.occupied(pieces), rules.vector_allowed)
    threat = jnp.max(jnp.where((pieces & mine & attacked) != 0, values, 0.0))
    return material(pieces, mine) - 0.5 * threat + pressure(rules, pieces, mine)


def board_score(rules, pieces, mine):
    """float32 the score of a board for `mine`, who has just moved (module docstring)."""
    them = RB.occupied(pieces) & ~mine
    won = lost(rules, pieces, them) & ~lost(rules, pieces, mine)
    return quiet_score(rules, pieces, mine) + jnp.where(won, WIN_SCORE, 0.0)


def prior(rules, pieces, own):
    """float32 the score for the side to move `own` of a board in its frame: minus the quiet
    score of the side that has just moved, in that side's frame (positive when the mover is
    ahead in material or attacks a piece worth more than the one of its own that is attacked)."""
    return -quiet_score(rules, mirror(pieces), mirror(RB.occupied(pieces) & ~own))
