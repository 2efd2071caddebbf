"""Self-checks of the plain-Python reference rules engine (tests/reference_engine.py).

1. Perft from every start position against the rules.md table.
2. Agreement with Fairy-Stockfish (pyffish) for the variants it expresses: full legal-move sets,
   game results, FENs after moves and (dark) fog FENs, on random-play games and on random
   positions.
3. Hand-made edge cases for the variants without an oracle (rifle, monochromatic, bichromatic),
   verified by hand reasoning, plus a few atomic / extinction / dark specifics.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

try:  # works whether or not tests/ is a package
    from . import reference_engine as R
except ImportError:
    import reference_engine as R

INI_PATH = Path(__file__).resolve().parents[2] / "mmc_jax" / "data" / "fairy-variants.ini"


def mv(moves: str) -> list[str]:
    """'a2a3 b1c3' -> ['a2a3', 'b1c3'] (move lists written compactly)."""
    return moves.split()


FSF_NAMES = {
    "gardner": "gardner",
    "baby": "babychess",
    "mallet": "mallett",
    "atomic": "atomic-gardner",
    "dark": "dark-gardner",
    "extinction": "extinction-gardner-qrbn",
}

# ---------------------------------------------------------------------------------------------
# 1. Perft (rules.md table)
# ---------------------------------------------------------------------------------------------

PERFT = {
    "gardner": [7, 53, 506, 4775, 52512],
    "baby": [7, 53, 504, 4707, 50814],
    "mallet": [8, 41, 422, 3180, 34647],
    "atomic": [7, 53, 490, 4239, 41459],
    "dark": [7, 53, 510, 5000, 58557],
    "extinction": [7, 53, 477, 4388, 48348],
    "monochromatic": [0, 0, 0, 0, 0],
    "bichromatic": [7, 42, 255, 1423, 8124],
}


@pytest.mark.parametrize("variant", sorted(PERFT))
def test_perft_start_depth_1_to_4(variant):
    fen = R.START_FEN[variant]
    assert [R.perft(variant, fen, d) for d in range(1, 5)] == PERFT[variant][:4]


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(PERFT))
def test_perft_start_depth_5(variant):
    # The whole depth-5 set takes ~7 s on a small CPU; bichromatic alone ~0.3 s.
    assert R.perft(variant, R.START_FEN[variant], 5) == PERFT[variant][4]


def test_rifle_perft_start():
    # No oracle exists; pinned here so that an accidental change is noticed (depth 5: 45857,
    # not run).  Depth 1-2 equal Gardner; depth 3 differs from Gardner's 506 because after
    # e.g. 1. b3 axb3 the capturing black pawn stays on a4.
    assert [R.perft("rifle", R.START_FEN["rifle"], d) for d in range(1, 5)] == [7, 53, 490, 4428]


def test_start_moves_and_fen_roundtrip():
    for variant in R.VARIANTS:
        fen = R.START_FEN[variant]
        assert R.to_fen(R.parse_fen(fen)) == fen
    assert R.legal_moves("gardner", R.START_FEN["gardner"]) == mv(
        "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3"
    )
    fen = R.make_move("gardner", R.START_FEN["gardner"], "b1c3")
    assert fen == "rnbqk/ppppp/2N2/PPPPP/R1BQK b - - 1 1"  # quiet piece move: clock + 1
    fen = R.make_move("gardner", "rnbqk/ppppp/2N2/PPPPP/R1BQK b - - 1 1", "b4b3")
    assert fen == "rnbqk/p1ppp/1pN2/PPPPP/R1BQK w - - 0 2"  # pawn move: clock 0, move 2


@pytest.mark.parametrize(
    "bad",
    [
        "rnbqk/ppppp/5/PPPPP w - - 0 1",  # 4 ranks
        "rnbqk/ppppp/6/PPPPP/RNBQK w - - 0 1",  # rank too long
        "rnbqk/ppppp/4/PPPPP/RNBQK w - - 0 1",  # rank too short
        "rnbqk/ppppp/5/PPPPP/RNBQK x - - 0 1",  # bad side
        "rnbqk/ppppp/5/PPPPP/RNBQX w - - 0 1",  # bad piece
        "rnbqk/ppppp/5/PPPPP/RNBQK w KQ - 0 1",  # castling field
        "rnbqp/ppppp/5/PPPPP/RNBQK w - - 0 1",  # pawn on last rank
    ],
)
def test_parse_fen_rejects(bad):
    with pytest.raises(ValueError):
        R.parse_fen(bad)


def test_make_move_rejects_illegal():
    with pytest.raises(ValueError):
        R.make_move("gardner", R.START_FEN["gardner"], "a2a4")
    with pytest.raises(ValueError):
        R.legal_moves("chess", R.START_FEN["gardner"])
    with pytest.raises(ValueError):  # check-based variant without a king
        R.legal_moves("gardner", "rnbq1/ppppp/5/PPPPP/RNBQK w - - 0 1")


# ---------------------------------------------------------------------------------------------
# 2. Agreement with Fairy-Stockfish
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sf():
    import pyffish  # the test extra installs it; the oracle must not be skippable

    pyffish.load_variant_config(INI_PATH.read_text())
    return pyffish


def fsf_result(sf, fsf_variant, fen):
    """Result of a position according to Fairy-Stockfish, in the reference engine's format."""
    end, value = sf.is_immediate_game_end(fsf_variant, fen, [])
    if not end:
        if sf.legal_moves(fsf_variant, fen, []):
            return None
        value = sf.game_result(fsf_variant, fen, [])
    if value == 0:
        return "1/2-1/2"
    side_to_move_wins = value > 0
    white_to_move = fen.split()[1] == "w"
    return "1-0" if side_to_move_wins == white_to_move else "0-1"


