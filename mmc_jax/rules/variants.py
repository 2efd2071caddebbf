"""Every variant as one `Rules` value: data, not code; and the rule space it is a point of.

A variant is a combination of five rule components (rules.md, "The rule space"): `start`
(the start array), `capture` (normal, rifle, atomic), `goal` (checkmate, king, extinction),
`fog` (off, on, sense:2, sense:3) and `colour` (any, same, other). `fog=sense:W`
(reconnaissance-blind, e.g. `recon`) changes the game's protocol (a sense phase before every
move, moves as requests): such variants are played through `mmc_jax.rules.recon`. A variant
is spelled as a registered name, a name followed by overrides, or overrides alone on top of
gardner, e.g. `dark,capture=atomic` or `gardner,start=shuffle:17,colour=other`;
`canonical(spec)` gives the one canonical spelling.

A `Rules` pytree holds arrays only, so a batch may mix variants (`stack`) and one compiled
`step` serves them all. The game branches on these fields with `jnp.where`, never in Python.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import itertools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax.rules import tables as T

# Capture modes.
CAPTURE_NORMAL, CAPTURE_RIFLE, CAPTURE_ATOMIC = 0, 1, 2
# Goals.
GOAL_CHECKMATE, GOAL_KING, GOAL_EXTINCTION = 0, 1, 2
# Colour rules.
COLOUR_ANY, COLOUR_SAME, COLOUR_OTHER = 0, 1, 2

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
# Registered variants with `fog=sense:W` (rules.md, "Reconnaissance-blind minichess"): kept
# apart from VARIANTS, whose games are played through the 1225-action API.
SENSE_VARIANTS = ("recon",)
REGISTERED = VARIANTS + SENSE_VARIANTS

# Name in ../shared/fairy-variants.ini (or built in) of the variants Fairy-Stockfish expresses.
FAIRY_STOCKFISH_NAMES = {
    "gardner": "gardner",
    "baby": "babychess",
    "mallet": "mallett",
    "atomic": "atomic-gardner",
    "dark": "dark-gardner",
    "extinction": "extinction-gardner-qrbn",
}

# Fairy-Stockfish sections by (capture, goal); the start is given by the FEN, and fog does not
# change the legal moves. Colour rules, rifle captures and atomic without a royal king (goal
# king / extinction: Fairy-Stockfish's atomic king either may not step into attack or may
# capture) have no Fairy-Stockfish equivalent; the reference engine covers those.
FAIRY_STOCKFISH_RULES = {
    ("normal", "checkmate"): "gardner",
    ("normal", "king"): "dark-gardner",
    ("normal", "extinction"): "extinction-gardner-qrbn",
    ("atomic", "checkmate"): "atomic-gardner",
}

DEFAULT_MAX_PLIES = 256

# ----------------------------------------------------------------------------- the rule space

COMPONENTS = ("start", "capture", "goal", "fog", "colour")
CAPTURES = ("normal", "rifle", "atomic")
GOALS = ("checkmate", "king", "extinction")
FOGS = ("off", "on")  # the fog values of the 1225-action games
SENSE_FOGS = ("sense:2", "sense:3")  # reconnaissance-blind: `mmc_jax.rules.recon`
# Window side of each sensing fog value (0: no sensing).
SENSE_WINDOW = {"off": 0, "on": 0, "sense:2": 2, "sense:3": 3}
COLOURS = ("any", "same", "other")
GOAL_FOGS = (
    ("checkmate", "off"),
    ("king", "off"),
    ("king", "on"),
    ("extinction", "off"),
    ("extinction", "on"),
)
# Goal/fog pairs with sensing: valid, but out of the default task distribution (`Space`), whose
# games are played through the 1225-action API.
SENSE_GOAL_FOGS = (
    ("king", "sense:2"),
    ("king", "sense:3"),
    ("extinction", "sense:2"),
    ("extinction", "sense:3"),
)
NAMED_STARTS = {
    "gardner": "rnbqk/ppppp/5/PPPPP/RNBQK",
    "baby": "kqbnr/ppppp/5/PPPPP/RNBQK",
    "mallet": "rbkqb/ppppp/5/PPPPP/RNKQN",
}
NUM_SHUFFLES = 240
_PERMUTATIONS = tuple("".join(p) for p in itertools.permutations("KQRBN"))


def shuffle_board(n: int) -> str:
    """FEN board field of `start=shuffle:N` (0 <= N < 240), as rules.md defines it."""
    white = _PERMUTATIONS[n % 120]
    black = white.lower() if n < 120 else white[::-1].lower()
    return f"{black}/ppppp/5/PPPPP/{white}"


def _board_to_name() -> dict[str, str]:
    names = {}
    for n in range(NUM_SHUFFLES):
        names.setdefault(shuffle_board(n), f"shuffle:{n}")
    names.update({board: name for name, board in NAMED_STARTS.items()})
    return names


_START_NAME = _board_to_name()  # board field -> canonical start spelling


@dataclasses.dataclass(frozen=True)
class Variant:
    """One point of the rule space; `start` is its canonical start spelling.

    Build one with `parse(spec)`; `canonical(variant)` spells it.
    """

    start: str = "gardner"
    capture: str = "normal"
    goal: str = "checkmate"
    fog: str = "off"
    colour: str = "any"


NAMED = {
    "gardner": Variant(),
    "baby": Variant(start="baby"),
    "mallet": Variant(start="mallet"),
    "rifle": Variant(capture="rifle"),
    "atomic": Variant(capture="atomic"),
    "dark": Variant(goal="king", fog="on"),
    "extinction": Variant(goal="extinction"),
    "monochromatic": Variant(colour="same"),
    "bichromatic": Variant(colour="other"),
    "recon": Variant(goal="king", fog="sense:2"),
}
_NAME_OF = {v: k for k, v in NAMED.items()}
_VALUES = {"capture": CAPTURES, "goal": GOALS, "fog": FOGS + SENSE_FOGS, "colour": COLOURS}


def _board_counts(board: str) -> tuple[list[str], str]:
    """Validate a FEN board field as a start array; returns (25 squares rank 5 first, normal
    form). Raises ValueError naming the problem."""
    ranks = board.split("/")
    if len(ranks) != 5:
        raise ValueError(f"start={board!r}: a FEN board field needs 5 ranks, got {len(ranks)}")
    squares: list[str] = []
    for i, text in enumerate(ranks):
        row: list[str] = []
        for ch in text:
            if ch.isdigit():
                row += ["."] * int(ch)
            elif ch.lower() in T.PIECE_LETTERS:
                row.append(ch)
            else:
                raise ValueError(
                    f"start={board!r}: unknown piece {ch!r} (expected PNBRQK / pnbrqk or a digit)"
                )
        if len(row) != 5:
            raise ValueError(
                f"start={board!r}: rank {5 - i} ({text!r}) covers {len(row)} squares, expected 5"
            )
        squares += row
    for letter, colour in (("K", "White"), ("k", "Black")):
        kings = squares.count(letter)
        if kings != 1:
            raise ValueError(f"start={board!r}: needs exactly one {colour} king, has {kings}")
    if any(ch in "Pp" for ch in squares[:5] + squares[20:]):
        raise ValueError(f"start={board!r}: a pawn stands on rank 1 or 5")
    from mmc_jax.rules.notation import fen_board  # notation imports this module

    return squares, fen_board(squares[5 * r : 5 * r + 5] for r in range(5))


def _parse_start(value: str) -> str:
    """Canonical start spelling of a `start=` value; ValueError listing the valid values."""
    if value in NAMED_STARTS:
        return value
    if value.startswith("shuffle:"):
        number = value[len("shuffle:") :]
        if not number.isdigit() or not 0 <= int(number) < NUM_SHUFFLES:
            raise ValueError(f"start={value!r}: shuffle:N needs an integer 0 <= N < {NUM_SHUFFLES}")
        return _START_NAME[shuffle_board(int(number))]
    if "/" in value:
        _, board = _board_counts(value)
        return _START_NAME.get(board, board)
    raise ValueError(
        f"unknown start {value!r}; valid starts: {', '.join(NAMED_STARTS)}, "
        f"shuffle:N (0 <= N < {NUM_SHUFFLES}), or a FEN board field such as "
        f"'k4/ppppp/5/PPPPP/K4'"
    )


def start_board(start: str) -> str:
    """FEN board field of a canonical start spelling."""
    if start in NAMED_STARTS:
        return NAMED_STARTS[start]
    if start.startswith("shuffle:"):
        return shuffle_board(int(start.split(":")[1]))
    return start


def has_fog(spec: str | Variant) -> bool:
    """Whether a variant has dark's fog (`fog=on`): each side sees only its view."""
    return parse(spec).fog == "on"


