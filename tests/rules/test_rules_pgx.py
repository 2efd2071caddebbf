"""Action ids interchangeable with pgx `gardner_chess`: legal action ids (not counts) and moves.

pgx plays seeded random games (Gardner from `env.init`, baby and mallet from their start FENs
through `State._from_fen`); on every position reached, the set of legal action ids of
`R.legal_action_mask(R.from_fen(state._to_fen()))` must equal pgx's `legal_action_mask`, and
playing pgx's action with the jitted `R.step` must give pgx's next position.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pgx  # installed by the test extra: the oracle must not be skippable
import pgx.gardner_chess as gardner_chess
import pytest
from rules_support import B, fen_of

from mmc_jax import rules as R

START_IDS = [62, 289, 293, 307, 552, 797, 1042]  # rules.md: a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3
GAMES, PLIES = 8, 32  # per seed
SEEDS = {"gardner": (0, 1), "baby": (2,), "mallet": (3,)}
# The fast tier compares the mallet games; the slow tier Gardner's and baby's too.
PGX_VARIANTS = [pytest.param(v, marks=[pytest.mark.slow] * (v != "mallet")) for v in SEEDS]


@functools.cache
def _pgx_functions():
    env = pgx.make("gardner_chess")

    @jax.jit
    def play(state, key):
        keys = jax.random.split(key, state.legal_action_mask.shape[0] + 1)
        logits = jnp.where(state.legal_action_mask, 0.0, -jnp.inf)
        action = jax.vmap(jax.random.categorical)(keys[1:], logits)
        return action, jax.vmap(env.step)(state, action, keys[1:])

    return env, play


def unbatched(state, i):
    return jax.tree.map(lambda x: x[i], state)


class PgxPosition(NamedTuple):
    fen: str
    legal_ids: list[int]
    action: int  # the random action pgx played
    next_fen: str
    next_rewards: list[float] | None  # [White, Black] when the game ended with that action


@functools.cache
def pgx_games(variant: str) -> tuple[PgxPosition, ...]:
    """Every non-terminal position of seeded random pgx games (GAMES per seed)."""
    env, play = _pgx_functions()
    out = []
    for seed in SEEDS[variant]:
        key = jax.random.key(seed)
        if variant == "gardner":
            state = jax.vmap(env.init)(jax.random.split(key, GAMES))
        else:
            one = gardner_chess.State._from_fen(R.START_FENS[variant])
            state = jax.tree.map(lambda x: jnp.stack([x] * GAMES), one)
        fens = [unbatched(state, i)._to_fen() for i in range(GAMES)]
        for t in range(PLIES):
            action, new_state = play(state, jax.random.fold_in(key, t))
            old, new = jax.device_get((state, new_state))
            next_fens = list(fens)
            for i in range(GAMES):
                if old.terminated[i]:
                    continue
                next_fens[i] = unbatched(new, i)._to_fen()
                rewards = None
                if new.terminated[i]:
                    # pgx rewards are indexed by player id; current_player is the side to move.
                    white = int(new.current_player[i]) ^ int(new._turn[i])
                    rewards = [float(new.rewards[i][white]), float(new.rewards[i][1 - white])]
                out.append(
                    PgxPosition(
                        fen=fens[i],
                        legal_ids=np.flatnonzero(old.legal_action_mask[i]).tolist(),
                        action=int(action[i]),
                        next_fen=next_fens[i],
                        next_rewards=rewards,
                    )
                )
            state, fens = new_state, next_fens
    return tuple(out)


def test_start_position_ids(engine):
    fen = R.START_FENS["gardner"]
    mask, _ = engine.analyse(["gardner"], [fen])
    assert np.flatnonzero(mask[0]).tolist() == START_IDS
    moves = R.legal_moves("gardner", fen)
    assert [R.uci_to_action("gardner", fen, m) for m in moves] == START_IDS, moves
    env, _ = _pgx_functions()
    pgx_start = env.init(jax.random.key(0))
    assert np.flatnonzero(pgx_start.legal_action_mask).tolist() == START_IDS
    assert pgx_start._to_fen() == fen


@pytest.mark.parametrize("variant", PGX_VARIANTS)
def test_legal_action_ids_match_pgx(engine, variant):
    games = pgx_games(variant)
    minimum = 200 if variant == "gardner" else 100
    assert len(games) >= minimum, len(games)
    fens = [g.fen for g in games]
    for fen in fens:
        assert R.to_fen(R.from_fen(fen)) == fen, "FEN round trip of a pgx FEN"
    masks, _ = engine.analyse([variant] * len(fens), fens)
    for g, mask in zip(games, masks, strict=True):
        ours = np.flatnonzero(mask).tolist()
        assert ours == g.legal_ids, (
            f"{variant} {g.fen!r}: only ours {sorted(set(ours) - set(g.legal_ids))}, "
            f"only pgx {sorted(set(g.legal_ids) - set(ours))}"
        )


@pytest.mark.parametrize("variant", PGX_VARIANTS)
def test_step_matches_pgx(engine, variant):
    """The jitted step plays pgx's action to pgx's next position (promotions included), and
    a game pgx ends by checkmate ends with the same rewards."""
    games = pgx_games(variant)
    failures = []
    decisive = 0
    for start in range(0, len(games), B):
        chunk = games[start : start + B]
        forced = [g.action for g in chunk]
        states = engine.states([g.fen for g in chunk])
        out = engine.play(engine.rules([variant]), states, forced=forced)
        for i, g in enumerate(chunk):
            ours = fen_of(out.after, i)
            uci = R.action_to_uci(variant, g.fen, g.action)
            if ours != g.next_fen:
                failures.append(
                    f"  {g.fen!r} + {g.action} ({uci}): ours {ours!r}, pgx {g.next_fen!r}"
                )
            rewards = out.after.rewards[i].tolist()
            # Only decisive results are compared: pgx also draws by insufficient material,
            # and our FEN-loaded state has no history for repetitions.
            if (g.next_rewards and any(g.next_rewards)) or any(rewards):
                decisive += 1
                if rewards != g.next_rewards or not out.after.terminated[i]:
                    failures.append(
                        f"  {g.fen!r} + {uci}: rewards ours {rewards}, pgx {g.next_rewards}"
                    )
    assert not failures, (
        f"{len(failures)} of {len(games)} {variant} steps differ from pgx:\n"
        + "\n".join(failures[:8])
    )
