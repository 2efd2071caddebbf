"""The rules are symmetric under the file mirror (a<->e): no castling, pawn double step or en
passant exists in any variant (rules.md), so the mirrored position has the mirrored legal moves
and the same result. The action-value labels (mmc_jax/uci/labels.py) store each position with its
mirror on this ground."""

import numpy as np
import pytest
from rules_support import VARIANTS

from mmc_jax import rules as R
from mmc_jax.uci import labels

MIRRORABLE = VARIANTS  # (no sensing variant: its moves are requests, not board moves)


def test_mirror_is_an_involution_on_boards_and_moves():
    fen = "rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 1"
    assert labels.mirror_fen(fen) == "kqbnr/ppppp/5/PPPPP/KQBNR w - - 0 1"
    for board in ("r3k/1p2p/5/P1N2/4K", "2k2/5/5/5/K4", "5/5/5/5/5"):
        assert labels.mirror_board(labels.mirror_board(board)) == board
    assert labels.mirror_move("a4a5q") == "e4e5q" and labels.mirror_move("b1c3") == "d1c3"


@pytest.mark.parametrize("variant", MIRRORABLE)
def test_the_mirrored_position_has_the_mirrored_moves_and_result(rollout, variant):
    rows = [i for i, v in enumerate(rollout.variants) if v == variant]
    fens = sorted({rollout.pre_fens[t][i] for t in range(len(rollout.plies)) for i in rows})
    rng = np.random.default_rng(0)
    checked = 0
    for fen in rng.permutation(fens)[:40]:
        mirrored = labels.mirror_fen(str(fen))
        moves = R.legal_moves(variant, str(fen))
        assert sorted(R.legal_moves(variant, mirrored)) == sorted(
            labels.mirror_move(m) for m in moves
        ), fen
        assert R.result(variant, mirrored) == R.result(variant, str(fen)), fen
        checked += 1
    assert checked >= 10