def is_sense(spec: str | Variant) -> bool:
    """Whether a variant senses (`fog=sense:W`): its games use `mmc_jax.rules.recon`."""
    return SENSE_WINDOW[parse(spec).fog] > 0


def _check_constraints(v: Variant) -> None:
    if SENSE_WINDOW[v.fog] and v.goal == "checkmate":
        raise ValueError(
            f"fog={v.fog} needs goal=king or goal=extinction (there is no check when the "
            f"mover cannot see the attackers)"
        )
    if SENSE_WINDOW[v.fog] and v.capture == "atomic":
        raise ValueError(
            f"fog={v.fog} needs capture=normal or capture=rifle: an atomic blast removes "
            f"pieces of both sides that the players are never told about"
        )
    if v.fog == "on" and v.goal == "checkmate":
        raise ValueError(
            "fog=on needs goal=king or goal=extinction (with check rules the legal moves "
            "would reveal hidden attackers)"
        )
    if v.goal == "extinction":
        squares = start_board(v.start)
        board, _ = _board_counts(squares)
        for colour, letters in (("White", "PNBRQK"), ("Black", "pnbrqk")):
            missing = [ch for ch in letters if ch not in board]
            if missing:
                raise ValueError(
                    f"goal=extinction needs a start where each side has every piece type; "
                    f"{colour} has no {', '.join(missing)} in start={v.start}"
                )


