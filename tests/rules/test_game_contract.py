"""One harness over every Game (`mmc_jax.rules.contract`), as pgx's api_test runs one over its
games: shapes and dtypes, determinism, terminal states absorb, a legal action until the end,
and, under the fog of war and sensing, that what the mover may read does not change when only
what it cannot see changes."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import rules as R
from mmc_jax.rules import contract, recon, variants
from mmc_jax.rules import game as board
from mmc_jax.rules import tables as T

# (game, variant): plain, fog of war, a composition, and both sensing window sizes.
CASES = [
    ("board", "gardner"),
    ("board", "dark"),
    ("board", "atomic,goal=extinction"),
    ("recon", "recon"),
    ("recon", "recon,fog=sense:3,capture=rifle"),
]
BATCH = 6
PLY_CAP = 24  # every game ends within the scan below (a draw by rule at the latest)


def _ids(case):
    return f"{case[0]}-{case[1]}"


def _rules(game: contract.Game, spec: str):
    rules = game.batch(spec, BATCH)
    return rules.replace(max_plies=jnp.full_like(rules.max_plies, PLY_CAP))


def _random_action(key, mask):
    """A uniformly random legal action per game (0 when none is legal)."""
    noise = jax.random.uniform(key, mask.shape)
    return jnp.argmax(jnp.where(mask, noise, -1.0), axis=-1).astype(jnp.int32)


@functools.cache
def _compiled(game_name: str) -> dict:
    """The jitted functions of a game, shared by all its variants (rules are data)."""
    game = contract.GAMES[game_name]
    steps = (PLY_CAP + 2) * (2 if game.has_sense_phase else 1)

    def play(rules, key):
        def body(state, key):
            mask = game.legal_action_mask(rules, state)
            action = _random_action(key, mask)
            return game.step(rules, state, action), (state, mask, action)

        return jax.lax.scan(body, game.init(rules), jax.random.split(key, steps))

    def everything(rules):
        state = game.init(rules)
        mask = game.legal_action_mask(rules, state)
        after = game.step(rules, state, jnp.argmax(mask, axis=-1).astype(jnp.int32))
        return dict(
            state=state,
            after=after,
            mask=mask,
            obs=game.observe(rules, state),
            waiting=game.observe_waiting(rules, after),
            desc=game.descriptor(rules),
            sensing=game.sense_phase(state),
            windows=game.sense_action_mask(rules),
            view=game.player_view(rules, state),
        )

    return dict(
        play=jax.jit(play),
        everything=jax.jit(everything),
        step=jax.jit(game.step),
        view=jax.jit(game.player_view),
    )


@functools.cache
def _play(game_name: str, spec: str, seed: int):
    """States [T, B] of random games to the end, and the masks and actions played."""
    rules = _rules(contract.GAMES[game_name], spec)
    final, (states, masks, actions) = _compiled(game_name)["play"](rules, jax.random.key(seed))
    return rules, jax.device_get((final, states, masks, actions))


@pytest.fixture(scope="module", params=CASES, ids=_ids)
def case(request):
    game_name, spec = request.param
    return contract.GAMES[game_name], spec


def test_every_game_is_registered_and_plays_its_variants():
    assert set(contract.GAMES) == {"board", "recon"}
    for game_name, spec in CASES:
        assert contract.game_for(spec) is contract.GAMES[game_name]
        other = next(g for g in contract.GAMES.values() if g.name != game_name)
        with pytest.raises(ValueError, match=f"play it as {game_name}"):
            other.batch(spec, 2)


def test_shapes_and_dtypes(case):
    game, spec = case
    rules = _rules(game, spec)

    out = _compiled(game.name)["everything"](rules)
    chex.assert_shape(out["mask"], (BATCH, game.num_actions))
    chex.assert_type(out["mask"], bool)
    chex.assert_shape(out["obs"], (BATCH, *game.observation_shape))
    chex.assert_type(out["obs"], jnp.float32)
    chex.assert_shape(out["waiting"], (BATCH, *game.observation_shape))
    chex.assert_type(out["waiting"], jnp.float32)
    chex.assert_shape(out["desc"], (BATCH, game.descriptor_size))
    chex.assert_type(out["desc"], jnp.float32)
    state = out["state"]
    chex.assert_shape(game.terminated(state), (BATCH,))
    chex.assert_type(game.terminated(state), bool)
    chex.assert_shape(game.rewards(state), (BATCH, 2))
    chex.assert_type(game.rewards(state), jnp.float32)
    chex.assert_shape(out["sensing"], (BATCH,))
    chex.assert_shape(out["windows"], (BATCH, game.num_actions))
    chex.assert_trees_all_equal_shapes_and_dtypes(out["after"], state)
    assert not state.terminated.any() and out["mask"].any(axis=-1).all()
    for leaf in jax.tree.leaves(out["view"]):
        assert leaf.shape[0] == BATCH


def test_step_is_deterministic(case):
    game, spec = case
    _, first = _play(game.name, spec, 0)
    rules = _rules(game, spec)
    _, states, _, actions = first
    # Replaying the recorded actions from the start reproduces every state exactly.
    state = game.init(rules)
    step = _compiled(game.name)["step"]
    for t in range(actions.shape[0]):
        chex.assert_trees_all_equal(state, jax.tree.map(lambda x, t=t: x[t], states))
        state = step(rules, state, actions[t])


def test_games_end_with_a_legal_action_until_then_and_absorb_afterwards(case):
    game, spec = case
    rules, (final, states, masks, _) = _play(game.name, spec, 0)
    terminated = states.terminated  # [T, B]
    assert final.terminated.all(), "every game ends within the ply cap's scan"
    assert masks[~terminated].any(axis=-1).all()  # a legal action in every live state
    assert not masks[terminated].any()  # none in a finished one
    assert (np.diff(terminated.astype(int), axis=0) >= 0).all()  # never un-finished
    # Any action on a finished game: the same state, zero rewards.
    step = _compiled(game.name)["step"]
    for action in (0, game.num_actions - 1, 7):
        after = step(rules, final, jnp.full((BATCH,), action, jnp.int32))
        np.testing.assert_array_equal(after.rewards, 0.0)
        chex.assert_trees_all_equal(after.replace(rewards=final.rewards), jax.device_get(final))
    # Rewards are zero-sum, and only a finishing step pays.
    rewards = states.rewards
    np.testing.assert_array_equal(rewards.sum(-1), 0.0)
    assert (rewards[1:][terminated[:-1]] == 0).all()


def test_sense_phase_offers_only_sense_windows(case):
    game, spec = case
    rules, (_, states, masks, _) = _play(game.name, spec, 0)
    sensing = np.asarray(jax.vmap(game.sense_phase)(states))  # [T, B]
    windows = np.asarray(game.sense_action_mask(rules))  # [B, A]
    if not game.has_sense_phase:
        assert not sensing.any() and not windows.any()
        return
    assert sensing.any() and (~sensing & ~states.terminated).any()
    assert (masks[sensing] == np.broadcast_to(windows, masks.shape)[sensing]).all()
    assert not (masks & windows[None]).any(axis=-1)[~sensing].any()


# ------------------------------------------------------------------------------------ fairness


@jax.jit
def _board_seen(rules, state):
    """The squares the mover of one board-game state sees (fog of war)."""
    return board.visible_squares(state.pieces, state.own, board.legal_planes(rules, state))


def _hidden_variations(game: contract.Game, rules, state, rng: np.random.Generator):
    """Copies of the unbatched `state` that differ only in what its mover cannot see: an
    opponent piece (not the king) moved to another square the mover cannot see. Under the fog
    of war "cannot see" is the board game's hidden set before and after the change; under
    sensing the mover never sees the true opponent pieces (only its memory, which stays)."""
    pieces = np.asarray(state.pieces, np.uint32)
    own = int(state.own)
    occupied = int(np.bitwise_or.reduce(pieces))
    opponent = occupied & ~own
    if game.name == "board":
        seen = int(_board_seen(rules, state))
    else:
        seen = own  # what the mover sees of the true board: its own pieces
    out = []
    for square in rng.permutation(T.NUM_SQUARES):
        bit = 1 << int(square)
        if not opponent & bit or seen & bit or pieces[T.KING] & bit:
            continue
        kind = int(next(k for k in range(6) if pieces[k] & bit))
        for target in rng.permutation(T.NUM_SQUARES):
            to = 1 << int(target)
            pawn_rank = int(target) % 5 in (0, 4)
            if occupied & to or seen & to or (kind == T.PAWN and pawn_rank):
                continue
            moved = pieces.copy()
            moved[kind] = (moved[kind] & ~np.uint32(bit)) | np.uint32(to)
            changed = state.replace(pieces=jnp.asarray(moved))
            if game.name == "board":
                if int(_board_seen(rules, changed)) != seen:
                    continue  # the move made a square visible: not a hidden change
            out.append(changed)
            break
    return out


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[1] in ("dark",) or c[0] == "recon"], ids=_ids
)
def test_what_the_mover_may_read_ignores_what_it_cannot_see(case):
    game_name, spec = case
    game = contract.GAMES[game_name]
    rules, (_, states, _, _) = _play(game_name, spec, 0)
    rng = np.random.default_rng(0)
    view = _compiled(game_name)["view"]
    pairs = 0
    for t in range(0, states.terminated.shape[0], 3):
        for b in range(BATCH):
            state = jax.tree.map(lambda x, t=t, b=b: x[t, b], states)
            if state.terminated:
                continue
            one_rules = jax.tree.map(lambda x, b=b: x[b], rules)
            for changed in _hidden_variations(game, one_rules, state, rng)[:2]:
                batched = jax.tree.map(lambda a, c: jnp.stack([a, c]), state, changed)
                both = jax.tree.map(lambda x: jnp.stack([x, x]), one_rules)
                seen = jax.device_get(view(both, batched))
                chex.assert_trees_all_equal(
                    jax.tree.map(lambda x: x[0], seen), jax.tree.map(lambda x: x[1], seen)
                )
                pairs += 1
    assert pairs >= 20, f"only {pairs} hidden changes were found: the check would be empty"


def test_the_board_game_observation_does_read_visible_pieces():
    """The contrast that keeps the fairness check honest: a visible change is seen."""
    game = contract.BOARD
    rules = _rules(game, "gardner")
    state = game.init(rules)
    pieces = state.pieces.at[:, T.PAWN].set(state.pieces[:, T.PAWN] & ~jnp.uint32(1 << 1))
    changed = state.replace(pieces=pieces)
    assert not np.array_equal(game.observe(rules, state), game.observe(rules, changed))
    assert recon.NUM_ACTIONS == contract.RECON.num_actions
    assert variants.is_sense("recon")


ONE_ROAD = {
    contract.BOARD: ("init", "start_position", "end_if_stuck", "step", "step_with_planes",
              "legal_planes", "legal_action_mask", "observe", "planes_to_mask"),
    contract.RECON: {"recon_init": "init", "recon_step": "step",
              "recon_legal_action_mask": "legal_action_mask", "recon_observe": "observe"},
}  # fmt: skip


def test_the_rules_batched_functions_are_the_contracts_methods():
    """One implementation: `R.init`, `R.step`, ... and `R.recon_*` are BOARD's and RECON's
    methods, so this harness certifies the code the trainers call (they were vmaps of their
    own beside the contract's)."""
    for name in ONE_ROAD[contract.BOARD]:
        assert getattr(R, name) == getattr(contract.BOARD, name), name
    for alias, name in ONE_ROAD[contract.RECON].items():
        assert getattr(R, alias) == getattr(contract.RECON, name), alias


# The parts that play games (issue 67): they call the contract, and self-play and search the
# Game they are handed. The functions a game is made of, as `R.` attributes a module may not
# call (it calls the contract's `game.`/`BOARD.` instead).
GAME_FUNCTIONS = ONE_ROAD[contract.BOARD]
PLAYING_MODULES = (
    "training/selfplay.py", "training/fog.py", "training/games.py", "search/__init__.py",
    "search/one_ply.py", "evaluation/arena.py", "evaluation/match.py",
    "evaluation/policies.py", "evaluation/pimc.py", "evaluation/model_engine.py",
)  # fmt: skip


def test_self_play_search_arenas_and_players_import_the_contract_and_call_it():
    import ast
    from pathlib import Path

    package = Path(R.__file__).resolve().parents[1]
    for module in PLAYING_MODULES:
        tree = ast.parse((package / module).read_text())
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert "mmc_jax.rules.contract" in imported, module
        calls = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "R"
            and node.attr in GAME_FUNCTIONS
        }
        assert not calls, (module, sorted(calls))


