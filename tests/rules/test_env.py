"""`mmc_jax.faces.pgx_env`: every variant as a pgx Env. pgx's own `api_test` on board variants and a
sensing variant, the two-phase turn of sensing as a State sees it, rewards by player id, pgx's
illegal-action rule, the waiting player's observation is fair, and `make`'s one-line refusals."""

from typing import Literal

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.faces import pgx_env as E

api_test = pytest.importorskip("pgx._src.api_test")


def _single_act_randomly(key, legal_action_mask):
    """pgx's `act_randomly` for one state: pgx's own samples over axis 1, so its single-state
    test fails on pgx's own gardner_chess under this JAX (IndexError); the batch test uses
    pgx's unchanged."""
    logits = jnp.where(legal_action_mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits)


@pytest.mark.parametrize(
    "spec",
    [
        "gardner",
        pytest.param("capture=atomic,goal=king", marks=pytest.mark.slow),
        pytest.param("dark", marks=pytest.mark.slow),
        "goal=king,fog=sense:3",
    ],
)
def test_pgx_api_test_passes(spec, monkeypatch):
    """pgx's api_test with two stated patches: its closed list of env ids names this one, and
    the single-state random policy is 1-D (`_single_act_randomly`)."""
    env = E.make(spec)
    pgx_act_randomly = api_test.act_randomly
    monkeypatch.setattr(api_test, "EnvId", Literal[env.id])
    monkeypatch.setattr(api_test, "act_randomly", jax.jit(_single_act_randomly))
    api_test.api_test_single(env, num=2)
    monkeypatch.setattr(api_test, "act_randomly", pgx_act_randomly)
    api_test.api_test_batch(env, num=1)


def _play(env, seed: int, plies: int):
    init, step = jax.jit(env.init), jax.jit(env.step)
    key = jax.random.key(seed)
    state = init(key)
    states = [state]
    for _ in range(plies):
        if bool(state.terminated):
            break
        key, sub = jax.random.split(key)
        state = step(state, _single_act_randomly(sub, state.legal_action_mask))
        states.append(state)
    return states


def test_a_sensing_turn_is_two_steps_by_the_same_player():
    env = E.make("goal=king,fog=sense:3")
    sense = jax.jit(env.sense_phase)
    states = _play(env, 0, 40)
    assert len(states) > 8
    for before, after in zip(states, states[1:], strict=False):
        if bool(after.terminated):
            break
        if bool(sense(before)):  # a sense: the same player moves next, in the move phase
            assert int(after.current_player) == int(before.current_player)
            assert not bool(sense(after))
            mask = np.asarray(before.legal_action_mask)
            assert mask.any() and not mask[: R.recon.SENSE_BASE].any()  # only windows
        else:  # a move: the other player, who senses first
            assert int(after.current_player) != int(before.current_player)
            assert bool(sense(after))


def test_rewards_are_by_player_id_and_sum_to_zero_at_a_decisive_end():
    env = E.make("goal=king")  # a king capture ends random games quickly
    finished = 0
    for seed in range(12):
        states = _play(env, seed, 200)
        last = states[-1]
        white = int(last._player_order[0])
        assert {int(p) for p in states[0]._player_order} == {0, 1}
        if not bool(last.terminated) or not np.abs(np.asarray(last.rewards)).any():
            continue
        finished += 1
        assert float(last.rewards.sum()) == 0.0
        # The game's own [White, Black] rewards, placed by player id.
        game_rewards = np.asarray(last._game.rewards[0])
        assert float(last.rewards[white]) == game_rewards[0]
        assert float(last.rewards[1 - white]) == game_rewards[1]
        # The mover of the last step won it (a king is only taken by its capturer).
        assert float(last.rewards[int(states[-2].current_player)]) == 1.0
    assert finished >= 3, "too few decisive games: the check would be empty"


def test_an_illegal_action_loses_for_the_mover():
    env = E.make("gardner")
    state = jax.jit(env.init)(jax.random.key(1))
    illegal = int(np.flatnonzero(~np.asarray(state.legal_action_mask))[0])
    after = jax.jit(env.step)(state, illegal)
    mover = int(state.current_player)
    assert bool(after.terminated)
    assert float(after.rewards[mover]) == -1.0 and float(after.rewards[1 - mover]) == 1.0


