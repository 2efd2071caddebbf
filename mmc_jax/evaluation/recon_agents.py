"""Fair agents for reconnaissance-blind minichess and a batched, colour-balanced arena.

Every decision reads the player's belief (`mmc_jax.search.recon_belief`), its own pieces and a
key, never the true state:

  random_window     a uniformly random sense window
  entropy_window    the window whose sense result splits the belief most: maximum entropy of
                    the distribution of the window's content over the candidate boards (each
                    candidate weighted equally); ties broken at random
  random_request    a uniformly random requestable move or `PASS`
  learned           the learned agent (`mmc_jax.search.recon_learned`): network + one-ply
                    searches over `worlds` belief samples for both the window and the move
                    (kind `SENSE_LEARNED` / `MOVE_LEARNED`; needs its parameters)
  pimc_request      PIMC: `worlds` boards drawn from the belief; on each, every requestable
                    move is resolved by the referee's `resolve` and scored greedily (material
                    after it, a win for taking the king / the last of a type, less half the
                    value of the most valuable own piece the opponent then attacks, plus a
                    little for attacking opponent pieces and advancing pawns); the move with
                    the best mean score is requested

An agent is a (sense kind, move kind) pair; the player table names them
(`mmc_jax.evaluation.players`: random, random-pimc, entropy-pimc, learned). `turn`
plays one whole turn (belief update, sense, belief update, move, belief update) of a game for
the side to move, whichever agents the two sides are (agent kinds are data, so one compiled
function serves every pairing and variant); `play_games` runs a batch to the end and returns
the results and per-turn measurements of the beliefs (`TurnStats`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mmc_jax.model import recon_net
from mmc_jax.rules import recon
from mmc_jax.rules.game import planes_to_mask
from mmc_jax.search import recon_belief as RB
from mmc_jax.search import recon_learned as L
from mmc_jax.search import recon_score as S

SENSE_RANDOM, SENSE_ENTROPY, SENSE_LEARNED = 0, 1, 2
MOVE_RANDOM, MOVE_PIMC, MOVE_LEARNED = 0, 1, 2
DEFAULT_WORLDS = 8


def _window_squares() -> np.ndarray:
    """int32[4, 16, 9] squares (mover's view) of window w of side W, -1 padded."""
    table = -np.ones((4, recon.MAX_WINDOWS, 9), np.int32)
    for side in (2, 3):
        for w in range(recon.MAX_WINDOWS):
            squares = [s for s in range(25) if int(recon.WINDOW_BITS[side, w]) >> s & 1]
            table[side, w, : len(squares)] = squares
    return table


WINDOW_SQUARES = _window_squares()
_POWERS = 7 ** np.arange(9, dtype=np.int64)


def _windows_legal(rules):
    return jnp.arange(recon.MAX_WINDOWS) < recon.num_windows(rules)


def random_window(key, rules):
    """int32 a uniformly random window of the variant."""
    return jax.random.randint(key, (), 0, recon.num_windows(rules)).astype(jnp.int32)


def window_entropies(rules, belief: RB.ReconBelief):
    """float32[16] entropy (nats) of each window's sense result over the candidates; -inf for
    windows the variant does not have."""
    contents = RB.square_contents(belief)  # [K, 25] in 0..6
    squares = jnp.asarray(WINDOW_SQUARES)[jnp.clip(rules.sense, 0, 3)]  # [16, 9]
    cells = jnp.where(squares >= 0, contents[:, jnp.maximum(squares, 0)], 0)  # [K, 16, 9]
    codes = (cells * jnp.asarray(_POWERS, jnp.int32)).sum(-1)  # [K, 16], exact, < 7 ** 9
    codes = jnp.where(belief.valid[:, None], codes, jnp.iinfo(jnp.int32).max)
    n = jnp.maximum(belief.valid.sum(), 1)

    def entropy(column):
        ordered = jnp.sort(column)
        same = jnp.searchsorted(ordered, ordered, "right") - jnp.searchsorted(ordered, ordered)
        share = same / n
        valid = ordered != jnp.iinfo(jnp.int32).max
        return -jnp.sum(jnp.where(valid, jnp.log(share) / n, 0.0))

    out = jax.vmap(entropy, in_axes=1)(codes)
    return jnp.where(_windows_legal(rules), out, -jnp.inf)


def entropy_window(key, rules, belief: RB.ReconBelief):
    """int32 the window of maximum sense-result entropy (random among near-ties)."""
    scores = window_entropies(rules, belief)
    noise = jax.random.uniform(key, scores.shape, maxval=1e-4)
    return jnp.argmax(scores + noise).astype(jnp.int32)


def requestable_mask(rules, own_pieces):
    """bool[1226] requestable moves and `PASS` from the player's own pieces."""
    planes = recon.requestable_planes(rules, own_pieces)
    return jnp.concatenate([planes_to_mask(planes), jnp.ones(1, bool)])


def random_request(key, rules, own_pieces):
    """int32 a uniformly random requestable move or `PASS`."""
    mask = requestable_mask(rules, own_pieces)
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


def request_scores(rules, own_pieces, opponent):
    """float32[1226] greedy score of every request (`PASS` last) on one world: the board it
    leads to, scored for the player by `recon_score.board_score` (material lead, a win, less
    half the value of the most valuable own piece then attacked, a little for pressure)."""
    own = RB.occupied(own_pieces)
    actions = jnp.arange(RB.NUM_REQUESTS)
    resolve = jax.vmap(recon.resolve, in_axes=(None, None, None, 0))
    after, own_after, _, _ = resolve(rules, own_pieces | opponent, own, actions)  # [A, 6], [A]
    return jax.vmap(S.board_score, in_axes=(None, 0, 0))(rules, after, own_after)


def pimc_request(key, rules, belief: RB.ReconBelief, worlds: int = DEFAULT_WORLDS):
    """int32 the requestable move (or `PASS`) of best mean `request_scores` over `worlds`
    boards drawn from the belief (ties broken at random)."""
    sample_key, noise_key = jax.random.split(key)
    boards = RB.sample(sample_key, belief, worlds)
    scores = jax.vmap(request_scores, in_axes=(None, None, 0))(rules, belief.own, boards)
    mean = scores.mean(0) + jax.random.uniform(noise_key, scores.shape[1:], maxval=1e-3)
    mask = requestable_mask(rules, belief.own)
    return jnp.argmax(jnp.where(mask, mean, -jnp.inf)).astype(jnp.int32)


def choose_window(key, rules, belief, sense_kind):
    """int32 the window of a sense kind (`SENSE_RANDOM` or `SENSE_ENTROPY`)."""
    k1, k2 = jax.random.split(key)
    return jnp.where(
        sense_kind == SENSE_ENTROPY, entropy_window(k1, rules, belief), random_window(k2, rules)
    )


def choose_request(key, rules, belief, move_kind, worlds: int = DEFAULT_WORLDS):
    """int32 the request of a move kind (`MOVE_RANDOM` or `MOVE_PIMC`)."""
    k1, k2 = jax.random.split(key)
    return jnp.where(
        move_kind == MOVE_PIMC,
        pimc_request(k1, rules, belief, worlds),
        random_request(k2, rules, belief.own),
    )


# ----------------------------------------------------------------------------- the arena


@struct.dataclass(kw_only=True)
class ReconGames:
    """Games with both players' beliefs: `beliefs` has a leading [2] axis (White, Black) after
    the game axis; `agents` int32[2, 2] per colour (sense kind, move kind)."""

    state: recon.ReconState
    beliefs: RB.ReconBelief
    agents: jax.Array


class TurnStats(NamedTuple):
    """Measurements of the mover's belief in one turn (per game when batched)."""

    live: jax.Array  # bool, the game was running at the start of the turn
    mover: jax.Array  # int32 colour
    ply: jax.Array  # int32
    before_sense: jax.Array  # int32 candidates after the opponent's move
    after_sense: jax.Array  # int32 candidates after the sense
    exact: jax.Array  # bool, the belief has been exact so far
    contains_true: jax.Array  # bool, the true board is a candidate (after the sense)
    certain: jax.Array  # float32, share of squares whose content every candidate has right
    agreement: jax.Array  # float32, mean share of candidates right about a square


def start(rules, agents, size: int = RB.DEFAULT_SIZE) -> ReconGames:
    """A new game (unbatched): `agents` int32[2, 2] (White's, Black's sense and move kind)."""
    beliefs = jax.tree.map(
        lambda *xs: jnp.stack(xs), RB.initial(rules, 0, size), RB.initial(rules, 1, size)
    )
    return ReconGames(state=recon.init(rules), beliefs=beliefs, agents=jnp.asarray(agents))


def _knowledge(belief: RB.ReconBelief, true_opponent):
    """(certain, agreement): how much of the true board the belief gets right, per square
    (own pieces count as known)."""
    truth = RB.square_contents(RB.from_boards(true_opponent[None], belief.own, 1))[0]
    valid = belief.valid[:, None]
    right = (RB.square_contents(belief) == truth[None]) | ~valid
    n = jnp.maximum(belief.valid.sum(), 1)
    certain = jnp.all(right, axis=0).mean()
    agreement = (jnp.sum(right & valid, axis=0) / n).mean()
    return certain.astype(jnp.float32), agreement.astype(jnp.float32)


def turn(rules, games: ReconGames, key, params=None, *, moves_per_board: int, worlds: int,
         learned: L.SearchConfig | None = None):  # fmt: skip
    """One whole turn of the side to move (unbatched): (games after it, TurnStats).

    `learned` (its sizes; `worlds` replaced by the arena's, so every searching agent samples as
    many boards per decision) and `params` enable the learned agent's kinds; without them
    those kinds fall back to random sensing and moving."""
    state = games.state
    colour = state.turn
    sense_kind, move_kind = games.agents[colour, 0], games.agents[colour, 1]
    belief = jax.tree.map(lambda x: x[colour], games.beliefs)
    keys = jax.random.split(key, 6)
    info = recon.player_info(state)
    belief = RB.after_opponent_move(
        rules, belief, info.own_pieces, info.notification, info.ply, keys[0],
        moves_per_board=moves_per_board,
    )  # fmt: skip
    before = RB.count(belief)
    window = choose_window(keys[1], rules, belief, sense_kind)
    if learned is not None:
        learned = learned._replace(worlds=worlds)
        net = recon_net.make_net(learned)
        sense_key, move_key = jax.random.split(keys[5])
        sensed = L.sense_search(net, params, learned, rules, state, belief, sense_key, False)
        window = jnp.where(sense_kind == SENSE_LEARNED, sensed.action - recon.SENSE_BASE, window)
    state = recon.step(rules, state, recon.SENSE_BASE + window)
    belief = RB.after_sense(belief, *RB.sensed_content(recon.player_info(state)), keys[2])
    true_opponent = state.pieces & ~state.own
    certain, agreement = _knowledge(belief, true_opponent)
    stats = TurnStats(
        live=~games.state.terminated,
        mover=colour,
        ply=state.ply,
        before_sense=before,
        after_sense=RB.count(belief),
        exact=belief.exact,
        contains_true=RB.contains(belief, true_opponent),
        certain=certain,
        agreement=agreement,
    )
    request = choose_request(keys[3], rules, belief, move_kind, worlds)
    if learned is not None:
        moved = L.move_search(net, params, learned, rules, state, belief, move_key, False)
        request = jnp.where(move_kind == MOVE_LEARNED, moved.action, request)
    state = recon.step(rules, state, request)
    belief = RB.after_own_move(
        rules, belief, request, state.taken[colour], state.capture[colour], keys[4]
    )
    beliefs = jax.tree.map(
        lambda all_, one: jnp.where(jnp.arange(2).reshape((2,) + (1,) * one.ndim) == colour,
                                    one[None], all_),
        games.beliefs, belief,
    )  # fmt: skip
    # A finished game's steps change nothing (zero rewards); its beliefs stay as they were.
    beliefs = jax.tree.map(
        lambda old, new: jnp.where(games.state.terminated, old, new), games.beliefs, beliefs
    )
    return ReconGames(state=state, beliefs=beliefs, agents=games.agents), stats


@functools.partial(jax.jit, static_argnames=("moves_per_board", "worlds", "learned"))
def turns(rules, games: ReconGames, key, params=None, *, moves_per_board: int, worlds: int,
          learned: L.SearchConfig | None = None):  # fmt: skip
    """`turn` batched over games (Rules [B], ReconGames [B], one key, shared params)."""
    keys = jax.random.split(key, games.agents.shape[0])
    one = functools.partial(turn, moves_per_board=moves_per_board, worlds=worlds, learned=learned)
    return jax.vmap(one, in_axes=(0, 0, 0, None))(rules, games, keys, params)


def play_games(
    rules,
    agents,
    key,
    *,
    size: int = RB.DEFAULT_SIZE,
    moves_per_board: int = RB.DEFAULT_MOVES_PER_BOARD,
    worlds: int = DEFAULT_WORLDS,
    params=None,
    learned: L.SearchConfig | None = None,
):
    """Play a batch of games to the end: `rules` Rules [B], `agents` int32[B, 2, 2];
    `params` and `learned` (its `SearchConfig`) for the learned agent's kinds.

    Returns (rewards float32[B, 2] of White and Black, plies int32[B], TurnStats of numpy
    arrays [turns, B]).
    """
    games = jax.vmap(functools.partial(start, size=size))(rules, jnp.asarray(agents, jnp.int32))
    rewards = np.zeros((games.agents.shape[0], 2), np.float32)
    history = []
    for t in range(int(np.max(np.asarray(rules.max_plies)))):
        games, stats = turns(
            rules, games, jax.random.fold_in(key, t), params, moves_per_board=moves_per_board,
            worlds=worlds, learned=learned,
        )  # fmt: skip
        rewards += np.asarray(games.state.rewards)
        history.append(jax.device_get(stats))
        if bool(np.all(np.asarray(games.state.terminated))):
            break
    stats = TurnStats(*(np.stack(xs) for xs in zip(*history, strict=True)))
    return rewards, np.asarray(games.state.ply), stats
