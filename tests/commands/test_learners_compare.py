"""The equal-budget comparison of the learners (experiments/learners/compare.py, issue 48):
the CPU time of a process tree is counted, every stage stops at its share of the budget and
the next starts from it, a resume counts on from what was spent, and the report reads the
ladder's JSON. A fake trainer stands in for `python -m mmc_jax.train` (no JAX here)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from experiments.lab import runner

PATH = Path(__file__).resolve().parents[2] / "experiments" / "learners" / "compare.py"
_spec = importlib.util.spec_from_file_location("learners_compare", PATH)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)

# Burns CPU in a child of its own (as the dataset workers do) until SIGTERM, recording its
# arguments; it saves a checkpoint folder at once unless $FAKE_NO_CHECKPOINT is set.
FAKE_TRAINER = """#!{python}
import os, signal, subprocess, sys
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\\n")
if not os.environ.get("FAKE_NO_CHECKPOINT"):
    workdir = [a for a in sys.argv if a.startswith("--workdir=")][0].split("=", 1)[1]
    os.makedirs(os.path.join(workdir, "checkpoints"), exist_ok=True)
worker = subprocess.Popen([sys.executable, "-c", "while True: pass"])
signal.signal(signal.SIGTERM, lambda *_: (worker.kill(), sys.exit(0)))
while True:
    pass
"""


@pytest.fixture
def fake_python(tmp_path, monkeypatch) -> str:
    """`FAKE_TRAINER` as the runner's python, recording its calls in `tmp_path / "calls"`;
    the budget polled every 0.2 s."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_TRAINER.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls"))
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.2)
    return str(fake)


def test_the_cpu_time_of_a_process_tree_counts_its_children():
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
         "'import time\\nend = time.process_time() + 1.0\\nwhile time.process_time() < end: "
         "pass\\ntime.sleep(30)'])"]
    )  # fmt: skip
    try:
        deadline = time.time() + 60
        used = 0.0
        while time.time() < deadline and used < 0.9:
            time.sleep(0.2)
            used = runner.process_tree_cpu_seconds(child.pid)
        assert used >= 0.9  # the grandchild's second of CPU, seen through the tree
    finally:
        subprocess.run(["pkill", "-P", str(child.pid)], check=False)
        child.kill()


def test_stages_split_the_budget_and_the_open_one_takes_the_rest():
    assert runner.stage_limits("supervised_az", 3600.0, compare.ARMS) == [1800.0, 1800.0]
    assert runner.stage_limits("alphazero", 3600.0, compare.ARMS) == [3600.0]


def test_every_stage_stops_at_its_share_and_the_next_starts_from_it(tmp_path, fake_python):
    calls = tmp_path / "calls"
    root = tmp_path / "root"
    lines = []
    budget = compare.train_arm("supervised_az", root, 0.05, fake_python, lines.append)  # 3 s
    stages = budget["stages"]
    assert list(stages) == ["sup", "az"] and all(s["done"] for s in stages.values())
    for record in stages.values():  # stopped at the share, give or take one poll
        assert 1.5 <= record["cpu_seconds"] <= 1.5 + 3 * 0.2 * 2, record
    first, second = calls.read_text().splitlines()
    assert "--config=configs/supervised.py:cpu" in first and "--config.data.nodes=100" in first
    assert f"--init_from={root / 'supervised_az' / 'sup'}" in second.split()
    assert budget["final"] == str(root / "supervised_az" / "az")
    assert json.loads((root / "supervised_az" / "budget.json").read_text()) == budget
    # Done stages are not run again; another budget for the same arm is refused.
    again = compare.train_arm("supervised_az", root, 0.05, fake_python, lines.append)
    assert again["stages"] == stages and len(calls.read_text().splitlines()) == 2
    with pytest.raises(SystemExit, match="started with --cpu-minutes 0.05"):
        compare.train_arm("supervised_az", root, 60, fake_python, lines.append)


def test_a_stopped_runner_stops_its_stage_counts_it_to_the_end_and_does_not_finish_it(
    tmp_path, fake_python
):
    """SIGTERM to `train` (a sitting's end, before `park`): the stage's child is stopped, its
    CPU time is counted until it has ended, and the stage stays unfinished for the resume."""
    root = tmp_path / "root"
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(SystemExit, match="alphazero/az: stopped by SIGTERM at"):
            compare.train_arm("alphazero", root, 1.0, fake_python, print)
    finally:
        timer.cancel()
    record = runner.read_budget(root, "alphazero")["stages"]["az"]
    assert not record["done"] and 0.5 < record["cpu_seconds"] < 60
    assert signal.getsignal(signal.SIGTERM) is before  # the runner's handler is gone
    assert "final" not in runner.read_budget(root, "alphazero")


