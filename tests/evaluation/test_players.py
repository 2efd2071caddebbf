"""Every built-in player (`mmc_jax.evaluation.players.REGISTRY`), checked the same way.

The tests are parametrised over the registry, so an entry added there is tested without a new
test: its policy plays legal moves in every variant (named and composed, positions of random
games), a flagged player's move under fog is the same from the true board and from the board
its side sees, it plays through every arena (slow tier), and the commands, the ladder and
in-training evaluation name it. Compile time dominates on 2 CPU cores: the positions come from
one compiled random-play scan over a batch mixing every variant.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from mmc_jax import evaluate
from mmc_jax import rules as R
from mmc_jax.evaluation import arena, ladder, match, pimc, players
from mmc_jax.search import belief as B

KINDS = players.kinds()
FOG_VARIANTS = ("dark", "dark,capture=atomic", "dark,capture=rifle", "baby,goal=extinction,fog=on")
# Named and composed; monochromatic also from a start where White can move (at its own start
# White is stalemated, so it has no position to move in).
VARIANTS = (
    *R.VARIANTS,
    *FOG_VARIANTS[1:],
    "mallet,colour=other",
    "gardner,goal=extinction",
    "monochromatic,start=rnbqk/1p1p1/5/1P1P1/RNBQK",
)
GAMES_PER_VARIANT = 8
NUM_PLIES = 24


@functools.partial(jax.jit, static_argnames="num_plies")
def _random_games(rules, state, planes, key, num_plies):
    """Every ply's (State [T, B], legal planes [T, B, 49]) of random games."""

    def ply(carry, ply_key):
        state, planes = carry
        action = R.random_legal_action(ply_key, R.planes_to_mask(planes))
        return R.step_with_planes(rules, state, action, planes), (state, planes)

    _, seen = jax.lax.scan(ply, (state, planes), jax.random.split(key, num_plies))
    return seen


@pytest.fixture(scope="module")
def positions():
    """(variant names [N], Rules [N], State [N], legal bool [N, 1225]) of the unfinished
    positions with a legal move among every ply of random games of every variant."""
    names = [v for v in VARIANTS for _ in range(GAMES_PER_VARIANT)]
    rules, state, planes = arena.start_batch(names, pad=False)  # no compiled move generator
    states, all_planes = _random_games(rules, state, planes, jax.random.key(0), NUM_PLIES)
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731 [T, B, ...] -> [T * B, ...]
    states, all_planes = jax.tree.map(flat, (states, all_planes))
    rules = jax.tree.map(lambda x: jnp.tile(x, (NUM_PLIES,) + (1,) * (x.ndim - 1)), rules)
    names = np.array(names * NUM_PLIES)
    live = np.flatnonzero(~np.asarray(states.terminated) & np.asarray(all_planes).any(axis=-1))
    take = lambda tree: jax.tree.map(lambda x: x[live], tree)  # noqa: E731
    rules, states, all_planes = take((rules, states, all_planes))
    return names[live], rules, states, all_planes


@functools.partial(jax.jit, static_argnames="kind")
def _moves(kind, key, rules, board, planes):
    return players.builtin(kind).policy(key, rules, board, R.planes_to_mask(planes))


@pytest.mark.parametrize("kind", KINDS)
def test_player_plays_a_legal_move_in_every_variant(kind, positions):
    names, rules, state, planes = positions
    assert set(names) == set(VARIANTS) - {"monochromatic"}  # positions to move in
    actions = _moves(kind, jax.random.key(1), rules, state, planes)
    chex.assert_shape(actions, (len(names),))
    chex.assert_type(actions, jnp.int32)
    legal = np.asarray(R.planes_to_mask(planes))
    actions = np.asarray(actions)
    illegal = ~legal[np.arange(len(names)), actions]
    assert not illegal.any(), f"{kind} plays illegal moves in {sorted(set(names[illegal]))}"


