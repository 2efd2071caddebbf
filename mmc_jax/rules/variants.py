"""Every variant as one `Rules` value: data, not code.

A `Rules` pytree holds arrays only, so a batch may mix variants (`stack`) and one compiled
`step` serves them all. The game branches on these fields with `jnp.where`, never in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax.rules import tables as T

# Capture modes.
CAPTURE_NORMAL, CAPTURE_RIFLE, CAPTURE_ATOMIC = 0, 1, 2

GARDNER_FEN = "rnbqk/ppppp/5/PPPPP/RNBQK w - - 0 1"

VARIANTS = (
    "gardner",
    "baby",
    "mallet",
    "rifle",
    "atomic",
    "dark",
    "extinction",
    "monochromatic",
    "bichromatic",
)

# Name in ../shared/fairy-variants.ini (or built in) of the variants Fairy-Stockfish expresses.
FAIRY_STOCKFISH_NAMES = {
    "gardner": "gardner",
    "baby": "babychess",
    "mallet": "mallett",
    "atomic": "atomic-gardner",
    "dark": "dark-gardner",
    "extinction": "extinction-gardner-qrbn",
}

DEFAULT_MAX_PLIES = 256


@struct.dataclass(kw_only=True)
class Rules:
    """The rules of one variant (or, stacked, of a batch of games).

    Fields:
      variant_id: int32, index into `VARIANTS`.
      start_pieces: uint32[6] start position bitboards (P, N, B, R, Q, K), White's view.
      start_own: uint32, White's pieces at the start.
      check_based: bool, a move may not leave the mover's king attacked; no move in check loses.
      capture_mode: int32, `CAPTURE_NORMAL`, `CAPTURE_RIFLE` (capturer stays) or
        `CAPTURE_ATOMIC` (explosions).
      extinction: bool, a side left without one of the six piece types loses.
      fog: bool, observations show only what the mover can see (dark).
      kk_draw: bool, K vs K is a draw.
      vector_allowed: bool[40], which move vectors (32 queen-like direction x distance, then
        8 knight jumps) pieces may use; colour rules forbid some of them.
      max_plies: int32, ply cap after which the game is a draw by rule.
    """

    variant_id: jax.Array
    start_pieces: jax.Array
    start_own: jax.Array
    check_based: jax.Array
    capture_mode: jax.Array
    extinction: jax.Array
    fog: jax.Array
    kk_draw: jax.Array
    vector_allowed: jax.Array
    max_plies: jax.Array


def _vector_parities() -> np.ndarray:
    """[40] parity of each move vector: 0 keeps the square colour, 1 changes it."""
    parity = np.zeros(T.NUM_VECTORS, np.int32)
    for d, (df, dr) in enumerate(T.DIRECTIONS):
        for n in range(1, 5):
            parity[T.vector_index(d, n)] = (df * n + dr * n) % 2
    for k, (df, dr) in enumerate(T.KNIGHT_VECTORS):
        parity[32 + k] = (df + dr) % 2
    return parity


VECTOR_PARITY = _vector_parities()


def _make(name: str, start_fen: str, **fields) -> Rules:
    from mmc_jax.rules.notation import parse_fen  # notation imports this module

    position = parse_fen(start_fen)
    colour_rule = fields.pop("colour_rule", "any")
    if colour_rule == "same":
        allowed = VECTOR_PARITY == 0
    elif colour_rule == "other":
        allowed = VECTOR_PARITY == 1
    else:
        allowed = np.ones(T.NUM_VECTORS, bool)
    check_based = fields.get("check_based", True)
    return Rules(
        variant_id=jnp.int32(VARIANTS.index(name)),
        start_pieces=jnp.asarray(position.pieces, jnp.uint32),
        start_own=jnp.uint32(position.own),
        check_based=jnp.bool_(check_based),
        capture_mode=jnp.int32(fields.get("capture_mode", CAPTURE_NORMAL)),
        extinction=jnp.bool_(fields.get("extinction", False)),
        fog=jnp.bool_(fields.get("fog", False)),
        kk_draw=jnp.bool_(check_based),
        vector_allowed=jnp.asarray(allowed),
        max_plies=jnp.int32(fields.get("max_plies", DEFAULT_MAX_PLIES)),
    )


_SPECS = {
    "gardner": dict(start_fen=GARDNER_FEN),
    "baby": dict(start_fen="kqbnr/ppppp/5/PPPPP/RNBQK w - - 0 1"),
    "mallet": dict(start_fen="rbkqb/ppppp/5/PPPPP/RNKQN w - - 0 1"),
    "rifle": dict(start_fen=GARDNER_FEN, capture_mode=CAPTURE_RIFLE),
    "atomic": dict(start_fen=GARDNER_FEN, capture_mode=CAPTURE_ATOMIC),
    "dark": dict(start_fen=GARDNER_FEN, check_based=False, fog=True),
    "extinction": dict(start_fen=GARDNER_FEN, check_based=False, extinction=True),
    "monochromatic": dict(start_fen=GARDNER_FEN, colour_rule="same"),
    "bichromatic": dict(start_fen=GARDNER_FEN, colour_rule="other"),
}

START_FENS = {name: spec["start_fen"] for name, spec in _SPECS.items()}


def check_variant(name: str) -> str:
    """Return `name` if it is a registered variant, else raise a ValueError listing them."""
    if not isinstance(name, str) or name not in _SPECS:
        raise ValueError(f"unknown variant {name!r}; valid variants: {', '.join(VARIANTS)}")
    return name


def get(name: str, *, max_plies: int = DEFAULT_MAX_PLIES) -> Rules:
    """The `Rules` of variant `name` (unbatched). Raises ValueError for unknown names."""
    check_variant(name)
    if not isinstance(max_plies, int) or max_plies < 1:
        raise ValueError(f"max_plies must be a positive integer, got {max_plies!r}")
    spec = dict(_SPECS[name])
    return _make(name, spec.pop("start_fen"), max_plies=max_plies, **spec)


def stack(rules: Sequence[Rules]) -> Rules:
    """Stack unbatched `Rules` into one with a leading batch axis [B]."""
    if not rules:
        raise ValueError("stack() needs at least one Rules value")
    return jax.tree.map(lambda *xs: jnp.stack(xs), *rules)


def batch(variants: str | Rules | Sequence[str | Rules], batch_size: int | None = None) -> Rules:
    """Batched `Rules` [B].

    `batch("atomic", 64)` repeats one variant; `batch(["gardner", "dark", ...])` gives one game
    per entry (a mixed batch); with `batch_size` the list is tiled cyclically to that size.
    """
    if isinstance(variants, (str, Rules)):
        variants = [variants]
    items = [get(v) if isinstance(v, str) else v for v in variants]
    if batch_size is not None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        items = [items[i % len(items)] for i in range(batch_size)]
    return stack(items)
