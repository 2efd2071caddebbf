"""`python -m mmc_jax.adapt`'s answer (issue 51): a verdict line under the table, a `next:`
hint, a `--help` that lists every flag with its default, and a note when fog leaves the
adapted-versus-unadapted match out. No training here: the verdict is a function of the
results, and the command's start is checked up to its first error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mmc_jax import adapt

ROOT = Path(__file__).resolve().parents[2]


def match(score, low, high):
    return {"score": score, "score_ci95": [low, high], "num_games": 40}


def results(*points, opponents=("random", "greedy")):
    return {
        "variant": "atomic",
        "settings": {"opponents": list(opponents)},
        "points": [{"iteration": i, "matches": m} for i, m in points],
    }


@pytest.mark.parametrize(
    "head_to_head, meaning",
    [
        (match(0.7, 0.6, 0.8), "stronger than before"),
        (match(0.3, 0.2, 0.4), "weaker than before"),
        (match(0.55, 0.45, 0.65), "no clear difference yet (the interval holds 0.5)"),
    ],
)
def test_verdict_reads_the_match_against_the_unadapted_model(head_to_head, meaning):
    line = adapt.verdict(
        results((0, {"greedy": match(0.4, 0.3, 0.5)}), (2, {"unadapted": head_to_head}))
    )
    assert line.startswith("verdict: after 2 adaptation iterations the adapted model scores ")
    assert "against the unadapted one" in line and line.endswith(meaning)


def test_verdict_under_fog_compares_the_strongest_built_in_opponent():
    """Without a head-to-head match (fog), the start and the end against greedy."""
    start = {"random": match(0.9, 0.8, 0.95), "greedy": match(0.3, 0.2, 0.4)}
    end = {"random": match(0.95, 0.9, 1.0), "greedy": match(0.6, 0.5, 0.7)}
    line = adapt.verdict(results((0, start), (1, end)))
    assert line == (
        "verdict: against greedy, 0.30 [0.20, 0.40] at the start and 0.60 [0.50, 0.70] after "
        "1 adaptation iteration: better"
    )
    overlapping = {"greedy": match(0.35, 0.25, 0.45)}
    assert adapt.verdict(results((0, start), (1, overlapping))).endswith("intervals overlap)")
    assert "only the unadapted start" in adapt.verdict(results((0, start)))


def test_next_hint_resumes_with_more_iterations_and_plays_the_result():
    line = adapt.next_hint("atomic", "joat-study", "runs/adapt_atomic", 2)
    assert line.startswith("next: python -m mmc_jax.adapt --variant 'atomic' ")
    assert "--init_from joat-study --iterations 4 --workdir runs/adapt_atomic" in line
    assert "python -m mmc_jax.serve --model runs/adapt_atomic" in line


def run_adapt(*argv, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "mmc_jax.adapt", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        **kwargs,
    )


def test_help_lists_every_flag_with_its_default():
    done = run_adapt("--help")
    assert done.returncode == 0, done.stderr
    flags = done.stdout.split("Flags:")[1].split("Config fields")[0]
    for flag in ("--variant", "--init_from", "--workdir", "--eval_at", "--head_to_head"):
        assert f"\n  {flag}\n" in flags or f"\n  {flag} (default:" in flags, flag
    assert "--iterations (default: 1)" in flags and "--seed (default: 0)" in flags
    assert "joint-study" in flags  # --init_from's default, in its help
    assert "--chex" not in flags and "--verbosity" not in flags  # the libraries' own flags


def test_fog_says_the_head_to_head_match_is_skipped(tmp_path):
    """Under fog the adapted model plays the built-in players only: one note says so before
    anything runs (here the run then stops at once, at a bad --iterations)."""
    done = run_adapt(
        "--variant", "dark", "--init_from", "gardner-cpu", "--iterations", "-1",
        "--workdir", str(tmp_path / "adapt"),
    )  # fmt: skip
    assert done.returncode == 2
    note = adapt.FOG_NOTE.format(variant="dark")
    assert note in done.stdout.splitlines()
    assert "not the unadapted one" in note
    clear = run_adapt(
        "--variant", "atomic", "--init_from", "gardner-cpu", "--iterations", "-1",
        "--workdir", str(tmp_path / "adapt2"),
    )  # fmt: skip
    assert "note: atomic has fog" not in clear.stdout


def test_a_signal_that_stops_the_training_raises_stopped_not_a_short_curve(tmp_path, monkeypatch):
    """A SIGTERM during the adaptation run (a time limit's) used to return the points played so
    far as if they were the whole curve, and the study wrote that short curve as a cell. The
    call now raises `Stopped`; the points played stay in the workdir for the resume."""
    from configs import joat
    from mmc_jax.training import runloop

    def stopped_run(algorithm, config, workdir, **kwargs):
        return runloop.RunResult(
            state=None, record={"iteration": 1}, start_iteration=0, stopped=True
        )

    monkeypatch.setattr(runloop, "run", stopped_run)
    with pytest.raises(runloop.Stopped, match="stopped by a signal at iteration 1"):
        adapt.run_adaptation(
            "atomic", "scratch", tmp_path / "adapt", config=joat.get_config("smoke"),
            iterations=2, eval_at=[2], stream=None,
        )  # fmt: skip


def test_the_table_keeps_every_line_under_200_characters():
    """The caption was one line of 207 characters on a plain run (issue 70's first hour)."""
    table = dict(
        results((0, {"random": match(0.88, 0.79, 0.96)}), (1, {"unadapted": match(0.5, 0.4, 0.6)})),
        init_from="joint-study",
        seed=0,
        settings={"opponents": ["random", "greedy"], "num_games": 64, "num_simulations": 16,
                  "max_plies": 256, "opening_plies": 4},
    )  # fmt: skip
    for point, frames in zip(table["points"], (0, 512), strict=True):
        point["frames"] = frames
    lines = adapt.markdown_table(table).splitlines()
    assert lines[0].startswith("Adaptation to `atomic` from `joint-study`: 64 colour-balanced")
    assert all(len(line) < 200 for line in lines), [len(line) for line in lines]
