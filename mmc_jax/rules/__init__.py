"""The rules engine: every minichess variant as jit-compiled, vmappable array functions.

Batched core (leading batch axis B; a batch may mix variants; `jax.jit` them yourself):

    rules_b = batch("atomic", 64)               # Rules [B]
    state = init(rules_b)                       # State [B]
    mask = legal_action_mask(rules_b, state)    # bool [B, 1225]
    state = step(rules_b, state, actions)       # actions int32 [B]
    obs = observe(rules_b, state)               # float32 [B, 5, 5, C]

The single-game versions live in `mmc_jax.rules.game`. Python-facing helpers (FEN, UCI,
legal move lists, perft, fog FEN, rendering) take a variant spec (a registered name, a name
with overrides, or overrides alone: `"dark,capture=atomic"`, see rules.md "The rule space") and
raise `ValueError` on bad input, impossible positions included.

The rule space: `get(spec)`, `canonical(spec)`, `start_fen(spec)`, `check_variant(spec)`
(returns the canonical spelling), `sample_variants(seed, n, space, exclude, per)`.

Sensing variants (`fog=sense:W`, e.g. `recon`) have their own protocol and a wider action space
(1225 moves + pass + sense windows): they are played through `mmc_jax.rules.recon`. Here the
Python-facing helpers refuse them, and the batched functions treat their games as finished at
`init` (no legal action), so that no 1225-action consumer plays them on the true board.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax.rules import game, notation, recon
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD, GAMES, RECON, Game, game_for
from mmc_jax.rules.game import (
    BOARD_CHANNELS,
    DESCRIPTOR_CHANNELS,
    OBS_CHANNELS,
    OBS_LAYOUT,
    OBS_SHAPE,
    PLY_SCALE,
    State,
    mask_to_planes,
    pack_observation,
    state_bytes,
    unpack_observation,
)
from mmc_jax.rules.notation import parse_fen, render
from mmc_jax.rules.variants import (
    CAPTURE_RIFLE,
    COMPONENTS,
    FAIRY_STOCKFISH_NAMES,
    NAMED,
    REGISTERED,
    SAMPLING,
    SENSE_GOAL_FOGS,
    SENSE_VARIANTS,
    START_FENS,
    VARIANTS,
    Rules,
    Space,
    Variant,
    batch,
    canonical,
    check_variant,
    fairy_stockfish_name,
    get,
    has_fog,
    is_sense,
    parse,
    space_points,
    space_weights,
    stack,
    start_fen,
)

NUM_ACTIONS = T.NUM_ACTIONS

__all__ = [
    "BOARD",
    "GAMES",
    "RECON",
    "Game",
    "game_for",
    "BOARD_CHANNELS",
    "COMPONENTS",
    "DESCRIPTOR_CHANNELS",
    "NAMED",
    "REGISTERED",
    "SAMPLING",
    "SENSE_GOAL_FOGS",
    "SENSE_VARIANTS",
    "has_fog",
    "is_sense",
    "OBS_LAYOUT",
    "PLY_SCALE",
    "Space",
    "Variant",
    "canonical",
    "check_variant",
    "fairy_stockfish_name",
    "is_playable",
    "parse",
    "sample_variants",
    "space_points",
    "space_weights",
    "start_fen",
    "validate_position",
    "FAIRY_STOCKFISH_NAMES",
    "NUM_ACTIONS",
    "OBS_CHANNELS",
    "OBS_SHAPE",
    "START_FENS",
    "VARIANTS",
    "Rules",
    "State",
    "apply_move",
    "batch",
    "end_if_stuck",
    "fog_fen",
    "from_fen",
    "from_fens",
    "get",
    "init",
    "legal_action_mask",
    "legal_moves",
    "observe",
    "perft",
    "random_legal_action",
    "render",
    "render_state",
    "result",
    "stack",
    "start_position",
    "state_bytes",
    "step",
    "step_with_planes",
    "recon",
    "RECON_NUM_ACTIONS",
    "recon_batch",
    "recon_from_fen",
    "recon_init",
    "recon_legal_action_mask",
    "recon_observe",
    "recon_step",
    "recon_to_fen",
    "legal_planes",
    "planes_to_mask",
    "mask_to_planes",
    "pack_observation",
    "unpack_observation",
    "to_fen",
    "uci_to_action",
    "action_to_uci",
    "board_action_to_uci",
    "capturer_lands",
]


# The batched board game is the contract's BOARD (one implementation; the harness certifies it).
init = BOARD.init
start_position = BOARD.start_position
end_if_stuck = BOARD.end_if_stuck
step = BOARD.step
step_with_planes = BOARD.step_with_planes
legal_planes = BOARD.legal_planes
legal_action_mask = BOARD.legal_action_mask
observe = BOARD.observe
planes_to_mask = BOARD.planes_to_mask
capturer_lands = game.capturer_lands


def random_legal_action(key: jax.Array, legal_action_mask: jax.Array) -> jax.Array:
    """int32 [B]: a uniformly random legal action per game (0 where none is legal).

    Draws one random word per game and ranks the actions by a hash of (word, action): far
    cheaper on a CPU than 1225 random numbers per game, and every legal action is equally
    likely up to the quality of the 32-bit hash (tested by a frequency test).
    """
    batch_shape = legal_action_mask.shape[:-1]
    words = jax.random.bits(key, batch_shape, jnp.uint32)
    actions = jnp.arange(legal_action_mask.shape[-1], dtype=jnp.uint32)
    h = actions * jnp.uint32(0x9E3779B1) ^ words[..., None]
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    h = (h ^ (h >> 16)) | jnp.uint32(1)
    return jnp.argmax(jnp.where(legal_action_mask, h, 0), axis=-1).astype(jnp.int32)


# ----------------------------------------------------------------------------- sensing variants

RECON_NUM_ACTIONS = recon.NUM_ACTIONS
# The batched sensing game is the contract's RECON.
recon_init = RECON.init
recon_step = RECON.step
recon_legal_action_mask = RECON.legal_action_mask
recon_observe = RECON.observe


def recon_batch(
    variants: str | Variant | Sequence[str | Variant], batch_size: int | None = None
) -> Rules:
    """Batched `Rules` [B] of sensing variants (`batch` for `recon_*`); a variant without
    `fog=sense:W` is a ValueError."""
    specs = [variants] if isinstance(variants, (str, Variant)) else list(variants)
    for spec in specs:
        if not is_sense(spec):
            raise ValueError(
                f"{canonical(spec)} has no sensing (fog=sense:2 or sense:3); play it with "
                f"init/step, not recon_*"
            )
    return batch(specs, batch_size)


def recon_from_fen(fen: str) -> recon.ReconState:
    """An unbatched ReconState from a FEN: the sense phase of the side to move, no history."""
    position = parse_fen(fen)
    board = fen.split()[0]
    if position.pieces[T.PAWN] & (T.RANK_MASKS[0] | T.RANK_MASKS[4]):
        raise ValueError(f"impossible position {board!r}: a pawn stands on rank 1 or 5")
    return recon.from_position(
        np.asarray(position.pieces, np.uint32),
        np.uint32(position.own),
        position.turn,
        position.fullmove,
    )


def recon_to_fen(state: recon.ReconState) -> str:
    """FEN of the true board of an unbatched ReconState (half-move clock 0: no 50-move rule)."""
    s = jax.device_get(state)
    return notation.to_fen(s.pieces, s.own, int(s.turn), 0, s.fullmove)


# ----------------------------------------------------------------------------- FEN <-> State


_from_position = jax.jit(game.from_position)  # one small program, not a dozen eager ops


def from_fen(fen: str, variant: str | Variant | None = None) -> State:
    """An unbatched State from a FEN (no move history before it).

    With `variant`, the position is also checked to be possible in it (`validate_position`).
    """
    position = parse_fen(fen)
    if variant is not None:
        validate_position(variant, fen)
    return _from_position(
        np.asarray(position.pieces, np.uint32),
        np.uint32(position.own),
        position.turn,
        position.halfmove,
        position.fullmove,
    )


def from_fens(fens: Sequence[str], variant: str | Variant) -> State:
    """A batched State [N] of FENs, each checked as `from_fen(fen, variant)` checks it (the
    first impossible one raises the same ValueError), in chunks of one compiled program each:
    a dataset of 134k positions loads in seconds, not the minutes of one `from_fen` each."""
    name = canonical(variant)
    _refuse_sense(name)
    positions = [parse_fen(str(fen)) for fen in fens]
    if not positions:
        raise ValueError("from_fens needs at least one FEN")
    pieces = np.asarray([p.pieces for p in positions], np.uint32).reshape(len(positions), -1)
    own = np.asarray([p.own for p in positions], np.uint32)
    occ = np.bitwise_or.reduce(pieces, axis=1)
    # Which positions `_validate` could refuse (it is asked for those only, and raises).
    suspect = (pieces[:, T.PAWN] & np.uint32(T.RANK_MASKS[0] | T.RANK_MASKS[4])) != 0
    v = parse(name)
    if v.goal == "checkmate":
        kings = pieces[:, T.KING]
        missing = ((kings & own) == 0) | ((kings & occ & ~own) == 0)
        suspect |= missing
        if v.capture != "atomic" or not missing.all():
            (in_check,) = _chunked(_waiting_side_in_check_chunk, get(name), pieces, own)
            suspect |= in_check.astype(bool) & ~missing
    for i in np.flatnonzero(suspect):
        _validate(name, str(fens[i]).split()[0], positions[i].turn)
    columns = (
        pieces,
        own,
        np.asarray([p.turn for p in positions], np.int32),
        np.asarray([p.halfmove for p in positions], np.int32),
        np.asarray([p.fullmove for p in positions], np.int32),
    )
    leaves = _chunked(_from_positions_chunk, None, *columns)
    structure = jax.tree.structure(jax.eval_shape(game.from_position, *(c[0] for c in columns)))
    return jax.device_put(jax.tree.unflatten(structure, leaves))


def to_fen(state: State) -> str:
    """FEN of an unbatched State."""
    s = jax.device_get(state)
    return notation.to_fen(s.pieces, s.own, int(s.turn), s.halfmove, s.fullmove)


def render_state(state: State) -> str:
    """Unicode board of an unbatched State."""
    return render(to_fen(state))


# ----------------------------------------------------------------------------- compiled helpers


# The Python-facing helpers run positions through these in fixed-size chunks, so each is
# compiled once per process whatever the number of positions.
CHUNK = 256


@jax.jit
def _analyse_chunk(rules, pieces, own):
    a = jax.vmap(game.analyse, in_axes=(None, 0, 0))(rules, pieces, own)
    return a.planes, a.in_check


@jax.jit
def _children_chunk(rules, pieces, own, from_sq, to_sq, plane):
    def one(p, o, f, t, pl):
        new_pieces, new_own, _ = game._apply(rules, p, o, f, t, pl)
        occ = new_pieces[0] | new_pieces[1] | new_pieces[2] | new_pieces[3]
        occ = occ | new_pieces[4] | new_pieces[5]
        return game.mirror(new_pieces), game.mirror(occ & ~new_own)

    return jax.vmap(one)(pieces, own, from_sq, to_sq, plane)


@jax.jit
def _from_positions_chunk(rules, pieces, own, turn, halfmove, fullmove):
    del rules
    states = jax.vmap(game.from_position)(pieces, own, turn, halfmove, fullmove)
    return jax.tree.leaves(states)


@jax.jit
def _waiting_side_in_check_chunk(rules, pieces, own):
    """Whether the side not to move is in check, seen as if it were to move (`_validate`)."""

    def one(p, o):
        occ = p[0] | p[1] | p[2] | p[3] | p[4] | p[5]
        return game.analyse(rules, game.mirror(p), game.mirror(occ & ~o)).in_check

    return (jax.vmap(one)(pieces, own),)


def _chunked(fn, rules, *arrays):
    """Apply a jitted per-chunk function to arrays of any length [N, ...] (numpy out)."""
    n = len(arrays[0])
    outs = []
    for start in range(0, n, CHUNK):
        part = [x[start : start + CHUNK] for x in arrays]
        pad = CHUNK - len(part[0])
        part = [np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]) for x in part]
        outs.append([np.asarray(o)[: CHUNK - pad] for o in fn(rules, *part)])
    return [np.concatenate(parts) for parts in zip(*outs, strict=True)]


def analyse_positions(rules: Rules, pieces: np.ndarray, own: np.ndarray):
    """(planes uint32[N, 49], in_check bool[N]) for N positions in the mover's view."""
    pieces = np.asarray(pieces, np.uint32).reshape(-1, 6)
    own = np.asarray(own, np.uint32).reshape(-1)
    if len(own) == 0:
        return np.zeros((0, T.NUM_PLANES), np.uint32), np.zeros(0, bool)
    return tuple(_chunked(_analyse_chunk, rules, pieces, own))


