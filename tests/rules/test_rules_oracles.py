"""The rules engine against Fairy-Stockfish (pyffish) for the six variants it expresses.

- perft from every start position: depth 1-4 (and 5) against the rules.md table, depth 1-3
  against a perft computed by recursion on `pyffish.legal_moves`;
- on positions of seeded random games played by pyffish (some capture-greedy, so that games
  end) and on random placements: full legal-move sets, the FEN after every move of the games,
  game end and winner (the fast tier: every 4th position, the slow tier the others), and (dark)
  the fog-of-war FEN and the `observe` planes;
- the jitted batched engine (`R.step` + `R.random_legal_action` on a mixed batch): the legal
  mask of every third reached position, decoded to UCI, and the rewards of every finished game.
"""

from __future__ import annotations

import numpy as np
import pytest
from rules_support import FSF_VARIANTS, TIERS, board_of, obs_board, tier_part, uci_set

from mmc_jax import rules as R

PERFT = {  # rules.md, from Fairy-Stockfish
    "gardner": [7, 53, 506, 4775, 52512],
    "baby": [7, 53, 504, 4707, 50814],
    "mallet": [8, 41, 422, 3180, 34647],
    "atomic": [7, 53, 490, 4239, 41459],
    "dark": [7, 53, 510, 5000, 58557],
    "extinction": [7, 53, 477, 4388, 48348],
}
REWARDS = {"1-0": [1.0, -1.0], "0-1": [-1.0, 1.0], "1/2-1/2": [0.0, 0.0]}


def positions(fsf, variant):
    return fsf.games(variant) + fsf.placements(variant)


def report(failures: list[str], total: int, what: str) -> str:
    head = f"{len(failures)} of {total} {what} differ from Fairy-Stockfish; first ones:\n"
    return head + "\n".join(failures[:8])


# ------------------------------------------------------------------------------------- perft


@pytest.mark.parametrize("variant", FSF_VARIANTS)
def test_perft_start_matches_table(variant):
    fen = R.START_FENS[variant]
    got = [R.perft(variant, fen, d) for d in range(1, 6)]
    assert got == PERFT[variant], f"{variant} perft 1-5 from {fen!r}: {got} != {PERFT[variant]}"


def fsf_perft(fsf, variant, fen, depth):
    legal = fsf.legal(variant, fen)
    if depth == 1:
        return len(legal)
    fv = R.FAIRY_STOCKFISH_NAMES[variant]
    return sum(fsf_perft(fsf, variant, fsf.sf.get_fen(fv, fen, [m]), depth - 1) for m in legal)


@pytest.mark.parametrize("variant", FSF_VARIANTS)
def test_perft_start_matches_pyffish_recursion(fsf, variant):
    fen = R.START_FENS[variant]
    for depth in (1, 2, 3):
        theirs = fsf_perft(fsf, variant, fen, depth)
        assert R.perft(variant, fen, depth) == theirs, f"{variant} perft({depth}) from {fen!r}"
        assert theirs == PERFT[variant][depth - 1]


# ------------------------------------------------------------------------------------- positions


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("variant", FSF_VARIANTS)
def test_legal_moves_match(fsf, variant, tier):
    games = fsf.games(variant)
    assert len(games) >= 200
    failures = []
    compared = tier_part(positions(fsf, variant), tier)
    for p in compared:
        ours = R.legal_moves(variant, p.fen)
        if ours != p.legal:
            failures.append(
                f"  {variant} {p.fen!r}: only ours {sorted(set(ours) - set(p.legal))}, "
                f"only Fairy-Stockfish {sorted(set(p.legal) - set(ours))}"
            )
    assert not failures, report(failures, len(compared), "legal-move sets")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("variant", FSF_VARIANTS)