def compare_position(sf, variant, fen, tally):
    """Compare everything about one position; returns our legal moves."""
    fv = FSF_NAMES[variant]
    ours = R.legal_moves(variant, fen)
    theirs = sf.legal_moves(fv, fen, [])
    assert len(ours) == len(set(ours))
    assert set(ours) == set(theirs), (
        f"{variant} {fen}: only ours {sorted(set(ours) - set(theirs))}, "
        f"only Fairy-Stockfish {sorted(set(theirs) - set(ours))}"
    )
    res = R.result(variant, fen)
    if res is not None or not ours:
        assert res == fsf_result(sf, fv, fen), f"{variant} {fen}"
        tally[res] = tally.get(res, 0) + 1
    if variant == "dark":
        assert R.fog_fen(fen) == sf.get_fog_fen(fen, fv), fen
    tally["positions"] = tally.get("positions", 0) + 1
    return ours


def ends_game(variant, fen, move):
    """Whether ``move`` ends the game at once (cheap pre-filter: only checking moves can mate)."""
    after = R.parse_fen(R.make_move(variant, fen, move))
    if variant in ("gardner", "baby", "mallet") and not R.in_check(variant, after):
        return False
    return R.result(variant, after) is not None


def play_random_game(sf, variant, seed, max_plies, tally):
    rng = random.Random(seed)
    capture_bias = rng.random()  # some games greedy for captures, so that many games end
    fen = R.START_FEN[variant]
    for _ in range(max_plies):
        moves = compare_position(sf, variant, fen, tally)
        if not moves or R.result(variant, fen) is not None:
            tally["games"] = tally.get("games", 0) + 1
            return
        moves = sorted(moves)
        pos = R.parse_fen(fen)
        captures = [m for m in moves if pos.board[R.parse_sq(m[2:4])] != R.EMPTY]
        move = rng.choice(captures if captures and rng.random() < capture_bias else moves)
        if rng.random() < capture_bias:  # greedy games also play a game-ending move if any
            enders = [m for m in moves if ends_game(variant, fen, m)]
            move = rng.choice(enders) if enders else move
        new_fen = R.make_move(variant, fen, move)
        assert new_fen == sf.get_fen(FSF_NAMES[variant], fen, [move]), (fen, move)
        fen = new_fen
    compare_position(sf, variant, fen, tally)
    tally["games"] = tally.get("games", 0) + 1