def _analyse_one(rules, pieces, own):
    planes, in_check = analyse_positions(rules, np.asarray(pieces), np.asarray(own))
    return planes[0], in_check[0]


def _occupied(pieces) -> int:
    occ = 0
    for p in pieces:
        occ |= int(p)
    return occ


def _refuse_sense(name: str) -> None:
    if is_sense(name):
        raise ValueError(
            f"{name} is a sensing variant (fog={parse(name).fog}): its moves are requests "
            f"resolved on a hidden board; use mmc_jax.rules.recon"
        )


@functools.lru_cache(maxsize=65536)
def _validate(name: str, board: str, turn: int) -> None:
    _refuse_sense(name)
    v = parse(name)
    position = parse_fen(f"{board} {'wb'[turn]} - - 0 1")
    pieces, own = position.pieces, position.own
    occ = _occupied(pieces)
    colour = ("White", "Black") if turn == 0 else ("Black", "White")
    last_ranks = T.RANK_MASKS[0] | T.RANK_MASKS[4]
    if pieces[T.PAWN] & last_ranks:
        raise ValueError(
            f"impossible position {board!r}: a pawn stands on rank 1 or 5 (pawns promote on "
            f"their last rank and never stand on their first)"
        )
    if v.goal != "checkmate":
        return  # a missing king is a finished game there; there is no check
    for side, bits in ((colour[0], own), (colour[1], occ & ~own)):
        if not pieces[T.KING] & bits:
            if v.capture == "atomic":
                return  # an exploded king: the game is over
            raise ValueError(
                f"impossible position {board!r} in {name}: the {side} king is missing "
                f"(goal=checkmate without atomic captures needs both kings)"
            )
    # The side not to move, seen as if it were to move: may it be in check?
    mirrored = [notation.mirror_bits(p) for p in pieces]
    other_own = notation.mirror_bits(occ & ~own)
    _, in_check = _analyse_one(get(name), np.asarray(mirrored), np.uint32(other_own))
    if bool(in_check):
        raise ValueError(
            f"impossible position {board!r} in {name}: the side not to move ({colour[1]}) is "
            f"in check, so the side to move could capture its king"
        )