@pytest.mark.parametrize("kind", KINDS)
def test_flagged_player_moves_the_same_from_the_board_it_sees(kind, positions):
    """`fair_under_fog`: from the true board and from `observed_board` (own pieces and the
    enemy pieces in sight) the same key gives the same move, in every fog variant."""
    if not players.builtin(kind).fair_under_fog:
        pytest.skip(f"{kind} is not flagged fair_under_fog: it plays under fog only from its view")
    names, rules, state, planes = positions
    fog = np.flatnonzero(np.isin(names, FOG_VARIANTS))
    rules, state, planes = jax.tree.map(lambda x: x[fog], (rules, state, planes))
    seen = players.observed_board(jax.jit(B.observe_batch)(rules, state, planes))
    hidden = np.asarray(seen.pieces != state.pieces).any(axis=-1)
    assert hidden.mean() > 0.5  # the fog hides something in most positions
    for seed in range(3):
        key = jax.random.key(seed)
        from_truth = _moves(kind, key, rules, state, planes)
        from_view = _moves(kind, key, rules, seen, planes)
        np.testing.assert_array_equal(from_truth, from_view)


def test_registry_kinds_are_distinct_from_every_other_player_name():
    assert len(set(KINDS)) == len(KINDS) >= 2
    others = {*players.fog_kinds(), arena.NETWORK_KIND, arena.ENGINE_KIND, "checkpoint", "none"}
    assert not set(KINDS) & others
    for entry in players.REGISTRY:
        # A kind is a command-line word and part of metric names (eval/score_vs_<kind>).
        assert entry.kind and not set(entry.kind) & set(" :/,=") and "\n" not in entry.summary
    assert players.index("random") == 0  # the ladder's anchor; its key stream is split(key)[0]


@pytest.mark.parametrize(
    "call",
    [
        lambda: players.builtin("stockfish"),
        lambda: arena.Player("x", "stockfish"),
        lambda: pimc.FogPlayer("stockfish"),
        lambda: ladder.rung_players(ladder.LadderSettings("gardner", baselines=("stockfish",))),
        lambda: match.play_match("random", None, "gardner", "stockfish", 4, 0, jax.random.key(0)),
    ],
    ids=["registry", "stepwise-arena", "fog-arena", "ladder", "jitted-arena"],
)
def test_an_unknown_kind_is_a_one_line_error_naming_the_known_ones(call):
    with pytest.raises(ValueError, match="unknown") as error:
        call()
    message = str(error.value)
    assert "\n" not in message and "'stockfish'" in message
    assert all(kind in message for kind in KINDS)


def test_evaluate_refuses_an_unknown_opponent_naming_the_kinds(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--variant", "gardner", "--opponent", "stockfish"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert all(kind in error for kind in KINDS), error


def _first_legal(key, rules, board, legal):
    """A test entry: the legal move of lowest id."""
    del key, rules, board
    return jnp.argmax(legal, axis=-1).astype(jnp.int32)


@pytest.fixture
def with_new_entry(monkeypatch):
    """The registry with one more entry, as a contributor would add it; and an unfair one."""
    new = players.Builtin("first", _first_legal, True, "the legal move of lowest id")
    peeker = players.Builtin("peeker", _first_legal, False, "reads the true board")
    monkeypatch.setattr(players, "REGISTRY", (*players.REGISTRY, new, peeker))
    return new


def test_a_new_entry_is_named_by_the_commands_and_the_ladder(with_new_entry, capsys):
    assert players.kinds()[-2:] == ("first", "peeker")
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    assert "random, greedy, first, peeker" in " ".join(capsys.readouterr().out.split())
    rungs = [p.name for p in ladder.rung_players(ladder.LadderSettings("gardner", nodes=()))]
    assert rungs == ["random", "greedy", "first", "peeker"]
    assert players.fair_kinds("dark") == ("random", "greedy", "first")  # the dark ladder's
    assert pimc.FogPlayer("peeker").name == "peeker"  # from its observations: fair anyway
    assert arena.builtin_player("first").kind == "first"


def test_an_unfair_entry_is_refused_where_it_would_see_the_true_state(with_new_entry):
    for call in (
        lambda: ladder.rung_players(
            ladder.LadderSettings("dark", nodes=(), baselines=("random", "peeker"))
        ),
        lambda: match.play_match("peeker", None, "dark", "random", 4, 0, jax.random.key(0)),
        lambda: arena.play_games(
            [arena.builtin_player("peeker"), arena.random_player()],
            arena.colour_balanced(0, 1, 2, "dark"),
        ),
    ):
        with pytest.raises(ValueError, match="not fair under fog") as error:
            call()
        assert "\n" not in str(error.value)


def test_a_model_is_refused_in_the_engine_arena_under_fog():
    """The arena's model search steps the true board (the ladder and `evaluate` against an
    engine used it under fog); a model plays fog games there only as a UCI engine."""
    model = arena.model_player("m", None, None, 4)
    with pytest.raises(ValueError, match="'uci:python -m mmc_jax.engine --model <model>'") as e:
        arena.play_games([model, arena.random_player()], arena.colour_balanced(0, 1, 2, "dark"))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="would search the true board"):
        ladder.run([ladder.Model("m", None, None)], ladder.LadderSettings("dark", nodes=()))


