"""Self-play: a `lax.scan` over plies of B games at once, and the training targets.

`selfplay` plays `config.selfplay.num_plies` plies of every game in a batch with search on each
move. A game that ends is replaced in place by a fresh start position (terminal flags cleared),
so the batch never idles, and the returned state carries the unfinished games on into the next
call: the scan of the next training iteration continues them.

`compute_targets` turns the recorded `Trajectory` [T, B] into a flat `learner.Batch` [T * B]:
the policy target is the search's action weights, the value target the final result of the
sample's game from the side to move's point of view, found by a backward scan over the plies
that restarts at every game boundary. Samples of games still running when the scan stopped
have no result yet: their value is masked (`value_mask=False`) while their policy still trains,
unless the run keeps them pending in its replay ring (`replay.backfill_outcomes`:
`pending_movers` marks them, `carried_results` finds their game's end in the next scan, and
`learner.replay_resolve` writes the result into the ring) or bootstraps them from the search's
value (`selfplay.value_bootstrap`).

Left-right mirror augmentation (`mirror_files`, `random_mirror`) is valid only for a variant
whose rules and start position are both symmetric under the file mirror a<->e. Every rule of
the engine is (move vectors, colour rules and square colours keep their parity under
f -> 4 - f on a 5-file board), but none of the nine start positions is: the kings and queens
sit on the d and e files (`file_symmetric_variants()` returns an empty tuple), so training
never mirrors today; the functions are generic for variants added later.

Everything here is pure and jittable; `config` is a Python-level (static) ConfigDict.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mmc_jax import rules as R
from mmc_jax import search
from mmc_jax.infra import sharding
from mmc_jax.rules import notation
from mmc_jax.rules import tables as T
from mmc_jax.rules.contract import BOARD, BoardGame
from mmc_jax.training import learner


class Trajectory(NamedTuple):
    """What `selfplay` records, one entry per ply and game: leading axes [T, B].

    obs: `[T, B, 5, 5, C]` float32 observation of the searched position (side to move's view).
    legal_action_mask: `[T, B, A]` bool legal actions of that position.
    action_weights: `[T, B, A]` float32 search policy (sums to 1 over the legal actions).
    action: `[T, B]` int32 action played.
    mover: `[T, B]` int32 colour to move in the searched position (0 White, 1 Black).
    ply: `[T, B]` int32 plies played in the game before this position.
    terminated: `[T, B]` bool, the game ended with this ply's move (the slot is then reset).
    rewards: `[T, B, 2]` float32 [White, Black] rewards of this ply's move (nonzero only on
      the move that ends a game).
    valid: `[T, B]` bool, the position was a live game (False only for a game that was
      already over in the state handed to `selfplay`; it is reset after its first ply).
    root_value: `[T, B]` float32 the search's value of the position for the side to move
      (what `compute_targets` bootstraps from for games cut off by the end of the scan).
    """

    obs: jax.Array
    legal_action_mask: jax.Array
    action_weights: jax.Array
    action: jax.Array
    mover: jax.Array
    ply: jax.Array
    terminated: jax.Array
    rewards: jax.Array
    valid: jax.Array
    root_value: jax.Array


def ply_record(state, next_state, *, obs, legal_action_mask, action_weights, action, valid,
               root_value) -> Trajectory:  # fmt: skip
    """The `Trajectory` entry of the ply from `state` to `next_state` (both [B]): the one
    writer of self-play records, for `selfplay` and for fair fog self-play
    (`training.fog`). The mover, the ply count, the end and the rewards come from the two
    states; the rest is the search's."""
    return Trajectory(
        obs=obs,
        legal_action_mask=legal_action_mask,
        action_weights=action_weights,
        action=action,
        mover=state.turn,
        ply=state.ply,
        terminated=next_state.terminated,
        rewards=next_state.rewards,
        valid=valid,
        root_value=root_value,
    )


