"""Tests for mmc_jax.evaluation.elo: the maximum-likelihood fit recovers known ratings, its
intervals cover them, and the edge cases (perfect scores, disconnected players) are handled. Pure
numpy."""

import numpy as np
import pytest

from mmc_jax.evaluation import elo

TRUE = {"random": 0.0, "greedy": 150.0, "model": 420.0, "engine1": 300.0, "engine2": 700.0}
PAIRS = [
    ("model", "random"),
    ("model", "greedy"),
    ("model", "engine1"),
    ("model", "engine2"),
    ("greedy", "random"),
    ("engine1", "greedy"),
    ("engine2", "engine1"),
]


def synthetic(games: int, draw_rate: float, seed: int) -> list[elo.PairResult]:
    """W/D/L drawn so that each pair's expected score is the Elo expectation of TRUE."""
    rng = np.random.default_rng(seed)
    results = []
    for a, b in PAIRS:
        expected = float(elo.expected_score(TRUE[a] - TRUE[b]))
        draws = min(draw_rate, 1.8 * min(expected, 1 - expected))
        p = [expected - draws / 2, draws, 1 - expected - draws / 2]
        wins, draws_n, losses = rng.multinomial(games, p)
        results.append(elo.PairResult(a, b, int(wins), int(draws_n), int(losses)))
    return results


def test_recovers_known_ratings():
    fit = elo.fit_elo(synthetic(4000, 0.3, seed=0), "random", prior_draws=0, bootstrap=200)
    ratings = fit["ratings"]
    assert ratings["random"]["elo"] == 0.0
    for name, true in TRUE.items():
        r = ratings[name]
        assert r["elo"] == pytest.approx(true, abs=25), name
        if name != "random":
            assert r["ci95"][0] < true < r["ci95"][1], (name, r)
            assert r["ci95_fisher"][0] < true < r["ci95_fisher"][1], (name, r)
            # With draws the Fisher interval (coin-flip variance) is the wider one.
            fisher = r["ci95_fisher"][1] - r["ci95_fisher"][0]
            assert fisher > 0.9 * (r["ci95"][1] - r["ci95"][0])
    for pair in fit["pairs"]:
        assert pair["expected_score"] == pytest.approx(pair["score"], abs=0.03)


@pytest.mark.slow
def test_interval_coverage_over_seeds():
    """Intervals at 400 games per pair cover the true rating in most of 40 seeded trials
    (over 100 trials: bootstrap 93%, Fisher 98%; the bootstrap's width matches the spread of
    the estimates, sd 15 Elo, the Fisher one is wider because of the draws)."""
    covered = {"ci95": 0, "ci95_fisher": 0}
    for seed in range(40):
        results = synthetic(400, 0.3, seed=seed)
        fit = elo.fit_elo(results, "random", prior_draws=0, bootstrap=200, seed=seed)
        for kind in covered:
            low, high = fit["ratings"]["model"][kind]
            covered[kind] += low < TRUE["model"] < high
    assert covered["ci95"] >= 34 and covered["ci95_fisher"] >= 36, covered


def test_order_and_merging_do_not_matter():
    results = synthetic(300, 0.2, seed=1)
    flipped = [elo.PairResult(r.b, r.a, r.losses, r.draws, r.wins) for r in results]
    halves = [elo.PairResult(r.a, r.b, r.wins // 2, r.draws // 2, r.losses // 2) for r in results]
    rest = [
        elo.PairResult(r.a, r.b, r.wins - h.wins, r.draws - h.draws, r.losses - h.losses)
        for r, h in zip(results, halves, strict=True)
    ]
    a = elo.fit_elo(results, "random", bootstrap=0)["ratings"]
    b = elo.fit_elo(flipped, "random", bootstrap=0)["ratings"]
    c = elo.fit_elo(halves + rest, "random", bootstrap=0)["ratings"]
    for name in TRUE:
        assert a[name]["elo"] == pytest.approx(b[name]["elo"], abs=1e-6)
        assert a[name]["elo"] == pytest.approx(c[name]["elo"], abs=1e-6)


def test_perfect_score_with_and_without_prior():
    """200-0 has no finite MLE; one virtual draw bounds it at 400 log10(200.5 / 0.5)."""
    results = [elo.PairResult("model", "random", 200, 0, 0)]
    fit = elo.fit_elo(results, "random", prior_draws=1.0, bootstrap=50)
    assert fit["ratings"]["model"]["elo"] == pytest.approx(400 * np.log10(200.5 / 0.5), abs=0.1)
    draws_only = elo.fit_elo([elo.PairResult("a", "b", 0, 10, 0)], "b", bootstrap=0)
    assert draws_only["ratings"]["a"]["elo"] == pytest.approx(0.0, abs=1e-9)


def test_errors():
    results = [elo.PairResult("a", "b", 3, 1, 2), elo.PairResult("c", "d", 1, 1, 1)]
    with pytest.raises(ValueError, match="no chain of games to the anchor 'a'"):
        elo.fit_elo(results, "a")
    with pytest.raises(ValueError, match="anchor 'z' played no game"):
        elo.fit_elo(results[:1], "z")
    with pytest.raises(ValueError, match="cannot play itself"):
        elo.fit_elo([elo.PairResult("a", "a", 1, 0, 0)], "a")
    with pytest.raises(ValueError, match="prior_draws"):
        elo.fit_elo(results[:1], "a", prior_draws=-1)


@pytest.mark.parametrize("games", [2, 4, 10, 64, 100, 400, 1000])
def test_every_score_interval_contains_its_score(games):
    # 400 wins out of 400 once gave a Wilson upper end of 0.9999999999999999 < 1.0, and the
    # ladder's plot (error bars score - low, high - score) crashed on the negative bar.
    for wins in range(games + 1):
        for draws in sorted({0, (games - wins) // 2, games - wins}):
            losses = games - wins - draws
            score = (wins + draws / 2) / games
            low, high = elo.wilson_interval(score, games)
            assert 0.0 <= low <= score <= high <= 1.0, (wins, draws, losses)
            rewards = np.array([1] * wins + [0] * draws + [-1] * losses)
            stats = elo.match_statistics(rewards, np.ones(games))
            low, high = stats["score_ci95"]
            assert 0.0 <= low <= stats["score"] <= high <= 1.0, (wins, draws, losses)


@pytest.mark.parametrize(
    "results",
    [
        [("model", "random", 200, 0, 0)],
        [
            ("model", "random", 400, 0, 0),
            ("model", "engine", 0, 0, 400),
            ("engine", "random", 400, 0, 0),
        ],
        [("model", "random", 2, 0, 0), ("model", "greedy", 2, 0, 0), ("greedy", "random", 2, 0, 0)],
        [
            ("model", "random", 30, 5, 1),
            ("model", "greedy", 12, 3, 9),
            ("greedy", "random", 20, 4, 2),
        ],
    ],
)
def test_every_rating_interval_contains_its_rating(results):
    # Perfect scores everywhere make every bootstrap resample the same data; its refits landed
    # 1e-13 to one side of the estimate, and the ladder's plot crashed on the negative bar.
    fit = elo.fit_elo([elo.PairResult(*r) for r in results], "random", bootstrap=100)
    for name, rating in fit["ratings"].items():
        for key in ("ci95", "ci95_fisher"):
            low, high = rating[key]
            assert low <= rating["elo"] <= high, (name, key, low, rating["elo"], high)