@functools.lru_cache(maxsize=4096)
def _parse_str(spec: str) -> Variant:
    tokens = [t.strip() for t in spec.split(",")]
    if any(not t for t in tokens):
        raise ValueError(f"malformed variant {spec!r}: empty component between commas")
    base = Variant()
    given: dict[str, str] = {}
    for i, token in enumerate(tokens):
        if "=" not in token:
            if i > 0:
                raise ValueError(
                    f"malformed variant {spec!r}: a registered name ({token!r}) may come only "
                    f"first; components are given as key=value"
                )
            if token not in NAMED:
                close = difflib.get_close_matches(token, list(REGISTERED), n=1, cutoff=0.6)
                raise ValueError(
                    f"unknown variant {token!r}"
                    + (f" (did you mean {close[0]!r}?)" if close else "")
                    + f"; valid variants: {', '.join(REGISTERED)}, or "
                    f"components {', '.join(c + '=...' for c in COMPONENTS)}"
                )
            base = NAMED[token]
            continue
        key, value = (s.strip() for s in token.split("=", 1))
        if key not in COMPONENTS:
            raise ValueError(
                f"unknown component {key!r} in variant {spec!r}; valid components: "
                f"{', '.join(COMPONENTS)}"
            )
        if key in given:
            raise ValueError(f"component {key!r} given twice in variant {spec!r}")
        if key == "start":
            given[key] = _parse_start(value)
        elif value not in _VALUES[key]:
            raise ValueError(
                f"unknown {key} {value!r} in variant {spec!r}; valid values of {key}: "
                f"{', '.join(_VALUES[key])}"
            )
        else:
            given[key] = value
    variant = dataclasses.replace(base, **given)
    _check_constraints(variant)
    return variant


def parse(spec: str | Variant) -> Variant:
    """The `Variant` (rule-space point) of a spelling; ValueError naming what is wrong."""
    if isinstance(spec, Variant):
        _check_constraints(spec)
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"a variant must be a string, got {type(spec).__name__}")
    return _parse_str(spec)


def canonical(spec: str | Variant) -> str:
    """The canonical spelling: a registered name when the point is one, else the overrides on
    top of gardner in the order start, capture, goal, fog, colour (e.g.
    `start=shuffle:17,colour=other`)."""
    v = parse(spec)
    if v in _NAME_OF:
        return _NAME_OF[v]
    default = Variant()
    return ",".join(
        f"{c}={getattr(v, c)}" for c in COMPONENTS if getattr(v, c) != getattr(default, c)
    )


def check_variant(spec: str | Variant, *, sensing: bool = False) -> str:
    """Validate a spelling and return its canonical form (for CLIs, configs, PGN headers).

    A sensing variant (`fog=sense:W`, e.g. `recon`) is a ValueError unless `sensing`: it plays
    only through the recon engine (`mmc_jax.rules.recon_*`) so far, and everything that takes a
    variant outside it (training, matches, search, play, engines) plays the 1225-action games,
    where a sensing game would be over at its first move."""
    name = canonical(spec)
    if not sensing and SENSE_WINDOW[parse(name).fog]:
        raise ValueError(
            f"{name} is a sensing variant (fog=sense:W): only the recon engine "
            "(mmc_jax.rules.recon_*) plays it so far; training, matches and play do not"
        )
    return name


def start_fen(spec: str | Variant) -> str:
    """Start FEN of a variant (White to move)."""
    return f"{start_board(parse(spec).start)} w - - 0 1"