@pytest.mark.parametrize("variant", sorted(FSF_NAMES))
def test_random_games_agree_with_fairy_stockfish(sf, variant):
    tally = {}
    seed = 0
    # At least MIN_POSITIONS positions and a few finished games per variant.
    while seed < 300 and (
        tally.get("positions", 0) < MIN_POSITIONS
        or sum(v for k, v in tally.items() if k not in ("positions", "games")) < MIN_FINISHED
    ):
        play_random_game(sf, variant, seed, 80, tally)
        seed += 1
    assert tally["positions"] >= MIN_POSITIONS
    finished = sum(v for k, v in tally.items() if k not in ("positions", "games"))
    assert finished >= MIN_FINISHED, tally


MIN_POSITIONS = 300
MIN_FINISHED = 5


def random_position(rng, variant):
    """A random placement; in check-based variants the side not to move is not in check."""
    while True:
        board = [R.EMPTY] * 25
        squares = list(range(25))
        rng.shuffle(squares)
        pieces = []
        if variant not in ("dark", "extinction") or rng.random() < 0.85:
            pieces += ["K", "k"]
        pieces += [rng.choice("PNBRQpnbrq") for _ in range(rng.randint(1, 10))]
        if variant == "extinction" and rng.random() < 0.6:
            pieces = list("KQRBNPkqrbnp") + pieces[2:]
        for piece in pieces:
            for i, sq in enumerate(squares):
                if piece in "Pp" and R.rank_of(sq) in (0, 4):
                    continue
                board[sq] = piece
                squares.pop(i)
                break
        if variant in ("dark", "extinction") and (board.count("K") > 1 or board.count("k") > 1):
            continue
        turn = rng.choice("wb")
        if variant in R.CHECK_BASED or variant == "atomic":
            other = R.Position(tuple(board), R.opponent(turn))
            if R.in_check(variant, other):
                continue
        return R.to_fen(R.Position(tuple(board), turn, rng.randint(0, 20), rng.randint(1, 40)))


@pytest.mark.parametrize("variant", sorted(FSF_NAMES))
def test_random_positions_agree_with_fairy_stockfish(sf, variant):
    rng = random.Random(1234)
    tally = {}
    for _ in range(150):
        compare_position(sf, variant, random_position(rng, variant), tally)
    assert tally["positions"] == 150


# Positions found by search (hill climbing on the number of legal moves), checked against
# Fairy-Stockfish: no legal move without check is a draw in extinction and dark, and in atomic
# also when the king is "attacked" but touches the enemy king.
NO_MOVE_POSITIONS = [
    ("extinction", "NNKRN/QPBRB/PPPPp/bkr1q/bb1n1 w - - 0 1", "1/2-1/2"),
    ("dark", "NNKRN/QPBRB/PPPPp/bkr1q/bb1n1 w - - 0 1", "1/2-1/2"),
    ("atomic", "rn1bn/1qbqr/rPRK1/nnkP1/n2n1 w - - 0 1", "1/2-1/2"),
    ("atomic", "k4/5/1Q3/5/K4 b - - 0 1", "1/2-1/2"),  # king a5 boxed in, not attacked
    ("gardner", "k4/5/1Q3/5/K4 b - - 0 1", "1/2-1/2"),
    ("gardner", "k4/1Q3/1K3/5/5 b - - 0 1", "1-0"),  # checkmate
]


@pytest.mark.parametrize("variant,fen,expected", NO_MOVE_POSITIONS)
def test_no_legal_move_results(sf, variant, fen, expected):
    assert R.legal_moves(variant, fen) == []
    assert R.result(variant, fen) == expected
    assert fsf_result(sf, FSF_NAMES[variant], fen) == expected