def validate_position(variant: str | Variant, fen: str) -> None:
    """Raise ValueError naming the problem when `fen` cannot arise in `variant`.

    Impossible are: a pawn on rank 1 or 5; with `goal=checkmate`, the side not to move in
    check, and a missing king unless captures are atomic. Under `goal=king` / `extinction` and
    atomic captures a missing king is a finished game.
    """
    position = parse_fen(fen)
    _validate(canonical(variant), fen.split()[0], position.turn)


def _position(variant: str | Variant, fen: str, validate: bool = True):
    name = canonical(variant)
    _refuse_sense(name)
    position = parse_fen(fen)
    if validate:
        _validate(name, fen.split()[0], position.turn)
    return get(name), position


def _uci(rules, position, action: int) -> str:
    rifle = int(rules.capture_mode) == CAPTURE_RIFLE
    return notation.action_to_uci(action, position.turn, position.pieces, position.own, rifle)


@functools.lru_cache(maxsize=65536)
def _legal_table(name: str, board: str, turn: int) -> tuple[dict[str, int], bool, bool]:
    """({UCI move: action id}, whether any move is legal, whether the mover is in check) of a
    position (board and turn: the legal moves do not depend on the move counters). Cached:
    a game replayed from FENs (an engine's, a UCI session's) asks the same position for its
    moves, each move's id and its result; callers never change the dict."""
    rules = get(name)
    position = parse_fen(f"{board} {'wb'[turn]} - - 0 1")
    planes, in_check = _analyse_one(
        rules, np.asarray(position.pieces, np.uint32), np.uint32(position.own)
    )
    mask = np.asarray(game.planes_to_mask(planes))
    table = {_uci(rules, position, int(a)): int(a) for a in np.flatnonzero(mask)}
    return table, bool(np.any(planes)), bool(in_check)