def test_a_stage_that_saved_no_checkpoint_is_an_error_not_a_start(
    tmp_path, monkeypatch, fake_python
):
    # Amendment 3's failure: the supervised stage spent its budget on the dataset alone.
    monkeypatch.setenv("FAKE_NO_CHECKPOINT", "1")
    with pytest.raises(SystemExit, match="supervised_az/sup spent its 0.0 CPU-min without saving"):
        compare.train_arm("supervised_az", tmp_path / "root", 0.02, fake_python, print)
    budget = runner.read_budget(tmp_path / "root", "supervised_az")
    assert not budget["stages"]["sup"]["done"] and "az" not in budget["stages"]
    assert len((tmp_path / "calls").read_text().splitlines()) == 1  # the second never started


def test_a_prepaid_stage_starts_from_the_named_dataset_and_is_charged_its_cost(
    tmp_path, monkeypatch, fake_python
):
    """Amendment 4: the stage copies the other arm's dataset before it starts, its budget
    counts on from the charge, and a stage started before cannot be prepaid over."""
    root = tmp_path / "root"
    with pytest.raises(SystemExit, match="compare.py train supervised_2400`"):
        compare.train_arm("supervised_2400_az", root, 0.05, fake_python, print)
    source = root / "supervised_2400" / "sup" / "dataset"
    source.mkdir(parents=True)
    (source / "manifest.json").write_text(json.dumps({"shards": [{"index": 0}, {"index": 1}]}))
    (source / "shard-00000.npz").write_bytes(b"games")
    registered = compare.PREPAID[("supervised_2400_az", "sup")]
    assert registered == (("supervised_2400", "sup"), pytest.approx(2400 * 0.77))
    monkeypatch.setitem(
        compare.PREPAID, ("supervised_2400_az", "sup"), (("supervised_2400", "sup"), 1.0)
    )
    budget = compare.train_arm("supervised_2400_az", root, 0.05, fake_python, print)  # 3 s
    sup = budget["stages"]["sup"]
    assert sup["prepaid"] == 1.0 and sup["prepaid_from"] == "supervised_2400/sup"
    assert sup["prepaid_shards"] == 2
    assert 1.8 <= sup["cpu_seconds"] <= 1.8 + 3 * 0.2 * 2  # 0.6 of 3 s, the charge included
    copied = root / "supervised_2400_az" / "sup" / "dataset" / "shard-00000.npz"
    assert copied.read_bytes() == b"games"
    with pytest.raises(SystemExit, match="was started already"):
        compare.prepay(root, "supervised_2400_az", "sup", root / "supervised_2400_az" / "sup")


def test_a_parked_arm_resumes_on_a_fresh_root_from_where_it_stopped(tmp_path, fake_python):
    """`park` keeps what a resume needs (the latest checkpoint of each stage, metrics, logs,
    an unfinished stage's dataset, the budget), `train` on a root without the arm unpacks it
    and runs only what is left, counting on from the parked CPU time; an arm that is there is
    never overwritten by its archive."""
    root = tmp_path / "root"
    arm = root / "supervised_az"
    for stage in ("sup", "az"):
        for step in (3, 12):
            (arm / stage / "checkpoints" / str(step)).mkdir(parents=True)
            (arm / stage / "checkpoints" / str(step) / "state").write_text(f"{stage} {step}")
        (arm / stage / "tensorboard").mkdir()
        (arm / stage / "tensorboard" / "events").write_text("e")
        (arm / stage / "metrics.jsonl").write_text(f'{{"step": 12, "stage": "{stage}"}}\n')
        (arm / stage / "lock.json").write_text("{}")
        (arm / stage / "dataset").mkdir()
        (arm / stage / "dataset" / "manifest.json").write_text("{}")
        (arm / stage / "dataset" / "shard-00000.npz").write_text("positions")
    (arm / "az.log").write_text("log")
    budget = {"arm": "supervised_az", "cpu_minutes": 0.05,
              "stages": {"sup": {"cpu_seconds": 1.5, "done": True},
                         "az": {"cpu_seconds": 0.5, "done": False}}}  # fmt: skip
    runner.write_budget(root, "supervised_az", budget)
    archive = tmp_path / "parked" / "supervised_az.tar.gz"
    runner.park(root, "supervised_az", archive, print)
    fresh = tmp_path / "fresh"
    assert runner.unpark(fresh, "supervised_az", archive, print)
    kept = sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file())
    assert kept == [
        "supervised_az/az.log",
        "supervised_az/az/checkpoints/12/state",
        "supervised_az/az/dataset/manifest.json",
        "supervised_az/az/dataset/shard-00000.npz",  # the unfinished stage's data
        "supervised_az/az/metrics.jsonl",
        "supervised_az/budget.json",
        "supervised_az/sup/checkpoints/12/state",
        "supervised_az/sup/dataset/manifest.json",  # the finished stage's: its manifest only
        "supervised_az/sup/metrics.jsonl",
    ]
    assert (fresh / "supervised_az/az/checkpoints/12/state").read_text() == "az 12"
    # A root that has the arm keeps it: the archive is not unpacked over it.
    (arm / "budget.json").write_text(json.dumps({**budget, "note": "newer"}))
    assert not runner.unpark(root, "supervised_az", archive, print)
    assert json.loads((arm / "budget.json").read_text())["note"] == "newer"
    # The resume on the fresh root: only the unfinished stage runs, from 0.5 CPU-s on.
    again = tmp_path / "again"
    done = compare.train_arm("supervised_az", again, 0.05, fake_python, print, parked=archive)
    (call,) = (tmp_path / "calls").read_text().splitlines()
    assert f"--workdir={again / 'supervised_az' / 'az'}" in call.split()
    assert done["stages"]["sup"] == {"cpu_seconds": 1.5, "done": True}
    assert 1.5 <= done["stages"]["az"]["cpu_seconds"] <= 1.5 + 3 * 0.2 * 2