def test_atomic_specifics(sf):
    fv = FSF_NAMES["atomic"]
    # Kings cannot capture (Kxb2 is legal in Gardner only).
    fen = "4k/5/5/1p3/K4 w - - 0 1"
    assert "a1b2" in R.legal_moves("gardner", fen)
    assert "a1b2" not in R.legal_moves("atomic", fen)
    # In check from the rook on a5, Rxd4 still legal: it explodes the black king on e5.
    fen = "r3k/3p1/5/5/K2R1 w - - 0 1"
    assert R.legal_moves("atomic", fen) == ["a1b1", "a1b2", "d1d4"]
    after = R.make_move("atomic", fen, "d1d4")
    assert after == "r4/5/5/5/K4 b - - 0 1"
    assert R.result("atomic", after) == "1-0"
    # A capture that explodes both kings is illegal.
    fen = "4k/R2p1/3K1/5/5 w - - 0 1"
    assert "a4d4" not in R.legal_moves("atomic", fen)
    # Touching kings: the black king may step next to the white king although the queen on
    # b4 "attacks" a4 ... b5 is not adjacent to b3 and is attacked, so only a5a4.
    fen = "k4/1Q3/1K3/5/5 b - - 0 1"
    assert R.legal_moves("atomic", fen) == ["a5a4"]
    assert R.in_check("atomic", fen)
    for f in (
        "4k/5/5/1p3/K4 w - - 0 1",
        "r3k/3p1/5/5/K2R1 w - - 0 1",
        "4k/R2p1/3K1/5/5 w - - 0 1",
        "k4/1Q3/1K3/5/5 b - - 0 1",
    ):
        assert set(R.legal_moves("atomic", f)) == set(sf.legal_moves(fv, f, []))


def test_extinction_specifics(sf):
    fv = FSF_NAMES["extinction"]
    # White's last pawn promotes while capturing Black's only knight: both sides have lost a
    # type, the side that just moved is examined first, so White loses.
    fen = "kqrbn/3P1/p4/5/KQRBN w - - 0 1"
    moves = R.legal_moves("extinction", fen)
    assert set(moves) == set(sf.legal_moves(fv, fen, []))
    # No promotion to a king (plain extinction-gardner would also offer d4c5k / d4e5k).
    assert [m for m in moves if m.startswith("d4")] == mv(
        "d4c5b d4c5n d4c5q d4c5r d4e5b d4e5n d4e5q d4e5r"
    )
    for move in ("d4e5q", "d4e5n", "d4c5r"):
        after = R.make_move("extinction", fen, move)
        assert after == sf.get_fen(fv, fen, [move])
        assert R.result("extinction", after) == "0-1" == fsf_result(sf, fv, after)
        assert R.legal_moves("extinction", after) == []
    # Both sides missing a type: the side that just moved loses.
    assert R.result("extinction", "k4/5/5/5/4K w - - 0 1") == "1-0"
    assert R.result("extinction", "k4/5/5/5/4K b - - 0 1") == "0-1"
    # Only the side to move is missing a type.
    assert R.result("extinction", "rnbqk/ppppp/5/PPPPP/RN1QK w - - 0 1") == "0-1"
    for f in ("k4/5/5/5/4K w - - 0 1", "rnbqk/ppppp/5/PPPPP/RN1QK w - - 0 1"):
        assert R.result("extinction", f) == fsf_result(sf, fv, f)


