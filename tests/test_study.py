"""The adaptation study's bookkeeping (experiments/adaptation/study.py): presets, the paired
comparisons between arms and the frames-to-target table, on made-up results (no JAX work)."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "experiments" / "adaptation" / "study.py"
_spec = importlib.util.spec_from_file_location("study", PATH)
study = importlib.util.module_from_spec(_spec)
sys.modules["study"] = study  # dataclasses look their module up
_spec.loader.exec_module(study)


def _point(iteration, score, games=64, frames_per_iteration=256):
    match = {"score": score, "num_games": games, "score_ci95": [score - 0.1, score + 0.1]}
    return {"iteration": iteration, "frames": iteration * frames_per_iteration,
            "matches": {"greedy": match}}  # fmt: skip


def _results():
    # joat: 0.5 -> 0.9 on both variants; joint: 0.5 -> 0.7 (a) and 0.6 (b); two seed pairs.
    games = {}
    for variant, joint_after in (("a", 0.7), ("b", 0.6)):
        for seed in ("0", "1"):
            for arm, after in (("joat", 0.9), ("joint", joint_after)):
                points = [_point(0, 0.5), _point(1, after), _point(2, after)]
                games.setdefault(variant, {}).setdefault(arm, {})[seed] = {"0": points}
    return {"preset": "test", "fewshot": {}, "games": games}


def test_paired_differences_pair_the_same_cells():
    rows = study.game_rows(_results())
    diffs = study.paired_differences(rows, "joat", "joint")
    assert set(diffs) == {0, 1, 2}
    mean, half, cells = diffs[1]
    assert cells == 4 and mean == pytest.approx(0.25)
    # differences 0.2, 0.2, 0.3, 0.3: sd 0.0577, half-width t(0.975, 3) sd / 2
    assert half == pytest.approx(3.182446 * math.sqrt(1 / 300) / 2)
    assert diffs[0][:2] == (0.0, 0.0)


def test_frames_to_target_is_the_first_iteration_reaching_it():
    reached = study.frames_to(study.game_rows(_results()), target=0.8)
    assert reached[("a", "joat")] == 256 and reached[("b", "joat")] == 256
    assert reached[("a", "joint")] is None


def test_report_has_the_tables_and_reads_the_first_format(tmp_path):
    text = study.report(tmp_path, _results())
    assert "| joat - joint | +0.000 +- 0.000 (4) | +0.250" in text
    assert "Adaptation frames to reach 0.8" in text
    # The first quick run stored the greedy match's fields in the point itself.
    old = {"preset": "quick", "fewshot": {}, "games": {"a": {"joat": {"0": {"0": [
        {"iteration": 0, "frames": 0, "score": 0.4, "num_games": 64}]}}}}}  # fmt: skip
    assert "| `a` | joat | 0.40 |" in study.report(tmp_path, old)


def test_presets_follow_the_protocol():
    for name, preset in study.PRESETS.items():
        assert preset.adapt_points[:2] == (0, 1), name
        assert set(preset.game_arms) <= set(study.ALL_ARMS), name
    cpu, gpu = study.PRESETS["cpu"], study.PRESETS["gpu"]
    assert (
        (len(cpu.seeds), len(cpu.adapt_seeds)) == (3, 2) == (len(gpu.seeds), len(gpu.adapt_seeds))
    )
    assert cpu.adapt_points == gpu.adapt_points == (0, 1, 2, 5)
    assert gpu.games >= 256 and gpu.references and gpu.engine_nodes