def test_park_refuses_a_running_arm_and_unpark_a_damaged_archive(tmp_path):
    from mmc_jax.infra import storage

    root = tmp_path / "root"
    runner.write_budget(root, "alphazero", {"arm": "alphazero", "stages": {}})
    with pytest.raises(SystemExit, match="holds no run of td_lambda"):
        runner.park(root, "td_lambda", tmp_path / "td.tar.gz", print)
    (root / "alphazero" / "az").mkdir()
    archive = tmp_path / "alphazero.tar.gz"
    with storage.workdir_lock(root / "alphazero" / "az"):  # a live trainer's lock
        with pytest.raises(SystemExit, match="stop `train alphazero` first"):
            runner.park(root, "alphazero", archive, print)
    assert not archive.exists()
    archive.write_bytes(b"not a tar archive")
    with pytest.raises(SystemExit, match="cannot be unpacked"):
        runner.unpark(tmp_path / "fresh", "alphazero", archive, print)
    assert not (tmp_path / "fresh" / "alphazero").exists()


def test_the_report_reads_the_ladder(tmp_path):
    root = tmp_path
    runner.write_budget(
        root, "alphazero", {"arm": "alphazero", "stages": {"az": {"cpu_seconds": 3612.0}}}
    )
    rung = {"score": 0.25, "score_ci95": [0.21, 0.29], "games": 400}
    ladder = {
        "models": [
            {
                "elo": 480.0,
                "ci95": [450.0, 510.0],
                "rungs": [{**rung, "opponent": "engine:nodes=100"}],
            }
        ]
    }
    (root / "alphazero" / "ladder").mkdir(parents=True)
    (root / "alphazero" / "ladder" / "ladder.json").write_text(json.dumps(ladder))
    table = compare.report(root)
    assert "| alphazero | az 60.2 | - | - | 0.250 [0.210, 0.290] | - | -191 [-230, -156] |" in table


def test_the_second_seeds_are_read_as_registered_once_every_seed_is_rated(tmp_path):
    """README, "Second seeds": per recipe the seeds and their mean against 100 nodes, then
    supervised_az minus AlphaZero per seed, its mean and half its range; nothing before
    every seed is rated."""
    scores = {"alphazero": 0.20, "alphazero_s1": 0.26, "supervised_az": 0.21,
              "supervised_az_s1": 0.23}  # fmt: skip
    for arm, score in scores.items():
        if arm == "supervised_az_s1":
            assert compare.seeds_report(tmp_path) is None
        rung = {"opponent": "engine:nodes=100", "score": score, "score_ci95": [0, 1]}
        (tmp_path / arm / "ladder").mkdir(parents=True)
        (tmp_path / arm / "ladder" / "ladder.json").write_text(
            json.dumps({"models": [{"rungs": [rung]}]})
        )
    table = compare.seeds_report(tmp_path).splitlines()
    assert table[0] == "| recipe | seed 0 | seed 1 | mean |"
    assert table[2] == "| alphazero | 0.200 | 0.260 | 0.230 |"
    assert table[3] == "| supervised_az | 0.210 | 0.230 | 0.220 |"
    assert table[4] == "| supervised_az - alphazero | +0.010 | -0.030 | -0.010 (± 0.020) |"


