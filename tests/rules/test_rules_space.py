"""The rule space as an API: spellings, canonical names, start arrays, the generator, the
rules-descriptor observation, the network's `rule_planes` switch, and the checks that refuse
impossible positions (rules.md, "The rule space")."""

from __future__ import annotations

import itertools

import jax
import ml_collections
import numpy as np
import pytest
import reference_engine as REF
from rules_support import B, descriptor_planes

from mmc_jax import rules as R
from mmc_jax.model import network

# (spelling, canonical spelling), examples from rules.md and around them.
SPELLINGS = [
    ("gardner", "gardner"),
    ("dark", "dark"),
    ("goal=king,fog=on", "dark"),
    ("capture=rifle", "rifle"),
    ("start=shuffle:71,capture=rifle", "rifle"),
    ("start=shuffle:191", "baby"),
    ("gardner,start=baby", "baby"),
    ("baby,start=gardner", "gardner"),
    ("dark,capture=atomic", "capture=atomic,goal=king,fog=on"),
    ("gardner,start=shuffle:17,colour=other", "start=shuffle:17,colour=other"),
    ("colour=other,start=shuffle:17", "start=shuffle:17,colour=other"),
    (" dark , capture = atomic ", "capture=atomic,goal=king,fog=on"),
    ("capture=rifle,goal=extinction", "capture=rifle,goal=extinction"),
    ("start=k4/ppppp/5/PPPPP/K4", "start=k4/ppppp/5/PPPPP/K4"),
    ("start=k31/ppppp/23/PPPPP/K13", "start=k4/ppppp/5/PPPPP/K4"),
    ("start=kbnrq/ppppp/5/PPPPP/KBNRQ", "start=shuffle:17"),
    ("start=rnbqk/ppppp/5/PPPPP/RNBQK", "gardner"),
    ("monochromatic,colour=other", "bichromatic"),
    ("extinction,fog=on", "goal=extinction,fog=on"),
    ("mallet,capture=atomic,goal=king", "start=mallet,capture=atomic,goal=king"),
]


@pytest.mark.parametrize("spec, expected", SPELLINGS)
def test_canonical_spelling(spec, expected):
    assert R.canonical(spec) == expected
    assert R.check_variant(spec) == expected
    assert R.canonical(expected) == expected  # canonical spellings are fixed points


@pytest.mark.parametrize("spec, expected", SPELLINGS)
def test_spellings_of_one_point_give_equal_rules(spec, expected):
    chex_equal = jax.tree.map(np.array_equal, R.get(spec), R.get(expected))
    assert all(jax.tree.leaves(chex_equal))
    assert R.start_fen(spec) == REF.start_fen(spec)  # the reference parser agrees


@pytest.mark.parametrize("name", R.VARIANTS)
def test_named_variants_are_points_of_the_space(name):
    v = R.parse(name)
    overrides = [f"{c}={getattr(v, c)}" for c in R.COMPONENTS]
    assert R.canonical(",".join(overrides)) == name
    assert R.start_fen(name) == R.START_FENS[name]


