"""Precomputed tables for 5x5 bitboards and the 1225-action encoding.

Squares are numbered as in pgx `gardner_chess`: `square = 5 * file + rank` with a=0 and
rank 1=0, always from the point of view of the side to move (Black's board is mirrored
rank-wise). A bitboard is a `uint32` whose bit `square` is set when the square is occupied.

Actions: `action = 49 * from_square + plane`.

- planes 0-8: under-promotions, piece `[R, B, N][plane // 3]`, direction `plane % 3`
  (forward, capture toward the e-file, capture toward the a-file);
- planes 9-40: queen-like moves, 8 directions x distance 1-4 (order below, as pgx);
- planes 41-48: knight moves.

Everything here is plain numpy computed once at import; the jitted code closes over it.
"""

from __future__ import annotations

import numpy as np

NUM_SQUARES = 25
NUM_PLANES = 49
NUM_ACTIONS = NUM_SQUARES * NUM_PLANES
FULL = (1 << NUM_SQUARES) - 1

# Piece types (index into State.pieces).
PAWN, KNIGHT, BISHOP, ROOK, QUEEN, KING = range(6)
PIECE_LETTERS = "pnbrqk"


def _promotion_piece() -> np.ndarray:
    """[49] the piece a pawn reaching the last rank becomes, by plane: planes 0-8 under-promote
    (R, B, N by thirds), every other pawn move onto the last rank makes a queen."""
    plane = np.arange(NUM_PLANES)
    return np.where(plane < 9, np.array([ROOK, BISHOP, KNIGHT])[np.minimum(plane, 8) // 3], QUEEN)


PROMOTION_PIECE = _promotion_piece().astype(np.int32)

# The 8 queen directions as (dfile, drank), in the order of pgx planes 9-40.
# pgx lists each direction's distances either 4..1 or 1..4; DIRECTION_REVERSED records which.
DIRECTIONS = (
    (0, -1),  # south
    (0, 1),  # north
    (-1, 0),  # west
    (1, 0),  # east
    (-1, -1),  # south-west
    (1, 1),  # north-east
    (-1, 1),  # north-west
    (1, -1),  # south-east
)
DIRECTION_REVERSED = (True, False, True, False, True, False, True, False)
ORTHOGONAL = (True, True, True, True, False, False, False, False)
# Index of the opposite direction.
OPPOSITE = (1, 0, 3, 2, 5, 4, 7, 6)
KNIGHT_VECTORS = ((-2, -1), (-2, 1), (-1, -2), (-1, 2), (2, -1), (2, 1), (1, -2), (1, 2))
# Pawn move directions in the mover's frame: forward, toward the e-file, toward the a-file.
PAWN_DIRECTIONS = (1, 5, 6)  # north, north-east, north-west (indices into DIRECTIONS)

# Move "vectors" that colour rules may forbid: 32 queen-like (direction, distance) + 8 knight.
NUM_VECTORS = 40


def vector_index(direction: int, distance: int) -> int:
    """Index of the queen-like vector `direction` x `distance` (1-4) among the 40 vectors."""
    return 4 * direction + distance - 1


def _plane_vectors() -> np.ndarray:
    """[49, 2] (dfile, drank) of every plane; under-promotions use their pawn direction."""
    vectors = np.zeros((NUM_PLANES, 2), np.int32)
    for plane in range(9):
        vectors[plane] = DIRECTIONS[PAWN_DIRECTIONS[plane % 3]]
    for d, (df, dr) in enumerate(DIRECTIONS):
        distances = (4, 3, 2, 1) if DIRECTION_REVERSED[d] else (1, 2, 3, 4)
        for k, n in enumerate(distances):
            vectors[9 + 4 * d + k] = (df * n, dr * n)
    for k, v in enumerate(KNIGHT_VECTORS):
        vectors[41 + k] = v
    return vectors


PLANE_VECTORS = _plane_vectors()


def _plane_vector_index() -> np.ndarray:
    """[49] index into the 40 vectors of each plane's move vector."""
    index = np.zeros(NUM_PLANES, np.int32)
    for plane in range(9):
        index[plane] = vector_index(PAWN_DIRECTIONS[plane % 3], 1)
    for d in range(8):
        distances = (4, 3, 2, 1) if DIRECTION_REVERSED[d] else (1, 2, 3, 4)
        for k, n in enumerate(distances):
            index[9 + 4 * d + k] = vector_index(d, n)
    index[41:] = 32 + np.arange(8)
    return index


PLANE_VECTOR_INDEX = _plane_vector_index()
# Plane of each queen-like vector (direction, distance) and knight vector.
VECTOR_PLANE = np.zeros(NUM_VECTORS, np.int32)
for _plane in range(9, NUM_PLANES):
    VECTOR_PLANE[PLANE_VECTOR_INDEX[_plane]] = _plane


def square(file: int, rank: int) -> int:
    return 5 * file + rank


def _to_table() -> np.ndarray:
    """[25, 49] destination square of every action, -1 when it leaves the board."""
    to = -np.ones((NUM_SQUARES, NUM_PLANES), np.int32)
    for sq in range(NUM_SQUARES):
        f, r = divmod(sq, 5)
        for plane in range(NUM_PLANES):
            df, dr = PLANE_VECTORS[plane]
            nf, nr = f + df, r + dr
            if plane < 9 and r != 3:
                continue  # under-promotions only from the 7th rank (rank index 3)
            if 0 <= nf < 5 and 0 <= nr < 5:
                to[sq, plane] = square(nf, nr)
    return to


TO_SQUARE = _to_table()


def _rank_mask(rank: int) -> int:
    return sum(1 << square(f, rank) for f in range(5))


def _file_mask(file: int) -> int:
    return sum(1 << square(file, r) for r in range(5))


RANK_MASKS = tuple(_rank_mask(r) for r in range(5))
FILE_MASKS = tuple(_file_mask(f) for f in range(5))
DARK_SQUARES = sum(1 << square(f, r) for f in range(5) for r in range(5) if (f + r) % 2 == 0)


def shift_params(df: int, dr: int) -> tuple[int, int]:
    """Bit shift and destination mask that move every square by (df, dr) on the board."""
    amount = 5 * df + dr
    mask = FULL
    for r in range(5):
        if not 0 <= r - dr < 5:
            mask &= ~RANK_MASKS[r]
    for f in range(5):
        if not 0 <= f - df < 5:
            mask &= ~FILE_MASKS[f]
    return amount, mask


def neighbours(sq: int) -> int:
    f, r = divmod(sq, 5)
    bits = 0
    for df in (-1, 0, 1):
        for dr in (-1, 0, 1):
            if (df or dr) and 0 <= f + df < 5 and 0 <= r + dr < 5:
                bits |= 1 << square(f + df, r + dr)
    return bits


NEIGHBOURS = np.array([neighbours(s) for s in range(NUM_SQUARES)], np.uint32)
SQUARE_BITS = np.array([1 << s for s in range(NUM_SQUARES)], np.uint32)


def _source_bits() -> np.ndarray:
    """[40, 25] bit of the square `t - vector` for each vector and destination `t` (0 if off)."""
    bits = np.zeros((NUM_VECTORS, NUM_SQUARES), np.uint32)
    vectors = [(df * n, dr * n) for (df, dr) in DIRECTIONS for n in range(1, 5)]
    vectors += list(KNIGHT_VECTORS)
    for v, (df, dr) in enumerate(vectors):
        for t in range(NUM_SQUARES):
            f, r = divmod(t, 5)
            if 0 <= f - df < 5 and 0 <= r - dr < 5:
                bits[v, t] = 1 << square(f - df, r - dr)
    return bits


SOURCE_BITS = _source_bits()
