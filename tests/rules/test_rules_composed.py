"""Composed variants of the rule space against the oracles (rules.md, "The rule space").

`COMBOS`: 216 combinations (3 batches of the shared compiled engine), 210 drawn by
`R.sample_variants` from the whole space less `colour=same`, plus six with FEN-board starts
(some with `colour=same`, which the generator leaves out). For each, the jitted engine plays
random games from the start in one mixed batch (one compiled `step` for all, checked by
`chex.assert_max_traces` in `Engine`), and every position is compared with the plain-Python
reference engine (`tests/reference_engine.py`, written from rules.md): the whole legal-move
set, the position after the move, termination and rewards (results of finished positions),
and the observation (the fog view where fog is on, the rules descriptor everywhere). Perft 3
from every combination's start is compared too.

Fairy-Stockfish (`pyffish` with the shipped `fairy-variants.ini`) checks the combinations it
expresses (`R.fairy_stockfish_name`): colour `any` with
  capture normal + goal checkmate (`gardner`), normal + king (`dark-gardner`),
  normal + extinction (`extinction-gardner-qrbn`), atomic + checkmate (`atomic-gardner`),
from any start, fog on or off. Only the reference engine covers: capture rifle (any goal),
atomic with goal king or extinction (Fairy-Stockfish's atomic king is pseudo-royal or may
capture), and colour same / other (any capture, any goal).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import reference_engine as REF
from rules_support import B, descriptor_planes, fen_of, obs_board, uci_set

from mmc_jax import rules as R

FEN_STARTS = [
    "start=rnbqk/1p1p1/5/1P1P1/RNBQK,colour=same",
    "start=rnbqk/1p1p1/5/1P1P1/RNBQK,capture=atomic,colour=same",
    "start=rnbqk/1p1p1/5/1P1P1/RNBQK,capture=rifle,goal=king,fog=on,colour=same",
    "start=k3r/ppp2/5/2PPP/R3K,capture=atomic",
    "start=k3r/ppp2/5/2PPP/R3K,capture=rifle,goal=king,colour=other",
    "start=nbkrq/ppppp/5/PPPPP/QRKBN,goal=extinction,fog=on",
]
COMBOS = R.sample_variants(20240611, 3 * B - len(FEN_STARTS)) + [R.canonical(s) for s in FEN_STARTS]
PLIES = 24
REWARDS = {"1-0": [1.0, -1.0], "0-1": [-1.0, 1.0], "1/2-1/2": [0.0, 0.0]}


def test_combos_cover_the_space():
    assert len(set(COMBOS)) == len(COMBOS) >= 200
    for component, values in [
        ("capture", R.variants.CAPTURES),
        ("goal", R.variants.GOALS),
        ("fog", R.variants.FOGS),
        ("colour", R.variants.COLOURS),
    ]:
        seen = {getattr(R.parse(s), component) for s in COMBOS}
        assert seen == set(values), component
    starts = {R.parse(s).start for s in COMBOS}
    assert len(starts) > 100
    fsf = [s for s in COMBOS if R.fairy_stockfish_name(s)]
    assert 20 <= len(fsf) < len(COMBOS)


class Step:
    """One position of a composed game and the engine's verdict on it."""

    def __init__(self, spec, fen, legal, move, after, terminated, rewards, obs):
        self.spec, self.fen, self.legal, self.move = spec, fen, legal, move
        self.after, self.terminated, self.rewards, self.obs = after, terminated, rewards, obs


class ComposedGames:
    """Per combination, the random-play positions of the jitted engine (auto-reset): the
    combinations are played `B` at a time, each batch when a test first needs it."""

    def __init__(self, engine):
        self.engine = engine
        self.batches: dict[int, list[list[Step]]] = {}

    def __getitem__(self, i: int) -> list[Step]:
        start = i - i % B
        if start not in self.batches:
            self.batches[start] = self.play(start)
        return self.batches[start][i - start]

    def play(self, chunk: int) -> list[list[Step]]:
        engine = self.engine
        specs = COMBOS[chunk : chunk + B]
        games: list[list[Step]] = [[] for _ in specs]
        rules = engine.rules(specs)
        start = engine.states([R.start_fen(s) for s in specs])
        state = start
        for t in range(PLIES):
            out = engine.play(rules, state, seed=7000 + 100 * chunk + t, reset_state=start)
            for i, spec in enumerate(specs):
                fen = fen_of(state, i)
                legal = uci_set(spec, fen, out.mask[i])
                move = R.action_to_uci(spec, fen, int(out.action[i]))
                games[i].append(
                    Step(
                        spec,
                        fen,
                        legal,
                        move,
                        fen_of(out.after, i),
                        bool(out.after.terminated[i]),
                        out.after.rewards[i].tolist(),
                        out.obs[i],
                    )
                )
            state = out.reset
        return games


@pytest.fixture(scope="module")
def composed_games(engine) -> ComposedGames:
    return ComposedGames(engine)


