"""The recon no-collapse run (experiments/recon/no_collapse.py, issue 47 item 4): collapse is
read from the metrics as registered (10 iterations in a row with at least 90% of the games
undecided), and evaluating before a finished run is refused in one line. No training here."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "experiments" / "recon" / "no_collapse.py"
_spec = importlib.util.spec_from_file_location("recon_no_collapse", PATH)
no_collapse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no_collapse)


def records(decisive: list[float]) -> list[dict]:
    return [{"iteration": i, "selfplay/decisive": d} for i, d in enumerate(decisive, start=1)]


def test_collapse_is_ten_passive_iterations_in_a_row():
    assert no_collapse.collapse(records([0.5] * 30)) is None
    assert no_collapse.collapse(records([0.05] * 9 + [0.5] + [0.05] * 9)) is None
    assert no_collapse.collapse(records([0.5] * 5 + [0.1] * 10 + [0.5])) == 6
    assert no_collapse.collapse(records([0.11] * 20)) is None  # 89% undecided is not passive


def test_the_run_trains_the_cpu_preset_to_its_budget_and_evaluate_needs_a_finished_run(
    tmp_path, capsys
):
    (stage,) = no_collapse.arms(1)["recon"]
    assert stage[1] == "configs/recon.py:cpu" and stage[2] is None
    # Run 1: the preset as it is, with the minibatch sampler it ran with (its draws).
    assert stage[3] == ["--config.num_iterations=100000", "--config.learner.sampler=gumbel"]
    assert no_collapse.runner.stage_limits("recon", 3600.0, no_collapse.arms(1)) == [3600.0]
    command = no_collapse.evaluation_command(tmp_path)
    assert command[command.index("--checkpoint") + 1] == str(tmp_path / "recon" / "recon")
    assert command[command.index("--games") + 1] == "100"
    with pytest.raises(SystemExit):
        no_collapse.main(["evaluate", "--root", str(tmp_path)])
    assert "no finished run under" in capsys.readouterr().err


def test_runs_2_to_4_add_only_their_registered_changes_and_have_their_own_folders(capsys):
    (one,), (two,) = no_collapse.arms(1)["recon"], no_collapse.arms(2)["recon"]
    assert two[:3] == one[:3]
    assert two[3] == one[3] + ["--config.selfplay.explore=0.1"]
    assert no_collapse.RUNS[1][1] != no_collapse.RUNS[2][1]
    (three,) = no_collapse.arms(3)["recon"]
    assert three[:3] == one[:3] and three[3] == two[3] + ["--config.replay.iterations=4"]
    # Run 4: run 3 drawn by the preset's sampler (inverse CDF), refilled slots, 32 of them.
    (four,) = no_collapse.arms(4)["recon"]
    assert four[:3] == one[:3]
    assert four[3] == [x for x in three[3] if x != no_collapse.GUMBEL] + [
        "--config.selfplay.refill=True", "--config.selfplay.games=32"
    ]  # fmt: skip
    assert len({name for _, name in no_collapse.RUNS.values()}) == len(no_collapse.RUNS)
    with pytest.raises(SystemExit):
        no_collapse.main(["evaluate", "--run", "5"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_parked_run_goes_to_its_own_archive_and_park_needs_a_run(tmp_path, capsys):
    archives = {no_collapse.parked_archive(run) for run in no_collapse.RUNS}
    assert len(archives) == len(no_collapse.RUNS)  # each run its own archive
    assert all(a.parent == no_collapse.ROOT / "experiments" / "recon" / "parked" for a in archives)
    with pytest.raises(SystemExit, match="holds no run of recon to park"):
        no_collapse.main(["park", "--root", str(tmp_path)])
