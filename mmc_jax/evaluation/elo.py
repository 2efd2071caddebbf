"""Elo ratings by maximum likelihood over game results, with confidence intervals.

Model (Bradley-Terry on the Elo scale, draws as half points): player i scores against
player j with expected score

    E_ij = 1 / (1 + 10 ** (-(r_i - r_j) / 400)),

and the ratings r maximise the log-likelihood of the observed scores, every game counting as
s log E + (1 - s) log (1 - E) with s = 1, 1/2, 0 (a draw is half a win and half a loss, as in the
Elo system itself; there is no separate draw parameter as in Davidson's model, so the ratings
are exactly the ones that reproduce each player's total score). One player is the anchor,
fixed at 0 (random play, in the ladder). The fit is Newton's method on the other ratings.

A pair with a perfect score (200-0) has no finite maximum. `prior_draws` virtual draws are
added to every pair that played (default 1, as BayesElo's prior does): 200 wins and no loss
then give a difference of 400 log10(200.5 / 0.5) = 1041 Elo, a finite bound rather than
infinity. Set it to 0 for the plain MLE (which then needs every player to have won and lost
something in the graph of games).

Confidence intervals (95%):
  ci95_fisher  r +- 1.96 se, se from the inverse of the observed Fisher information (the
               negative Hessian of the log-likelihood at the optimum, anchor removed). With
               draws this overstates the variance (a draw is scored like a coin flip of a win
               and a loss, per-game variance E(1 - E) instead of the observed one), so it is
               conservative when draws are frequent.
  ci95         the percentile interval of a bootstrap over games: each pair's W/D/L counts are
               resampled (multinomial at the observed frequencies) and the ratings refitted.
               It uses the observed draw rate and is the one reported by default. It always
               contains the estimate (widened where the refits of identical resamples fall a
               rounding error to one side of it).

Match statistics (`match_statistics`, used by every arena): per-game scores 1 / 0.5 / 0, the
score with the normal interval on the per-game scores (sample variance, ddof 1) or, when every
game has the same result, the Wilson score interval (`ci_method` says which); the Wilson
interval always as `score_ci95_wilson`; and the Elo difference `400 log10(p / (1 - p))` of the
score and of its bounds (None where infinite).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

Z_95 = 1.959963984540054
ELO_SCALE = 400.0 / math.log(10.0)  # Elo per natural-log unit of odds
Z_95 = 1.959963984540054


@dataclasses.dataclass
class PairResult:
    """Games between two players, counted from `a`'s side."""

    a: str
    b: str
    wins: int = 0  # a won
    draws: int = 0
    losses: int = 0  # a lost

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """a's score (W + D/2) / N."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else float("nan")


def expected_score(difference: float | np.ndarray) -> float | np.ndarray:
    """Expected score of a player rated `difference` Elo above its opponent."""
    return 1.0 / (1.0 + 10.0 ** (-np.asarray(difference, np.float64) / 400.0))


def aggregate(results: Iterable[PairResult]) -> list[PairResult]:
    """Merge results of the same pair (in either order) into one PairResult per pair."""
    merged: dict[tuple[str, str], PairResult] = {}
    for r in results:
        if r.a == r.b:
            raise ValueError(f"a player cannot play itself in a rating fit: {r.a!r}")
        if min(r.wins, r.draws, r.losses) < 0:
            raise ValueError(f"negative game counts for {r.a} vs {r.b}")
        key = (r.a, r.b) if r.a < r.b else (r.b, r.a)
        entry = merged.setdefault(key, PairResult(*key))
        if key == (r.a, r.b):
            entry.wins, entry.losses = entry.wins + r.wins, entry.losses + r.losses
        else:
            entry.wins, entry.losses = entry.wins + r.losses, entry.losses + r.wins
        entry.draws += r.draws
    return [r for r in merged.values() if r.games > 0]


def _connected(players: Sequence[str], pairs: Sequence[PairResult], anchor: str) -> set[str]:
    neighbours: dict[str, set[str]] = {p: set() for p in players}
    for r in pairs:
        neighbours[r.a].add(r.b)
        neighbours[r.b].add(r.a)
    seen, stack = {anchor}, [anchor]
    while stack:
        for q in neighbours[stack.pop()] - seen:
            seen.add(q)
            stack.append(q)
    return seen


def _fit(
    index_a: np.ndarray,
    index_b: np.ndarray,
    points: np.ndarray,
    games: np.ndarray,
    num_players: int,
    anchor: int,
    start: np.ndarray | None = None,
    iterations: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method in natural-log units; returns (ratings [P] in log-odds units, the
    observed information matrix [P, P] at the optimum)."""
    theta = np.zeros(num_players) if start is None else start.copy()
    free = np.arange(num_players) != anchor

    def terms(theta):
        expected = 1.0 / (1.0 + np.exp(-(theta[index_a] - theta[index_b])))
        residual = points - games * expected
        gradient = np.zeros(num_players)
        np.add.at(gradient, index_a, residual)
        np.add.at(gradient, index_b, -residual)
        weight = games * expected * (1.0 - expected)
        information = np.zeros((num_players, num_players))
        np.add.at(information, (index_a, index_a), weight)
        np.add.at(information, (index_b, index_b), weight)
        np.add.at(information, (index_a, index_b), -weight)
        np.add.at(information, (index_b, index_a), -weight)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_likelihood = np.sum(
                np.where(points > 0, points * np.log(expected), 0.0)
                + np.where(games - points > 0, (games - points) * np.log1p(-expected), 0.0)
            )
        return log_likelihood, gradient, information

    log_likelihood, gradient, information = terms(theta)
    for _ in range(iterations):
        step = np.zeros(num_players)
        try:
            step[free] = np.linalg.solve(information[np.ix_(free, free)], gradient[free])
        except np.linalg.LinAlgError:
            step[free] = np.linalg.lstsq(
                information[np.ix_(free, free)], gradient[free], rcond=None
            )[0]
        scale = 1.0
        while True:  # step halving keeps every iteration an ascent
            candidate = theta + scale * step
            new = terms(candidate)
            if new[0] >= log_likelihood - 1e-12 or scale < 1e-6:
                break
            scale /= 2
        theta = candidate
        log_likelihood, gradient, information = new
        if np.max(np.abs(scale * step)) < 1e-10:
            break
    return theta, information