def _legal(variant: str | Variant, fen: str) -> tuple[dict[str, int], bool, bool]:
    name = canonical(variant)
    _, position = _position(name, fen)  # refuses a sensing variant, validates the position
    return _legal_table(name, fen.split()[0], position.turn)


def legal_moves(variant: str | Variant, fen: str) -> list[str]:
    """Legal moves of a position as sorted UCI strings (automatic draws are ignored)."""
    return sorted(_legal(variant, fen)[0])


def uci_to_action(variant: str | Variant, fen: str, move: str) -> int:
    """Action id of a legal UCI move; raises ValueError for malformed or illegal moves."""
    legal = _legal(variant, fen)[0]
    if move in legal:
        return legal[move]
    notation.uci_to_action(move, parse_fen(fen).turn)  # raises for malformed strings
    raise ValueError(
        f"illegal move {move!r} in {canonical(variant)} position {fen!r}; legal moves: "
        f"{', '.join(sorted(legal)) or 'none (the game is over)'}"
    )


def action_to_uci(variant: str | Variant, fen: str, action: int) -> str:
    """UCI string of an action id in a position."""
    rules, position = _position(variant, fen, validate=False)
    return _uci(rules, position, action)


def board_action_to_uci(variant: str | Variant, action: int, turn: int, pieces, own) -> str:
    """UCI string of an action id in a position given as mover's-view bitboards (`pieces` [6],
    `own`), spelled as `variant` spells it (a rifle capture names no promotion piece)."""
    rifle = parse(variant).capture == "rifle"
    return notation.action_to_uci(int(action), int(turn), pieces, own, rifle)


