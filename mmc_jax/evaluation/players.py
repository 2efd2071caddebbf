"""The built-in players: one table from kind to pure policy, with a fair-under-fog flag.

Everything that names a built-in opponent reads `REGISTRY`: the jitted arena
(`match.play_match(..., opponent=KIND)`: a `lax.switch` over the kinds, so every pairing of
built-in players shares one compiled arena), the stepwise arena (`arena.Player(name, KIND)`),
the ladder's rungs, `python -m mmc_jax.evaluate --opponent KIND`, the fog matches
(`pimc.FogPlayer(KIND)`) and in-training evaluation (`config.eval.opponents`). Adding an
opponent is one `Builtin` entry below (its policy written here or in `policies`); the
parametrised tests in tests/evaluation/test_players.py run every entry in every variant.

A policy is pure: `(key, rules [B], board State [B], legal bool [B, 1225]) -> int32 [B]`, one
legal action per game (anything where no move is legal), with `board` the position in the
mover's view and `legal` its legal moves. It consumes `key`.

Fog: the fog arena (`pimc.fog_match`) hands a policy `observed_board(observation)`, the mover's
pieces and the enemy pieces it sees, so there every policy is fair. `fair_under_fog` promises
more: the policy's move from the true board is its move from the observed board (same key, same
legal moves), so the arenas that step the true state (`match.play_match`, `arena.play_games`,
the ladder) may hand it the true state in a game under fog. They refuse an entry without the
flag there (`check_fair`); tests/evaluation/test_players.py checks the promise of every flagged
entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from mmc_jax import rules as R
from mmc_jax.evaluation import policies
from mmc_jax.search import belief as B

BoardPolicy = Callable[[jax.Array, R.Rules, R.State, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class Builtin:
    """One built-in player: its `kind` (the name every command and config uses), its pure
    `policy` (see the module docstring), whether it is `fair_under_fog` (its move never depends
    on a square its side cannot see) and a one-line `summary` for help texts."""

    kind: str
    policy: BoardPolicy
    fair_under_fog: bool
    summary: str


def random_move(key, rules, board, legal):
    """int32 [B]: a uniformly random legal move."""
    del rules, board
    return R.random_legal_action(key, legal)


# The order is part of the results: the jitted arena gives entry i the key
# `jax.random.split(key, n)[i]`, which does not depend on n, so new entries go at the end.
REGISTRY: tuple[Builtin, ...] = (
    Builtin("random", random_move, True, "a uniformly random legal move"),
    Builtin(
        "greedy",
        policies.greedy_from_mask,
        # Every capture target of a legal move is a square the mover sees.
        True,
        "the legal move that wins the most material, ties at random",
    ),
)


def kinds() -> tuple[str, ...]:
    """The built-in kinds, in registry order (read at call time, never cached)."""
    return tuple(entry.kind for entry in REGISTRY)


def builtin(kind: str, role: str = "player kind") -> Builtin:
    """The registry entry of `kind`; a one-line ValueError naming the known kinds otherwise."""
    for entry in REGISTRY:
        if entry.kind == kind:
            return entry
    raise ValueError(f"unknown {role} {kind!r}; known: {', '.join(kinds())}")


def index(kind: str) -> int:
    """Position of `kind` in `kinds()` (the `lax.switch` index of `act`)."""
    return kinds().index(builtin(kind).kind)


def fair_kinds(variant: str) -> tuple[str, ...]:
    """The kinds an arena stepping the true state may play in `variant`: every kind, or under
    fog the ones flagged `fair_under_fog`."""
    fog = R.has_fog(variant)
    return tuple(entry.kind for entry in REGISTRY if entry.fair_under_fog or not fog)


def check_fair(kind: str, variant: str) -> None:
    """ValueError (one line) unless `kind` may be handed the true state in `variant`."""
    if builtin(kind).kind not in fair_kinds(variant):
        raise ValueError(
            f"player {kind!r} is not fair under fog ({variant}): it would read hidden squares "
            "from the true state; play it from its observations (pimc.fog_match)"
        )


def act(
    kinds_present: tuple[str, ...],
    which: jax.Array,
    key: jax.Array,
    rules: R.Rules,
    board: R.State,
    legal: jax.Array,
) -> jax.Array:
    """int32 [B]: the moves of built-in kind `kinds_present[which]` (`which` int32, data, so
    one compiled program serves every kind in `kinds_present`): a `lax.switch` in which the
    entry at registry position i draws from `jax.random.split(key, len(REGISTRY))[i]`."""
    positions = jnp.asarray([index(kind) for kind in kinds_present])
    branches = [builtin(kind).policy for kind in kinds_present]
    keys = jax.random.split(key, len(REGISTRY))
    return jax.lax.switch(which, branches, keys[positions[which]], rules, board, legal)


def observed_board(observation: B.Observation) -> R.State:
    """The board a side sees under fog as a `State` [B] in its view: its own pieces and the
    enemy pieces on the squares it sees (clocks, rewards and history zero)."""
    zeros = jnp.zeros_like(observation.ply)
    return R.State(
        pieces=observation.own_pieces | observation.seen,
        own=observation.own,
        turn=observation.turn,
        halfmove=zeros,
        fullmove=zeros,
        ply=observation.ply,
        terminated=observation.terminated,
        rewards=jnp.zeros(observation.ply.shape + (2,), jnp.float32),
        hash_history=jnp.zeros(observation.ply.shape + (1,), jnp.uint32),
    )
