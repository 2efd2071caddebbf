"""The rules tests' engine and oracles: helpers and session fixtures (a pytest plugin, loaded by
tests/conftest.py; test files import the helpers from here).

Compile time dominates on a small CPU, so every test that runs the jitted batched engine goes
through ONE compiled function, `Engine.ply` (legal mask + random or forced action + step +
observe + auto-reset, batch size `B`), wrapped in `chex.assert_max_traces(n=1)`: a call with
another shape or dtype fails loudly instead of silently compiling a second time. Oracle data
(Fairy-Stockfish random games, reference-engine positions, a mixed-variant rollout of the
jitted engine) is computed once per session and cached.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_engine as REF

from mmc_jax import rules as R
from mmc_jax.rules import notation

B = 72  # batch size of every call of the compiled engine (8 games of each of the 9 variants)
VARIANTS = R.VARIANTS
FSF_VARIANTS = tuple(R.FAIRY_STOCKFISH_NAMES)
INI_PATH = Path(R.__file__).resolve().parents[1] / "data" / "fairy-variants.ini"
CHECK_BASED = ("gardner", "baby", "mallet", "rifle", "atomic", "monochromatic", "bichromatic")

# Monochromatic has no legal move from the Gardner start; this position (two pawns per side
# removed) gives it a playable game for random play.
MONO_PLAYABLE = "rnbqk/1p1p1/5/1P1P1/RNBQK w - - 0 1"


# The fast tier compares a sample of an oracle's positions (every SAMPLE_EVERY-th), the slow
# tier the others: together every position, once (`TIERS`, `tier_part`).
SAMPLE_EVERY = 4
TIERS = [pytest.param("sample"), pytest.param("rest", marks=pytest.mark.slow)]


def tier_part(items, tier: str) -> list:
    """The items a tier compares: every SAMPLE_EVERY-th for "sample", the others for "rest"."""
    return [x for i, x in enumerate(items) if (i % SAMPLE_EVERY == 0) == (tier == "sample")]


def playable_start(variant: str) -> str:
    """Start FEN for random play (the Gardner start is a dead draw in monochromatic)."""
    return MONO_PLAYABLE if variant == "monochromatic" else R.START_FENS[variant]


# --------------------------------------------------------------------------------- FEN helpers


def board_of(fen: str) -> dict[str, str]:
    """{'a1': 'R', ...} of the occupied squares of a FEN ('*' squares included)."""
    out = {}
    for i, row in enumerate(fen.split()[0].split("/")):
        file = 0
        for ch in row:
            if ch.isdigit():
                file += int(ch)
            else:
                out[f"{'abcde'[file]}{5 - i}"] = ch
                file += 1
    return out


def is_capture(fen: str, move: str) -> bool:
    return move[2:4] in board_of(fen)


def flip_fen(fen: str) -> str:
    """The colour-mirrored position: ranks reversed, colours and side to move swapped."""
    board, side, *rest = fen.split()
    rows = [row.swapcase() for row in reversed(board.split("/"))]
    return " ".join(["/".join(rows), "b" if side == "w" else "w", *rest])


def flip_move(move: str) -> str:
    return f"{move[0]}{6 - int(move[1])}{move[2]}{6 - int(move[3])}{move[4:]}"


# --------------------------------------------------------------------------------- the engine


class Ply(NamedTuple):
    """One batched ply of the compiled engine (numpy after `Engine.play`)."""

    mask: np.ndarray  # bool [B, 1225] legal actions of the input state
    action: np.ndarray  # int32 [B] action played
    after: R.State  # State [B] after the action (terminal games not reset)
    reset: R.State  # State [B] after the action, finished games replaced by `reset_state`
    obs: np.ndarray  # float32 [B, 5, 5, C] observation of the input state


def _ply(rules, state, key, forced, use_forced, reset_state):
    mask = R.legal_action_mask(rules, state)
    action = jnp.where(use_forced, forced, R.random_legal_action(key, mask))
    after = R.step(rules, state, action)
    obs = R.observe(rules, state)

    def pick(a, b):
        cond = after.terminated.reshape(after.terminated.shape + (1,) * (a.ndim - 1))
        return jnp.where(cond, b, a)

    reset = jax.tree.map(pick, after, reset_state)
    return Ply(mask, action, after, reset, obs)


_DTYPES = dict(
    pieces=np.uint32,
    own=np.uint32,
    turn=np.int32,
    halfmove=np.int32,
    fullmove=np.int32,
    ply=np.int32,
    terminated=np.bool_,
    rewards=np.float32,
    hash_history=np.uint32,
)


def canonical(state: R.State) -> R.State:
    """Numpy copy of a State with the dtypes of `R.init` (so that the trace is reused)."""
    return R.State(**{k: np.asarray(getattr(state, k), dtype) for k, dtype in _DTYPES.items()})


def stack_states(states) -> R.State:
    return canonical(jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *states))


def row(state: R.State, i: int) -> R.State:
    return jax.tree.map(lambda x: x[i], state)


@functools.lru_cache(maxsize=20000)
def state_of(fen: str) -> R.State:
    """Canonical numpy State of a FEN (cached: building one runs a few eager JAX ops)."""
    return canonical(R.from_fen(fen))


def fen_of(state: R.State, i: int | None = None) -> str:
    """FEN of game `i` of a batched (numpy) State, or of an unbatched one."""
    s = state if i is None else row(state, i)
    return notation.to_fen(s.pieces, s.own, int(s.turn), int(s.halfmove), int(s.fullmove))


class Engine:
    """The compiled batched engine at batch size `B`, plus helpers around it."""

    def __init__(self):
        self.ply = jax.jit(chex.assert_max_traces(_ply, n=1))
        self._key = jax.random.key(0)

    @staticmethod
    @functools.cache
    def rules_of(variant: str, max_plies: int = 256) -> R.Rules:
        return R.get(variant, max_plies=max_plies)

    def rules(self, variants, max_plies: int = 256) -> R.Rules:
        """Rules [B] for a list of variant names (tiled cyclically to B)."""
        variants = [variants[i % len(variants)] for i in range(B)]
        return R.stack([self.rules_of(v, max_plies) for v in variants])

    def states(self, fens) -> R.State:
        """State [B] from a list of FENs (tiled cyclically to B)."""
        return stack_states([state_of(fens[i % len(fens)]) for i in range(B)])

    def play(self, rules, state, seed: int = 0, forced=None, reset_state=None) -> Ply:
        """One ply for all B games: random legal actions, or `forced` ones (int [B]) where
        given (`forced` may hold None entries for random ones). Returns numpy."""
        use_forced = np.zeros(B, bool)
        actions = np.zeros(B, np.int32)
        if forced is not None:
            for i, a in enumerate(forced):
                if a is not None:
                    use_forced[i] = True
                    actions[i] = a
        state = canonical(state)
        reset_state = state if reset_state is None else canonical(reset_state)
        key = jax.random.fold_in(self._key, seed)
        return jax.device_get(
            self.ply(rules, state, key, jnp.asarray(actions), jnp.asarray(use_forced), reset_state)
        )

    def analyse(self, variants, fens) -> tuple[np.ndarray, np.ndarray]:
        """(legal mask bool [N, 1225], observation [N, 5, 5, C]) of N (variant, FEN) pairs."""
        masks, obs = [], []
        for start in range(0, len(fens), B):
            chunk_v = list(variants[start : start + B])
            chunk_f = list(fens[start : start + B])
            out = self.play(self.rules(chunk_v), self.states(chunk_f))
            masks.append(out.mask[: len(chunk_f)])
            obs.append(out.obs[: len(chunk_f)])
        return np.concatenate(masks), np.concatenate(obs)


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine()


# --------------------------------------------------------------------------------- observations


def obs_board(obs: np.ndarray, turn: int) -> str:
    """FEN board field drawn from one observation [5, 5, C]: '*' where the hidden channel is
    set, own pieces from channels 0-5, the opponent's from 6-11 (the format of fog FENs)."""
    rows = []
    for rank in range(4, -1, -1):
        r = rank if turn == 0 else 4 - rank  # observations are in the mover's view
        row_text, empty = "", 0
        for file in range(5):
            cell = obs[r, file]
            on = [c for c in range(13) if cell[c] > 0.5]
            assert len(on) <= 1, f"square {'abcde'[file]}{rank + 1}: channels {on} all set"
            if not on:
                empty += 1
                continue
            if empty:
                row_text += str(empty)
                empty = 0
            c = on[0]
            if c == 12:
                row_text += "*"
            else:
                letter = "PNBRQK"[c % 6]
                white = (c < 6) == (turn == 0)
                row_text += letter if white else letter.lower()
        rows.append(row_text + (str(empty) if empty else ""))
    return "/".join(rows)


