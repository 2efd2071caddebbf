"""The replay ring's back-filled results (`replay.backfill_outcomes`): a game cut off by the end
of a self-play scan gets its result when it ends in a later scan, exactly the targets that
`selfplay.compute_targets` would give the whole history played as one long trajectory.

Synthetic trajectories (random game ends, results and movers), no network: a few small jits.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.training import learner, selfplay

SCANS, PLIES, SLOTS = 6, 4, 5
NUM_ACTIONS = 3  # the targets do not depend on the action space


def random_history(seed: int) -> selfplay.Trajectory:
    """`SCANS * PLIES` plies of `SLOTS` games: every ply ends its game with probability 0.2, a
    random [White, Black] result (not necessarily zero-sum), random movers; the first ply of
    one slot is invalid (a game already over when the first scan began)."""
    rng = np.random.default_rng(seed)
    plies = SCANS * PLIES
    terminated = rng.random((plies, SLOTS)) < 0.2
    rewards = rng.integers(-1, 2, (plies, SLOTS, 2)).astype(np.float32) * terminated[..., None]
    valid = np.ones((plies, SLOTS), bool)
    valid[0, 0], terminated[0, 0] = False, True
    return selfplay.Trajectory(
        obs=jnp.asarray(rng.random((plies, SLOTS, 1, 1, 1)), jnp.float32),
        legal_action_mask=jnp.ones((plies, SLOTS, NUM_ACTIONS), bool),
        action_weights=jnp.full((plies, SLOTS, NUM_ACTIONS), 1.0 / NUM_ACTIONS, jnp.float32),
        action=jnp.zeros((plies, SLOTS), jnp.int32),
        mover=jnp.asarray(rng.integers(0, 2, (plies, SLOTS)), jnp.int32),
        ply=jnp.zeros((plies, SLOTS), jnp.int32),
        terminated=jnp.asarray(terminated),
        rewards=jnp.asarray(rewards),
        valid=jnp.asarray(valid),
        root_value=jnp.asarray(rng.uniform(-1, 1, (plies, SLOTS)), jnp.float32),
    )


@functools.partial(jax.jit, static_argnames="q_weight")
def scan_into_ring(
    ring: learner.ReplayBuffer, trajectory: selfplay.Trajectory, q_weight: float = 0.0
):
    """What `alphazero.iteration_step` does with one scan's trajectory and the ring."""
    batch = selfplay.compute_targets(trajectory, q_weight=q_weight)
    finished, outcome = selfplay.carried_results(trajectory)
    ring, resolved = learner.replay_resolve(ring, finished, outcome, q_weight=q_weight)
    return learner.replay_add(ring, batch, selfplay.pending_movers(trajectory, batch)), resolved


def scan_part(history: selfplay.Trajectory, scan: int) -> selfplay.Trajectory:
    """The plies of self-play scan `scan` of the history."""
    return jax.tree.map(lambda x: x[scan * PLIES : (scan + 1) * PLIES], history)


def play_in_scans(
    history: selfplay.Trajectory, capacity: int, q_weight: float = 0.0
) -> learner.ReplayBuffer:
    example = selfplay.compute_targets(jax.tree.map(lambda x: x[:1], history))
    ring = learner.replay_init(example, capacity, pending=True)
    for scan in range(SCANS):
        ring, _ = scan_into_ring(ring, scan_part(history, scan), q_weight=q_weight)
    return ring


@pytest.mark.parametrize("seed, q_weight", [(0, 0.0), (1, 0.0), (2, 0.25), (3, 1.0)])
def test_backfilled_ring_equals_the_targets_of_the_whole_history(seed, q_weight):
    history = random_history(seed)
    # ply-major [SCANS * PLIES * SLOTS]
    whole = selfplay.compute_targets(history, q_weight=q_weight)
    ring = play_in_scans(history, SCANS * PLIES * SLOTS, q_weight)
    np.testing.assert_array_equal(ring.data.value_mask, whole.value_mask)
    known = np.asarray(whole.value_mask)
    # Mixed targets: the same sum in two programs, which XLA may round differently.
    np.testing.assert_allclose(
        np.asarray(ring.data.value_target)[known],
        np.asarray(whole.value_target)[known],
        rtol=0,
        atol=1e-6 if q_weight else 0,
    )
    valid = np.asarray(history.valid).reshape(-1)
    still_running = valid & ~np.asarray(whole.value_mask)
    np.testing.assert_array_equal(
        ring.pending_mover, np.where(still_running, np.asarray(history.mover).reshape(-1), -1)
    )
    # Per scan alone, the cut-off games' samples have no value: the back-fill adds some.
    per_scan = sum(
        int(jnp.sum(selfplay.compute_targets(scan_part(history, s)).value_mask))
        for s in range(SCANS)
    )
    assert int(jnp.sum(whole.value_mask)) > per_scan