class _CountingBoard(contract.BoardGame):
    """The board game, counting the moves it was asked to step while a program was traced."""

    def __init__(self):
        self.traced = []

    def step_with_planes(self, rules, state, actions, planes):
        self.traced.append(actions.shape)
        return super().step_with_planes(rules, state, actions, planes)


def test_self_play_and_its_search_step_the_game_they_are_handed():
    import ml_collections

    from mmc_jax.model import network as network_lib
    from mmc_jax.training import selfplay

    network = network_lib.make_network(
        ml_collections.ConfigDict({"num_blocks": 1, "channels": 8, "dtype": "float32"})
    )
    params = network_lib.init_params(network, jax.random.key(0), R.OBS_SHAPE)
    config = ml_collections.ConfigDict(
        {
            "selfplay": {
                "num_plies": 2, "num_simulations": 2, "algorithm": "gumbel_muzero",
                "gumbel_scale": 1.0, "max_num_considered_actions": 4, "temperature_plies": 0,
            }
        }
    )  # fmt: skip
    rules = R.batch(["gardner", "atomic"])
    game = _CountingBoard()
    state, trajectory = jax.eval_shape(
        lambda p, s, k: selfplay.selfplay(network, p, rules, s, k, config, game),
        params,
        R.init(rules),
        jax.random.key(1),
    )
    # The search's recurrent function (one state per game) and the ply's own move.
    assert len(game.traced) >= 2 and all(shape == (2,) for shape in game.traced)
    assert trajectory.action.shape == (2, 2)