def test_dark_specifics(sf):
    fv = FSF_NAMES["dark"]
    # Capturing the king is legal and wins; moving next to the enemy king is legal.
    fen = "k4/5/5/5/Q3K w - - 0 1"
    moves = R.legal_moves("dark", fen)
    assert "a1a5" in moves and set(moves) == set(sf.legal_moves(fv, fen, []))
    after = R.make_move("dark", fen, "a1a5")
    assert R.result("dark", after) == "1-0" == fsf_result(sf, fv, after)
    assert R.legal_moves("dark", after) == []
    assert "a5b5" in R.legal_moves("dark", "k4/5/2K2/5/5 b - - 0 1")
    # Fog: one '*' per hidden square, digits only for visible empty squares, counters kept.
    assert R.fog_fen(R.START_FEN["dark"]) == "*****/*****/5/PPPPP/RNBQK w - - 0 1"
    assert R.fog_fen("rnbqk/ppppp/5/PPPPP/RNBQK b - - 0 1") == (
        "rnbqk/ppppp/5/*****/***** b - - 0 1"
    )
    # Finished game: no moves, so only own pieces are visible (as Fairy-Stockfish).
    fen = "rnbqk/ppppp/5/PPPPP/RNBQ1 w - - 3 7"
    assert R.fog_fen(fen) == "*****/*****/*****/PPPPP/RNBQ* w - - 3 7" == sf.get_fog_fen(fen, fv)


# ---------------------------------------------------------------------------------------------
# 3. Hand-made edge cases: rifle, monochromatic, bichromatic
# ---------------------------------------------------------------------------------------------


def test_rifle_pinned_rook_captures_along_and_off_the_pin_line():
    # White Ka1, Ra2 pinned by the black rook a5; black bishop c2 (attacks b1, d1, b3, a4, d3).
    fen = "r3k/5/5/R1b2/K4 w - - 0 1"
    # Gardner: Rxc2 leaves the a-file -> illegal; Rxa5 moves onto the pinner.
    assert R.legal_moves("gardner", fen) == ["a1b2", "a2a3", "a2a4", "a2a5"]
    # Rifle: the rook stays on a2, so capturing off the pin line (a2xc2) is legal too.
    assert R.legal_moves("rifle", fen) == ["a1b2", "a2a3", "a2a4", "a2a5", "a2c2"]
    assert R.make_move("rifle", fen, "a2c2") == "r3k/5/5/R4/K4 b - - 0 1"
    assert R.make_move("rifle", fen, "a2a5") == "4k/5/5/R1b2/K4 b - - 0 1"
    assert R.make_move("gardner", fen, "a2a5") == "R3k/5/5/2b2/K4 b - - 0 1"


def test_rifle_capture_that_opens_a_line_to_own_king_is_illegal():
    # White Ka1, Bb2; the black knight a3 screens the black rook a5 from the white king.
    # Black king on d5 (not on b2's long diagonal).  The knight covers b1, c2, c4, b5.
    fen = "r2k1/5/n4/1B3/K4 w - - 0 1"
    # Gardner: Bxa3 puts the bishop on a3, still screening -> legal.
    assert R.legal_moves("gardner", fen) == ["a1a2", "b2a3", "b2c1", "b2c3", "b2d4", "b2e5"]
    # Rifle: the bishop stays on b2 and the a-file opens -> Bxa3 is illegal.
    assert R.legal_moves("rifle", fen) == ["a1a2", "b2c1", "b2c3", "b2d4", "b2e5"]


def test_rifle_king_captures_a_protected_piece_and_stays():
    # White Ka1 in check from the queen b1, which the rook b2 protects (and vice versa).
    fen = "4k/5/5/1r3/Kq3 w - - 0 1"
    # Gardner: Kxb1 / Kxb2 land on protected squares, a2 is attacked -> checkmate.
    assert R.legal_moves("gardner", fen) == []
    assert R.result("gardner", fen) == "0-1"
    # Rifle: Kxb1 removes the queen and the king stays on a1, where the rook does not attack.
    # Kxb2 removes the rook but the queen still checks; a2 is attacked.
    assert R.legal_moves("rifle", fen) == ["a1b1"]
    assert R.result("rifle", fen) is None
    assert R.make_move("rifle", fen, "a1b1") == "4k/5/5/1r3/K4 b - - 0 1"


