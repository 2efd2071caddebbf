"""The bfloat16-against-float32 comparison (experiments/precision/compare.py, issue 50 item 1):
the commands it runs carry each arm's dtype and seed, the report measures the bf16 gap against
the seed gap on the metrics the trainer writes, and nothing is reported before every arm and
match is done. Written metrics and match files stand in for the runs (no training here)."""

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "experiments" / "precision" / "compare.py"
_spec = importlib.util.spec_from_file_location("precision_compare", PATH)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def write_run(root: Path, arm: str, policy: list[float], value: list[float]) -> None:
    (root / arm).mkdir(parents=True)
    with open(root / arm / "metrics.jsonl", "w") as handle:
        for i, (p, v) in enumerate(zip(policy, value, strict=True), start=1):
            record = {"step": i, "iteration": i, "train/policy_loss": p, "train/value_loss": v,
                      "perf/iteration_seconds": float(i)}  # fmt: skip
            handle.write(json.dumps(record) + "\n")


def write_match(root: Path, name: str, score: float) -> None:
    path = compare.match_path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"score": score, "score_ci95": [score - 0.05, score + 0.05], "wins": 10,
              "draws": 2, "losses": 8}  # fmt: skip
    path.write_text(json.dumps(result))


def test_each_arm_trains_its_dtype_and_seed_and_each_match_plays_its_pair(tmp_path):
    command = " ".join(compare.train_command("bf16_s0", tmp_path))
    assert "--config.network.dtype=bfloat16" in command and "--config.seed=0" in command
    assert f"--config.num_iterations={compare.ITERATIONS}" in command
    assert "--config.seed=1" in " ".join(compare.train_command("f32_s1", tmp_path))
    match = compare.match_command("bf16_vs_f32", tmp_path)
    assert match[match.index("--checkpoint") + 1] == str(tmp_path / "bf16_s0")
    assert match[match.index("--opponent") + 1] == str(tmp_path / "f32_s0")
    # The diagnostic plays the bf16 arm's parameters from their float32-compute export.
    diagnostic = compare.match_command("bf16_params_f32_play_vs_f32", tmp_path)
    assert diagnostic[diagnostic.index("--checkpoint") + 1] == str(tmp_path / "bf16_s0_float32")


def test_the_report_sets_the_bf16_gap_against_the_seed_gap(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "ITERATIONS", 4)
    write_run(tmp_path, "f32_s0", [2.0, 1.8, 1.6, 1.5], [0.5, 0.4, 0.4, 0.3])
    write_run(tmp_path, "bf16_s0", [2.0, 1.9, 1.6, 1.4], [0.5, 0.4, 0.4, 0.3])
    write_run(tmp_path, "f32_s1", [2.2, 1.9, 1.8, 1.5], [0.6, 0.4, 0.5, 0.3])
    with pytest.raises(SystemExit, match="not done yet: bf16_vs_f32, seed1_vs_seed0"):
        compare.report(tmp_path)
    write_match(tmp_path, "bf16_vs_f32", 0.48)
    write_match(tmp_path, "seed1_vs_seed0", 0.55)
    table = compare.report(tmp_path)
    gaps = json.loads((tmp_path / "report.json").read_text())["gaps"]
    policy = gaps["train/policy_loss"]
    assert policy["bf16_gap"] == pytest.approx(0.2 / 4)
    assert policy["seed_gap"] == pytest.approx(0.5 / 4)
    assert policy["ratio"] == pytest.approx(0.4)
    assert gaps["train/value_loss"]["bf16_gap"] == 0.0
    assert "| bf16_s0 vs f32_s0 | 0.480 | [0.430, 0.530] | 10-2-8 |" in table
    assert (tmp_path / "losses.png").stat().st_size > 0
    assert compare.status(tmp_path).splitlines()[0] == "f32_s0: 4 of 4 iterations"