def test_shuffle_start_arrays():
    assert R.start_fen("start=shuffle:0").split()[0] == "kqrbn/ppppp/5/PPPPP/KQRBN"
    assert R.start_fen("start=shuffle:17").split()[0] == "kbnrq/ppppp/5/PPPPP/KBNRQ"
    assert R.start_fen("start=shuffle:119").split()[0] == "nbrqk/ppppp/5/PPPPP/NBRQK"
    assert R.start_fen("start=shuffle:137").split()[0] == "qrnbk/ppppp/5/PPPPP/KBNRQ"
    assert R.START_FENS["start=shuffle:17,colour=other"] == "kbnrq/ppppp/5/PPPPP/KBNRQ w - - 0 1"
    perms = ["".join(p) for p in itertools.permutations("KQRBN")]
    for n in range(240):
        board = R.start_fen(f"start=shuffle:{n}").split()[0]
        white = perms[n % 120]
        black = white.lower() if n < 120 else white[::-1].lower()
        assert board == f"{black}/ppppp/5/PPPPP/{white}"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("chess", "unknown variant 'chess'; valid variants: gardner, baby"),
        ("capture=glue", "valid values of capture: normal, rifle, atomic"),
        ("goal=mate", "valid values of goal: checkmate, king, extinction"),
        ("fog=yes", "valid values of fog: off, on"),
        ("colour=red", "valid values of colour: any, same, other"),
        ("speed=2", "valid components: start, capture, goal, fog, colour"),
        ("start=chess960", "valid starts: gardner, baby, mallet, shuffle:N"),
        ("start=shuffle:240", "shuffle:N needs an integer 0 <= N < 240"),
        ("start=shuffle:x", "shuffle:N needs an integer"),
        ("capture=rifle,capture=atomic", "component 'capture' given twice"),
        ("capture=rifle,dark", "a registered name ('dark') may come only first"),
        ("dark,", "empty component"),
        ("dark,goal=checkmate", "fog=on needs goal=king or goal=extinction"),
        ("fog=on", "fog=on needs goal=king or goal=extinction"),
        ("mallet,goal=extinction", "goal=extinction needs a start where each side has every"),
        ("start=k4/5/5/5/K4,goal=extinction", "goal=extinction needs a start"),
        ("start=kk3/ppppp/5/PPPPP/K4", "exactly one Black king, has 2"),
        ("start=5/ppppp/5/PPPPP/K4", "exactly one Black king, has 0"),
        ("start=k4/ppppp/5/PPPPP/KP3", "a pawn stands on rank 1 or 5"),
        ("start=k4/ppppp/5/PPPPP", "needs 5 ranks, got 4"),
        ("start=k4/pppppp/5/PPPPP/K4", "covers 6 squares, expected 5"),
        ("start=k4/ppxpp/5/PPPPP/K4", "unknown piece 'x'"),
        (42, "a variant must be a string"),
    ],
)
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=None) as info:
        R.canonical(spec)
    assert message in str(info.value)
    with pytest.raises(ValueError):
        R.get(spec)


def test_the_space_has_the_sizes_of_rules_md():
    whole = R.Space(colours=("any", "same", "other"))
    points = R.space_points(whole)
    assert len(points) == 10827
    assert len(set(points)) == len(points)
    assert set(R.VARIANTS) <= set(points)
    assert len(R.space_points()) == 10827 - 3609  # less colour=same


def test_sample_variants_is_deterministic_valid_and_playable():
    first = R.sample_variants(7, 40)
    assert first == R.sample_variants(7, 40)
    assert first != R.sample_variants(8, 40)
    assert len(set(first)) == 40
    assert R.sample_variants(jax.random.key(3), 5) == R.sample_variants(jax.random.key(3), 5)
    for spec in first:
        assert R.canonical(spec) == spec
        assert REF.legal_moves(spec, R.start_fen(spec)), spec  # a legal move at the start


def test_sample_variants_never_returns_an_excluded_point():
    space = R.Space(starts=("gardner",), captures=("normal", "rifle"), colours=("any",))
    points = R.space_points(space)
    assert len(points) == 2 * 5
    # Excluded by other spellings of the same points.
    exclude = ["start=shuffle:71,capture=rifle", "goal=king,fog=on", "gardner,goal=extinction"]
    drawn = R.sample_variants(0, 7, space=space, exclude=exclude)
    assert {"rifle", "dark", "extinction"}.isdisjoint(drawn)
    assert sorted(drawn) == sorted(set(points) - {"rifle", "dark", "extinction"})
    with pytest.raises(ValueError, match="only 7 playable points"):
        R.sample_variants(0, 8, space=space, exclude=exclude)