def fairy_stockfish_name(spec: str | Variant) -> str | None:
    """Fairy-Stockfish variant (from `fairy-variants.ini`) whose legal moves and results equal
    this variant's from any position given by FEN, or None when it cannot express it (a sensing
    variant's moves are requests: no Fairy-Stockfish variant has them)."""
    v = parse(spec)
    if v.colour != "any" or SENSE_WINDOW[v.fog]:
        return None
    return FAIRY_STOCKFISH_RULES.get((v.capture, v.goal))


# ----------------------------------------------------------------------------- Rules


@struct.dataclass(kw_only=True)
class Rules:
    """The rules of one variant (or, stacked, of a batch of games).

    Fields:
      variant_id: int32, index into `VARIANTS` of a named variant, -1 for a composed one.
      start_pieces: uint32[6] start position bitboards (P, N, B, R, Q, K), White's view.
      start_own: uint32, White's pieces at the start.
      check_based: bool, a move may not leave the mover's king attacked; no move in check loses
        (`goal=checkmate`).
      capture_mode: int32, `CAPTURE_NORMAL`, `CAPTURE_RIFLE` (capturer stays) or
        `CAPTURE_ATOMIC` (explosions).
      goal: int32, `GOAL_CHECKMATE`, `GOAL_KING` or `GOAL_EXTINCTION`.
      extinction: bool, a side left without one of the six piece types loses.
      fog: bool, observations show only what the mover can see (dark, `fog=on`).
      sense: int32, side of the sensing window (`fog=sense:W`: 2 or 3), 0 without sensing;
        such games are played through `mmc_jax.rules.recon`.
      colour: int32, `COLOUR_ANY`, `COLOUR_SAME` or `COLOUR_OTHER`.
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
    goal: jax.Array
    extinction: jax.Array
    fog: jax.Array
    sense: jax.Array
    colour: jax.Array
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


@functools.lru_cache(maxsize=1024)
def _make(name: str, max_plies: int) -> Rules:
    from mmc_jax.rules.notation import parse_fen  # notation imports this module

    v = parse(name)
    position = parse_fen(start_fen(v))
    if v.colour == "same":
        allowed = VECTOR_PARITY == 0
    elif v.colour == "other":
        allowed = VECTOR_PARITY == 1
    else:
        allowed = np.ones(T.NUM_VECTORS, bool)
    check_based = v.goal == "checkmate"
    atomic = v.capture == "atomic"
    # Concrete arrays even when the first call comes from inside a trace (e.g. `eval_shape`
    # over `batch`): the cache must never hold a tracer, which would leak into later calls.
    with jax.ensure_compile_time_eval():
        return Rules(
            variant_id=jnp.int32(VARIANTS.index(name) if name in VARIANTS else -1),
            start_pieces=jnp.asarray(position.pieces, jnp.uint32),
            start_own=jnp.uint32(position.own),
            check_based=jnp.bool_(check_based),
            capture_mode=jnp.int32(CAPTURES.index(v.capture)),
            goal=jnp.int32(GOALS.index(v.goal)),
            extinction=jnp.bool_(v.goal == "extinction"),
            fog=jnp.bool_(v.fog == "on"),
            sense=jnp.int32(SENSE_WINDOW[v.fog]),
            colour=jnp.int32(COLOURS.index(v.colour)),
            kk_draw=jnp.bool_(check_based or atomic),
            vector_allowed=jnp.asarray(allowed),
            max_plies=jnp.int32(max_plies),
        )


class _StartFens(dict):
    """{name: start FEN} of the named variants; any other spelling is looked up on demand
    (`START_FENS[spec] == start_fen(spec)`), so code written for names takes specs."""

    def __missing__(self, spec):
        return start_fen(spec)


START_FENS = _StartFens({name: start_fen(name) for name in VARIANTS})


def get(spec: str | Variant, *, max_plies: int = DEFAULT_MAX_PLIES) -> Rules:
    """The `Rules` of a variant spelling (unbatched). Raises ValueError for bad specs."""
    name = canonical(spec)
    if not isinstance(max_plies, int) or isinstance(max_plies, bool) or max_plies < 1:
        raise ValueError(f"max_plies must be a positive integer, got {max_plies!r}")
    return _make(name, max_plies)


def stack(rules: Sequence[Rules]) -> Rules:
    """Stack unbatched `Rules` into one with a leading batch axis [B].

    Built on the host from the distinct values (by identity) and gathered: `jnp.stack` of
    thousands of device arrays took minutes (one operand per game)."""
    if not rules:
        raise ValueError("stack() needs at least one Rules value")
    slot: dict[int, int] = {}
    distinct = []
    for r in rules:
        if id(r) not in slot:
            slot[id(r)] = len(distinct)
            distinct.append(r)
    index = np.asarray([slot[id(r)] for r in rules])
    host = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *distinct)
    return jax.tree.map(lambda x: jnp.asarray(x[index]), host)


def batch(
    variants: str | Variant | Rules | Sequence[str | Variant | Rules],
    batch_size: int | None = None,
) -> Rules:
    """Batched `Rules` [B].

    `batch("atomic", 64)` repeats one variant; `batch(["gardner", "dark,capture=atomic", ...])`
    gives one game per entry (a mixed batch); with `batch_size` the list is tiled cyclically to
    that size. Entries are variant spellings or `Rules` values.
    """
    if isinstance(variants, (str, Variant, Rules)):
        variants = [variants]
    items = [v if isinstance(v, Rules) else get(v) for v in variants]
    if batch_size is not None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        items = [items[i % len(items)] for i in range(batch_size)]
    return stack(items)


# ----------------------------------------------------------------------------- generator


@dataclasses.dataclass(frozen=True)
class Space:
    """A declared region of the rule space for `sample_variants`.

    starts: start spellings; `"shuffle"` stands for all 240 shuffles (duplicates of named
      arrays count once).
    captures: capture values. goal_fogs: (goal, fog) pairs (`GOAL_FOGS`, or the sensing pairs
      `SENSE_GOAL_FOGS`, which only a space declaring them holds). colours: colour values.
    The default is the whole space of the 1225-action games less `colour=same` (whose
    gardner-like starts have no move).
    """

    starts: tuple[str, ...] = ("gardner", "baby", "mallet", "shuffle")
    captures: tuple[str, ...] = CAPTURES
    goal_fogs: tuple[tuple[str, str], ...] = GOAL_FOGS
    colours: tuple[str, ...] = ("any", "other")


def _start_families(space: Space) -> list[list[str]]:
    """The start names of each entry of `space.starts` ("shuffle": all 240, named arrays once)."""
    families = []
    for s in space.starts:
        if s == "shuffle":
            names = [_START_NAME[shuffle_board(n)] for n in range(NUM_SHUFFLES)]
            families.append(list(dict.fromkeys(names)))
        else:
            families.append([_parse_start(s)])
    return families


def space_points(space: Space | None = None) -> list[str]:
    """Canonical spellings of every valid point of `space` (sorted, without duplicates).

    Playability (a legal move from the start) is not checked here.
    """
    return sorted(space_weights(space, per="point"))


SAMPLING = ("point", "component")


def space_weights(space: Space | None = None, per: str = "point") -> dict[str, float]:
    """{canonical point: probability} of one draw from `space` (valid points only, sorted).

    per="point": uniform over the valid points, so with "shuffle" among the starts about 238
      of every 241 points have a shuffled start.
    per="component": each entry of `space.starts` ("shuffle" is one entry), each capture, each
      goal/fog pair and each colour equally likely, drawn independently; the mass of invalid
      combinations is spread over the valid ones (rejection). A point reached two ways (the
      gardner array is also `shuffle:71`) adds both.
    """
    if per not in SAMPLING:
        raise ValueError(f"unknown sampling {per!r}; one of {SAMPLING}")
    space = Space() if space is None else space
    families = _start_families(space)
    for c in space.captures:
        if c not in CAPTURES:
            raise ValueError(f"unknown capture {c!r}; valid values of capture: {CAPTURES}")
    for gf in space.goal_fogs:
        if tuple(gf) not in GOAL_FOGS + SENSE_GOAL_FOGS:
            raise ValueError(
                f"unknown goal/fog pair {gf!r}; valid pairs: {GOAL_FOGS + SENSE_GOAL_FOGS}"
            )
    for c in space.colours:
        if c not in COLOURS:
            raise ValueError(f"unknown colour {c!r}; valid values of colour: {COLOURS}")
    weights: dict[str, float] = {}
    for members in (
        families if per == "component" else [list(dict.fromkeys(s for f in families for s in f))]
    ):
        for start, capture, (goal, fog), colour in itertools.product(
            members, space.captures, space.goal_fogs, space.colours
        ):
            v = Variant(start, capture, goal, fog, colour)
            try:
                _check_constraints(v)
            except ValueError:
                continue
            point = canonical(v)
            if per == "point":
                weights[point] = 1.0
            else:
                weights[point] = weights.get(point, 0.0) + 1.0 / len(members)
    total = sum(weights.values())
    return {p: weights[p] / total for p in sorted(weights)}
