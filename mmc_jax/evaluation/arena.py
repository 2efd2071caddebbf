"""A stepwise arena: batched JAX players and UCI engines in one batch of games, every move
recorded.

`evaluate.play_match` runs a whole match inside one jitted `lax.while_loop`, which cannot wait
for an engine process. This arena steps the batch from Python instead, one ply per iteration:

  1. engine moves are requested for every game where an engine is to move (an
     `uci.EnginePool`, several processes searching in parallel threads);
  2. meanwhile each JAX player (a built-in player of `mmc_jax.evaluation.players`, a network's
     search) acts on the games where it is to move: their rows are gathered into a fixed-size
     buffer inside the jitted policy, so a model searches only its own positions. A model's
     buffer shrinks by factors of 4 (down to `bucket_min`, default 4) once few of its games
     are left, so a ply costs what the games still running cost (the last game of a 400-game
     match searches a buffer of 12, not 200): one compile per size used;
  3. engine replies are checked against the rules (a move must be legal and spelled exactly as
     the rules spell it); one jitted `step_with_planes` plays every game's move.

A batch may mix variants, pairings and players (the ladder plays all its matches at once, so
the model's search always sees a large batch). Every game starts from its variant's start
position; its first `opening_plies` plies are the opening number `GameSpec.opening` of a
fixed, seeded suite: uniformly random legal moves drawn by `np.random.default_rng((seed,
opening, ply))`, so games that share an opening number (the two colours of a pairing, and
every pairing of a ladder) play the same opening moves.

Results follow the rules engine (mate, stalemate, captured king, extinction, 50-move rule,
repetition, K vs K, the ply cap). Built-in players are handed the true state, so under fog only
those flagged `fair_under_fog` may play (`players.check_fair`). A JAX player's illegal action
loses the game (as in `play_match`; never happens with the built-in players); an engine failure
(crash, timeout, illegal or malformed move) aborts that game: result "*", the error in its
record, never scored.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax import uci
from mmc_jax.evaluation import elo as elo_lib
from mmc_jax.evaluation import match, policies
from mmc_jax.evaluation import players as players_lib
from mmc_jax.rules import game, notation
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD

NETWORK_KIND = players_lib.NETWORK_KIND
ENGINE_KIND = players_lib.ENGINE_KIND


# ---------------------------------------------------------------------------------------------
# Players: the one table's (`mmc_jax.evaluation.players`), named here too for the arena's callers

Player = players_lib.Player
builtin_player = players_lib.builtin_player
random_player = players_lib.random_player
greedy_player = players_lib.greedy_player
model_player = players_lib.model_player
engine_player = players_lib.engine_player


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """The static (hashable) part of a JAX player: one compiled policy per spec and size."""

    kind: str  # a built-in kind (`players.kinds()`) or "model"
    network: Any = None
    num_simulations: int = 0
    gumbel_scale: float = 0.0
    one_ply: bool = False


def policy_spec(player: Player) -> PolicySpec:
    """The compile key of a JAX player."""
    if player.kind == NETWORK_KIND:
        return PolicySpec(
            player.kind, player.network, player.num_simulations, player.gumbel_scale, player.one_ply
        )
    return PolicySpec(player.kind)


# ---------------------------------------------------------------------------------------------
# Records


@dataclasses.dataclass
class GameSpec:
    """One game: player indices (into the arena's player list), variant, opening number
    (-1: no opening)."""

    white: int
    black: int
    variant: str
    opening: int = -1


@dataclasses.dataclass
class GameRecord:
    """A finished (or aborted) game. `result` "1-0" / "0-1" / "1/2-1/2", or "*" when an engine
    failure aborted it (`error` says why). `termination` follows the PGN tag: "normal",
    "rules infraction" (an illegal move lost the game) or "abandoned"."""

    variant: str
    white: str
    black: str
    start_fen: str
    moves: list[str]
    result: str
    termination: str = "normal"
    opening_plies: int = 0
    error: str | None = None
    final_fen: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    positions: list[str] | None = None  # with record_positions: `position_key` of each position

    @property
    def scored(self) -> bool:
        return self.result in ("1-0", "0-1", "1/2-1/2")


def pair_results(records: Sequence[GameRecord]) -> list[elo_lib.PairResult]:
    """W/D/L per unordered pair of players over the scored games (aborted ones left out)."""
    results = []
    for r in records:
        if not r.scored:
            continue
        white_points = {"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}[r.result]
        results.append(
            elo_lib.PairResult(
                r.white,
                r.black,
                int(white_points == 1.0),
                int(white_points == 0.5),
                int(white_points == 0.0),
            )
        )
    return elo_lib.aggregate(results)


def colour_balanced(a: int, b: int, num_games: int, variant: str) -> list[GameSpec]:
    """`num_games` (even) games of a vs b: a is White in the first half; game k of either half
    uses opening k."""
    if num_games % 2:
        raise ValueError(f"colour-balanced games must be an even number, got {num_games}")
    half = num_games // 2
    return [GameSpec(a, b, variant, k) for k in range(half)] + [
        GameSpec(b, a, variant, k) for k in range(half)
    ]


# ---------------------------------------------------------------------------------------------
# Compiled pieces


@jax.jit
def _gather(rules, state, planes, indices):
    """Rows `indices` [S] of a batch: (Rules [S], State [S], planes [S, 49])."""
    return jax.tree.map(lambda x: x[indices], (rules, state, planes))


@functools.partial(jax.jit, static_argnames=("spec",))
def _policy(params, rules, state, planes, key, *, spec: PolicySpec):
    """int32 [S]: a JAX player's actions in S positions. Compiled per spec and S only (the
    rows are gathered beforehand), so a model's search is shared by batches of any size."""
    if spec.kind != NETWORK_KIND:
        return players_lib.builtin(spec.kind).policy(
            key, rules, state, BOARD.planes_to_mask(planes)
        )
    policy = policies.make_model_policy(
        spec.network, params, spec.num_simulations, spec.gumbel_scale, one_ply=spec.one_ply
    )
    return policy(key, rules, state, planes)


