"""Invariants of the jitted batched engine, and its automatic draws.

The shared rollout is random play of ONE compiled ply function on a mixed batch of all nine
variants (8 games each, auto-reset). On every transition of every game:
- the random action is legal, a running game always has a legal move;
- the player who just moved is not in check (check-based variants, by the reference engine);
- piece counts never rise, except a pawn turning into a piece of the mover on promotion;
- turn, ply and counters advance; rewards are zero-sum, and nonzero only when the game ends;
- the game ends exactly when the reference engine says it is over or an automatic draw (50
  moves, threefold repetition tracked here independently, K vs K) applies, with those rewards;
- observations show the position (dark: the reference fog of war) and the right scalars.
Plus: finished games stay finished with zero rewards, one trace serves every variant
(`chex.assert_max_traces`), illegal actions lose, and the 50-move rule, threefold repetition,
K vs K and `max_plies` end games as draws.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_engine as REF
import xla_flags
from rules_support import (
    CHECK_BASED,
    ROLLOUT_PLIES,
    VARIANTS,
    B,
    board_of,
    descriptor_planes,
    obs_board,
    playable_start,
    row,
    stack_states,
    state_of,
)

from mmc_jax import rules as R
from mmc_jax.rules import game

REWARDS = {"1-0": [1.0, -1.0], "0-1": [-1.0, 1.0], "1/2-1/2": [0.0, 0.0]}


def position_key(fen: str) -> str:
    return " ".join(fen.split()[:2])


def with_side(fen: str, side: str) -> str:
    fields = fen.split()
    fields[1] = side
    return " ".join(fields)


def counts(fen: str) -> dict[str, int]:
    out = dict.fromkeys("PNBRQKpnbrqk", 0)
    for ch in board_of(fen).values():
        out[ch] += 1
    return out


def check_piece_counts(before: str, after: str, mover: str) -> None:
    """Counts never rise, except that a pawn of the mover may become one piece of the mover."""
    c0, c1 = counts(before), counts(after)
    mine, theirs = ("PNBRQK", "pnbrqk") if mover == "w" else ("pnbrqk", "PNBRQK")
    msg = f"{before!r} -> {after!r}"
    for p in theirs:
        assert c1[p] <= c0[p], f"the opponent gained a {p}: {msg}"
    assert c1[mine[0]] <= c0[mine[0]], f"pawn count rose: {msg}"
    assert c1[mine[5]] <= c0[mine[5]], f"king count rose: {msg}"
    gained = sum(max(0, c1[p] - c0[p]) for p in mine[1:5])
    assert gained <= c0[mine[0]] - c1[mine[0]] and gained <= 1, f"a piece appeared: {msg}"
    assert sum(c1[p] for p in mine) <= sum(c0[p] for p in mine), f"total rose: {msg}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_rollout_invariants(rollout, variant):
    rows = [i for i, v in enumerate(rollout.variants) if v == variant]
    start_key = position_key(playable_start(variant))
    # Positions since the last irreversible move, for repetitions (independent of the engine).
    since = {i: [start_key] for i in rows}
    seen = {"transitions": 0, "finished": 0, "decisive": 0, "repetition": 0, "in_check_tests": 0}
    for t, ply in enumerate(rollout.plies):
        pre = rollout.pre[t]
        for i in rows:
            fen, after_fen = rollout.pre_fens[t][i], rollout.after_fens[t][i]
            s, a = row(pre, i), row(ply.after, i)
            mover = fen.split()[1]
            assert not s.terminated, f"a finished game was not reset: {fen!r}"
            assert ply.mask[i].any(), f"{variant}: running game without a legal action {fen!r}"
            assert ply.mask[i, ply.action[i]], f"random action {ply.action[i]} illegal at {fen!r}"

            # Observation of the position before the move.
            o = ply.obs[i]
            turn = 0 if mover == "w" else 1
            board = REF.fog_fen(fen).split()[0] if variant == "dark" else fen.split()[0]
            assert obs_board(o, turn) == board, f"{variant} observation of {fen!r}"
            repeated = since[i][:-1].count(position_key(fen)) >= 1
            scalars = [o[0, 0, 13], o[0, 0, 14], o[0, 0, 15], o[0, 0, 16]]
            clear = REF.rule_set(variant).fog == "off"  # fog hides the clock and repetitions
            expected = [turn, clear * int(s.halfmove) / 100, clear * repeated, int(s.ply) / 256]
            np.testing.assert_allclose(scalars, expected, rtol=1e-6, err_msg=fen)
            np.testing.assert_array_equal(o[:, :, 17:], descriptor_planes(variant))

            # Counters and pieces.
            assert int(a.turn) == 1 - int(s.turn) and int(a.ply) == int(s.ply) + 1
            assert int(a.fullmove) == int(s.fullmove) + (mover == "b")
            check_piece_counts(fen, after_fen, mover)

            # The player who just moved is not in check.
            opponent_king = "k" if mover == "w" else "K"
            if variant in CHECK_BASED and opponent_king in board_of(after_fen).values():
                seen["in_check_tests"] += 1
                assert not REF.in_check(variant, with_side(after_fen, mover)), (
                    f"{variant}: {fen!r} + {R.action_to_uci(variant, fen, int(ply.action[i]))}"
                    f" leaves the mover in check: {after_fen!r}"
                )

            # Termination and rewards against the reference engine and the automatic draws.
            key = position_key(after_fen)
            if int(a.halfmove) == 0:
                since[i] = [key]
            else:
                since[i].append(key)
            repetition = since[i][:-1].count(key) >= 2
            only_kings = set(board_of(after_fen).values()) <= {"K", "k"}
            decisive = REF.result(variant, after_fen)
            draw_by_rule = (
                int(a.halfmove) >= 100
                or repetition
                or (variant in CHECK_BASED and only_kings)
                or int(a.ply) >= 256
            )
            rewards = a.rewards.tolist()
            expected = REWARDS[decisive] if decisive else [0.0, 0.0]
            assert bool(a.terminated) == (decisive is not None or draw_by_rule), (
                f"{variant}: {fen!r} -> {after_fen!r}: terminated={bool(a.terminated)}, "
                f"reference result {decisive}, automatic draw {draw_by_rule}"
            )
            assert rewards == expected, f"{variant}: {fen!r} -> {after_fen!r}: {rewards}"
            assert sum(rewards) == 0.0
            seen["transitions"] += 1
            seen["finished"] += bool(a.terminated)
            seen["decisive"] += decisive in ("1-0", "0-1")
            seen["repetition"] += repetition
            if a.terminated:
                since[i] = [start_key]
    assert seen["transitions"] == ROLLOUT_PLIES * len(rows)
    assert seen["finished"] >= 3, seen


def test_observe_shape_and_dtype(rollout):
    obs = rollout.plies[0].obs
    chex.assert_shape(obs, (B, 5, 5, R.OBS_CHANNELS))
    assert obs.dtype == np.float32
    assert R.OBS_SHAPE == (5, 5, R.OBS_CHANNELS)
    chex.assert_shape(rollout.plies[0].mask, (B, R.NUM_ACTIONS))
    chex.assert_shape(rollout.plies[0].after.rewards, (B, 2))


def test_finished_games_stay_finished(engine, rollout):
    items = [
        (rollout.variants[i], row(ply.after, i))
        for ply in rollout.plies
        for i in range(B)
        if ply.after.terminated[i]
    ]
    assert len(items) >= 20, len(items)
    items = [items[k % len(items)] for k in range(B)]
    rules = engine.rules([v for v, _ in items])
    state = stack_states([s for _, s in items])
    for seed, forced in [(1, None), (2, [62] * B), (3, [-1] * B)]:
        out = engine.play(rules, state, seed=seed, forced=forced)
        assert not out.mask.any(), "a finished game has legal actions"
        assert out.after.terminated.all()
        assert (out.after.rewards == 0).all(), "stepping a finished game gave rewards"
        for field in ("pieces", "own", "turn", "ply", "halfmove"):
            np.testing.assert_array_equal(getattr(out.after, field), getattr(state, field))


def test_one_trace_serves_every_variant(engine):
    """`Engine.ply` is wrapped in chex.assert_max_traces(n=1): a retrace raises."""
    init = jax.jit(R.init)  # one compile, instead of an eager one per operation of `init`
    for variant in VARIANTS:
        rules = engine.rules([variant])
        engine.play(rules, init(rules))
    for max_plies in (4, 256):
        rules = engine.rules(list(VARIANTS), max_plies=max_plies)
        engine.play(rules, init(rules))
    if hasattr(engine.ply, "_cache_size"):
        assert engine.ply._cache_size() == 1


def test_init_is_the_start_position():
    rules = R.batch(list(VARIANTS))
    state = R.init(rules)
    for i, variant in enumerate(VARIANTS):
        assert R.to_fen(row(state, i)) == R.START_FENS[variant]
    # Only the monochromatic start, where White has no legal move, is over at once (a draw).
    expected = np.array([v == "monochromatic" for v in VARIANTS])
    np.testing.assert_array_equal(np.asarray(state.terminated), expected)
    assert not np.asarray(state.rewards).any()
    assert (np.asarray(state.ply) == 0).all()


def test_state_bytes():
    assert R.state_bytes() <= 512, R.state_bytes()


# ------------------------------------------------------------------------------------- endings


def test_illegal_action_loses(engine):
    variants = [VARIANTS[i % len(VARIANTS)] for i in range(B)]
    fens = []
    for i, v in enumerate(variants):
        fen = playable_start(v)
        if i >= B // 2:  # Black to move in the second half
            fen = R.apply_move(v, fen, R.legal_moves(v, fen)[0])
        fens.append(fen)
    rules, states = engine.rules(variants), engine.states(fens)
    masks = engine.play(rules, states).mask
    illegal = []
    for i in range(B):
        if i % 4 == 0:
            illegal.append([-1, R.NUM_ACTIONS, 10**6][i // 4 % 3])  # out of range
        else:
            candidates = np.flatnonzero(~masks[i])
            illegal.append(int(candidates[(7 * i) % len(candidates)]))
    out = engine.play(rules, states, forced=illegal)
    for i in range(B):
        mover_white = fens[i].split()[1] == "w"
        expected = [-1.0, 1.0] if mover_white else [1.0, -1.0]
        assert out.after.terminated[i], f"{variants[i]} {fens[i]!r} + illegal {illegal[i]}"
        assert out.after.rewards[i].tolist() == expected, (
            f"{variants[i]} {fens[i]!r} + illegal action {illegal[i]}: "
            f"rewards {out.after.rewards[i].tolist()}, expected {expected}"
        )
        np.testing.assert_array_equal(out.after.pieces[i], states.pieces[i])


# Mallet's Black has no piece move from the start: there, open c4 first.
PIECE_START = {v: playable_start(v) for v in VARIANTS} | {
    "mallet": "rbkqb/pp1pp/2p2/PPPPP/RNKQN w - - 0 1"
}


def quiet_piece_moves(variant: str, fen: str) -> list[str]:
    board = board_of(fen)
    return [
        m for m in REF.legal_moves(variant, fen) if board[m[:2]] not in "Pp" and m[2:4] not in board
    ]


def play_forced(engine, rules, state, moves_per_row):
    """Play the given UCI moves (one list per row, same length) with the jitted engine;
    returns the list of Ply outputs (states not reset)."""
    outs = []
    for k in range(len(moves_per_row[0])):
        forced = []
        for i in range(B):
            fen = R.to_fen(row(state, i))
            forced.append(R.uci_to_action(rules_variant(rules, i), fen, moves_per_row[i][k]))
        out = engine.play(rules, state, forced=forced)
        outs.append(out)
        state = out.after
    return outs


def rules_variant(rules, i) -> str:
    return VARIANTS[int(np.asarray(rules.variant_id)[i])]


def test_fifty_move_rule(engine):
    cases = []  # (variant, fen, move, terminated, halfmove after)
    for v in VARIANTS:
        fen0 = " ".join(PIECE_START[v].split()[:4] + ["98", "40"])
        m1 = quiet_piece_moves(v, fen0)[0]
        fen1 = REF.make_move(v, fen0, m1)
        cases.append((v, fen0, m1, False, 99))
        cases.append((v, fen1, quiet_piece_moves(v, fen1)[0], True, 100))
        pawn_moves = [
            m
            for m in REF.legal_moves(v, fen1)
            if board_of(fen1)[m[:2]] == "p" and REF.result(v, REF.make_move(v, fen1, m)) is None
        ]
        if pawn_moves:
            cases.append((v, fen1, pawn_moves[0], False, 0))
    assert len(cases) <= B
    rows = [cases[i % len(cases)] for i in range(B)]
    forced = [R.uci_to_action(v, fen, m) for v, fen, m, _, _ in rows]
    out = engine.play(
        engine.rules([c[0] for c in rows]), engine.states([c[1] for c in rows]), forced=forced
    )
    for i, (v, fen, move, ends, halfmove) in enumerate(cases):
        assert int(out.after.halfmove[i]) == halfmove, f"{v} {fen!r} + {move}"
        assert bool(out.after.terminated[i]) == ends, f"{v} {fen!r} + {move}: 50-move rule"
        assert out.after.rewards[i].tolist() == [0.0, 0.0], f"{v} {fen!r} + {move}"


def shuffle(variant: str, fen: str) -> list[str]:
    """Four quiet piece moves (White, Black, back, back) that restore `fen`."""
    for w in quiet_piece_moves(variant, fen):
        f1 = REF.make_move(variant, fen, w)
        for b in quiet_piece_moves(variant, f1):
            f2 = REF.make_move(variant, f1, b)
            back = [w[2:4] + w[:2], b[2:4] + b[:2]]
            if back[0] in REF.legal_moves(variant, f2):
                f3 = REF.make_move(variant, f2, back[0])
                if back[1] in REF.legal_moves(variant, f3):
                    return [w, b, *back]
    raise AssertionError(f"no shuffle found for {variant} {fen!r}")


def test_threefold_repetition(engine):
    fens = PIECE_START
    cycles = {v: shuffle(v, fens[v]) for v in VARIANTS}
    variants = [VARIANTS[i % len(VARIANTS)] for i in range(B)]
    rules = engine.rules(variants)
    state = engine.states([fens[v] for v in variants])
    moves = [cycles[v] * 2 for v in variants]
    outs = play_forced(engine, rules, state, moves)
    for k, out in enumerate(outs, start=1):
        for i, v in enumerate(variants[: len(VARIANTS)]):
            ends = k == 8  # the start position occurs for the third time after 8 plies
            assert bool(out.after.terminated[i]) == ends, (
                f"{v}: {' '.join(moves[i])} from {fens[v]!r}: terminated after ply {k}?"
            )
            assert out.after.rewards[i].tolist() == [0.0, 0.0]
            if k >= 5:  # from ply 4 on the position has been seen before (fog hides it)
                seen = 0.0 if REF.rule_set(v).fog == "on" else 1.0
                assert out.obs[i][0, 0, 15] == seen, f"{v}: repetition plane at ply {k - 1}"


KK_CASES = [  # (variant, FEN, move, terminated): a capture leaves the two kings alone
    ("gardner", "4k/3R1/5/5/K4 b - - 0 1", "e5d4", True),
    ("baby", "4k/3R1/5/5/K4 b - - 0 1", "e5d4", True),
    ("mallet", "4k/3R1/5/5/K4 b - - 0 1", "e5d4", True),
    ("rifle", "4k/3R1/5/5/K4 b - - 0 1", "e5d4", True),  # the king stays on e5
    ("monochromatic", "4k/3R1/5/5/K4 b - - 0 1", "e5d4", True),
    ("bichromatic", "4k/4R/5/5/K4 b - - 0 1", "e5e4", True),
    ("atomic", "k4/5/2n2/5/2R1K w - - 0 1", "c1c3", True),  # the explosion leaves two kings
    ("dark", "4k/3R1/5/5/K4 b - - 0 1", "e5d4", False),  # no K vs K rule without check
]


def test_kings_only_is_a_draw_in_check_based_variants(engine):
    rows = [KK_CASES[i % len(KK_CASES)] for i in range(B)]
    forced = [R.uci_to_action(v, fen, m) for v, fen, m, _ in rows]
    out = engine.play(
        engine.rules([c[0] for c in rows]), engine.states([c[1] for c in rows]), forced=forced
    )
    for i, (v, fen, move, ends) in enumerate(KK_CASES):
        assert set(board_of(R.to_fen(row(out.after, i))).values()) == {"K", "k"}
        assert bool(out.after.terminated[i]) == ends, f"{v} {fen!r} + {move}: K vs K"
        assert out.after.rewards[i].tolist() == [0.0, 0.0], f"{v} {fen!r} + {move}"


def test_max_plies_is_a_draw(engine):
    variants = [VARIANTS[i % len(VARIANTS)] for i in range(B)]
    rules = engine.rules(variants, max_plies=4)
    state = engine.states([playable_start(v) for v in variants])
    done = np.zeros(B, bool)
    for k in range(1, 5):
        out = engine.play(rules, state, seed=50 + k)
        # The ply channel is on an absolute scale, whatever the ply cap.
        np.testing.assert_allclose(out.obs[~done][:, 0, 0, 16], (k - 1) / R.PLY_SCALE)
        for i in np.flatnonzero(~done):
            fen = R.to_fen(row(out.after, i))
            decisive = REF.result(variants[i], fen)
            assert bool(out.after.terminated[i]) == (decisive is not None or k == 4), (
                f"{variants[i]} max_plies=4: ply {k} {fen!r} terminated="
                f"{bool(out.after.terminated[i])}"
            )
            expected = REWARDS[decisive] if decisive else [0.0, 0.0]
            assert out.after.rewards[i].tolist() == expected, f"{variants[i]} ply {k} {fen!r}"
        done |= out.after.terminated
        state = out.after
    assert done.all()


def test_state_of_matches_from_fen():
    """The cached numpy states used above are exactly R.from_fen's."""
    fen = R.START_FENS["gardner"]
    ours, theirs = state_of(fen), R.from_fen(fen)
    for field in ("pieces", "own", "turn", "halfmove", "fullmove", "hash_history"):
        np.testing.assert_array_equal(getattr(ours, field), np.asarray(getattr(theirs, field)))