# ------------------------------------------------------------------------------- slow tier


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_player_plays_through_the_jitted_arena_and_in_training_evaluation(kind):
    """`evaluate_params` (in-training evaluation) against the player, on every variant: the
    jitted arena (one compiled program for every built-in pairing) counts no illegal move."""
    settings = ml_collections.ConfigDict(dict(num_games=8, num_simulations=0, opponents=[kind]))
    for index, variant in enumerate(VARIANTS):
        metrics = match.evaluate_params(
            settings, "random", None, variant, jax.random.key(index), prefix=""
        )
        assert set(metrics) >= {f"score_vs_{kind}", f"wins_vs_{kind}", f"losses_vs_{kind}"}
        result = match.play_match(
            kind, None, variant, "random", 8, 0, jax.random.key(index), max_plies=40
        )
        assert result["illegal_moves"] == {"model": 0, "opponent": 0}, variant


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_player_plays_through_the_stepwise_arena(kind):
    """One batch mixing every variant against random: every game scored, no illegal move."""
    games = [spec for variant in VARIANTS for spec in arena.colour_balanced(0, 1, 2, variant)]
    records = arena.play_games(
        [arena.builtin_player(kind, "player"), arena.random_player()], games, max_plies=40
    )
    assert all(r.scored and r.termination == "normal" for r in records)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_player_plays_through_the_fog_arena(kind):
    result = pimc.fog_match(
        None,
        None,
        "dark",
        pimc.FogPlayer(kind),
        pimc.FogPlayer("random"),
        8,
        jax.random.key(0),
        max_plies=40,
    )
    assert result["num_games"] == 8 and result["unfinished"] == 0
    assert result["player"] == kind


@pytest.mark.slow  # two compiled searches (about 40 s on the 2-core CPU)
def test_a_models_buffer_follows_the_games_it_still_plays(monkeypatch):
    """Issue 72 item 5: a ply's search costs what the games still running cost. With buffers
    shrinking by 4 down to `bucket_min`, the model searches the smallest buffer that holds the
    games where it moves (the last games of a match no longer search a buffer of every game)."""
    from mmc_jax.evaluation import arena

    calls = []
    real_act = arena.act

    def act(player, rules, state, planes, indices, key):
        if player.name == "model":
            moving = len(set(indices.tolist()))
            calls.append((moving, len(indices)))
        return real_act(player, rules, state, planes, indices, key)

    players = [arena.model_player("model", None, {}, 1), arena.builtin_player("random")]
    games = arena.colour_balanced(0, 1, 16, "gardner,goal=king")  # kings fall at any ply
    monkeypatch.setattr(arena, "act", act)
    arena.play_games(players, games, seed=3, max_plies=80, bucket_min=1)
    sizes = arena._buckets(8, 1)  # 8 games a colour: buffers of 8 and 2
    assert sizes == [8, 2]
    assert {size for _, size in calls} <= set(sizes)
    for moving, size in calls:
        assert size == min(s for s in sizes if s >= moving), (moving, size)
    assert any(size < 8 for _, size in calls)  # games ended at different plies
