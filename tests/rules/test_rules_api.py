"""The Python-facing API of the rules engine: errors, notation, rendering, random actions, CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from rules_support import VARIANTS, flip_fen, flip_move, reference_positions

from mmc_jax import rules as R

START = R.START_FENS["gardner"]
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call",
    [
        lambda: R.get("chess"),
        lambda: R.batch("chess", 2),
        lambda: R.batch(["gardner", "chess"]),
        lambda: R.legal_moves("chess", START),
        lambda: R.apply_move("chess", START, "a2a3"),
        lambda: R.uci_to_action("chess", START, "a2a3"),
        lambda: R.action_to_uci("chess", START, 62),
        lambda: R.result("chess", START),
        lambda: R.perft("chess", START, 1),
        lambda: R.fog_fen("chess", START),
    ],
    ids=[
        "get",
        "batch",
        "batch-list",
        "legal_moves",
        "apply_move",
        "uci_to_action",
        "action_to_uci",
        "result",
        "perft",
        "fog_fen",
    ],
)
def test_unknown_variant_lists_valid_names(call):
    with pytest.raises(ValueError, match="unknown variant 'chess'") as info:
        call()
    for name in VARIANTS:
        assert name in str(info.value), f"{name!r} missing from: {info.value}"


def test_bad_configuration_values():
    with pytest.raises(ValueError, match="max_plies"):
        R.get("gardner", max_plies=0)
    with pytest.raises(ValueError, match="depth"):
        R.perft("gardner", START, -1)
    with pytest.raises(ValueError, match="batch_size"):
        R.batch("gardner", 0)


BAD_FENS = [
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - - 0", "expected 6 fields"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 1 x", "expected 6 fields"),
    ("rnbqk/ppppp/5/PPPPP w - - 0 1", "5 ranks"),
    ("rnbqk/ppppp/5/PPPPP/RNBQX w - - 0 1", "unknown piece 'X'"),
    ("rnbqk/ppppp/5/PP*PP/RNBQK w - - 0 1", "unknown piece"),
    ("rnbqk/ppppp/6/PPPPP/RNBQK w - - 0 1", "rank 3"),
    ("rnbqk/pppp/5/PPPPP/RNBQK w - - 0 1", "rank 4"),
    ("rnbqk/ppppp/5/PPPPPP/RNBQK w - - 0 1", "rank 2"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK x - - 0 1", "side-to-move"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK W - - 0 1", "side-to-move"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w KQkq - 0 1", "castling"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - c3 0 1", "en-passant"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - - x 1", "half-move clock"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - - -1 1", "half-move clock"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 one", "move number"),
    ("rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 0", "move number"),
    ("rnbqk/ppppp/5/PPPPP/RNBKK w - - 0 1", "2 White kings"),
]


@pytest.mark.parametrize("fen,message", BAD_FENS, ids=[m for _, m in BAD_FENS])
def test_malformed_fen_names_the_field(fen, message):
    for call in (lambda: R.from_fen(fen), lambda: R.legal_moves("gardner", fen)):
        with pytest.raises(ValueError, match=message) as info:
            call()
        assert fen in str(info.value), f"the message should quote the FEN: {info.value}"
    with pytest.raises(ValueError, match="FEN must be a string"):
        R.from_fen(None)


@pytest.mark.parametrize("call", [R.apply_move, R.uci_to_action])
def test_illegal_move(call):
    with pytest.raises(ValueError, match="illegal move 'a2a4'") as info:
        call("gardner", START, "a2a4")  # no double step in minichess
    assert "a2a3" in str(info.value), f"the message should list the legal moves: {info.value}"
    with pytest.raises(ValueError, match="illegal move 'a2a3q'"):
        call("gardner", START, "a2a3q")  # well-formed but no promotion
    with pytest.raises(ValueError, match="illegal move 'b5c3'"):
        call("gardner", START, "b5c3")  # Black's move with White to move
    with pytest.raises(ValueError, match="the game is over"):
        call("gardner", "k4/1Q3/1K3/5/5 b - - 0 1", "a5a4")  # checkmated


@pytest.mark.parametrize("move", ["", "a2", "a2a3a3", "z2a3", "a0a1", "a2a3k", "a2a3x", None, 62])
@pytest.mark.parametrize("call", [R.apply_move, R.uci_to_action])
def test_malformed_move(call, move):
    with pytest.raises(ValueError, match="malformed move"):
        call("gardner", START, move)


# ------------------------------------------------------------------------------------- notation


def test_render_shows_unicode_pieces():
    expected = "\n".join(
        [
            "5 ♜ ♞ ♝ ♛ ♚",
            "4 ♟ ♟ ♟ ♟ ♟",
            "3 · · · · ·",
            "2 ♙ ♙ ♙ ♙ ♙",
            "1 ♖ ♘ ♗ ♕ ♔",
            "  a b c d e",
        ]
    )
    assert R.render(START) == expected
    assert R.render_state(R.from_fen(START)) == expected
    fog = R.render(R.fog_fen("dark", START))
    assert fog.splitlines()[0] == "5 ⊙ ⊙ ⊙ ⊙ ⊙" and fog.splitlines()[3] == "2 ♙ ♙ ♙ ♙ ♙"


def test_fen_round_trip():
    for variant in VARIANTS:
        for p in reference_positions(variant, 20, 20, 5)[1]:
            assert R.to_fen(R.from_fen(p.fen)) == p.fen


@pytest.mark.parametrize("variant", VARIANTS)
def test_action_uci_round_trip(variant):
    """uci_to_action and action_to_uci are inverse on every legal move; Black's ids are those
    of the mirrored White move (ids are in the mover's frame, as in pgx)."""
    games, placed, finished = reference_positions(variant, 20, 20, 5)
    n = 0
    for p in games + placed + finished:
        ids = []
        for move in p.legal:
            action = R.uci_to_action(variant, p.fen, move)
            assert 0 <= action < R.NUM_ACTIONS
            assert R.action_to_uci(variant, p.fen, action) == move, f"{p.fen!r} {move}"
            ids.append(action)
            n += 1
        assert len(set(ids)) == len(ids), f"two moves share an action id at {p.fen!r}"
        if p.legal and n % 3 == 0:
            move = p.legal[0]
            mirrored = R.uci_to_action(variant, flip_fen(p.fen), flip_move(move))
            assert mirrored == R.uci_to_action(variant, p.fen, move), p.fen
    assert n >= 200, n


def test_board_action_to_uci_spells_a_rifle_capture_without_promotion():
    """The same action (pawn d4 takes e5 on the last rank) is "d4e5q" where the capturer lands
    and promotes, "d4e5" under rifle captures, where it stays on d4."""
    position = R.from_fen("k3r/3P1/5/5/K4 w - - 0 1")
    action = R.notation.uci_to_action("d4e5", 0)
    spell = lambda variant: R.board_action_to_uci(  # noqa: E731
        variant, action, 0, np.asarray(position.pieces), int(position.own)
    )
    assert spell("gardner") == spell("atomic") == "d4e5q"
    assert spell("rifle") == spell("dark,capture=rifle") == "d4e5"
    assert spell("gardner") == R.action_to_uci("gardner", "k3r/3P1/5/5/K4 w - - 0 1", action)


def test_capturer_lands_only_under_normal_captures():
    rules = R.batch(["gardner", "rifle", "atomic", "dark", "dark,capture=atomic"])
    assert np.asarray(R.capturer_lands(rules)).tolist() == [True, False, False, True, False]


def test_promotion_piece_of_every_plane_matches_the_uci_suffix():
    """Planes 0-8 under-promote to R, B, N (by thirds: the letter UCI writes), all others make
    a queen."""
    letters = [R.tables.PIECE_LETTERS[p] for p in R.tables.PROMOTION_PIECE]
    assert letters[:9] == list("rrrbbbnnn") and set(letters[9:]) == {"q"}
    assert len(letters) == R.tables.NUM_PLANES


# ------------------------------------------------------------------------------------- random


def test_random_legal_action_is_uniform():
    mask = np.zeros((7000, R.NUM_ACTIONS), bool)
    start_ids = [62, 289, 293, 307, 552, 797, 1042]
    mask[:, start_ids] = True
    draws = np.asarray(R.random_legal_action(jax.random.key(123), mask))
    assert np.isin(draws, start_ids).all(), "an illegal action was drawn"
    counts = np.array([(draws == a).sum() for a in start_ids])
    sigma = np.sqrt(7000 * (1 / 7) * (6 / 7))
    assert (np.abs(counts - 1000) < 5 * sigma).all(), (
        f"counts {counts.tolist()} (sigma {sigma:.0f})"
    )
    chi2 = ((counts - 1000) ** 2 / 1000).sum()
    assert chi2 < 25.0, f"chi-square {chi2:.1f} with 6 degrees of freedom: {counts.tolist()}"
    # Other keys give other draws.
    again = np.asarray(R.random_legal_action(jax.random.key(124), mask))
    assert (again != draws).mean() > 0.7


def test_random_legal_action_never_illegal():
    rng = np.random.default_rng(0)
    density = rng.uniform(0.0, 0.05, size=(512, 1))
    mask = rng.random((512, R.NUM_ACTIONS)) < density
    mask[:9] = False
    mask[8, -1] = True  # only the last action
    draws = np.asarray(R.random_legal_action(jax.random.key(0), mask))
    assert draws.dtype == np.int32 and draws.shape == (512,)
    has_legal = mask.any(axis=1)
    assert mask[np.arange(512), draws][has_legal].all(), "an illegal action was drawn"
    assert (draws[~has_legal] == 0).all(), "no legal action: expected 0"
    assert draws[8] == R.NUM_ACTIONS - 1


# ------------------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_plays_a_game():
    proc = subprocess.run(
        [sys.executable, "-m", "mmc_jax.rules", "--variant", "atomic", "--games", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "result: " in out, out[-2000:]
    assert any(piece in out for piece in "♔♚"), "no Unicode board printed"
    result = out.rsplit("result: ", 1)[1].split()[0]
    assert result in ("1-0", "0-1", "1/2-1/2")


def test_cli_rejects_unknown_variant():
    proc = subprocess.run(
        [sys.executable, "-m", "mmc_jax.rules", "--variant", "chess", "--games", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "unknown variant 'chess'" in proc.stderr and "bichromatic" in proc.stderr


def test_stack_equals_a_stack_of_every_leaf_for_mixed_and_repeated_rules():
    import jax.numpy as jnp

    rules = [R.get(v) for v in ("gardner", "atomic", "dark,capture=atomic", "baby")]
    items = [rules[i % 4] for i in range(11)] + [R.get("rifle"), R.get("gardner")]
    got = R.stack(items)
    want = jax.tree.map(lambda *xs: jnp.stack(xs), *items)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and x.weak_type == y.weak_type
        assert bool(jnp.all(x == y))