@jax.jit
def _step_one(rules, state, action):
    return game.step(rules, state, action)


def apply_move(variant: str | Variant, fen: str, move: str) -> str:
    """FEN after playing the UCI `move`; raises ValueError for an illegal or malformed move."""
    action = uci_to_action(variant, fen, move)
    rules = get(variant)
    return to_fen(_step_one(rules, from_fen(fen), jnp.int32(action)))


def result(variant: str | Variant, fen: str) -> str | None:
    """'1-0', '0-1' or '1/2-1/2' if the position is over by itself, else None.

    Covers checkmate, stalemate (no legal move), captured or exploded kings and extinction;
    the automatic draws that need history (50 moves, repetition, ply cap) are not applied.
    If both sides have lost (both kings gone), the side that just moved has lost.
    """
    rules, position = _position(variant, fen)
    pieces = position.pieces
    occ = _occupied(pieces)
    sides = {"to_move": position.own, "moved": occ & ~position.own}
    extinction = bool(rules.extinction)

    def missing(side_bits: int) -> bool:
        kinds = range(6) if extinction else [T.KING]
        return any(not pieces[k] & side_bits for k in kinds)

    to_move_wins = "1-0" if position.turn == 0 else "0-1"
    moved_wins = "0-1" if position.turn == 0 else "1-0"
    if missing(sides["moved"]):  # the side that just moved is checked first
        return to_move_wins
    if missing(sides["to_move"]):
        return moved_wins
    _, any_legal, in_check = _legal_table(canonical(variant), fen.split()[0], position.turn)
    if any_legal:
        return None
    return moved_wins if in_check else "1/2-1/2"


def fog_fen(variant: str | Variant, fen: str) -> str:
    """The FEN the side to move sees: `*` on every square it cannot see.

    Visible are its own pieces and the target squares of its legal moves; the format is that
    of `pyffish.get_fog_fen`. Works for every variant (it is the observation under fog=on).
    """
    rules, position = _position(variant, fen)
    pieces = jnp.asarray(position.pieces, jnp.uint32)
    planes, _ = _analyse_one(rules, pieces, jnp.uint32(position.own))
    seen = int(game.visible_squares(pieces, jnp.uint32(position.own), planes))
    if position.turn == 1:
        seen = notation.mirror_bits(seen)
    hidden = T.FULL & ~seen
    return notation.to_fen(
        position.pieces,
        position.own,
        position.turn,
        position.halfmove,
        position.fullmove,
        hidden=hidden,
    )