def descriptor_planes(variant) -> np.ndarray:
    """[5, 5, 10] rules-descriptor channels (17-26) expected for a variant spelling, built from
    the reference engine's parser: capture, goal one-hots, fog, colour one-hot."""
    rs = REF.rule_set(variant)
    flat = [rs.capture == c for c in ("normal", "rifle", "atomic")]
    flat += [rs.goal == g for g in ("checkmate", "king", "extinction")]
    flat += [rs.fog == "on"]
    flat += [rs.colour == c for c in ("any", "same", "other")]
    return np.broadcast_to(np.asarray(flat, np.float32), (5, 5, len(flat)))


# --------------------------------------------------------------------------------- random play


def random_placement(rng: random.Random, variant: str) -> str:
    """A random legal-ish position: pawns off the back ranks, at most one king per side, and in
    check-based variants the side not to move not in check (checked by the reference engine)."""
    while True:
        board = [REF.EMPTY] * 25
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
                if piece in "Pp" and REF.rank_of(sq) in (0, 4):
                    continue
                board[sq] = piece
                squares.pop(i)
                break
        if board.count("K") > 1 or board.count("k") > 1:
            continue
        turn = rng.choice("wb")
        if variant in CHECK_BASED:
            other = REF.Position(tuple(board), REF.opponent(turn))
            if REF.in_check(variant, other):
                continue
        pos = REF.Position(tuple(board), turn, rng.randint(0, 20), rng.randint(1, 40))
        return REF.to_fen(pos)