def check_computed_once() -> None:
    """`game.computed_once` (the reduction that keeps XLA from recomputing a per-game value
    in every consuming element) is the identity for every dtype the engine passes it,
    including -0.0, infinities and subnormals, jitted and vmapped."""
    rng = np.random.default_rng(0)
    floats = rng.standard_normal((4, 7)).astype(np.float32)
    floats[0, :5] = [-0.0, 0.0, np.inf, -np.inf, np.float32(1e-45)]
    cases = [
        rng.integers(0, 2**32, (4, 7), dtype=np.uint32),
        rng.integers(-(2**31), 2**31, (4, 7), dtype=np.int32),
        rng.random((4, 7)) < 0.5,
        floats,
    ]
    for x in cases:
        for fn in (jax.jit(game.computed_once), jax.jit(jax.vmap(game.computed_once))):
            got = np.asarray(fn(jnp.asarray(x)))
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


@pytest.mark.slow
def test_computed_once_returns_its_input_bit_for_bit():
    """`check_computed_once` in a child compiled as the commands compile: without LLVM's
    optimisation (the tests' XLA flags, tests/xla_flags.py) XLA:CPU's max flushes a subnormal
    input to zero, so the identity holds in the optimised program only."""
    environ = dict(os.environ, JAX_PLATFORMS="cpu")
    environ["XLA_FLAGS"] = xla_flags.without_test_flags(environ.get("XLA_FLAGS", ""))
    code = "from test_rules_invariants import check_computed_once; check_computed_once()"
    tests = Path(__file__).resolve().parents[1]  # the support modules (`rules_support`, ...)
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tests)!r})\n" + code],
        cwd=Path(__file__).parent,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