def test_a_match_before_its_arms_are_trained_and_bad_names_are_refused_in_one_line(
    tmp_path, capsys
):
    with pytest.raises(SystemExit, match="needs arm bf16_s0 trained first"):
        compare.match(tmp_path, "bf16_vs_f32")
    write_run(tmp_path, "bf16_s1", [1.0] * compare.ITERATIONS, [0.5] * compare.ITERATIONS)
    write_run(tmp_path, "f32_s1", [1.0] * compare.ITERATIONS, [0.5] * compare.ITERATIONS)
    with pytest.raises(SystemExit, match="needs arm bf16_s1's checkpoints"):
        compare.match(tmp_path, "bf16_vs_f32_s1")
    with pytest.raises(SystemExit):
        compare.main(["train", "f16", "--root", str(tmp_path)])
    error = capsys.readouterr().err
    assert "train takes one of f32_s0, bf16_s0, f32_s1, bf16_s1" in error and "got 'f16'" in error


def test_round_two_reads_the_paired_bf16_scores_with_an_interval_over_the_seeds(tmp_path):
    assert compare.paired_verdict([0.49, 0.51, 0.50])["verdict"] == "equal"
    assert compare.paired_verdict([0.40, 0.42, 0.41])["verdict"] == "worse"
    wide = compare.paired_verdict([0.30, 0.50, 0.70])
    assert wide["verdict"] == "undecided" and wide["mean"] == pytest.approx(0.5)
    assert wide["half_width"] == pytest.approx(4.302653 * 0.2 / 3**0.5)
    with pytest.raises(SystemExit, match="not done yet: bf16_vs_f32, bf16_vs_f32_s1"):
        compare.report_round2(tmp_path)
    names = [*compare.PAIRED, *compare.SEED_PAIRS]
    for name, score in zip(names, [0.42, 0.45, 0.44, 0.52, 0.5], strict=True):
        write_match(tmp_path, name, score)
    table = compare.report_round2(tmp_path)
    assert "| bf16_s2 vs f32_s2 | 0.440 | [0.390, 0.490] |" in table
    assert "mean 0.437" in table and "**worse**" in table


def test_round_three_reads_five_pairs_with_the_t_quantile_of_four_degrees_of_freedom(tmp_path):
    five = compare.paired_verdict([0.42, 0.55, 0.53, 0.50, 0.50])
    sd = statistics.stdev([0.42, 0.55, 0.53, 0.50, 0.50])
    assert five["half_width"] == pytest.approx(2.776445 * sd / 5**0.5)
    assert five["verdict"] == "equal"  # what three pairs of that spread could not say
    assert compare.paired_verdict([0.42, 0.55, 0.53])["verdict"] == "undecided"
    for name, score in zip(compare.PAIRED, [0.42, 0.55, 0.53], strict=True):
        write_match(tmp_path, name, score)
    for name in compare.SEED_PAIRS:
        write_match(tmp_path, name, 0.5)
    with pytest.raises(
        SystemExit, match=r"not done yet: bf16_vs_f32_s3, bf16_vs_f32_s4 \(run `all --round 3`\)"
    ):
        compare.report_round2(tmp_path, 3)
    for name in compare.ROUND3_MATCHES:
        write_match(tmp_path, name, 0.5)
    table = compare.report_round2(tmp_path, 3)
    assert "paired by seed (n = 5): mean 0.500" in table and "**equal**" in table
    assert (tmp_path / "report_round3.json").exists()


def test_the_readme_table_is_the_report_of_the_committed_runs(tmp_path):
    import shutil

    shutil.copytree(PATH.parent / "runs", tmp_path / "runs")
    table = compare.report(tmp_path / "runs")
    readme = (PATH.parent / "README.md").read_text()
    for line in table.splitlines():
        assert line in readme, line
    for line in compare.report_round2(tmp_path / "runs").splitlines():
        assert line in readme, line
    for line in compare.report_round2(tmp_path / "runs", 3).splitlines():
        assert line in readme, line
