"""Reconnaissance-blind minichess (`fog=sense:W`, rules.md): the rule-space spelling, the
jitted engine (`mmc_jax.rules.recon`) against the plain-Python reference written from the spec
(tests/recon_reference.py) on random turns, against Fairy-Stockfish's `dark-gardner` where the
taken move is the requested one, and the fairness of the observation.

Every engine call goes through ONE compiled function (`ReconEngine.turn`: legal mask,
observation and step of a batch of `G` games, wrapped in `chex.assert_max_traces(n=1)`), over
mixed batches of sensing variants.
"""

from __future__ import annotations

import collections
import functools
import random

import chex
import jax
import numpy as np
import pytest
import recon_reference as RR
import reference_engine as REF
from rules_support import INI_PATH

from mmc_jax import rules as R
from mmc_jax.rules import notation, recon

G = 24  # games per call of the compiled engine

# Sensing variants of the differential tests: both windows, both captures, both goals, colour
# rules, other starts.
SPECS = (
    "recon",
    "recon,fog=sense:3",
    "recon,capture=rifle",
    "recon,goal=extinction",
    "capture=rifle,goal=extinction,fog=sense:3",
    "recon,colour=other",
    "recon,colour=same",
    "recon,start=shuffle:17",
    "recon,start=baby",
)