def choose_move(rng: random.Random, fen: str, moves: list[str], capture_bias: float) -> str:
    """A random move; capture-greedy games prefer captures (so that games end)."""
    moves = sorted(moves)
    captures = [m for m in moves if is_capture(fen, m)]
    if captures and rng.random() < capture_bias:
        kings = [m for m in captures if board_of(fen)[m[2:4]] in "Kk"]
        return rng.choice(kings or captures)
    return rng.choice(moves)


@functools.cache
def finished_placements(variant: str, n: int) -> tuple[str, ...]:
    """`n` random placements on which the game is over (by the reference engine's verdict,
    used only to pick them; the oracles label them independently)."""
    rng = random.Random(f"finished-{variant}")
    out = []
    for _ in range(20000):
        fen = random_placement(rng, variant)
        if REF.result(variant, fen) is not None:
            out.append(fen)
            if len(out) == n:
                break
    return tuple(out)


class FsfPosition(NamedTuple):
    fen: str
    legal: list[str]  # sorted; [] when Fairy-Stockfish says the game is over
    result: str | None  # '1-0' / '0-1' / '1/2-1/2' / None
    fog: str | None  # dark only: pyffish.get_fog_fen
    move: str | None  # move played from here (random play), None at the end of a game
    next_fen: str | None  # pyffish.get_fen after `move`


class FairyStockfish:
    """Fairy-Stockfish (pyffish) as an oracle, with cached random-play positions."""

    GAMES_MIN_POSITIONS = 240
    PLACEMENTS = 100
    FINISHED = 20

    def __init__(self, sf):
        self.sf = sf

    def legal(self, variant: str, fen: str) -> list[str]:
        fv = R.FAIRY_STOCKFISH_NAMES[variant]
        if self.sf.is_immediate_game_end(fv, fen, [])[0]:
            return []
        return sorted(self.sf.legal_moves(fv, fen, []))

    def result(self, variant: str, fen: str, legal: list[str] | None = None) -> str | None:
        """Result in '1-0' form; pyffish scores are from the side to move (±32000 mate)."""
        fv = R.FAIRY_STOCKFISH_NAMES[variant]
        end, value = self.sf.is_immediate_game_end(fv, fen, [])
        if not end:
            if legal is None:
                legal = self.sf.legal_moves(fv, fen, [])
            if legal:
                return None
            value = self.sf.game_result(fv, fen, [])  # meaningful only without legal moves
        if value == 0:
            return "1/2-1/2"
        white_to_move = fen.split()[1] == "w"
        return "1-0" if (value > 0) == white_to_move else "0-1"

    def fog(self, fen: str) -> str:
        return self.sf.get_fog_fen(fen, R.FAIRY_STOCKFISH_NAMES["dark"])

    def position(self, variant: str, fen: str, move=None, next_fen=None) -> FsfPosition:
        legal = self.legal(variant, fen)
        return FsfPosition(
            fen=fen,
            legal=legal,
            result=self.result(variant, fen, legal),
            fog=self.fog(fen) if variant == "dark" else None,
            move=move,
            next_fen=next_fen,
        )

    @functools.cache  # noqa: B019 (one instance per session)
    def games(self, variant: str) -> tuple[FsfPosition, ...]:
        """Positions of seeded random games played with pyffish (some capture-greedy)."""
        fv = R.FAIRY_STOCKFISH_NAMES[variant]
        out: list[FsfPosition] = []
        seed = 0
        while len(out) < self.GAMES_MIN_POSITIONS:
            rng = random.Random(f"{variant}-{seed}")
            capture_bias = rng.random()
            fen = R.START_FENS[variant]
            for _ in range(60):
                pos = self.position(variant, fen)
                if not pos.legal:
                    out.append(pos)
                    break
                move = choose_move(rng, fen, pos.legal, capture_bias)
                next_fen = self.sf.get_fen(fv, fen, [move])
                out.append(pos._replace(move=move, next_fen=next_fen))
                fen = next_fen
            seed += 1
        return tuple(out)

    @functools.cache  # noqa: B019
    def placements(self, variant: str) -> tuple[FsfPosition, ...]:
        """Random placements, plus some where the game is over (mate, stalemate, ...)."""
        rng = random.Random(f"placements-{variant}")
        fens = [random_placement(rng, variant) for _ in range(self.PLACEMENTS)]
        fens += finished_placements(variant, self.FINISHED)
        return tuple(self.position(variant, fen) for fen in fens)