def act(player: Player, rules, state, planes, indices, key) -> np.ndarray:
    """int32 [S]: `player`'s actions in the games `indices` [S] of a batch (numpy)."""
    gathered = _gather(rules, state, planes, jnp.asarray(indices, jnp.int32))
    params = player.params if player.kind == NETWORK_KIND else None
    return np.asarray(_policy(params, *gathered, key, spec=policy_spec(player)))


@jax.jit
def _advance(rules, state, planes, actions):
    """Play `actions` [B] in every game: (State [B], legal planes [B, 49])."""
    return BOARD.step_with_planes(rules, state, actions, planes)


def padded_size(num_games: int) -> int:
    """Batch size for `num_games`: the next power of two from 16 up to 256, then a multiple of
    256. Batches are padded with finished games so that runs of different sizes (a ladder, a
    tournament, the tests) share compiled steps."""
    if num_games <= 256:
        return max(16, 1 << (num_games - 1).bit_length())
    return -(-num_games // 256) * 256


def _pad(tree, size: int):
    """Pad every leaf's batch axis to `size` by repeating row 0."""
    return jax.tree.map(
        lambda x: jnp.concatenate([x, jnp.repeat(x[:1], size - x.shape[0], axis=0)]), tree
    )


def pad_batch(rules, state, planes, size: int):
    """(rules, state, planes) padded to `size` games; the padding games are finished."""
    real = state.terminated.shape[0]
    rules, state, planes = _pad((rules, state, planes), size)
    padding = jnp.arange(size) >= real
    state = state.replace(terminated=state.terminated | padding)
    return rules, state, jnp.where(padding[:, None], jnp.uint32(0), planes)


def start_batch(variants: Sequence[str], max_plies: int | None = None, pad: bool = True):
    """(Rules [B], State [B], legal planes [B, 49]) of the start positions of `variants`,
    padded to `padded_size(len(variants))` games with finished ones unless `pad` is False.

    Built without compiling a move generator: per variant one eager `from_position` and the
    cached `evaluate.start_planes`, gathered per game. A start without any legal move
    (monochromatic) is a finished draw.
    """
    unique = list(dict.fromkeys(variants))
    rules_of = [R.get(v) if max_plies is None else R.get(v, max_plies=max_plies) for v in unique]
    states = [game.from_position(r.start_pieces, r.start_own, jnp.int32(0)) for r in rules_of]
    planes = np.stack([match.start_planes(v) for v in unique])
    index = np.array([unique.index(v) for v in variants])
    take = lambda *xs: jnp.stack(xs)[index]  # noqa: E731
    rules = jax.tree.map(take, *rules_of)
    state = jax.tree.map(take, *states)
    planes = jnp.asarray(planes[index])
    state = state.replace(terminated=~jnp.any(planes != 0, axis=-1))
    if pad:
        return pad_batch(rules, state, planes, padded_size(len(variants)))
    return rules, state, planes


def position_key(pieces, own, turn: int) -> str:
    """A position without its clocks: the FEN's board and side-to-move fields."""
    return notation.to_fen(pieces, own, int(turn), 0, 1).rsplit(" ", 4)[0]


def is_legal(planes: np.ndarray, action: int) -> bool:
    """Is `action` legal, by a bit test on one position's legal planes [49]."""
    if not 0 <= action < R.NUM_ACTIONS:
        return False
    return bool((int(planes[action % T.NUM_PLANES]) >> (action // T.NUM_PLANES)) & 1)


def legal_actions(planes: np.ndarray) -> list[int]:
    """Sorted legal action ids of one position's planes [49]."""
    squares = np.arange(T.NUM_SQUARES, dtype=np.uint64)[:, None]
    bits = (np.asarray(planes, np.uint64)[None, :] >> squares) & 1  # [25, 49]: action 49 s + p
    return [int(a) for a in np.flatnonzero(bits.reshape(-1))]


def legal_uci(variant: str, turn: int, pieces, own, planes: np.ndarray) -> dict[str, int]:
    """{UCI move: action} of one position (mover's-view bitboards, planes [49])."""
    return {R.board_action_to_uci(variant, a, turn, pieces, own): a for a in legal_actions(planes)}


def parse_move(variant: str, text: str, turn: int, pieces, own, planes: np.ndarray) -> int:
    """The action of a UCI move string in a position, or ValueError naming the problem (a
    malformed string, or an illegal move with the legal ones listed)."""
    legal = legal_uci(variant, turn, pieces, own, planes)
    if text in legal:
        return legal[text]
    notation.uci_to_action(text, turn)  # raises for malformed strings
    raise ValueError(
        f"illegal move {text!r}; legal moves: {' '.join(sorted(legal)) or 'none (game over)'}"
    )


def _engine_pools(players, games, engine_pool) -> dict[str, uci.EnginePool]:
    """{engine player's name: its pool}, checked: every engine player of a game has a pool
    that plays the game's variant."""
    pools = {}
    for spec in games:
        for side in (spec.white, spec.black):
            player = players[side]
            if player.kind != ENGINE_KIND:
                continue
            if engine_pool is None:
                raise ValueError("engine players need an engine_pool")
            pool = engine_pool.get(player.name) if isinstance(engine_pool, Mapping) else engine_pool
            if pool is None:
                raise ValueError(f"engine player {player.name!r} has no engine pool")
            if pool.variant != spec.variant:
                raise ValueError(
                    f"engine games in {spec.variant} but the engine pool of {player.name!r} "
                    f"plays {pool.variant}"
                )
            pools[player.name] = pool
    return pools


def _buckets(size: int, bucket_min: int) -> list[int]:
    sizes = [size]
    while sizes[-1] // 4 >= bucket_min:
        sizes.append(sizes[-1] // 4)
    return sizes


# ---------------------------------------------------------------------------------------------
# The arena


def play_games(
    players: Sequence[Player],
    games: Sequence[GameSpec],
    *,
    seed: int = 0,
    opening_plies: int = 0,
    max_plies: int | None = None,
    engine_pool: uci.EnginePool | Mapping[str, uci.EnginePool] | None = None,
    bucket_min: int = 4,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 15.0,
    record_positions: bool = False,
    on_ply: Callable[[int, int], None] | None = None,
) -> list[GameRecord]:
    """Plays `games` between `players`; returns one `GameRecord` per game, in order.

    Args:
      players: the players; `GameSpec.white` / `.black` index them.
      games: the games (a batch may mix variants; engine games need one variant, the pool's).
      seed: of the opening suite and of the JAX players' randomness.
      opening_plies: random plies of the opening suite played first by both sides.
      max_plies: the rules' ply cap (default 256), a draw by rule.
      engine_pool: serves the engine players (required if there are any): one pool for all of
        them, or a mapping from each engine player's name to its pool (two different UCI
        engines in one batch, e.g. a served model against Fairy-Stockfish).
      bucket_min: smallest reduced buffer of a model player (see the module docstring).
      progress: called with a status line every `progress_every` seconds (e.g. print).
      record_positions: keep every position's `position_key` in `GameRecord.positions`
        (start and final positions included).
      on_ply: called after each ply with (plies played, games that were running in it).
    """
    if not games:
        return []
    _check_games(players, games)
    pools = _engine_pools(players, games, engine_pool)
    book = _Book.start(games)
    rules, state, planes = start_batch(book.variants, max_plies)
    batch_size = state.terminated.shape[0]
    buffers = _jax_buffers(players, book, bucket_min)
    base_key = jax.random.key(seed)
    ply = 0
    started = last_report = time.monotonic()
    while True:
        host = _Host.read(state, planes, len(games))
        book.white_reward += host.rewards[:, 0]
        done = host.terminated | book.aborted
        if done.all():
            break
        active = np.flatnonzero(~done)
        movers = np.where(host.turn == 0, book.white, book.black)
        actions = np.zeros(batch_size, np.int32)
        forced = np.zeros(len(games), bool)
        if ply < opening_plies:
            _opening_actions(actions, active, book.openings, host.planes, seed, ply)
            forced = book.openings >= 0
        to_play = [g for g in active if not forced[g]]
        by_engine = _request_engine_moves(players, pools, book, to_play, movers)
        key = jax.random.fold_in(base_key, ply)
        _jax_actions(actions, players, buffers, to_play, movers, (rules, state, planes), key)
        _engine_actions(actions, players, book, by_engine, movers, host)
        _record_moves(book, active, actions, movers, host, record_positions)
        state, planes = _advance(rules, state, planes, jnp.asarray(actions))
        ply += 1
        if on_ply is not None:
            on_ply(ply, len(active))
        now = time.monotonic()
        if progress is not None and now - last_report >= progress_every:
            last_report = now
            progress(
                f"ply {ply}: {len(active)} of {len(games)} games running, "
                f"{now - started:.0f} s elapsed"
            )
    return _game_records(
        players, games, book, jax.device_get(state), opening_plies, record_positions
    )


def _check_games(players: Sequence[Player], games: Sequence[GameSpec]) -> None:
    """ValueError for an unknown variant, a player index out of range, or a player that would
    see the true state of a fog game: a built-in player not fair under fog, or a model (its
    search here steps the true board)."""
    for spec in games:
        R.check_variant(spec.variant)
        for side in (spec.white, spec.black):
            if not 0 <= side < len(players):
                raise ValueError(f"game {spec} names player {side}; there are {len(players)}")
            player = players[side]
            if player.kind == NETWORK_KIND and R.has_fog(spec.variant):
                raise ValueError(
                    f"{player.name} under fog ({spec.variant}): a model here would search the "
                    "true board; play it as a UCI engine, which searches its own view "
                    "('uci:python -m mmc_jax.engine --model <model>')"
                )
            if player.kind not in (NETWORK_KIND, ENGINE_KIND):
                players_lib.check_fair(player.kind, spec.variant)


@dataclasses.dataclass
class _Book:
    """The host's bookkeeping of `play_games`, one entry per game: what the games are (fixed)
    and what happened so far (UCI moves, positions, aborts and illegal moves, rewards)."""

    variants: list[str]
    white: np.ndarray  # int [G] player indices
    black: np.ndarray  # int [G]
    openings: np.ndarray  # int [G] opening numbers (-1: none)
    start_fens: list[str]
    moves: list[list[str]]
    positions: list[list[str]]
    aborted: np.ndarray  # bool [G] by an engine failure
    illegal_by: np.ndarray  # int [G] the player who played an illegal action, else -1
    errors: dict[int, str]
    white_reward: np.ndarray  # float [G]

    @classmethod
    def start(cls, games: Sequence[GameSpec]) -> _Book:
        num_games = len(games)
        variants = [g.variant for g in games]
        return cls(
            variants=variants,
            white=np.array([g.white for g in games]),
            black=np.array([g.black for g in games]),
            openings=np.array([g.opening for g in games]),
            start_fens=[R.START_FENS[v] for v in variants],
            moves=[[] for _ in range(num_games)],
            positions=[[] for _ in range(num_games)],
            aborted=np.zeros(num_games, bool),
            illegal_by=np.full(num_games, -1),
            errors={},
            white_reward=np.zeros(num_games),
        )


class _Host(NamedTuple):
    """The batch on the host, its first G rows (the rest is padding with finished games)."""

    turn: np.ndarray  # [G]
    terminated: np.ndarray  # [G]
    pieces: np.ndarray  # [G, 6]
    own: np.ndarray  # [G]
    rewards: np.ndarray  # [G, 2]
    planes: np.ndarray  # [G, 49]

    @classmethod
    def read(cls, state, planes, num_games: int) -> _Host:
        host = jax.device_get(
            (state.turn, state.terminated, state.pieces, state.own, state.rewards, planes)
        )
        return cls(*(x[:num_games] for x in host))


def _jax_buffers(players: Sequence[Player], book: _Book, bucket_min: int) -> dict[int, list[int]]:
    """{JAX player's index: its buffer sizes, largest first}. In lockstep play a player moves
    at even plies in its White games and at odd plies in its Black games."""
    buffers: dict[int, list[int]] = {}
    for p, player in enumerate(players):
        if player.is_jax:
            most = max(int((book.white == p).sum()), int((book.black == p).sum()))
            if most:
                minimum = bucket_min if player.kind == NETWORK_KIND else most
                buffers[p] = _buckets(most, max(minimum, 1))
    return buffers


def _opening_actions(
    actions: np.ndarray,
    active: np.ndarray,
    openings: np.ndarray,
    host_planes: np.ndarray,
    seed: int,
    ply: int,
) -> None:
    """Writes into `actions` the opening suite's move at `ply` of every active game that has
    an opening."""
    for g in active:
        if openings[g] >= 0:
            actions[g] = opening_action(host_planes[g], seed, int(openings[g]), ply)


def opening_action(planes: np.ndarray, seed: int, opening: int, ply: int) -> int:
    """The random opening suite's move at `ply` of opening number `opening` (its games, one per
    colour assignment, play the same moves): a legal action of the position with legal
    `planes` [49], drawn from (`seed`, `opening`, `ply`) alone."""
    choices = legal_actions(planes)
    rng = np.random.default_rng((seed, opening, ply))
    return choices[rng.integers(len(choices))]


def _request_engine_moves(
    players: Sequence[Player],
    pools: Mapping[str, uci.EnginePool],
    book: _Book,
    to_play: Sequence[int],
    movers: np.ndarray,
) -> dict[int, Any]:
    """{game: future of its engine's reply} for the games in `to_play` where an engine moves;
    the engines search while the JAX players act."""
    by_engine: dict[int, Any] = {}
    for g in to_play:
        player = players[movers[g]]
        if player.kind == ENGINE_KIND:
            request = uci.MoveRequest(book.start_fens[g], tuple(book.moves[g]), player.limits)
            by_engine[g] = pools[player.name].submit([request])[0]
    return by_engine


def _jax_actions(
    actions: np.ndarray,
    players: Sequence[Player],
    buffers: Mapping[int, list[int]],
    to_play: Sequence[int],
    movers: np.ndarray,
    batch,
    key,
) -> None:
    """Writes into `actions` every JAX player's moves in the games of `to_play` where it
    moves, each player acting on its own games gathered into its smallest fitting buffer;
    `batch` the device's (rules, state, planes)."""
    to_play_set = np.zeros(len(movers), bool)
    to_play_set[list(to_play)] = True
    for p, sizes in buffers.items():
        mine = np.flatnonzero(to_play_set & (movers == p))
        if len(mine) == 0:
            continue
        # Lockstep play never needs more than the first buffer; split just in case.
        for start in range(0, len(mine), sizes[0]):
            chunk = mine[start : start + sizes[0]]
            size = min(s for s in sizes if s >= len(chunk))
            indices = np.full(size, chunk[0], np.int32)
            indices[: len(chunk)] = chunk
            out = act(players[p], *batch, indices, jax.random.fold_in(key, p))
            actions[chunk] = out[: len(chunk)]


def _engine_actions(
    actions: np.ndarray,
    players: Sequence[Player],
    book: _Book,
    by_engine: Mapping[int, Any],
    movers: np.ndarray,
    host: _Host,
) -> None:
    """Writes into `actions` the engines' replies, checked against the rules; a failed or
    illegal reply aborts its game with the error in `book`."""
    for g, future in by_engine.items():
        reply = future.result()
        player = players[movers[g]]
        if reply.error is not None:
            book.aborted[g] = True
            book.errors[g] = f"{player.name}: {reply.error}"
            continue
        move = reply.move
        turn, pieces, own = host.turn[g], host.pieces[g], host.own[g]
        legal = legal_uci(book.variants[g], int(turn), pieces, own, host.planes[g])
        if move not in legal:
            book.aborted[g] = True
            fen = notation.to_fen(pieces, own, int(turn), 0, 1)
            book.errors[g] = f"{player.name}: " + str(
                uci.EngineIllegalMove(
                    f"engine played {move!r}, not a legal move in {book.variants[g]} "
                    f"after {' '.join(book.moves[g]) or 'no moves'} (board {fen.split()[0]}, "
                    f"{'White' if turn == 0 else 'Black'} to move); legal moves: "
                    f"{', '.join(sorted(legal)) or 'none'}"
                )
            )
            continue
        actions[g] = legal[move]


def _record_moves(
    book: _Book,
    active: np.ndarray,
    actions: np.ndarray,
    movers: np.ndarray,
    host: _Host,
    record_positions: bool,
) -> None:
    """Appends each active, unaborted game's move (in UCI) and, with `record_positions`, the
    position it is played in; an illegal action is marked against its mover."""
    for g in active:
        if book.aborted[g]:
            continue
        turn, pieces, own = host.turn[g], host.pieces[g], host.own[g]
        if record_positions:
            book.positions[g].append(position_key(pieces, own, turn))
        action = int(actions[g])
        if not is_legal(host.planes[g], action):
            book.illegal_by[g] = movers[g]
            book.moves[g].append(f"<illegal action {action}>")
            continue
        book.moves[g].append(R.board_action_to_uci(book.variants[g], action, turn, pieces, own))


def _game_records(
    players: Sequence[Player],
    games: Sequence[GameSpec],
    book: _Book,
    final,
    opening_plies: int,
    record_positions: bool,
) -> list[GameRecord]:
    """One `GameRecord` per game from the bookkeeping and the final states (host)."""
    records = []
    for g, spec in enumerate(games):
        moves = book.moves[g]
        record = GameRecord(
            variant=spec.variant,
            white=players[spec.white].name,
            black=players[spec.black].name,
            start_fen=book.start_fens[g],
            moves=[m for m in moves if not m.startswith("<")],
            result="*",
            opening_plies=min(opening_plies, len(moves)) if spec.opening >= 0 else 0,
        )
        if book.aborted[g]:
            record.termination = "abandoned"
            record.error = book.errors[g]
        else:
            reward = book.white_reward[g]
            record.result = "1-0" if reward > 0 else "0-1" if reward < 0 else "1/2-1/2"
            illegal_by = book.illegal_by[g]
            if illegal_by >= 0:
                record.termination = "rules infraction"
                record.error = f"{players[illegal_by].name} played an illegal action"
            s = jax.tree.map(lambda x, g=g: x[g], final)
            record.final_fen = notation.to_fen(
                s.pieces, s.own, int(s.turn), int(s.halfmove), int(s.fullmove)
            )
            if record_positions and illegal_by < 0:
                book.positions[g].append(position_key(s.pieces, s.own, s.turn))
        if record_positions:
            record.positions = book.positions[g]
        records.append(record)
    return records


def print_progress(line: str) -> None:
    """A `progress` callback: the line on stderr."""
    print(line, file=sys.stderr, flush=True)


def engine_match(
    network,
    params: Any,
    variant: str,
    num_games: int,
    num_simulations: int,
    limits: uci.Limits,
    *,
    seed: int = 0,
    opening_plies: int = 0,
    max_plies: int | None = None,
    engine: str | None = None,
    processes: int = 2,
) -> dict[str, Any]:
    """`num_games` colour-balanced games of a network's search against Fairy-Stockfish at
    `limits`: `elo.match_statistics` of the model's results (games the engine aborted left
    out and counted in `aborted`).

    Raises:
      uci.EngineError: no engine, or one that does not play `variant`.
    """
    players = [
        model_player("model", network, params, num_simulations),
        engine_player(limits),
    ]
    pool = uci.EnginePool(variant, engine, processes=processes)
    try:
        records = play_games(
            players,
            colour_balanced(0, 1, num_games, variant),
            seed=seed,
            opening_plies=opening_plies,
            max_plies=max_plies,
            engine_pool=pool,
        )
    finally:
        pool.close()
    white_points = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}
    rewards, plies = [], []
    for record in records:
        if record.scored:
            sign = 1 if record.white == "model" else -1
            rewards.append(sign * white_points[record.result])
            plies.append(len(record.moves))
    if not rewards:
        raise uci.EngineError(f"every game against {players[1].name} was aborted")
    result = elo_lib.match_statistics(np.array(rewards), np.array(plies))
    result.update(opponent=players[1].name, aborted=len(records) - len(rewards))
    return result


# ---------------------------------------------------------------------------------------------
# One game at a time (the play CLI, PGN replay)


def _eager_planes(rules: R.Rules, state: R.State) -> tuple[np.ndarray, bool]:
    """(legal planes [49], in check) of one position, op by op (no compile; about a second)."""
    with jax.disable_jit():
        analysis = game.analyse(rules, state.pieces, state.own)
        return np.asarray(analysis.planes), bool(analysis.in_check)


class SingleGame:
    """One game stepped by the compiled `_advance` (row 0 of a padded batch), with its moves.

    Starts from the variant's start position or from `fen` (then the ply cap and the
    repetition history count from there). `play(move)` takes a UCI string and raises
    ValueError for a malformed or illegal one, naming the legal moves.
    """

    def __init__(self, variant: str, fen: str | None = None, max_plies: int | None = None):
        R.check_variant(variant)
        self.variant = variant
        if fen is None or fen == R.START_FENS[variant]:
            self.rules, self.state, self.planes = start_batch([variant], max_plies)
            self.start_fen = R.START_FENS[variant]
            self._start_in_check = False
        else:
            single = R.get(variant) if max_plies is None else R.get(variant, max_plies=max_plies)
            position = R.from_fen(fen)  # ValueError for a malformed FEN
            planes, in_check = _eager_planes(single, position)
            rules = jax.tree.map(lambda x: jnp.asarray(x)[None], single)
            state = jax.tree.map(lambda x: jnp.asarray(x)[None], position)
            state = state.replace(terminated=jnp.asarray([not planes.any()]))
            self.rules, self.state, self.planes = pad_batch(
                rules, state, jnp.asarray(planes[None]), padded_size(1)
            )
            self.start_fen = fen
            self._start_in_check = in_check
        self.moves: list[str] = []
        self._white_reward = 0.0
        self._sync()

    def _sync(self) -> None:
        s, planes = jax.device_get((self.state, self.planes))
        self._host = jax.tree.map(lambda x: x[0], s)
        self._host_planes = planes[0]

    @property
    def turn(self) -> int:
        return int(self._host.turn)

    @property
    def over(self) -> bool:
        return bool(self._host.terminated)

    @property
    def fen(self) -> str:
        s = self._host
        return notation.to_fen(s.pieces, s.own, int(s.turn), int(s.halfmove), int(s.fullmove))

    def legal_moves(self) -> dict[str, int]:
        """{UCI move: action} (empty once the game is over)."""
        if self.over:
            return {}
        s = self._host
        return legal_uci(self.variant, int(s.turn), s.pieces, s.own, self._host_planes)

    def parse(self, move: str) -> int:
        """Action of a UCI move; ValueError for a malformed or illegal one."""
        if self.over:
            raise ValueError(f"the game is over ({self.result()}); no move can be played")
        s = self._host
        return parse_move(self.variant, move, int(s.turn), s.pieces, s.own, self._host_planes)

    def play_action(self, action: int) -> str:
        """Play a legal action; returns its UCI string."""
        if self.over or not is_legal(self._host_planes, int(action)):
            raise ValueError(f"action {action} is not legal here ({self.fen})")
        s = self._host
        move = R.board_action_to_uci(self.variant, action, s.turn, s.pieces, s.own)
        actions = jnp.zeros(self.planes.shape[0], jnp.int32).at[0].set(action)
        self.state, self.planes = _advance(self.rules, self.state, self.planes, actions)
        self._sync()
        self._white_reward += float(self._host.rewards[0])
        self.moves.append(move)
        return move

    def play(self, move: str) -> str:
        return self.play_action(self.parse(move))

    def result(self) -> str | None:
        """ "1-0" / "0-1" / "1/2-1/2" once over, else None."""
        if not self.over:
            return None
        if not self.moves:  # over from the start: mate or stalemate in the given position
            if not self._start_in_check:
                return "1/2-1/2"
            return "0-1" if self.turn == 0 else "1-0"
        if self._white_reward > 0:
            return "1-0"
        return "0-1" if self._white_reward < 0 else "1/2-1/2"