def test_sample_variants_skips_unplayable_points():
    space = R.Space(starts=("gardner", "baby"), captures=("normal",), colours=("same", "other"))
    drawn = R.sample_variants(1, 5, space=space)
    assert all("colour=other" in s or s == "bichromatic" for s in drawn)
    assert not R.is_playable("monochromatic")
    with pytest.raises(ValueError):
        R.sample_variants(1, 11, space=space)


def test_component_sampling_weighs_each_declared_value_equally():
    """Per point, 238 of 241 start arrays are shuffles; per component, "shuffle" is one start
    entry of four, and every capture / goal-fog pair / colour is equally likely."""
    space = R.Space()
    by_point, by_component = R.space_weights(space, "point"), R.space_weights(space, "component")
    assert list(by_point) == list(by_component) == R.space_points(space)
    assert abs(sum(by_component.values()) - 1) < 1e-9

    def mass(weights, predicate):
        return sum(w for p, w in weights.items() if predicate(R.parse(p)))

    def shuffled(v):
        return v.start not in {R.parse(n).start for n in ("gardner", "baby", "mallet")}

    # mallet has no extinction (2 of 5 goal/fog pairs): a tenth of the draws are rejected.
    valid = 1 - 0.25 * 2 / 5
    assert mass(by_point, shuffled) > 0.98
    assert abs(mass(by_component, shuffled) - 0.25 / valid) < 0.01  # 236 of 238 shuffles
    for capture in space.captures:
        assert abs(mass(by_component, lambda v, c=capture: v.capture == c) - 1 / 3) < 0.02
    for colour in space.colours:
        assert abs(mass(by_component, lambda v, c=colour: v.colour == c) - 1 / 2) < 1e-9
    # The gardner array is also shuffle:71: it gets its own entry's mass and a shuffle's.
    gardner_start = mass(by_component, lambda v: v.start == R.parse("gardner").start)
    assert abs(gardner_start - (0.25 + 0.25 / 238) / valid) < 1e-4


def test_component_sampling_draws_follow_the_weights_and_stay_valid():
    drawn = R.sample_variants(3, 64, per="component")
    assert drawn == R.sample_variants(3, 64, per="component")
    assert len(set(drawn)) == 64
    assert all(R.is_playable(v) and R.canonical(v) == v for v in drawn)
    shuffles = sum("shuffle" in v for v in drawn)
    assert 8 <= shuffles <= 28, drawn  # about a quarter, not 63 of 64 as per point
    many = R.sample_variants(3, 200, exclude=["dark", "atomic"], per="component")
    assert {"dark", "atomic"}.isdisjoint(many)
    with pytest.raises(ValueError, match="unknown sampling"):
        R.sample_variants(3, 4, per="task")


def test_one_trace_serves_composed_and_named_batches(engine):
    """`Engine.ply` is wrapped in chex.assert_max_traces(n=1): a retrace would fail here."""
    composed = R.sample_variants(5, B)
    for specs in (composed, list(R.VARIANTS), composed[:3] + ["dark", "rifle"]):
        out = engine.play(engine.rules(specs), engine.states([R.start_fen(s) for s in specs]))
        assert out.mask.shape == (B, R.NUM_ACTIONS)