@pytest.fixture(scope="session")
def fsf() -> FairyStockfish:
    import pyffish as sf  # installed by the test extra: the oracle must not be skippable

    sf.load_variant_config(INI_PATH.read_text())
    return FairyStockfish(sf)


# --------------------------------------------------------------------------------- reference


class RefPosition(NamedTuple):
    fen: str
    legal: list[str]  # reference_engine.legal_moves
    result: str | None  # reference_engine.result
    move: str | None  # move played from here, None at the end of a path
    next_fen: str | None


@functools.cache
def reference_positions(
    variant: str, n_games: int = 120, n_placements: int = 120, n_finished: int = 20
):
    """Positions of the reference engine, seeded: (random games from the start (monochromatic:
    from `MONO_PLAYABLE`), short random games from random placements, finished placements)."""

    def walk(rng, fen, plies, capture_bias):
        out = []
        for _ in range(plies):
            legal = REF.legal_moves(variant, fen)
            res = REF.result(variant, fen)
            if not legal:
                out.append(RefPosition(fen, legal, res, None, None))
                return out
            move = choose_move(rng, fen, legal, capture_bias)
            next_fen = REF.make_move(variant, fen, move)
            out.append(RefPosition(fen, legal, res, move, next_fen))
            fen = next_fen
        return out

    games: list[RefPosition] = []
    seed = 0
    while len(games) < n_games:
        rng = random.Random(f"ref-{variant}-{seed}")
        games += walk(rng, playable_start(variant), 40, rng.random())
        seed += 1
    placed: list[RefPosition] = []
    rng = random.Random(f"ref-placements-{variant}")
    while len(placed) < n_placements:
        placed += walk(rng, random_placement(rng, variant), 4, rng.random())
    finished = [
        RefPosition(fen, REF.legal_moves(variant, fen), REF.result(variant, fen), None, None)
        for fen in finished_placements(variant, n_finished)
    ]
    return tuple(games[:n_games]), tuple(placed[:n_placements]), tuple(finished)


# --------------------------------------------------------------------------------- rollout


class Rollout(NamedTuple):
    """Random play of the compiled engine on a mixed batch (row i plays VARIANTS[i % 9])."""

    variants: list[str]
    pre: list[R.State]  # [T] State [B] before each ply
    plies: list[Ply]  # [T]
    pre_fens: list[list[str]]  # [T][B]
    after_fens: list[list[str]]  # [T][B]


ROLLOUT_PLIES = 150


@pytest.fixture(scope="session")
def rollout(engine) -> Rollout:
    variants = [VARIANTS[i % len(VARIANTS)] for i in range(B)]
    rules = engine.rules(variants)
    start = engine.states([playable_start(v) for v in variants])
    state = start
    pre, plies, pre_fens, after_fens = [], [], [], []
    for t in range(ROLLOUT_PLIES):
        out = engine.play(rules, state, seed=1000 + t, reset_state=start)
        pre.append(state)
        plies.append(out)
        pre_fens.append([fen_of(state, i) for i in range(B)])
        after_fens.append([fen_of(out.after, i) for i in range(B)])
        state = out.reset
    return Rollout(variants, pre, plies, pre_fens, after_fens)


def uci_set(variant: str, fen: str, mask_row: np.ndarray) -> list[str]:
    """Sorted UCI strings of the actions set in one legal mask row."""
    return sorted(R.action_to_uci(variant, fen, int(a)) for a in np.flatnonzero(mask_row))
