"""The rules engine against the plain-Python reference engine (tests/reference_engine.py).

The reference is the only oracle for rifle, monochromatic and bichromatic (Fairy-Stockfish
cannot express them); it is itself checked against Fairy-Stockfish by test_reference_engine.py.
Compared, for every variant, on positions of seeded random games and of random placements:
legal-move sets, results, `R.apply_move`, and the jitted `R.step` on EVERY legal move of every
position (the fast tier: every 4th position, the slow tier the others). Plus hand-made edge
positions (rifle pins and checks, promotions under the colour rules), each also with colours
mirrored, and the monochromatic start.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import reference_engine as REF
from rules_support import (
    MONO_PLAYABLE,
    TIERS,
    VARIANTS,
    B,
    fen_of,
    flip_fen,
    flip_move,
    is_capture,
    random_placement,
    reference_positions,
    tier_part,
    uci_set,
)

from mmc_jax import rules as R

KEY_VARIANTS = ("rifle", "monochromatic", "bichromatic")


def sample(variant):
    """Positions of the reference engine: 240 from random play and 20 finished ones for the
    variants without another oracle; 120 + 20 for the others (Fairy-Stockfish covers them)."""
    n = 120 if variant in KEY_VARIANTS else 60
    games, placed, finished = reference_positions(variant, n, n, 20)
    return games + placed + finished


# ------------------------------------------------------------------------------------- perft


PERFT = {  # rules.md (bichromatic, monochromatic); rifle pinned by the reference engine
    "rifle": [7, 53, 490, 4428],
    "monochromatic": [0, 0, 0, 0],
    "bichromatic": [7, 42, 255, 1423, 8124],
}


@pytest.mark.parametrize("variant", KEY_VARIANTS)
def test_perft_start(variant):
    fen = R.START_FENS[variant]
    got = [R.perft(variant, fen, d) for d in range(1, len(PERFT[variant]) + 1)]
    assert got == PERFT[variant], f"{variant} perft from {fen!r}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_perft_random_positions(variant):
    rng = random.Random(f"perft-{variant}")
    fens = [MONO_PLAYABLE] if variant == "monochromatic" else []
    fens += [random_placement(rng, variant) for _ in range(3)]
    for fen in fens:
        for depth in (1, 2, 3):
            expected = REF.perft(variant, fen, depth)
            assert R.perft(variant, fen, depth) == expected, f"{variant} perft({depth}) {fen!r}"


# ------------------------------------------------------------------------------------- positions


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_legal_moves_and_results(variant, tier):
    positions = sample(variant)
    assert len(positions) >= (260 if variant in KEY_VARIANTS else 140)
    finished = sum(p.result is not None for p in positions)
    assert finished >= 20, f"{variant}: only {finished} finished positions"
    for p in tier_part(positions, tier):
        ours = R.legal_moves(variant, p.fen)
        assert ours == p.legal, (
            f"{variant} {p.fen!r}: only ours {sorted(set(ours) - set(p.legal))}, "
            f"only reference {sorted(set(p.legal) - set(ours))}"
        )
        assert R.result(variant, p.fen) == p.result, f"{variant} result of {p.fen!r}"


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_apply_move(variant, tier):
    jobs = []  # (fen, move)
    for p in sample(variant):
        if p.move is None:
            continue
        moves = [p.move]
        if variant in KEY_VARIANTS:  # plus a capture and a promotion, if any
            moves += [m for m in p.legal if is_capture(p.fen, m) and m != p.move][:1]
            moves += [m for m in p.legal if len(m) == 5 and m != p.move][:1]
        jobs += [(p.fen, m) for m in moves]
    assert len(jobs) >= (250 if variant in KEY_VARIANTS else 60), len(jobs)
    for fen, m in tier_part(jobs, tier):
        expected = REF.make_move(variant, fen, m)
        assert R.apply_move(variant, fen, m) == expected, f"{variant} {fen!r} + {m}"


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_jitted_step_on_every_legal_move(engine, variant, tier):
    """Every legal move of every sampled position through the compiled batched step."""
    positions = [p for p in sample(variant) if p.legal]
    assert sum(len(p.legal) for p in positions) >= 500
    positions = tier_part(positions, tier)
    masks, _ = engine.analyse([variant] * len(positions), [p.fen for p in positions])
    jobs = []  # (fen, move, action, expected FEN)
    for p, mask in zip(positions, masks, strict=True):
        actions = {R.action_to_uci(variant, p.fen, int(a)): int(a) for a in np.flatnonzero(mask)}
        assert sorted(actions) == p.legal, f"{variant} jitted mask at {p.fen!r}"
        pos = REF.parse_fen(p.fen)
        for move in REF._legal(variant, pos):
            uci = REF.move_to_uci(move)
            jobs.append((p.fen, uci, actions[uci], REF.to_fen(REF._play(variant, pos, move))))
    rules = engine.rules([variant])
    failures = []
    for start in range(0, len(jobs), B):
        chunk = jobs[start : start + B]
        out = engine.play(rules, engine.states([j[0] for j in chunk]), forced=[j[2] for j in chunk])
        for i, (fen, uci, action, expected) in enumerate(chunk):
            ours = fen_of(out.after, i)
            if ours != expected:
                failures.append(f"  {fen!r} + {uci} (action {action}): {ours!r} != {expected!r}")
            elif not out.after.terminated[i] and out.after.rewards[i].any():
                failures.append(f"  {fen!r} + {uci}: rewards {out.after.rewards[i]} mid-game")
    assert not failures, (
        f"{variant}: {len(failures)} of {len(jobs)} jitted steps differ from the reference:\n"
        + "\n".join(failures[:8])
    )


# ------------------------------------------------------------------------------------- edge cases


def mv(moves: str) -> list[str]:
    return sorted(moves.split())


# (variant, FEN, legal moves, {move: FEN after}, result). Hand-checked in
# test_reference_engine.py (the reasoning is written there) unless commented here.
EDGE_CASES = [
    # Rifle: the pinned rook a2 captures off the pin line (it stays on a2); Gardner cannot.
    ("gardner", "r3k/5/5/R1b2/K4 w - - 0 1", mv("a1b2 a2a3 a2a4 a2a5"), {}, None),
    (
        "rifle",
        "r3k/5/5/R1b2/K4 w - - 0 1",
        mv("a1b2 a2a3 a2a4 a2a5 a2c2"),
        {"a2c2": "r3k/5/5/R4/K4 b - - 0 1", "a2a5": "4k/5/5/R1b2/K4 b - - 0 1"},
        None,
    ),
    # Rifle: Bxa3 would leave the bishop on b2 and open the a-file to the own king.
    ("gardner", "r2k1/5/n4/1B3/K4 w - - 0 1", mv("a1a2 b2a3 b2c1 b2c3 b2d4 b2e5"), {}, None),
    ("rifle", "r2k1/5/n4/1B3/K4 w - - 0 1", mv("a1a2 b2c1 b2c3 b2d4 b2e5"), {}, None),
    # Rifle: the king captures a protected queen and stays out of the rook's reach.
    ("gardner", "4k/5/5/1r3/Kq3 w - - 0 1", [], {}, "0-1"),
    ("rifle", "4k/5/5/1r3/Kq3 w - - 0 1", ["a1b1"], {"a1b1": "4k/5/5/1r3/K4 b - - 0 1"}, None),
    # Rifle: a pawn capturing onto the last rank stays, so it does not promote.
    (
        "rifle",
        "k3r/3P1/5/5/K4 w - - 0 1",
        mv("a1a2 a1b1 a1b2 d4d5b d4d5n d4d5q d4d5r d4e5"),
        {"d4e5": "k4/3P1/5/5/K4 b - - 0 1", "d4d5n": "k2Nr/5/5/5/K4 b - - 0 1"},
        None,
    ),
    (
        "gardner",
        "k3r/3P1/5/5/K4 w - - 0 1",
        mv("a1a2 a1b1 a1b2 d4d5b d4d5n d4d5q d4d5r d4e5b d4e5n d4e5q d4e5r"),
        {"d4e5r": "k3R/5/5/5/K4 b - - 0 1", "d4d5q": "k2Qr/5/5/5/K4 b - - 0 1"},
        None,
    ),
    # Rifle: check answered by a capture that stays on c3.
    (
        "rifle",
        "k4/4r/2N2/5/4K w - - 0 1",
        mv("c3e2 c3e4 e1d1 e1d2"),
        {"c3e4": "k4/5/2N2/5/4K b - - 0 1"},
        None,
    ),
    # Monochromatic: king diagonal, pawn captures only (and promotes), rook distance 2 / 4,
    # the knight never moves.
    (
        "monochromatic",
        "2n1k/1P3/2R2/5/K2N1 w - - 0 1",
        mv("a1b2 b4c5b b4c5n b4c5q b4c5r c3a3 c3c1 c3c5 c3e3"),
        {"b4c5n": "2N1k/5/2R2/5/K2N1 b - - 0 1", "b4c5q": "2Q1k/5/2R2/5/K2N1 b - - 0 1"},
        None,
    ),
    ("monochromatic", "4k/5/5/N4/R3K w - - 0 1", mv("a1c1 e1d2"), {}, None),
    (
        "monochromatic",
        "5/4k/2Q2/5/K4 w - - 0 1",
        mv("a1b2 c3a3 c3a5 c3b2 c3b4 c3c1 c3c5 c3d2 c3d4 c3e1 c3e3 c3e5"),
        {},
        None,
    ),
    ("monochromatic", "5/4k/4R/5/K4 b - - 0 1", mv("e4d3 e4d5"), {}, None),
    ("monochromatic", "2k2/5/2R2/5/K4 b - - 0 1", mv("c5b4 c5d4"), {}, None),
    ("monochromatic", "k4/5/R1B2/5/4K b - - 0 1", [], {}, "1-0"),
    # Monochromatic, Black: b2 cannot push to b1, promotes by capturing the knight c1 (both
    # squares dark); the king a5 only steps diagonally.
    (
        "monochromatic",
        "k4/5/5/1p3/2N1K b - - 0 1",
        mv("a5b4 b2c1b b2c1n b2c1q b2c1r"),
        {"b2c1n": "k4/5/5/5/2n1K w - - 0 2", "b2c1r": "k4/5/5/5/2r1K w - - 0 2"},
        None,
    ),
    # Bichromatic: king orthogonal, pawn pushes only (and promotes), rook distance 1 / 3,
    # the bishop never moves.
    (
        "bichromatic",
        "2n2/1P2k/5/2R1B/K2N1 w - - 0 1",
        mv("a1a2 a1b1 b4b5b b4b5n b4b5q b4b5r c2b2 c2c1 c2c3 c2c5 c2d2 d1b2 d1c3 d1e3"),
        {"b4b5b": "1Bn2/4k/5/2R1B/K2N1 b - - 0 1", "c2c5": "2R2/1P2k/5/4B/K2N1 b - - 0 1"},
        None,
    ),
    (
        "bichromatic",
        "4k/5/5/1Q3/K4 w - - 0 1",
        mv("a1a2 a1b1 b2a2 b2b1 b2b3 b2b5 b2c2 b2e2"),
        {},
        None,
    ),
    ("bichromatic", "5/4k/2BP1/4R/K4 b - - 0 1", ["e4d4"], {}, None),
    # Bichromatic, Black: b2 promotes by the push to b1 only, never by capturing c1.
    (
        "bichromatic",
        "k4/5/5/1p3/2N1K b - - 0 1",
        mv("a5a4 a5b5 b2b1b b2b1n b2b1q b2b1r"),
        {"b2b1q": "k4/5/5/5/1qN1K w - - 0 2", "b2b1r": "k4/5/5/5/1rN1K w - - 0 2"},
        None,
    ),
]


def board_and_side(fen: str) -> str:
    return " ".join(fen.split()[:2])


@pytest.mark.parametrize("flipped", [False, True], ids=["as-given", "colours-flipped"])
@pytest.mark.parametrize(
    "variant,fen,moves,after,result",
    [pytest.param(*case, id=f"{case[0]}-{i}") for i, case in enumerate(EDGE_CASES)],
)
def test_edge_case(variant, fen, moves, after, result, flipped):
    if flipped:  # the same position with colours (and ranks) mirrored
        fen = flip_fen(fen)
        moves = sorted(flip_move(m) for m in moves)
        after = {flip_move(m): flip_fen(f) for m, f in after.items()}
        result = {"1-0": "0-1", "0-1": "1-0"}.get(result, result)
    assert REF.legal_moves(variant, fen) == moves, "the reference engine disagrees"
    assert R.legal_moves(variant, fen) == moves, f"{variant} {fen!r}"
    assert R.result(variant, fen) == result, f"{variant} result of {fen!r}"
    for move, expected in after.items():
        ours = R.apply_move(variant, fen, move)
        assert board_and_side(ours) == board_and_side(expected), f"{variant} {fen!r} + {move}"
        assert ours == REF.make_move(variant, fen, move), f"{variant} {fen!r} + {move}"


def test_rifle_pawn_capture_on_last_rank_has_no_under_promotion_action(engine):
    fen = "k3r/3P1/5/5/K4 w - - 0 1"
    action = R.uci_to_action("rifle", fen, "d4e5")
    assert action % 49 >= 9, "the capture must use the queen-like (plain) plane"
    d4 = 5 * 3 + 3
    under = [49 * d4 + plane for plane in range(9)]
    mask, _ = engine.analyse(["rifle"], [fen])
    legal = set(np.flatnonzero(mask[0]))
    # Forward (planes 0, 3, 6) are the d5 under-promotions; the e-file captures (1, 4, 7) are
    # illegal in rifle; there is nothing to capture on c5 (2, 5, 8).
    assert [a in legal for a in under] == [True, False, False] * 3, fen
    assert uci_set("rifle", fen, mask[0]) == R.legal_moves("rifle", fen)
    with pytest.raises(ValueError, match="illegal move"):
        R.apply_move("rifle", fen, "d4e5q")
    # The jitted step treats the under-promotion capture as illegal: White loses.
    out = engine.play(engine.rules(["rifle"]), engine.states([fen]), forced=[under[1]] * B)
    assert out.after.terminated[0] and out.after.rewards[0].tolist() == [-1.0, 1.0]


def test_monochromatic_start_is_a_draw(engine):
    fen = R.START_FENS["monochromatic"]
    assert R.legal_moves("monochromatic", fen) == []
    assert R.result("monochromatic", fen) == "1/2-1/2"
    assert R.perft("monochromatic", fen, 1) == 0
    rules = engine.rules(["monochromatic"])
    state = R.init(rules)
    out = engine.play(rules, state)
    assert not out.mask.any(), "no legal action from the monochromatic start"
    terminated, rewards = bool(out.after.terminated[0]), out.after.rewards[0].tolist()
    assert terminated and rewards == [0.0, 0.0], (
        f"the jitted step from the monochromatic start {fen!r} (no legal move, not in check) "
        f"must end the game as a draw with rewards [0, 0]; got terminated={terminated} "
        f"rewards={rewards} (init(): terminated={bool(np.asarray(state.terminated)[0])})"
    )