def test_rifle_pawn_capture_on_last_rank_does_not_promote():
    fen = "k3r/3P1/5/5/K4 w - - 0 1"
    rifle = ["a1a2", "a1b1", "a1b2", "d4d5b", "d4d5n", "d4d5q", "d4d5r", "d4e5"]
    assert R.legal_moves("rifle", fen) == rifle
    gardner = ["a1a2", "a1b1", "a1b2", "d4d5b", "d4d5n", "d4d5q", "d4d5r"]
    gardner += ["d4e5b", "d4e5n", "d4e5q", "d4e5r"]
    assert R.legal_moves("gardner", fen) == gardner
    assert R.make_move("rifle", fen, "d4e5") == "k4/3P1/5/5/K4 b - - 0 1"
    assert R.make_move("rifle", fen, "d4d5n") == "k2Nr/5/5/5/K4 b - - 0 1"
    with pytest.raises(ValueError):
        R.make_move("rifle", fen, "d4e5q")


def test_rifle_check_answered_by_a_capture_that_stays():
    # The rook e4 checks the king e1; the knight c3 removes it and stays on c3, or blocks on e2.
    fen = "k4/4r/2N2/5/4K w - - 0 1"
    assert R.in_check("rifle", fen)
    assert R.legal_moves("rifle", fen) == ["c3e2", "c3e4", "e1d1", "e1d2"]
    after = R.make_move("rifle", fen, "c3e4")
    assert after == "k4/5/2N2/5/4K b - - 0 1"
    assert not R.in_check("rifle", R.Position(R.parse_fen(after).board, "w"))


def test_monochromatic_movement():
    # White Ka1, Rc3, Nd1, Pb4; black ke5, nc5.  Dark squares: a1 c3 b4 c5 e5.
    fen = "2n1k/1P3/2R2/5/K2N1 w - - 0 1"
    # King: diagonal only.  Pawn: only captures, and promotes.  Rook: orthogonal distance 2
    # (or 4).  The knight d1 never moves; the pawn b4 cannot push to b5.
    assert R.legal_moves("monochromatic", fen) == mv(
        "a1b2  b4c5b b4c5n b4c5q b4c5r  c3a3 c3c1 c3c5 c3e3"
    )
    # Rook cannot slide through its own knight; reaches c1 (distance 2) only.
    assert R.legal_moves("monochromatic", "4k/5/5/N4/R3K w - - 0 1") == ["a1c1", "e1d2"]
    # Queen: every diagonal square plus orthogonal distance 2 / 4.
    assert R.legal_moves("monochromatic", "5/4k/2Q2/5/K4 w - - 0 1") == mv(
        "a1b2 c3a3 c3a5 c3b2 c3b4 c3c1 c3c5 c3d2 c3d4 c3e1 c3e3 c3e5"
    )
    # No piece ever changes square colour.
    pos = R.parse_fen(fen)
    for m in R.legal_moves("monochromatic", fen):
        assert R.is_dark(R.parse_sq(m[:2])) == R.is_dark(R.parse_sq(m[2:4]))
    assert pos.piece_at("d1") == "N"


def test_monochromatic_checks():
    # Rook e3 next to the king on e4 gives no check (distance 1); king moves diagonally only.
    fen = "5/4k/4R/5/K4 b - - 0 1"
    assert not R.in_check("monochromatic", fen)
    assert R.legal_moves("monochromatic", fen) == ["e4d3", "e4d5"]
    # Rook c3 checks the king on c5 at distance 2 through the empty c4.
    fen = "2k2/5/2R2/5/K4 b - - 0 1"
    assert R.in_check("monochromatic", fen)
    assert R.legal_moves("monochromatic", fen) == ["c5b4", "c5d4"]
    # Checkmate: Ra3 checks a5 (distance 2), the only flight b4 is covered by Bc3.
    fen = "k4/5/R1B2/5/4K b - - 0 1"
    assert R.in_check("monochromatic", fen)
    assert R.legal_moves("monochromatic", fen) == []
    assert R.result("monochromatic", fen) == "1-0"
    # Gardner start: no legal move, not in check -> stalemate.
    assert R.legal_moves("monochromatic", R.START_FEN["monochromatic"]) == []
    assert R.result("monochromatic", R.START_FEN["monochromatic"]) == "1/2-1/2"