# ----------------------------------------------------------------------------- the rule space


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("recon", "recon"),
        ("goal=king,fog=sense:2", "recon"),
        ("gardner,goal=king,fog=sense:2", "recon"),
        ("recon,fog=sense:3", "goal=king,fog=sense:3"),
        ("recon,capture=rifle", "capture=rifle,goal=king,fog=sense:2"),
        ("recon,goal=extinction", "goal=extinction,fog=sense:2"),
        ("recon,start=shuffle:71", "recon"),
        ("recon,colour=same", "goal=king,fog=sense:2,colour=same"),
        ("recon,fog=on", "dark"),
        ("dark,fog=sense:3", "goal=king,fog=sense:3"),
    ],
)
def test_sensing_spellings_are_canonical(spec, expected):
    assert R.canonical(spec) == expected
    assert R.canonical(expected) == expected
    assert R.is_sense(spec) == ("sense" in expected or expected == "recon")
    rs = RR.rule_set(spec) if R.is_sense(spec) else None
    if rs is not None:  # the reference's own parser reads the same point
        v = R.parse(spec)
        assert (rs.capture, rs.goal, f"sense:{rs.window}", rs.colour) == (
            v.capture,
            v.goal,
            v.fog,
            v.colour,
        )
        assert rs.start == R.start_fen(spec).split()[0]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("recon,capture=atomic", "fog=sense:2 needs capture=normal or capture=rifle: an atomic"),
        ("capture=atomic,goal=king,fog=sense:3", "fog=sense:3 needs capture=normal or"),
        ("recon,goal=checkmate", "fog=sense:2 needs goal=king or goal=extinction"),
        ("fog=sense:3", "fog=sense:3 needs goal=king or goal=extinction"),
        ("recon,fog=sense:4", "valid values of fog: off, on, sense:2, sense:3"),
        ("recon,start=mallet,goal=extinction", "goal=extinction needs a start"),
        ("chess", "valid variants: gardner, baby, mallet, rifle, atomic, dark, extinction, "),
    ],
)
def test_bad_sensing_specs_name_the_problem(spec, message):
    with pytest.raises(ValueError) as info:
        R.canonical(spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_sensing_rules_fields():
    rules = R.recon_batch(["recon", "recon,fog=sense:3,capture=rifle", "recon,goal=extinction"])
    np.testing.assert_array_equal(rules.sense, [2, 3, 2])
    np.testing.assert_array_equal(rules.capture_mode, [0, 1, 0])
    np.testing.assert_array_equal(rules.extinction, [False, False, True])
    np.testing.assert_array_equal(rules.fog, [False] * 3)
    np.testing.assert_array_equal(rules.check_based, [False] * 3)
    np.testing.assert_array_equal(R.batch(list(R.VARIANTS)).sense, [0] * len(R.VARIANTS))
    assert R.fairy_stockfish_name("recon") is None
    assert "recon" in R.NAMED and "recon" not in R.VARIANTS
    assert R.is_playable("recon,colour=same")  # a side can always pass


def test_the_sensing_space_and_the_default_space():
    whole = R.Space(
        captures=("normal", "rifle"),
        goal_fogs=R.SENSE_GOAL_FOGS,
        colours=("any", "same", "other"),
    )
    points = R.space_points(whole)
    # 241 start arrays x 2 captures x 4 goal/fog pairs x 3 colours, less mallet x extinction.
    assert len(points) == 241 * 2 * 4 * 3 - 2 * 2 * 3
    assert "recon" in points and all(R.is_sense(p) for p in points[:50])
    assert not any(R.is_sense(p) for p in R.space_points())  # default tasks never sense


def test_the_1225_action_api_refuses_sensing_variants():
    with pytest.raises(ValueError, match="recon is a sensing variant .*use mmc_jax.rules.recon"):
        R.legal_moves("recon", R.START_FENS["gardner"])
    with pytest.raises(ValueError, match="sensing variant"):
        R.from_fen(R.START_FENS["gardner"], "recon,fog=sense:3")
    with pytest.raises(ValueError, match="gardner has no sensing"):
        R.recon_batch(["recon", "gardner"])
    # A sensing game given to the 1225-action functions is over at once, with no legal move.
    rules = R.batch(["recon", "gardner"])
    state = R.init(rules)
    np.testing.assert_array_equal(state.terminated, [True, False])
    assert not np.asarray(R.legal_action_mask(rules, state))[0].any()


# ----------------------------------------------------------------------------- the engine


def action_id(text: str, turn: int) -> int:
    if text == "pass":
        return recon.PASS
    if text.startswith("sense:"):
        return recon.SENSE_BASE + int(text.split(":")[1])
    return notation.uci_to_action(text, turn)


def _turn(rules, state, action):
    mask = R.recon_legal_action_mask(rules, state)
    obs = R.recon_observe(rules, state)
    return mask, obs, R.recon_step(rules, state, action)


class ReconEngine:
    """The compiled batched recon engine at batch size `G` (numpy in, numpy out)."""

    def __init__(self):
        self.turn = jax.jit(chex.assert_max_traces(_turn, n=1))

    def __call__(self, rules, state, actions):
        return jax.device_get(self.turn(rules, state, np.asarray(actions, np.int32)))


@pytest.fixture(scope="module")
def engine() -> ReconEngine:
    return ReconEngine()


@functools.cache
def _rules_of(spec: str, max_plies: int) -> R.Rules:
    return R.get(spec, max_plies=max_plies)


def rules_of(specs, max_plies) -> R.Rules:
    return jax.device_get(R.stack([_rules_of(s, m) for s, m in zip(specs, max_plies, strict=True)]))


def state_of(fen: str) -> recon.ReconState:
    return jax.device_get(R.recon_from_fen(fen))


def row(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def stack(rows):
    return jax.tree.map(lambda *xs: np.stack(xs), *rows)


def text_of(action: int, state_row, rifle: bool) -> str:
    """Text of an action in a (numpy) state row, as the mover requests it."""
    pawns = int(state_row.pieces[0]) & int(state_row.own)
    return recon.action_to_text(action, int(state_row.turn), pawns, rifle)


def random_start(rng: random.Random, spec: str) -> str:
    """The variant's start, or a random placement with both kings (some pawns near promotion),
    either side to move."""
    if rng.random() < 0.3:
        return R.start_fen(spec)
    board = ["."] * 25
    squares = list(range(25))
    rng.shuffle(squares)
    pieces = ["K", "k"] + [rng.choice("PNBRQpnbrq") for _ in range(rng.randint(2, 12))]
    if "extinction" in spec and rng.random() < 0.5:
        pieces = list("KQRBNPkqrbnp") + pieces[2:6]
    for piece in pieces:
        for i, s in enumerate(squares):
            if piece in "Pp" and s // 5 in (0, 4):
                continue
            board[s] = piece
            squares.pop(i)
            break
    turn = rng.choice("wb")
    return f"{REF.board_to_str(tuple(board))} {turn} - - 0 {rng.randint(1, 30)}"


def choose(rng: random.Random, legal: list[str], board) -> str:
    """A random legal action; in the move phase captures of a seen king are not preferred,
    passes rare, so games move and sometimes end."""
    moves = [m for m in legal if m != "pass" and not m.startswith("sense:")]
    if moves and rng.random() < 0.95:
        targets = [m for m in moves if board[RR.parse(m[2:4])] in "Kk"]
        if targets and rng.random() < 0.3:
            return rng.choice(targets)
        return rng.choice(moves)
    return rng.choice(legal)  # a sense, or (rarely) a pass


def square_text(square: int, turn: int):
    return recon.square_name(square, turn)


def compare_turns(engine, seed: int, steps: int, positions=None):
    """Random play of G games (mixed sensing variants, random starts, some short ply caps) in
    the engine and in the reference, compared at every step: legal actions, the mover's
    observation (the reference builds it from the player's reports alone), the true board,
    phase, ply, result, notification and the taken move and capture square."""
    rng = random.Random(f"recon-{seed}")
    specs = [SPECS[i % len(SPECS)] for i in range(G)]
    max_plies = [rng.choice([6, 256, 256]) for _ in range(G)]
    rules = rules_of(specs, max_plies)
    matches, rows = [], []
    events = collections.Counter()
    for i in range(G):
        fen = random_start(rng, specs[i])
        matches.append(RR.Match(specs[i], fen, max_plies[i]))
        rows.append(state_of(fen))
    state = stack(rows)
    for step in range(steps):
        actions, texts = [], []
        for match in matches:
            legal = match.game.legal()
            text = choose(rng, legal, match.game.board) if legal else "pass"
            texts.append(text)
            actions.append(action_id(text, "wb".index(match.game.turn)))
        mask, obs, after = engine(rules, state, actions)
        for i, match in enumerate(matches):
            g = match.game
            where = f"game {i} ({specs[i]}) step {step} {g.fen()} {g.phase}"
            pre = row(state, i)
            rifle = g.rules.capture == "rifle"
            got = sorted(text_of(a, pre, rifle) for a in np.flatnonzero(mask[i]))
            assert got == sorted(g.legal()), where
            np.testing.assert_allclose(obs[i], match.observation(), err_msg=where, atol=1e-6)
            if g.result is not None:
                continue
            mover = "wb".index(g.turn)
            outcome = match.play(texts[i])
            post = row(after, i)
            assert R.recon_to_fen(post) == g.fen(), where
            assert int(post.phase) == (recon.SENSE if g.phase == "sense" else recon.MOVE), where
            assert int(post.ply) == g.ply, where
            assert bool(post.terminated) == (g.result is not None), where
            expected = {"1-0": [1, -1], "0-1": [-1, 1]}.get(g.result, [0, 0])
            assert post.rewards.tolist() == expected, where
            if not texts[i].startswith("sense:"):
                taken, capture = outcome
                assert text_of(int(post.taken[mover]), pre, rifle) == taken, where
                got_capture = square_text(int(post.capture[mover]), mover)
                assert got_capture == (None if capture is None else RR.name(capture)), where
                notified = square_text(int(post.notification), 1 - mover)
                assert notified == (None if capture is None else RR.name(capture)), where
                if positions is not None and g.rules.capture == "normal":
                    positions.append((specs[i], pre, mask[i]))
                events["move"] += 1
                events["capture"] += capture is not None
                events["rifle capture"] += capture is not None and rifle
                events["failed"] += taken == "pass" != texts[i]
                events["stopped short"] += taken not in ("pass", texts[i][:4], texts[i])
                events["promotion"] += len(taken) == 5
                events["decided"] += g.result in ("1-0", "0-1")
                events["extinction win"] += g.result in ("1-0", "0-1") and "ext" in specs[i]
                events["draw at the cap"] += g.result == "1/2-1/2"
            events["turn"] += 1
        state = after
        for i, match in enumerate(matches):  # finished games start again
            if match.game.result is not None and rng.random() < 0.5:
                fen = random_start(rng, specs[i])
                matches[i] = RR.Match(specs[i], fen, max_plies[i])
                state = jax.tree.map(
                    lambda x, y, i=i: np.concatenate([x[:i], y[None], x[i + 1 :]]),
                    state,
                    state_of(fen),
                )
    return events


EVENT_KINDS = (
    "capture",
    "rifle capture",
    "failed",
    "stopped short",
    "promotion",
    "decided",
    "extinction win",
    "draw at the cap",
)
EVENTS_0 = collections.Counter()


def test_recon_agrees_with_the_reference_on_random_turns(engine):
    events = compare_turns(engine, seed=0, steps=30)
    assert events["turn"] > 600, events
    for kind in ("capture", "rifle capture", "failed", "stopped short", "decided"):
        assert events[kind] > 0, events


@pytest.mark.slow
def test_recon_agrees_with_the_reference_on_thousands_of_turns(engine):
    events = sum((compare_turns(engine, seed=s, steps=150) for s in range(1, 4)), EVENTS_0)
    assert events["turn"] > 9000, events
    assert all(events[kind] >= 5 for kind in EVENT_KINDS), events


def test_sense_windows_are_numbered_from_the_movers_view(engine):
    """rules.md: w = (6 - W) * r + f of the window's lowest corner, ranks mirrored for Black
    only: Black's window 0 with W = 2 is a4-b5; White's window 5 with W = 3 is c2-e4."""
    specs = ["recon", "recon,fog=sense:3"] * (G // 2)
    fens = ["rnbqk/ppppp/5/PPPPP/RNBQK b - - 0 1", R.START_FENS["gardner"]] * (G // 2)
    state = stack([state_of(f) for f in fens])
    actions = [recon.SENSE_BASE + (0 if s == "recon" else 5) for s in specs]
    _, _, after = engine(rules_of(specs, [256] * G), state, actions)
    _, obs, _ = engine(rules_of(specs, [256] * G), after, [recon.PASS] * G)
    for i, (spec, expected) in enumerate(
        [("recon", {"a4", "a5", "b4", "b5"}), ("recon,fog=sense:3", None)]
    ):
        turn = 1 if spec == "recon" else 0
        seen = {
            f"{'abcde'[f]}{(r if turn == 0 else 4 - r) + 1}"
            for r in range(5)
            for f in range(5)
            if obs[i, r, f, 14]
        }
        if expected is None:
            expected = {f"{c}{n}" for c in "cde" for n in "234"}
        assert seen == expected, spec


@pytest.fixture(scope="module")
def pyffish():
    import pyffish as sf

    sf.load_variant_config(INI_PATH.read_text())
    return sf


def test_taken_moves_agree_with_fairy_stockfish_dark_gardner(engine, pyffish):
    """On positions of random recon games (normal captures, goal king; colour any): every
    `dark-gardner` legal move is requestable and is taken as requested, with Fairy-Stockfish's
    resulting position; every requestable move taken as requested is `dark-gardner` legal."""
    positions = []
    compare_turns(engine, seed=100, steps=16, positions=positions)
    positions = [p for p in positions if "colour" not in p[0] and "ext" not in p[0]][:60]
    assert len(positions) >= 40
    pairs = []  # (spec, pre-state, requested action, FSF legal set, FEN)
    for spec, pre, mask in positions:
        fen = R.recon_to_fen(pre)
        fsf_legal = set(pyffish.legal_moves("dark-gardner", fen, []))
        requestable = np.flatnonzero(mask[: recon.NUM_MOVES])
        texts = {text_of(a, pre, False) for a in requestable}
        assert fsf_legal <= texts, fen
        pairs += [(spec, pre, int(a), fsf_legal, fen) for a in requestable]
    agreed = 0
    for start in range(0, len(pairs), G):
        chunk = pairs[start : start + G]
        padded = chunk + [chunk[-1]] * (G - len(chunk))
        rules = rules_of([p[0] for p in padded], [256] * G)
        _, _, after = engine(rules, stack([p[1] for p in padded]), [p[2] for p in padded])
        for i, (_, pre, action, fsf_legal, fen) in enumerate(chunk):
            request = text_of(action, pre, False)
            post = row(after, i)
            taken = text_of(int(post.taken[int(pre.turn)]), pre, False)
            assert (taken == request) == (request in fsf_legal), (fen, request, taken)
            if taken == request:
                expected = pyffish.get_fen("dark-gardner", fen, [request])
                assert R.recon_to_fen(post).split()[:2] == expected.split()[:2], (fen, request)
                agreed += 1
    assert agreed > 300


def test_observation_depends_only_on_the_players_information(engine):
    """Two games with the same history for White (same senses and moves, same reports) and
    different hidden play by Black give White the same observations, while the true boards
    differ: Black moves on ranks 4-5 in one game and passes in the other; White senses ranks
    1-2 (1-3 with W = 3) and moves on ranks 1-2 only."""
    rng = random.Random("invariance")
    fen = "rnbqk/5/5/5/R3K w - - 0 1"
    specs = ["recon", "recon", "recon,fog=sense:3", "recon,fog=sense:3"] * (G // 4)
    rules = rules_of(specs, [256] * G)
    matches = [RR.Match(s, fen) for s in specs]
    state = stack([state_of(fen)] * G)
    differed = 0
    for step in range(40):
        actions = []
        for i, match in enumerate(matches):
            g = match.game
            pair = i // 2 * 2  # games 2k and 2k + 1 share White's actions
            if g.turn == "w":
                if g.phase == "sense":
                    text = f"sense:{rng.randrange(6 - g.rules.window)}" if i == pair else None
                else:
                    quiet = [m for m in g.legal() if m == "pass" or m[3] in "12"]
                    text = rng.choice(quiet) if i == pair else None
                text = text if text is not None else actions[pair][1]
            elif g.phase == "sense" or i % 2:
                text = "sense:0" if g.phase == "sense" else "pass"
            else:
                quiet = [m for m in g.legal() if m != "pass" and m[3] in "45"]
                quiet = [m for m in quiet if g.board[RR.parse(m[2:4])] == "."]
                text = rng.choice(quiet) if quiet else "pass"
            actions.append((action_id(text, "wb".index(g.turn)), text))
        _, obs, after = engine(rules, state, [a for a, _ in actions])
        for i in range(0, G, 2):
            if matches[i].game.turn == "w":
                np.testing.assert_array_equal(obs[i], obs[i + 1], err_msg=f"step {step}")
                differed += matches[i].game.board != matches[i + 1].game.board
        for match, (_, text) in zip(matches, actions, strict=True):
            match.play(text)
        state = after
    assert differed > 100


def test_everything_outside_the_recon_engine_refuses_a_sensing_variant_in_one_line():
    from configs import gardner
    from mmc_jax.algorithms import alphazero
    from mmc_jax.infra import cli

    assert R.check_variant("recon", sensing=True) == "recon"
    for variant in ("recon", "goal=extinction,fog=sense:3"):
        with pytest.raises(ValueError, match="sensing variant.*recon engine") as error:
            R.check_variant(variant)
        assert "\n" not in str(error.value)
        config = gardner.get_config("smoke")
        config.variant = variant
        with pytest.raises(ValueError, match="sensing variant"):
            alphazero.prepare_config(config)
        with pytest.raises(Exception, match="sensing variant"):
            cli.variant_arg(variant)