@pytest.mark.filterwarnings("ignore:.*player_id.*:DeprecationWarning")
def test_the_waiting_players_view_is_the_movers_view_of_the_swapped_position():
    """Gardner (no fog): `observe(state, other)` equals what the project's own observation of
    the FEN with the other side to move shows, on its board channels and colour."""
    env = E.make("gardner")
    observe = jax.jit(env.observe)
    for state in _play(env, 3, 12)[1:]:
        if bool(state.terminated):
            break
        fen = R.to_fen(jax.tree.map(lambda x: x[0], state._game)).split()
        fen[1] = "w" if fen[1] == "b" else "b"
        swapped = R.from_fen(" ".join(fen), "gardner")
        want = R.observe(R.batch("gardner", 1), jax.tree.map(lambda x: x[None], swapped))[0]
        waiting = 1 - int(state.current_player)
        got = observe(state, jnp.int32(waiting))
        np.testing.assert_array_equal(np.asarray(got)[..., :14], np.asarray(want)[..., :14])
        np.testing.assert_array_equal(observe(state, state.current_player), state.observation)


@pytest.mark.parametrize("spec", ["dark", "goal=king,fog=sense:3"])
@pytest.mark.filterwarnings("ignore:.*player_id.*:DeprecationWarning")
def test_the_waiting_player_never_sees_what_the_mover_sees(spec):
    """Under fog or sensing, the waiting player's observation is unchanged when a piece of the
    mover that the waiting player cannot see moves to another such square; the mover's own
    view of the same change shows it (the check is not empty)."""
    env = E.make(spec)
    observe = jax.jit(env.observe)
    rules = env.rules
    rng = np.random.default_rng(0)
    pairs = 0
    for seed in range(4):
        for state in _play(env, seed, 30)[2:]:
            if bool(state.terminated):
                break
            game = state._game
            waiting = jnp.int32(1 - int(state.current_player))
            base = np.asarray(observe(state, waiting))
            pieces = np.asarray(game.pieces[0], np.uint32)
            own = int(game.own[0])
            occupied = int(np.bitwise_or.reduce(pieces))
            # What the waiting player sees of the board, in the mover's view.
            hidden_channel = 12 if spec == "dark" else 13
            hidden = base[..., hidden_channel].T.reshape(-1)  # its view -> squares
            for square in rng.permutation(25)[:6]:
                bit = 1 << int(square)
                kind = next((k for k in range(6) if pieces[k] & bit), None)
                if kind in (None, 5) or not own & bit:
                    continue
                free = [
                    t
                    for t in range(25)
                    if not occupied & (1 << t) and (kind != 0 or t % 5 not in (0, 4))
                ]
                if not free:
                    continue
                to = 1 << int(rng.choice(free))
                moved = pieces.copy()
                moved[kind] = (moved[kind] & ~np.uint32(bit)) | np.uint32(to)
                changed_game = game.replace(
                    pieces=jnp.asarray(moved)[None], own=jnp.uint32((own & ~bit) | to)[None]
                )
                changed = state.replace(_game=changed_game)
                if not _hidden_from_waiting(spec, rules, game, changed_game, bit | to, hidden):
                    continue
                np.testing.assert_array_equal(np.asarray(observe(changed, waiting)), base)
                pairs += 1
    assert pairs >= 10, f"only {pairs} hidden changes: the check would be empty"


def _hidden_from_waiting(spec, rules, game, changed, squares: int, hidden) -> bool:
    """Both squares of the change are out of the waiting player's sight, and its sight is the
    same before and after."""
    if spec != "dark":
        return True  # under sensing the waiting player never sees the mover's true pieces
    from mmc_jax.rules import contract

    after = np.asarray(contract.BOARD.observe_waiting(rules, changed)[0])[..., 12]
    after = after.T.reshape(-1)
    if not np.array_equal(after, hidden):
        return False  # the change opened or closed a line of sight: not a hidden change
    for sq in range(25):
        if squares & (1 << sq):
            if not (hidden[_mirror(sq)] and after[_mirror(sq)]):
                return False
    return True


def _mirror(square: int) -> int:
    """A square index (5 * file + rank) in the other side's view."""
    return 5 * (square // 5) + 4 - square % 5


def test_make_refuses_in_one_line():
    with pytest.raises(ValueError, match="did you mean") as error:
        E.make("gardnr")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="no legal move in its start position") as error:
        E.make("monochromatic")
    assert "\n" not in str(error.value)


def test_a_batch_is_jax_vmap():
    env = E.make("baby")
    keys = jax.random.split(jax.random.key(0), 3)
    state = jax.jit(jax.vmap(env.init))(keys)
    chex.assert_shape(state.observation, (3, *env.game.observation_shape))
    chex.assert_shape(state.legal_action_mask, (3, env.num_actions))
    assert env.id == "baby" and env.num_players == 2
