"""The belief under fog: soundness along games, consistency of sampled worlds, frequencies."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.rules import game
from mmc_jax.rules import tables as T
from mmc_jax.search import belief as B
from mmc_jax.training import fog as fog_lib

NUM_GAMES = 16
NUM_PLIES = 40
K = 4

# The slow tier: a fog program compiled for 40 plies of 16 games (the fast tier reaches the belief
# through tests/evaluation/test_fair_search.py's fair search).
pytestmark = pytest.mark.slow


def _popcount(x):
    return np.vectorize(lambda v: bin(int(v)).count("1"))(x)


@pytest.fixture(scope="module")
def random_games():
    """Random dark games with both beliefs tracked; per ply: true state, observation, belief
    and K sampled worlds of the mover."""
    rules = R.batch("dark", NUM_GAMES)

    @jax.jit
    def ply(games, planes, key):
        action_key, world_key = jax.random.split(key)
        observation, belief = fog_lib.observe_and_update(rules, games, planes)
        worlds = B.sample_worlds_batch(world_key, rules, observation, belief, K, 64)
        states = B.world_states(worlds, observation)
        world_obs = jax.vmap(jax.vmap(lambda r, s: game.observe(r, s, True)), (None, 1), 1)(
            rules, states
        )
        world_planes = jax.vmap(jax.vmap(game.legal_planes), (None, 1), 1)(rules, states)
        action = R.random_legal_action(action_key, R.planes_to_mask(planes))
        record = (games.state, observation, belief, worlds, world_obs, world_planes)
        games, planes = fog_lib.play(rules, games, observation, belief, action, planes)
        return games, planes, record

    state = R.init(rules)
    games, planes = fog_lib.start_games(state), R.legal_planes(rules, state)
    records = []
    for t in range(NUM_PLIES):
        games, planes, record = ply(games, planes, jax.random.key(t))
        records.append(jax.device_get(record))
    return records


def test_sampled_worlds_reobserve_to_the_observation(random_games):
    failures = live_total = 0
    for state, observation, _, worlds, world_obs, world_planes in random_games:
        live = ~state.terminated
        live_total += live.sum()
        failures += (live & (worlds.num_consistent == 0)).sum()
        ok = worlds.consistent & live[:, None]
        # Board channels (pieces, opponent's seen pieces, hidden) and legal moves agree.
        board = observation.tensor[:, None, ..., :13]
        same_obs = np.all(world_obs[..., :13] == board, axis=(2, 3, 4))
        same_planes = np.all(world_planes == observation.planes[:, None], axis=-1)
        assert np.all(same_obs[ok]) and np.all(same_planes[ok])
    assert failures / live_total < 0.05, (failures, live_total)


def test_world_material_is_reachable_from_the_start(random_games):
    start = _popcount(np.asarray(R.get("dark").start_pieces & ~R.get("dark").start_own))
    for state, _, _, worlds, _, _ in random_games:
        live = ~state.terminated
        occ = np.bitwise_or.reduce(worlds.pieces, axis=-1)
        opponent = _popcount(worlds.pieces & (occ & ~worlds.own)[..., None])  # [B, K, 6]
        promoted = np.maximum(opponent - start, 0)[..., 1:5].sum(-1)
        assert np.all(opponent[live][..., T.KING] == 1)
        assert np.all((opponent[..., T.PAWN] + promoted)[live] <= start[T.PAWN])
        assert np.all(opponent[live].sum(-1) <= start.sum())


def test_belief_contains_the_truth(random_games):
    """The belief is sound: the true opponent pieces lie in `possible`, and the believed
    material total is the true one (captures are seen by the capturer)."""
    for state, _, belief, _, _, _ in random_games:
        live = ~state.terminated
        occ = np.bitwise_or.reduce(state.pieces, axis=-1)
        opponent = state.pieces & (occ & ~state.own)[:, None]
        assert np.all((opponent & ~belief.possible)[live] == 0)
        assert np.all(belief.counts.sum(-1)[live] == _popcount(opponent).sum(-1)[live])


def test_sampler_frequencies_match_the_enumerated_consistent_worlds():
    """Black has a king and a pawn, one of them blocks White's c-pawn: enumerate every
    placement on the squares White does not see, keep those whose legal moves equal the
    observed ones, and compare the sampler's frequencies with the uniform distribution."""
    fen = "k4/5/2p2/2P2/4K w - - 0 1"
    variant, rules = "dark", R.get("dark")
    position = R.parse_fen(fen)
    true_planes, _ = R.analyse_positions(rules, np.asarray(position.pieces), position.own)
    own = position.own
    own_pieces = np.asarray(position.pieces, np.uint32) & own
    hidden = T.FULL & ~int(
        game.visible_squares(
            jnp.asarray(position.pieces, jnp.uint32), jnp.uint32(own), jnp.asarray(true_planes[0])
        )
    )
    worlds = []
    for king in range(25):
        for pawn in range(25):
            if king == pawn or not (hidden >> king & 1 and hidden >> pawn & 1):
                continue
            if pawn % 5 in (0, 4):  # an opponent pawn stands on ranks 2-4
                continue
            pieces = own_pieces.copy()
            pieces[T.KING] |= 1 << king
            pieces[T.PAWN] |= 1 << pawn
            worlds.append(pieces)
    worlds = np.asarray(worlds, np.uint32)
    planes, _ = R.analyse_positions(rules, worlds, np.full(len(worlds), own, np.uint32))
    consistent = worlds[np.all(planes == true_planes, axis=1)]
    assert 10 <= len(consistent) <= 40
    index = {tuple(w): i for i, w in enumerate(consistent)}

    num_samples = 3000
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_samples, *x.shape)), R.from_fen(fen))
    batch = R.batch(variant, num_samples)

    @functools.partial(jax.jit)
    def draw(key):
        games = fog_lib.start_games(state, exact=False)
        observation, belief = fog_lib.observe_and_update(batch, games, R.legal_planes(batch, state))
        return B.sample_worlds_batch(key, batch, observation, belief, 1, 128)

    sampled = jax.device_get(draw(jax.random.key(0)))
    assert np.all(sampled.num_consistent > 0)
    counts = np.zeros(len(consistent))
    for pieces in sampled.pieces[:, 0]:
        counts[index[tuple(pieces)]] += 1  # KeyError: a world outside the consistent set
    expected = num_samples / len(consistent)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = len(consistent) - 1
    assert chi2 < df + 6 * np.sqrt(2 * df), (chi2, counts)