def where_games(condition: jax.Array, if_true, if_false):
    """Per-game select between two pytrees whose leaves have a leading axis B (`condition`
    bool[B]): game b's leaves from `if_true` where `condition[b]`, else from `if_false`."""

    def select(a, b):
        return jnp.where(condition.reshape(condition.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(select, if_true, if_false)


def sample_action(
    key: jax.Array, action_weights: jax.Array, legal_action_mask: jax.Array, temperature: float
) -> jax.Array:
    """int32 [B]: a legal action drawn with probability proportional to `weights ** (1/t)`.

    `temperature == 0` (static) gives the argmax. Actions with zero weight are never drawn.
    """
    allowed = legal_action_mask & (action_weights > 0)
    if temperature == 0:
        return jnp.argmax(jnp.where(allowed, action_weights, -1.0), axis=-1).astype(jnp.int32)
    logits = jnp.log(jnp.where(allowed, action_weights, 1.0)) / temperature
    logits = jnp.where(allowed, logits, -jnp.inf)
    return sharding.categorical(key, logits).astype(jnp.int32)


def selfplay(
    network,
    params,
    rules_b: R.Rules,
    state: R.State,
    key: jax.Array,
    config: ml_collections.ConfigDict,
    game: BoardGame = BOARD,
) -> tuple[R.State, Trajectory]:
    """Plays `config.selfplay.num_plies` plies of the B games of `state` of `game` (the Game
    contract's board game) with search.

    Each ply: search every game (`search.run_search`), pick the move, step, and replace every
    game that just ended by the start position of its variant. The move is drawn from the
    search's action weights (with `selfplay.temperature`) while the game's ply count is below
    `selfplay.temperature_plies`, afterwards it is the search's own choice (Gumbel MuZero's
    sequential-halving winner; for "muzero" the most visited action).

    Args:
      network: the `PolicyValueNet`.
      params: its parameters.
      rules_b: `Rules` [B], one per game (a batch may mix variants).
      state: `State` [B], the games to continue (e.g. `R.init(rules_b)` or the state returned
        by the previous call).
      key: consumed.
      config: run config; reads `config.selfplay.{num_plies, num_simulations, algorithm,
        gumbel_scale, max_num_considered_actions, temperature_plies, temperature,
        dirichlet_alpha, dirichlet_fraction}` (the last three optional).
      game: the Game contract's board game (`mmc_jax.rules.BOARD`): its rules step, observe
        and generate moves here and in the search.

    Returns:
      (state [B] after the last ply, `Trajectory` [T, B] with T = num_plies).
    """
    sp = config.selfplay
    algorithm = sp.algorithm
    temperature = float(sp.get("temperature", 1.0))
    planes, start, start_planes = planes_and_starts(rules_b, state, game)

    def one_ply(carry, ply_key: jax.Array):
        state, planes = carry
        search_key, sample_key = jax.random.split(ply_key)
        valid = ~state.terminated
        obs = game.observe(rules_b, state, planes)
        legal_action_mask = game.planes_to_mask(planes)
        policy = search.run_search(
            network,
            params,
            rules_b,
            state,
            search_key,
            num_simulations=int(sp.num_simulations),
            algorithm=algorithm,
            gumbel_scale=float(sp.gumbel_scale),
            max_num_considered_actions=int(sp.max_num_considered_actions),
            dirichlet_alpha=float(sp.get("dirichlet_alpha", 0.3)),
            dirichlet_fraction=float(sp.get("dirichlet_fraction", 0.25)),
            planes=planes,
            game=game,
        )
        weights = jnp.where(legal_action_mask, policy.action_weights, 0.0)
        explore = state.ply < int(sp.temperature_plies)
        sampled = sample_action(sample_key, weights, legal_action_mask, temperature)
        if algorithm == "gumbel_muzero":
            chosen = policy.action.astype(jnp.int32)
        else:
            chosen = sample_action(sample_key, weights, legal_action_mask, 0.0)
        action = jnp.where(explore, sampled, chosen)

        next_state, next_planes = game.step_with_planes(rules_b, state, action, planes)
        done = next_state.terminated
        record = ply_record(
            state,
            next_state,
            obs=obs,
            legal_action_mask=legal_action_mask,
            action_weights=weights,
            action=action,
            valid=valid,
            root_value=policy.search_tree.summary().value,
        )
        # In-place auto-reset: the fresh start position has its terminal flag cleared.
        next_state = where_games(done, start, next_state)
        next_planes = jnp.where(done[:, None], start_planes, next_planes)
        return (next_state, next_planes), record

    keys = jax.random.split(key, int(sp.num_plies))
    (state, _), trajectory = jax.lax.scan(one_ply, (state, planes), keys)
    return state, trajectory


def planes_and_starts(rules_b: R.Rules, state: R.State, game: BoardGame = BOARD):
    """(legal planes of `state` [B, 49], the start positions `game.init(rules_b)` [B], their legal
    planes [B, 49]) from one move generation over both (vmapped over the pair), so that a
    program holds one copy of it here instead of two (`init`'s stuck-start test and the first
    ply's `legal_planes`). The scan then carries the planes `step_with_planes` hands on: one
    move generation a ply instead of two."""
    raw = game.start_position(rules_b)
    pair = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, raw)
    planes, start_planes = jax.vmap(lambda s: game.legal_planes(rules_b, s))(pair)
    return planes, game.end_if_stuck(raw, start_planes), start_planes


def game_results(terminated: jax.Array, rewards: jax.Array, init=None):
    """(float32[T, B, 2], bool[T, B]): for each ply of each game slot, the result (White,
    Black) of the game it belongs to, the first game end at or after it (`terminated` bool
    [T, B]; `rewards` float32[T, B, 2] the result where a game ended), and whether there is
    one: a backward scan that restarts at every game end, so a slot may hold several games
    back to back. The ply of a game still running when the scan ends takes `init` (outcome
    [B, 2], known [B]; default: no result, 0 and False)."""

    def backward(carry, ply):
        outcome, known = carry
        ended, result = ply
        # A game that ends at this ply starts (going backwards) a new result.
        outcome = jnp.where(ended[:, None], result, outcome)
        known = ended | known
        return (outcome, known), (outcome, known)

    if init is None:
        slots = terminated.shape[1]
        init = (jnp.zeros((slots, 2), jnp.float32), jnp.zeros((slots,), bool))
    return jax.lax.scan(backward, init, (terminated, rewards), reverse=True)[1]


def compute_targets(
    trajectory: Trajectory, bootstrap: bool = False, q_weight: float = 0.0
) -> learner.Batch:
    """Training samples [T * B] (ply-major) from a `Trajectory` [T, B].

    value_target: final result (+1 win, 0 draw, -1 loss) of the sample's game for the side to
      move in the sample, from a backward scan that restarts at every game end. With
      `bootstrap`, a game cut off by the end of the scan takes the search's value of its last
      recorded position (`root_value`, seen from that position's mover) as its result. With
      `q_weight` w > 0 (`selfplay.value_q_weight`) the target is (1 - w) * result + w * the
      search's value of the sample's own position ("z and q averaged"); a sample without a
      result yet holds w * its search value, which `learner.replay_resolve` adds to
      (1 - w) * the result when the game ends.
    value_mask: the result is known (the game ended within the trajectory, or `bootstrap`) and
      the sample is valid; without `bootstrap`, False for games cut off by the end of the scan.
    policy_target: the search's action weights; zero for invalid samples (no legal move), so
      they contribute nothing to the policy loss.
    """
    num_plies, batch_size = trajectory.mover.shape
    init = None
    if bootstrap:
        # [White, Black] values of the last position: v for its mover, -v for the other.
        last_value = trajectory.root_value[-1].astype(jnp.float32)
        last_mover = trajectory.mover[-1]
        white = jnp.where(last_mover == 0, last_value, -last_value)
        cut = trajectory.valid[-1] & ~trajectory.terminated[-1]
        init = (jnp.stack([white, -white], axis=1) * cut[:, None], cut)
    outcomes, known = game_results(trajectory.terminated, trajectory.rewards, init)
    values = jnp.take_along_axis(outcomes, trajectory.mover[..., None], axis=-1)[..., 0]
    value_mask = known & trajectory.valid
    value_target = jnp.where(value_mask, values, 0.0)
    if q_weight:  # a Python-level branch: w = 0 compiles the program it always did
        weighted_q = q_weight * jnp.where(trajectory.valid, trajectory.root_value, 0.0)
        value_target = (1.0 - q_weight) * value_target + weighted_q.astype(jnp.float32)
    policy_target = jnp.where(trajectory.valid[..., None], trajectory.action_weights, 0.0)

    def flat(x):
        return x.reshape(num_plies * batch_size, *x.shape[2:])

    return learner.Batch(
        obs=flat(trajectory.obs),
        legal_action_mask=flat(trajectory.legal_action_mask),
        policy_target=flat(policy_target),
        value_target=flat(value_target),
        value_mask=flat(value_mask),
    )


def pending_movers(trajectory: Trajectory, batch: learner.Batch) -> jax.Array:
    """`[T * B]` int32 (ply-major, as `compute_targets`): the mover of every valid sample whose
    game was still running at the end of the scan (no value target yet), -1 elsewhere. What a
    replay ring with `pending_mover` keeps until `carried_results` reports the game's end."""
    valid = trajectory.valid.reshape(-1)
    return jnp.where(valid & ~batch.value_mask, trajectory.mover.reshape(-1), -1).astype(jnp.int32)


def carried_results(trajectory: Trajectory) -> tuple[jax.Array, jax.Array]:
    """The end of the game every slot was playing when the scan began (the game carried over
    from the previous scan, whose earlier samples are still pending).

    Returns `finished` `[B]` bool (that game ended within this scan) and `outcome` `[B, 2]`
    float32, its [White, Black] result (zeros where it did not end): the rewards of the first
    valid ply that ended a game in the slot.
    """
    ends = trajectory.terminated & trajectory.valid
    first = jnp.argmax(ends, axis=0)
    finished = jnp.any(ends, axis=0)
    outcome = jnp.take_along_axis(trajectory.rewards, first[None, :, None], axis=0)[0]
    return finished, jnp.where(finished[:, None], outcome, 0.0).astype(jnp.float32)


def trajectory_stats(trajectory: Trajectory) -> dict[str, jax.Array]:
    """Scalar statistics of a trajectory: frames (valid plies), finished games, their results
    (White wins, Black wins, draws) and mean length in plies."""
    finished = trajectory.terminated & trajectory.valid
    games = jnp.sum(finished)
    white = trajectory.rewards[..., 0]
    length = jnp.sum(jnp.where(finished, trajectory.ply + 1, 0))
    return {
        "frames": jnp.sum(trajectory.valid),
        "games": games,
        "white_wins": jnp.sum(finished & (white > 0)),
        "black_wins": jnp.sum(finished & (white < 0)),
        "draws": jnp.sum(finished & (white == 0)),
        "mean_game_length": length / jnp.maximum(games, 1),
    }


# ---------------------------------------------------------------------------------------------
# Left-right mirror augmentation


def _mirror_file_actions() -> np.ndarray:
    """[A] int32: the id of every action mirrored a<->e (an involution).

    The from-square's file f becomes 4 - f; a plane's move vector (df, dr) becomes (-df, dr);
    an under-promotion keeps its piece and swaps "toward the e-file" with "toward the a-file".
    """
    plane_of_vector = {tuple(T.PLANE_VECTORS[p]): p for p in range(9, T.NUM_PLANES)}
    mirrored_plane = np.zeros(T.NUM_PLANES, np.int32)
    for plane in range(9):
        piece, direction = divmod(plane, 3)
        mirrored_plane[plane] = 3 * piece + (0, 2, 1)[direction]
    for plane in range(9, T.NUM_PLANES):
        df, dr = T.PLANE_VECTORS[plane]
        mirrored_plane[plane] = plane_of_vector[(-int(df), int(dr))]
    actions = np.arange(T.NUM_ACTIONS)
    from_square, plane = np.divmod(actions, T.NUM_PLANES)
    file, rank = np.divmod(from_square, 5)
    mirrored = T.NUM_PLANES * T.square(4 - file, rank) + mirrored_plane[plane]
    return mirrored.astype(np.int32)


MIRROR_FILE_ACTIONS = _mirror_file_actions()


def is_file_symmetric(variant: str) -> bool:
    """Whether `variant`'s start position is unchanged by the file mirror a<->e.

    The rules themselves are mirror-symmetric for every variant (see the module docstring),
    so this decides whether mirror augmentation is valid for the variant.
    """
    R.check_variant(variant)
    return _board_is_file_symmetric(R.START_FENS[variant])


def _board_is_file_symmetric(fen: str) -> bool:
    """Every rank of the FEN's board reads the same left to right and right to left."""
    return all(rank == rank[::-1] for rank in notation.board_rows(fen.split()[0]))


def file_symmetric_variants() -> tuple[str, ...]:
    """The registered variants whose start position is file-symmetric (today: none)."""
    return tuple(v for v in R.VARIANTS if _board_is_file_symmetric(R.START_FENS[v]))


def mirror_files(batch: learner.Batch) -> learner.Batch:
    """Every sample mirrored a<->e: observations flipped along the file axis, and the legal
    mask and policy target permuted by `MIRROR_FILE_ACTIONS` (values unchanged)."""
    permutation = jnp.asarray(MIRROR_FILE_ACTIONS)
    return batch._replace(
        obs=jnp.flip(batch.obs, axis=2),  # obs is [N, rank, file, C]
        legal_action_mask=batch.legal_action_mask[:, permutation],
        policy_target=batch.policy_target[:, permutation],
    )


def random_mirror(key: jax.Array, batch: learner.Batch, symmetric: jax.Array) -> learner.Batch:
    """Mirrors each sample with probability 1/2 where `symmetric` [N] (its variant is
    file-symmetric); the others are returned unchanged. Consumes `key`."""
    flip = symmetric & jax.random.bernoulli(key, 0.5, symmetric.shape)
    return where_games(flip, mirror_files(batch), batch)