def test_a_wrapped_ring_holds_the_last_scans_with_their_results():
    history = random_history(7)
    whole = selfplay.compute_targets(history)
    kept = 2 * PLIES * SLOTS
    ring = play_in_scans(history, kept)
    data, filled = learner.replay_contents(ring)
    assert bool(jnp.all(filled))
    np.testing.assert_array_equal(data.value_mask, whole.value_mask[-kept:])
    np.testing.assert_array_equal(data.value_target, whole.value_target[-kept:])


def test_value_q_weight_mixes_the_result_with_the_search_value():
    history = random_history(5)
    plain = selfplay.compute_targets(history)
    q = np.where(np.asarray(history.valid), np.asarray(history.root_value), 0.0).reshape(-1)
    known = np.asarray(plain.value_mask)
    z = np.asarray(plain.value_target)
    for w in (0.25, 0.5, 1.0):
        mixed = selfplay.compute_targets(history, q_weight=w)
        np.testing.assert_array_equal(mixed.value_mask, plain.value_mask)
        np.testing.assert_allclose(
            mixed.value_target[known], ((1 - w) * z + w * q)[known], atol=1e-6
        )
        # No result yet: the sample holds w * q, which replay_resolve completes.
        np.testing.assert_allclose(mixed.value_target[~known], (w * q)[~known], atol=1e-6)
        np.testing.assert_array_equal(mixed.policy_target, plain.policy_target)
    assert np.abs(z[known] - q[known]).max() > 0.1  # the mixture is not trivially the result
    # The search value of an invalid sample (a game already over) never enters a target.
    assert not np.asarray(history.valid).reshape(-1)[0]
    assert float(selfplay.compute_targets(history, q_weight=1.0).value_target[0]) == 0.0


def test_carried_results_take_the_first_end_of_each_slot():
    history = random_history(3)
    part = scan_part(history, 0)
    finished, outcome = selfplay.carried_results(part)
    ends = np.asarray(part.terminated & part.valid)
    for slot in range(SLOTS):
        assert bool(finished[slot]) == ends[:, slot].any()
        expected = part.rewards[np.argmax(ends[:, slot]), slot] if ends[:, slot].any() else 0.0
        np.testing.assert_array_equal(outcome[slot], expected)


def test_pending_rings_reject_misuse_in_one_line():
    example = learner.Batch(
        obs=jnp.zeros((1, *R.OBS_SHAPE)),
        legal_action_mask=jnp.ones((1, R.NUM_ACTIONS), bool),
        policy_target=jnp.zeros((1, R.NUM_ACTIONS)),
        value_target=jnp.zeros((1,)),
        value_mask=jnp.zeros((1,), bool),
    )
    plain = learner.replay_init(example, 6)
    # A plain ring keeps the pytree every older checkpoint was written with (an optional
    # field, even None, would make orbax refuse them all).
    assert type(plain) is learner.ReplayBuffer
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(plain)]
    assert [p for p in paths if not p.startswith(".data")] == [
        ".position",
        ".size",
        ".total_added",
    ]
    with pytest.raises(ValueError, match="pending=True"):
        learner.replay_add(plain, example, jnp.zeros((1,), jnp.int32))
    with pytest.raises(ValueError, match="pending=True"):
        learner.replay_resolve(plain, jnp.zeros((3,), bool), jnp.zeros((3, 2)))
    ring = learner.replay_init(example, 6, pending=True)
    with pytest.raises(ValueError, match="not a multiple of the 4 game slots"):
        learner.replay_resolve(ring, jnp.zeros((4,), bool), jnp.zeros((4, 2)))
    # A sample added without movers is known: nothing pending.
    ring = learner.replay_add(ring, example)
    np.testing.assert_array_equal(ring.pending_mover, -1)


def test_a_ring_saved_before_the_backfill_default_names_the_flag_to_resume_it():
    from configs import gardner as gardner_config
    from mmc_jax.algorithms import alphazero

    mismatch = ValueError(
        "checkpoint runs/x/checkpoints/9 does not match the model being restored (1 mismatches):"
        "\n  leaf ['replay'].pending_mover: in the template but not in the checkpoint"
    )
    config = gardner_config.get_config("smoke")
    config.replay.backfill_outcomes = True  # as `cpu` and `full`
    error = alphazero.ALGORITHM.restore_error(mismatch, alphazero.prepare_config(config))
    assert "resume it with --config.replay.backfill_outcomes=False" in str(error)
    config = gardner_config.get_config("smoke")
    config.replay.backfill_outcomes = False
    error = alphazero.ALGORITHM.restore_error(mismatch, alphazero.prepare_config(config))
    assert "resume it with --config.replay.backfill_outcomes=True" in str(error)