def test_bichromatic_movement():
    # White Ka1, Rc2, Be2, Nd1, Pb4; black ke4, nc5.
    fen = "2n2/1P2k/5/2R1B/K2N1 w - - 0 1"
    # King: orthogonal only.  Pawn: pushes and promotes, never captures c5.  Rook: distance 1
    # or 3 (c2xc5 through c3, c4).  Knights always change colour.  The bishop e2 never moves.
    assert R.legal_moves("bichromatic", fen) == mv(
        "a1a2 a1b1  b4b5b b4b5n b4b5q b4b5r  c2b2 c2c1 c2c3 c2c5 c2d2  d1b2 d1c3 d1e3"
    )
    # Queen: orthogonal distance 1 or 3 only.
    assert R.legal_moves("bichromatic", "4k/5/5/1Q3/K4 w - - 0 1") == mv(
        "a1a2 a1b1 b2a2 b2b1 b2b3 b2b5 b2c2 b2e2"
    )
    for m in R.legal_moves("bichromatic", fen):
        assert R.is_dark(R.parse_sq(m[:2])) != R.is_dark(R.parse_sq(m[2:4]))


def test_bichromatic_checks():
    # Black ke4; white pawn d3 and bishop c3 attack nothing in bichromatic; rook e2 attacks e3
    # (distance 1) and, once the king has left e4, e5 (distance 3) - so only Kd4.
    fen = "5/4k/2BP1/4R/K4 b - - 0 1"
    assert not R.in_check("bichromatic", fen)
    assert R.legal_moves("bichromatic", fen) == ["e4d4"]
    # The same pawn would give check in Gardner.
    assert R.in_check("gardner", fen)
    # Start position perft(1): 5 pawn pushes + 2 knight moves.
    assert R.legal_moves("bichromatic", R.START_FEN["bichromatic"]) == mv(
        "a2a3 b1a3 b1c3 b2b3 c2c3 d2d3 e2e3"
    )


@pytest.mark.parametrize("variant", ["monochromatic", "bichromatic", "rifle"])
def test_random_play_invariants(variant):
    """Colour rules and rifle captures hold on every move of random games from random
    positions (no oracle, so only invariants)."""
    rng = random.Random(7)
    n_moves = 0
    for _ in range(60):
        fen = random_position(rng, variant)
        for _ply in range(20):
            moves = R.legal_moves(variant, fen)
            if not moves:
                assert R.result(variant, fen) is not None
                break
            pos = R.parse_fen(fen)
            # Legality, restated independently of attacks_from(): a pseudo-legal move is legal
            # iff afterwards no enemy move (under the same variant rules) captures our king.
            for pm in R._pseudo_moves(variant, pos):
                board = R._apply_board(variant, pos.board, pm)
                king = R.king_square(board, pos.turn)
                reply = R.Position(board, R.opponent(pos.turn))
                king_capturable = any(r[1] == king for r in R._pseudo_moves(variant, reply))
                assert (R.move_to_uci(pm) in moves) == (not king_capturable), (fen, pm)
            for m in moves:
                frm, to = R.parse_sq(m[:2]), R.parse_sq(m[2:4])
                piece = pos.board[frm].upper()
                capture = pos.board[to] != R.EMPTY
                if variant == "monochromatic":
                    assert R.is_dark(frm) == R.is_dark(to)
                    assert piece != "N"
                    assert not (piece == "P" and not capture)
                elif variant == "bichromatic":
                    assert R.is_dark(frm) != R.is_dark(to)
                    assert piece != "B"
                    assert not (piece == "P" and capture)
                after = R.parse_fen(R.make_move(variant, fen, m))
                assert R.king_square(after.board, pos.turn) is not None
                assert not R.in_check(variant, R.Position(after.board, pos.turn))
                if variant == "rifle" and capture:
                    assert after.board[frm] == pos.board[frm] and after.board[to] == R.EMPTY
                    assert len(m) == 4
                n_moves += 1
            fen = R.make_move(variant, fen, rng.choice(moves))
    assert n_moves > 500