def test_batch_accepts_specs():
    specs = ["gardner", "dark,capture=atomic", "start=shuffle:17,colour=other"]
    rules = R.batch(specs, 5)
    np.testing.assert_array_equal(rules.capture_mode, [0, 2, 0, 0, 2])
    np.testing.assert_array_equal(rules.goal, [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(rules.colour, [0, 0, 2, 0, 0])
    np.testing.assert_array_equal(rules.variant_id, [0, -1, -1, 0, -1])


# ----------------------------------------------------------------------------- impossible input


@pytest.mark.parametrize(
    "call", ["legal_moves", "result", "fog_fen", "perft", "from_fen", "from_fens"]
)
@pytest.mark.parametrize(
    "variant, fen, message",
    [
        ("gardner", "5/5/5/5/4K w - - 0 1", "the Black king is missing"),
        ("rifle", "k4/5/5/5/5 b - - 0 1", "the White king is missing"),
        ("gardner", "k4/5/5/5/Q3K w - - 0 1", "the side not to move (Black) is in check"),
        ("bichromatic", "k4/4q/5/5/4K b - - 0 1", "the side not to move (White) is in check"),
        ("gardner", "k3P/5/5/5/4K w - - 0 1", "a pawn stands on rank 1 or 5"),
        ("dark", "k4/5/5/5/p3K b - - 0 1", "a pawn stands on rank 1 or 5"),
    ],
)
def test_impossible_positions_are_rejected(call, variant, fen, message):
    args = {
        "perft": (variant, fen, 1),
        "from_fen": (fen, variant),
        "from_fens": ([R.start_fen(variant), fen], variant),  # the second of a batch
    }.get(call, (variant, fen))
    with pytest.raises(ValueError) as info:
        getattr(R, call)(*args)
    assert message in str(info.value)


@pytest.mark.parametrize("variant", ["gardner", "atomic", "dark", "goal=king", "extinction"])
def test_from_fens_is_from_fen_of_each_stacked(variant):
    """The batched loader of datasets equals one `from_fen` per FEN, finished games (kings
    gone where that ends a game) and a batch longer than one chunk included."""
    fens = [
        R.start_fen(variant),
        "k4/5/5/5/Q3K w - - 0 1",  # Black in check, White to move: Black may not be in check
        "5/5/5/5/4K b - - 0 1",
        "k4/1K3/5/5/Q4 w - - 0 1",
        "r1k2/1p3/5/3P1/R3K b - - 3 17",
    ]
    fens = [f for f in fens if _possible(variant, f)]
    fens = (fens * (R.CHUNK // len(fens) + 2))[: R.CHUNK + 3]
    got = R.from_fens(fens, variant)
    want = R.stack([R.from_fen(f, variant) for f in fens])
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _possible(variant, fen):
    try:
        R.validate_position(variant, fen)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "variant, fen, expected",
    [
        ("dark", "5/5/5/5/4K b - - 0 1", "1-0"),  # king captured: the game is over
        ("atomic", "5/5/5/5/4K b - - 0 1", "1-0"),  # king exploded
        ("goal=king", "5/5/5/5/5 w - - 0 1", "1-0"),  # both kings gone: the mover (Black) lost
        ("extinction", "k4/5/5/5/Q3K w - - 0 1", "1-0"),  # no check: Black lacks types
        ("atomic", "k4/1K3/5/5/Q4 w - - 0 1", None),  # adjacent kings: the queen gives no check
        ("dark", "k4/5/5/5/Q3K w - - 0 1", None),  # attacked king: legal under goal=king
    ],
)
def test_positions_legal_where_rules_md_allows_them(variant, fen, expected):
    assert R.result(variant, fen) == expected
    assert REF.result(variant, fen) == expected


@pytest.mark.parametrize("garbage", ["garbage", "", "k4/5/5/5", "k4/5/5/5/6K w", "x4/5/5/5/5"])
def test_render_rejects_garbage_with_a_value_error(garbage):
    with pytest.raises(ValueError, match="cannot render"):
        R.render(garbage)


# ----------------------------------------------------------------------------- observations


def test_observation_carries_the_rules_descriptor(engine):
    specs = ["gardner", "dark", "dark,capture=atomic", "capture=rifle,colour=other"]
    specs += ["start=baby", "goal=extinction,fog=on,colour=other"]
    out = engine.play(engine.rules(specs), engine.states([R.start_fen(s) for s in specs]))
    for i in range(B):
        np.testing.assert_array_equal(out.obs[i, :, :, 17:], descriptor_planes(specs[i % 6]))
    # A named variant and the composed spelling of its point see the same descriptor.
    np.testing.assert_array_equal(descriptor_planes("dark"), descriptor_planes("goal=king,fog=on"))


def test_ply_channel_does_not_depend_on_the_ply_cap(engine):
    fens = ["k4/5/5/5/R3K w - - 3 20"]
    state = engine.states(fens)
    state = state.replace(ply=np.full(B, 37, np.int32))
    short = engine.play(engine.rules(["gardner"], max_plies=64), state)
    long = engine.play(engine.rules(["gardner"], max_plies=256), state)
    np.testing.assert_allclose(short.obs[:, 0, 0, 16], 37 / R.PLY_SCALE)
    np.testing.assert_array_equal(short.obs, long.obs)


def test_fog_hides_the_clock_and_the_repetition_flag(engine):
    fen = "k4/5/5/5/R3K w - - 7 20"
    state = engine.states([fen])
    history = np.array(state.hash_history)
    history[:, 2] = history[:, 0]  # the position occurred before
    state = state.replace(hash_history=history)
    out = engine.play(engine.rules(["goal=king", "goal=king,fog=on"]), state)
    clear, fog = out.obs[0, 0, 0], out.obs[1, 0, 0]
    assert clear[14] == pytest.approx(0.07) and clear[15] == 1.0
    assert fog[14] == 0.0 and fog[15] == 0.0


# ----------------------------------------------------------------------------- network


def net_config(**fields):
    return ml_collections.ConfigDict(dict(num_blocks=1, channels=8, **fields))


@pytest.mark.parametrize(
    "fields, rule_planes, channels",
    [
        ({}, "descriptor", R.OBS_CHANNELS),
        ({"rule_planes": "none"}, "none", R.BOARD_CHANNELS),
        ({"rule_planes": "descriptor"}, "descriptor", R.OBS_CHANNELS),
        ({"variant_planes": False}, "none", R.BOARD_CHANNELS),  # the retired field is mapped
        ({"variant_planes": True}, "descriptor", R.OBS_CHANNELS),
    ],
)
def test_network_rule_planes_switch(fields, rule_planes, channels):
    config = net_config(**fields)
    assert network.rule_planes_of(config) == rule_planes
    net = network.make_network(config)
    shapes = jax.eval_shape(
        lambda key: network.init_params(net, key, R.OBS_SHAPE), jax.random.key(0)
    )
    assert network.input_channels(shapes) == channels
    network.check_obs_layout(network.obs_layout(config), config, shapes)


def test_network_rule_planes_errors():
    with pytest.raises(ValueError, match="rule_planes must be one of none, descriptor"):
        network.rule_planes_of(net_config(rule_planes="onehot"))
    with pytest.raises(ValueError, match="variant_planes=True .* contradicts"):
        network.rule_planes_of(net_config(variant_planes=True, rule_planes="none"))


def test_old_observation_layout_is_refused():
    config = net_config()
    with pytest.raises(ValueError, match="rules descriptor replaced the variant one-hot"):
        network.check_obs_layout(None, config)
    with pytest.raises(ValueError, match="differs from this code's"):
        network.check_obs_layout(network.obs_layout(net_config(rule_planes="none")), config)
    old_params = {"Conv_0": {"kernel": np.zeros((3, 3, 26, 8))}}  # 17 + 9 variant one-hot
    with pytest.raises(ValueError, match="reads 26 observation channels, this layout gives 27"):
        network.check_obs_layout(network.obs_layout(config), config, old_params)


@pytest.mark.parametrize(
    "misspelt, meant",
    [("atomc", "atomic"), ("gardener", "gardner"), ("bichromatik", "bichromatic")],
)
def test_a_misspelt_variant_name_says_which_one_was_meant(misspelt, meant):
    with pytest.raises(ValueError) as error:
        R.check_variant(misspelt)
    assert str(error.value).startswith(f"unknown variant {misspelt!r} (did you mean {meant!r}?)")
    with pytest.raises(ValueError) as error:
        R.check_variant("chess960")  # nothing close: the list alone
    assert str(error.value).startswith("unknown variant 'chess960'; valid variants: gardner")