def test_a_td_model_is_also_rated_as_its_one_ply_player(tmp_path):
    root = tmp_path
    runner.write_budget(
        root, "td_lambda", {"arm": "td_lambda", "stages": {"td": {"cpu_seconds": 3600.0}}}
    )
    rung = {"score": 0.9, "score_ci95": [0.87, 0.93], "games": 400, "opponent": "greedy"}
    ladder = {"models": [{"elo": 300.0, "ci95": [280.0, 320.0], "rungs": [rung]}]}
    (root / "td_lambda" / "ladder_one_ply").mkdir(parents=True)
    (root / "td_lambda" / "ladder_one_ply" / "ladder.json").write_text(json.dumps(ladder))
    assert compare.ladders("td_lambda") == {
        "td_lambda": "ladder",
        "td_lambda (one-ply)": "ladder_one_ply",
    }
    assert compare.ladders("alphazero") == {"alphazero": "ladder"}
    table = compare.report(root)
    assert "| td_lambda | td 60.0 | - | - | - | - | - |" in table
    assert "| td_lambda (one-ply) | td 60.0 | - | 0.900 [0.870, 0.930] | - | - | - |" in table


def test_round_4_runs_each_candidate_recipe_on_its_variant_and_rates_it_there(
    tmp_path, monkeypatch
):
    """A round-4 arm is its recipe's stages (shares, configs, the stage chaining) with the
    variant added to every stage, and its ladder plays that variant."""
    for recipe in compare.ROUND4_RECIPES:
        for variant in compare.ROUND4_VARIANTS:
            arm = compare.ARMS[f"{recipe}_{variant}"]
            pairs = zip(arm, compare.ARMS[recipe], strict=True)
            for (name, config, share, overrides), base in pairs:
                assert (name, config, share) == base[:3]
                assert overrides == [*base[3], f"--config.variant={variant}"]
            assert compare.arm_variant(f"{recipe}_{variant}") == variant
    assert compare.arm_variant("supervised_2400") == "gardner"
    commands = []
    monkeypatch.setattr(compare.subprocess, "run", lambda command, **_: commands.append(command))
    runner.write_budget(tmp_path, "supervised_2400_atomic", {"stages": {}, "final": "W"})
    (tmp_path / "supervised_2400_atomic" / "ladder").mkdir(parents=True)
    (tmp_path / "supervised_2400_atomic" / "ladder" / "ladder.json").write_text("{}")
    (tmp_path / "supervised_2400_atomic" / "model").mkdir()
    (tmp_path / "supervised_2400_atomic" / "model" / "model.json").write_text("{}")
    compare.evaluate_arm("supervised_2400_atomic", tmp_path, "python", lambda _: None)
    assert commands == []  # exported and rated already: nothing is done again
    (tmp_path / "supervised_2400_atomic" / "ladder" / "ladder.json").unlink()
    with pytest.raises(FileNotFoundError):  # the fake run writes no ladder
        compare.evaluate_arm("supervised_2400_atomic", tmp_path, "python", lambda _: None)
    assert "--variant=atomic" in commands[0]
    # An arm without its exported model is exported first, its card naming the command.
    (tmp_path / "supervised_2400_atomic" / "model" / "model.json").unlink()
    commands.clear()
    with pytest.raises(FileNotFoundError):
        compare.evaluate_arm("supervised_2400_atomic", tmp_path, "python", lambda _: None)
    export, ladder = commands
    assert export[:3] == ["python", "-m", "mmc_jax.export"] and "--checkpoint=W" in export
    assert "--command=python experiments/learners/compare.py train supervised_2400_atomic" in export
    assert ladder[2] == "mmc_jax.evaluate"


def test_the_elo_column_is_the_difference_to_fsf_100_from_the_score():
    assert compare.elo_text(0.5) == "+0" and compare.elo_text(10 / 11) == "+400"
    assert compare.elo_text(0.0) == "-inf" and compare.elo_text(1.0) == "+inf"


def test_the_readme_table_is_the_report_of_the_committed_runs():
    """Every row `report` computes from experiments/learners/runs stands in the README."""
    here = Path(compare.__file__).resolve().parent
    table = compare.report(here / "runs")
    readme = (here / "README.md").read_text()
    rows = table.splitlines()[2:]
    assert rows, "no committed arm"
    for row in rows:
        assert row in readme, row