def chunks(n):
    """The parts of `COMBOS`, `n` combinations each: the fast tier checks the first, the slow
    tier the others."""
    return [
        pytest.param(k, id=f"combos{k * n}-{k * n + n - 1}", marks=[pytest.mark.slow] * (k > 0))
        for k in range(len(COMBOS) // n)
    ]


def _expected_end(spec: str, steps: list[Step], k: int):
    """(decisive result or None, automatic draw?) after move k of a game, by the reference
    engine and the rules of rules.md (repetition counted since the last irreversible move)."""
    step = steps[k]
    decisive = REF.result(spec, step.after)
    board = step.after.split()[0]
    rs = REF.rule_set(spec)
    kings_only = set(board.replace("/", "")) - set("12345") <= {"K", "k"}
    key = " ".join(step.after.split()[:2])
    history = []
    for prev in reversed(steps[: k + 1]):
        history.append(" ".join(prev.fen.split()[:2]))
        if int(prev.fen.split()[4]) == 0:  # irreversible move (every start has clock 0)
            break
    repetition = history.count(key) >= 2 and int(step.after.split()[4]) > 0
    draw = (rs.goal == "checkmate" or rs.capture == "atomic") and kings_only
    return decisive, draw or repetition


@pytest.mark.parametrize("part", chunks(36))
def test_composed_games_match_the_reference_engine(composed_games, part):
    checked = {"positions": 0, "fog": 0, "finished": 0}
    for i in range(part * 36, part * 36 + 36):
        spec, steps = COMBOS[i], composed_games[i]
        for k, step in enumerate(steps):
            if k and steps[k - 1].terminated:
                continue  # the reset start position, checked at the top of the game
            assert step.legal == REF.legal_moves(spec, step.fen), f"{spec}: {step.fen}"
            assert step.after == REF.make_move(spec, step.fen, step.move), (
                f"{spec}: {step.fen} + {step.move}"
            )
            turn = 0 if step.fen.split()[1] == "w" else 1
            fog = REF.rule_set(spec).fog == "on"
            view = REF.fog_fen(step.fen, spec) if fog else step.fen
            assert obs_board(step.obs, turn) == view.split()[0], f"{spec} observation {step.fen}"
            np.testing.assert_array_equal(step.obs[:, :, 17:], descriptor_planes(spec))
            decisive, draw = _expected_end(spec, steps, k)
            if decisive is not None:
                assert step.terminated and step.rewards == REWARDS[decisive], (spec, step.after)
                assert R.result(spec, step.after) == decisive
                checked["finished"] += 1
            elif not draw:
                assert not step.terminated, f"{spec}: {step.fen} -> {step.after} ended"
            if step.terminated and decisive is None:
                assert step.rewards == [0.0, 0.0]
            checked["positions"] += 1
            checked["fog"] += fog
    assert checked["positions"] >= 36 * PLIES // 2 and checked["fog"] > 0, checked


@pytest.mark.parametrize("part", chunks(54))
def test_composed_perft_3_matches_the_reference_engine(part):
    for spec in COMBOS[part * 54 : part * 54 + 54]:
        fen = R.start_fen(spec)
        assert fen == REF.start_fen(spec)
        assert R.perft(spec, fen, 3) == REF.perft(spec, fen, 3), spec


# ----------------------------------------------------------------------------- Fairy-Stockfish


@functools.cache
def _fsf_verdict(sf, name: str, fen: str):
    """(sorted legal moves, result or None) by Fairy-Stockfish."""
    end, value = sf.is_immediate_game_end(name, fen, [])
    legal = [] if end else sorted(sf.legal_moves(name, fen, []))
    if not end and legal:
        return legal, None
    if not end:
        value = sf.game_result(name, fen, [])
    if value == 0:
        return legal, "1/2-1/2"
    return legal, "1-0" if (value > 0) == (fen.split()[1] == "w") else "0-1"


def test_fairy_stockfish_expresses_the_declared_combinations():
    assert R.fairy_stockfish_name("gardner") == "gardner"
    assert R.fairy_stockfish_name("start=shuffle:5,goal=king,fog=on") == "dark-gardner"
    assert R.fairy_stockfish_name("start=mallet,capture=atomic") == "atomic-gardner"
    assert R.fairy_stockfish_name("goal=extinction,fog=on") == "extinction-gardner-qrbn"
    for spec in ["rifle", "capture=atomic,goal=king", "capture=atomic,goal=extinction"]:
        assert R.fairy_stockfish_name(spec) is None
    assert R.fairy_stockfish_name("colour=other") is None


@pytest.mark.slow
def test_composed_games_match_fairy_stockfish(fsf, composed_games):
    sf = fsf.sf
    checked = {"positions": 0, "finished": 0, "combos": 0}
    for i, spec in enumerate(COMBOS):
        steps = composed_games[i]
        name = R.fairy_stockfish_name(spec)
        if name is None:
            continue
        checked["combos"] += 1
        for k, step in enumerate(steps):
            if k and steps[k - 1].terminated:
                continue
            legal, verdict = _fsf_verdict(sf, name, step.fen)
            assert step.legal == legal, f"{spec} ({name}): {step.fen}"
            assert verdict is None
            assert step.after == sf.get_fen(name, step.fen, [step.move]), (spec, step.fen)
            if R.parse(spec).fog == "on":
                assert REF.fog_fen(step.fen, spec) == sf.get_fog_fen(step.fen, name)
            _, end = _fsf_verdict(sf, name, step.after)
            if end is not None:
                assert R.result(spec, step.after) == end, (spec, step.after)
                checked["finished"] += 1
            checked["positions"] += 1
    assert checked["combos"] >= 20 and checked["finished"] > 0, checked


@pytest.mark.parametrize("part", chunks(108))
def test_composed_perft_3_matches_fairy_stockfish(fsf, part):
    sf = fsf.sf

    def perft(name, fen, depth):
        legal, _ = _fsf_verdict(sf, name, fen)
        if depth == 1:
            return len(legal)
        return sum(perft(name, sf.get_fen(name, fen, [m]), depth - 1) for m in legal)

    for spec in COMBOS[part * 108 : part * 108 + 108]:
        name = R.fairy_stockfish_name(spec)
        if name is not None:
            fen = R.start_fen(spec)
            assert R.perft(spec, fen, 3) == perft(name, fen, 3), spec