def _containing(estimate: float, low: float, high: float) -> tuple[float, float]:
    """The interval [low, high] widened, if at all, to contain its estimate. Rounding can leave
    an end a hair on the wrong side: a Wilson upper end of 0.9999999999999999 for 400 wins of
    400, or bootstrap refits of identical resamples (a perfect score everywhere) all 1e-13 to
    one side of the rating; plotted as error bars, either is negative."""
    return min(float(low), estimate), max(float(high), estimate)


def fit_elo(
    results: Iterable[PairResult],
    anchor: str,
    *,
    prior_draws: float = 1.0,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Maximum-likelihood Elo ratings of every player in `results`, `anchor` = 0.

    Args:
      results: PairResults (pairs may repeat, in either order; they are merged).
      anchor: the player fixed at rating 0.
      prior_draws: virtual draws added to every pair that played (see the module docstring).
      bootstrap: resamples for the percentile intervals (0: Fisher intervals only).
      seed: of the bootstrap.

    Returns a JSON-able dict: `ratings` {player: {elo, ci95, ci95_fisher, se, games, score}}
    (score: the player's mean score over its games), `pairs` (W/D/L per pair, with the
    expected score under the fit), `anchor`, `prior_draws`, `bootstrap`, `method`.

    Raises:
      ValueError: unknown anchor, negative counts, or a player not connected to the anchor by
        games (its rating would be arbitrary).
    """
    pairs = aggregate(results)
    players = sorted({r.a for r in pairs} | {r.b for r in pairs})
    _check_fit_inputs(players, pairs, anchor, prior_draws)
    position = {p: i for i, p in enumerate(players)}
    index_a = np.array([position[r.a] for r in pairs])
    index_b = np.array([position[r.b] for r in pairs])
    counts = np.array([[r.wins, r.draws, r.losses] for r in pairs], np.float64)  # [K, 3]
    anchor_index = position[anchor]
    theta, information = _fit(
        index_a, index_b, *_points_and_games(counts, prior_draws), len(players), anchor_index
    )
    ratings = theta * ELO_SCALE
    ratings -= ratings[anchor_index]
    se = _standard_errors(information, anchor_index)
    boot_ci = None
    if bootstrap:
        boot_ci = _bootstrap_intervals(
            index_a, index_b, counts, prior_draws, theta, anchor_index, bootstrap, seed
        )
    return {
        "method": "Bradley-Terry maximum likelihood on the Elo scale, draws as half points",
        "anchor": anchor,
        "prior_draws": prior_draws,
        "bootstrap": bootstrap,
        "ratings": _rating_table(players, pairs, ratings, se, boot_ci),
        "pairs": [
            {
                "a": r.a,
                "b": r.b,
                "games": r.games,
                "wins": r.wins,
                "draws": r.draws,
                "losses": r.losses,
                "score": r.score,
                "expected_score": float(
                    expected_score(ratings[position[r.a]] - ratings[position[r.b]])
                ),
            }
            for r in pairs
        ],
    }


def _check_fit_inputs(
    players: list[str], pairs: list[PairResult], anchor: str, prior_draws: float
) -> None:
    """ValueError unless the anchor played, every player is connected to it by games and the
    prior is non-negative."""
    if anchor not in players:
        raise ValueError(f"anchor {anchor!r} played no game; players: {', '.join(players)}")
    reachable = _connected(players, pairs, anchor)
    if len(reachable) < len(players):
        missing = sorted(set(players) - reachable)
        raise ValueError(
            f"players {', '.join(missing)} have no chain of games to the anchor {anchor!r}: "
            "their ratings would be arbitrary"
        )
    if prior_draws < 0:
        raise ValueError(f"prior_draws must be >= 0, got {prior_draws}")


def _points_and_games(counts: np.ndarray, prior_draws: float) -> tuple[np.ndarray, np.ndarray]:
    """(points [K], games [K]) of W/D/L counts [K, 3], each pair with its prior draws added."""
    points = counts[:, 0] + 0.5 * counts[:, 1] + 0.5 * prior_draws
    games = counts.sum(axis=1) + prior_draws
    return points, games


def _standard_errors(information: np.ndarray, anchor_index: int) -> np.ndarray:
    """Elo standard errors [P] from the Fisher information (0 for the anchor; inf when the
    information is singular)."""
    free = np.arange(information.shape[0]) != anchor_index
    se = np.zeros(information.shape[0])
    try:
        covariance = np.linalg.inv(information[np.ix_(free, free)])
        se[free] = np.sqrt(np.maximum(np.diag(covariance), 0.0)) * ELO_SCALE
    except np.linalg.LinAlgError:
        se[free] = np.inf
    return se


def _bootstrap_intervals(
    index_a: np.ndarray,
    index_b: np.ndarray,
    counts: np.ndarray,
    prior_draws: float,
    theta: np.ndarray,
    anchor_index: int,
    bootstrap: int,
    seed: int,
) -> np.ndarray:
    """[2, P]: 95% percentile intervals of the Elo ratings over `bootstrap` refits, each on
    W/D/L counts resampled per pair (multinomial at the pair's observed frequencies)."""
    rng = np.random.default_rng(seed)
    totals = counts.sum(axis=1).astype(np.int64)
    frequencies = counts / np.maximum(totals, 1)[:, None]
    samples = np.empty((bootstrap, theta.shape[0]))
    for b in range(bootstrap):
        resampled = np.stack(
            [rng.multinomial(n, f) for n, f in zip(totals, frequencies, strict=True)]
        ).astype(np.float64)
        sample, _ = _fit(
            index_a,
            index_b,
            *_points_and_games(resampled, prior_draws),
            theta.shape[0],
            anchor_index,
            start=theta,
            iterations=30,
        )
        samples[b] = (sample - sample[anchor_index]) * ELO_SCALE
    return np.percentile(samples, [2.5, 97.5], axis=0)


def _rating_table(
    players: list[str],
    pairs: list[PairResult],
    ratings: np.ndarray,
    se: np.ndarray,
    boot_ci: np.ndarray | None,
) -> dict[str, dict[str, Any]]:
    """{player: {elo, ci95, ci95_fisher, se, games, score}} (the bootstrap interval when there
    is one, else the Fisher interval)."""
    games_of = dict.fromkeys(players, 0)
    points_of = dict.fromkeys(players, 0.0)
    for r in pairs:
        games_of[r.a] += r.games
        games_of[r.b] += r.games
        points_of[r.a] += r.wins + 0.5 * r.draws
        points_of[r.b] += r.losses + 0.5 * r.draws
    table = {}
    for i, p in enumerate(players):
        fisher = [float(ratings[i] - Z_95 * se[i]), float(ratings[i] + Z_95 * se[i])]
        table[p] = {
            "elo": float(ratings[i]),
            "ci95": (
                list(_containing(float(ratings[i]), *boot_ci[:, i]))
                if boot_ci is not None
                else fisher
            ),
            "ci95_fisher": fisher,
            "se": float(se[i]),
            "games": games_of[p],
            "score": points_of[p] / games_of[p],
        }
    return table


# ---------------------------------------------------------------------------------------------
# Match statistics


def wilson_interval(score: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion `score` observed over `n` trials.

    It always contains `score` (`_containing`): at 0 or 1 one end is exactly the score.
    """
    if n <= 0:
        raise ValueError(f"need at least one game, got {n}")
    denominator = 1.0 + z * z / n
    centre = (score + z * z / (2 * n)) / denominator
    half_width = z / denominator * math.sqrt(score * (1 - score) / n + z * z / (4 * n * n))
    return _containing(score, max(0.0, centre - half_width), min(1.0, centre + half_width))


def elo_difference(score: float) -> float | None:
    """Elo difference implied by a match score (None at 0 or 1, where it is infinite)."""
    if not 0.0 < score < 1.0:
        return None
    return 400.0 * math.log10(score / (1.0 - score))


def _tally(rewards: np.ndarray, plies: np.ndarray) -> dict[str, Any]:
    games = len(rewards)
    wins, draws, losses = (
        int(n) for n in ((rewards > 0).sum(), (rewards == 0).sum(), (rewards < 0).sum())
    )
    return {
        "games": games,
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "score": (wins + 0.5 * draws) / games,
        "mean_plies": float(plies.mean()),
    }


def normal_interval(scores: np.ndarray, z: float = Z_95) -> tuple[float, float]:
    """mean +- z * sd / sqrt(N) of per-game scores [N] (sample sd, ddof 1), clipped to [0, 1]."""
    scores = np.asarray(scores, np.float64)
    n = len(scores)
    sd = float(scores.std(ddof=1)) if n > 1 else 0.0
    mean = float(scores.mean())
    half_width = z * sd / math.sqrt(n)
    return max(0.0, mean - half_width), min(1.0, mean + half_width)


def match_statistics(model_rewards: np.ndarray, plies: np.ndarray) -> dict[str, Any]:
    """W/D/L overall and per colour (games [0, N/2) White, [N/2, N) Black), score, 95% CIs.

    `model_rewards` [N] are the model's game results (+1 / 0 / -1), `plies` [N] game lengths.
    See the module docstring for the intervals.
    """
    model_rewards, plies = np.asarray(model_rewards), np.asarray(plies)
    half = len(model_rewards) // 2
    overall = _tally(model_rewards, plies)
    num_games, score = overall.pop("games"), overall["score"]
    scores = (np.sign(model_rewards) + 1.0) / 2.0
    wilson = wilson_interval(score, num_games)
    degenerate = num_games < 2 or np.all(scores == scores[0])
    low, high = wilson if degenerate else normal_interval(scores)
    return {
        "num_games": num_games,
        **overall,
        "score_ci95": [low, high],
        "ci_method": "wilson" if degenerate else "normal",
        "score_ci95_wilson": list(wilson),
        "elo": elo_difference(score),
        "elo_ci95": [elo_difference(low), elo_difference(high)],
        "white": _tally(model_rewards[:half], plies[:half]),
        "black": _tally(model_rewards[half:], plies[half:]),
    }