def perft(variant: str | Variant, fen: str, depth: int) -> int:
    """Number of legal move sequences of exactly `depth` plies (finished games: no children)."""
    rules, position = _position(variant, fen)
    if not isinstance(depth, int) or depth < 0:
        raise ValueError(f"perft depth must be a non-negative integer, got {depth!r}")
    if depth == 0:
        return 1
    pieces = np.asarray([position.pieces], np.uint32)
    own = np.asarray([position.own], np.uint32)
    squares = np.arange(T.NUM_SQUARES, dtype=np.uint32)
    for level in range(depth):
        planes, _ = analyse_positions(rules, pieces, own)
        if level == depth - 1:
            return int(np.unpackbits(planes.view(np.uint8)).sum())
        bits = (planes[:, None, :] >> squares[None, :, None]) & 1  # [n, 25, 49]
        idx, from_sq, plane = np.nonzero(bits)
        if len(idx) == 0:
            return 0
        to_sq = T.TO_SQUARE[from_sq, plane]
        pieces, own = _chunked(
            _children_chunk,
            rules,
            pieces[idx],
            own[idx],
            from_sq.astype(np.int32),
            to_sq.astype(np.int32),
            plane.astype(np.int32),
        )
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------- generator


@functools.lru_cache(maxsize=16384)
def is_playable(variant: str | Variant) -> bool:
    """Whether the side to move has a legal move in the variant's start position (always, for
    a sensing variant: a side may pass)."""
    name = canonical(variant)
    if is_sense(name):
        return True
    position = parse_fen(start_fen(name))
    planes, _ = _analyse_one(get(name), np.asarray(position.pieces), np.uint32(position.own))
    return bool(np.any(planes))


def _seed_of(key_or_seed) -> int:
    if isinstance(key_or_seed, (int, np.integer)) and not isinstance(key_or_seed, bool):
        return int(key_or_seed)
    try:
        bits = jax.random.bits(key_or_seed, (2,), jnp.uint32)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"sample_variants needs an integer seed or a jax.random key, got {key_or_seed!r}"
        ) from e
    hi, lo = (int(x) for x in np.asarray(bits))
    return (hi << 32) | lo


def sample_variants(
    key_or_seed,
    n: int,
    space: Space | None = None,
    exclude=(),
    per: str = "point",
) -> list[str]:
    """`n` distinct random playable variants of `space`, as canonical spellings.

    Draws without replacement from the valid points of `space` (default: `Space()`, the whole
    rule space less `colour=same`), skipping every point whose start position has no legal
    move and every point equal to one in `exclude` (any spellings). `per="point"`: uniformly
    over the points (almost every point of a space with "shuffle" starts has a shuffled
    start); `per="component"`: each declared start entry, capture, goal/fog pair and colour
    equally likely (`space_weights`), drawn successively without replacement. Deterministic
    for a seed (an int or a `jax.random` key). Raises ValueError if the space has fewer than
    `n` such points.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if isinstance(exclude, (str, Variant)):
        exclude = [exclude]
    excluded = {canonical(e) for e in exclude}
    weights = space_weights(space, per=per)
    points = [p for p in weights if p not in excluded]
    rng = np.random.default_rng(_seed_of(key_or_seed))
    if per == "point":
        order = rng.permutation(len(points))
    else:  # weighted sampling without replacement: the smallest Exp(1) / weight first
        mass = np.array([weights[p] for p in points])
        order = np.argsort(rng.exponential(size=len(points)) / mass, kind="stable")
    out: list[str] = []
    for i in order:
        if len(out) == n:
            break
        if is_playable(points[i]):
            out.append(points[i])
    if len(out) < n:
        raise ValueError(
            f"the space has only {len(out)} playable points outside `exclude`, {n} requested"
        )
    return out