def test_apply_move_matches_get_fen(fsf, variant, tier):
    played = [p for p in fsf.games(variant) if p.move is not None]
    assert len(played) >= 150
    failures = []
    compared = tier_part(played, tier)
    for p in compared:
        ours = R.apply_move(variant, p.fen, p.move)
        if ours != p.next_fen:
            failures.append(f"  {variant} {p.fen!r} + {p.move}: ours {ours!r}, FSF {p.next_fen!r}")
    assert not failures, report(failures, len(compared), "FENs after a move")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("variant", FSF_VARIANTS)
def test_results_match(fsf, variant, tier):
    failures = []
    finished = sum(p.result is not None for p in positions(fsf, variant))
    assert finished >= 20, f"{variant}: only {finished} finished positions to compare"
    compared = tier_part(positions(fsf, variant), tier)
    for p in compared:
        ours = R.result(variant, p.fen)
        if ours != p.result:
            failures.append(f"  {variant} {p.fen!r}: ours {ours}, Fairy-Stockfish {p.result}")
    assert not failures, report(failures, len(compared), "results")


def test_dark_fog_matches_get_fog_fen(fsf, engine):
    ps = positions(fsf, "dark")
    fens = [p.fen for p in ps]
    _, obs = engine.analyse(["dark"] * len(fens), fens)
    for p, o in zip(ps, obs, strict=True):
        assert R.fog_fen("dark", p.fen) == p.fog, f"fog FEN of {p.fen!r}"
        turn = 0 if p.fen.split()[1] == "w" else 1
        rank_of_row = (lambda r: r) if turn == 0 else (lambda r: 4 - r)
        hidden = {f"{'abcde'[f]}{rank_of_row(r) + 1}" for r, f in np.argwhere(o[..., 12] > 0.5)}
        stars = {sq for sq, ch in board_of(p.fog).items() if ch == "*"}
        assert hidden == stars, f"observe() hidden channel of {p.fen!r}: {sorted(hidden)}"
        assert obs_board(o, turn) == p.fog.split()[0], f"observe() pieces of {p.fen!r}"


# ------------------------------------------------------------------------------------- jitted


@pytest.mark.parametrize("variant", FSF_VARIANTS)
def test_jitted_rollout_matches(fsf, rollout, variant):
    """Legal masks of the positions reached by the jitted engine and its terminal rewards."""
    rows = [i for i, v in enumerate(rollout.variants) if v == variant]
    checked = 0
    endings: dict[str, int] = {}
    for t, ply in enumerate(rollout.plies):
        for i in rows:
            fen = rollout.pre_fens[t][i]
            if (t + i) % 3 == 0:
                ours = uci_set(variant, fen, ply.mask[i])
                assert len(ours) == ply.mask[i].sum(), f"two actions, one UCI string: {fen!r}"
                theirs = fsf.legal(variant, fen)
                assert ours == theirs, (
                    f"jitted {variant} mask at {fen!r}: only ours "
                    f"{sorted(set(ours) - set(theirs))}, only FSF {sorted(set(theirs) - set(ours))}"
                )
                checked += 1
            if not ply.after.terminated[i]:
                continue
            after_fen = rollout.after_fens[t][i]
            expected = fsf.result(variant, after_fen)
            rewards = ply.after.rewards[i].tolist()
            if expected is None:  # an automatic draw (50 moves, repetition, K vs K, ply cap)
                assert rewards == [0.0, 0.0], f"{variant} {fen!r} -> {after_fen!r}: {rewards}"
                endings["automatic draw"] = endings.get("automatic draw", 0) + 1
            else:
                assert rewards == REWARDS[expected], (
                    f"jitted {variant}: {fen!r} + action {ply.action[i]} -> {after_fen!r}: "
                    f"rewards {rewards}, Fairy-Stockfish {expected}"
                )
                endings[expected] = endings.get(expected, 0) + 1
    assert checked >= 300, checked
    decisive = endings.get("1-0", 0) + endings.get("0-1", 0)
    assert sum(endings.values()) >= 3, f"{variant}: few finished games {endings}"
    if variant != "gardner":  # random Gardner games rarely end in mate
        assert decisive >= 1, f"{variant}: no decisive game to compare {endings}"
