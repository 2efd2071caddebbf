"""`mmc_jax.bench`'s round-robin timer: every arm timed once per round, each carrying its own
state on, and the per-round ratios paired by round (no timing is asserted, only the protocol)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from mmc_jax import algorithms
from mmc_jax import rules as R
from mmc_jax.bench import common, contract, env, iteration, memory, processes, programs, xla_flags
from mmc_jax.bench import compile as compile_programs
from mmc_jax.bench.__main__ import main
from mmc_jax.infra import startup


@pytest.fixture(autouse=True)
def keep_xla_flags(monkeypatch):
    """`main` sets XLA_FLAGS (the commands' start-up) and some tests fake the flags: put
    the session's value back after each test, so no later child process inherits a fake flag
    (XLA refuses to start on an unknown one)."""
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))


def counting_arm(step: int):
    """A jitted `run(state, key) -> state` that adds `step` to a counter: how many calls saw it."""
    return jax.jit(lambda state, key: state + step), jnp.zeros((), jnp.int32)


def test_every_arm_gets_its_compile_time_and_one_scan_time_per_round():
    arms = {"mmc_jax": counting_arm(1), "pgx": counting_arm(10)}
    timed = common.time_scans_interleaved(arms, rounds=3, verbose=False)
    assert set(timed) == {"mmc_jax", "pgx"}
    for name in arms:
        assert len(timed[name]["seconds"]) == 3
        assert all(s > 0 for s in timed[name]["seconds"])
        assert timed[name]["compile_s"] > 0


def test_round_ratios_pair_the_rounds_in_order():
    timed = {"mmc_jax": {"seconds": [1.0, 2.0, 4.0]}, "pgx": {"seconds": [6.0, 6.0, 6.0]}}
    assert common.round_ratios(timed, "pgx") == [6.0, 3.0, 1.5]
    timed["pgx"]["seconds"].pop()
    with pytest.raises(ValueError):  # unpaired rounds are a bug, never a silent shorter list
        common.round_ratios(timed, "pgx")


def test_the_state_advances_every_call():
    # The warm-up and every round continue the same games: count the calls through the state.
    seen = []
    run, state = counting_arm(1)

    class Spy:
        def lower(self, state, key):
            compiled = run.lower(state, key).compile()

            class Lowered:
                def compile(self):
                    def call(state, key):
                        seen.append(int(state))
                        return compiled(state, key)

                    return call

            return Lowered()

    common.time_scans_interleaved({"mmc_jax": (Spy(), state)}, rounds=4, verbose=False)
    assert seen == [0, 1, 2, 3, 4]  # warm-up from the start, then each round from the last


@pytest.mark.slow
def test_selfplay_vs_pgx_reports_the_median_ratio_of_paired_rounds(capsys):
    # End to end on a tiny search (2 games, 1 ply, 2 simulations, 1x8 net): every arm timed in
    # every round, and the JSON's ratio is the median of the rounds' pgx / mmc_jax ratios.
    main(
        "selfplay --vs-pgx --batch 2 --plies 1 --simulations 2 --blocks 1 --channels 8 "
        "--repeats 3 --json".split()
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rounds = result["seconds_per_scan_rounds"]
    assert set(rounds) == {"mmc_jax", "pgx", "pgx_mcts"}
    assert all(len(seconds) == 3 for seconds in rounds.values())
    ratios = [p / m for p, m in zip(rounds["pgx"], rounds["mmc_jax"], strict=True)]
    assert result["ratio"] == pytest.approx(float(np.median(ratios)))
    assert result["ratio_min"] <= result["ratio"] <= result["ratio_max"]
    assert result["moves_per_s"] == pytest.approx(2 / float(np.median(rounds["mmc_jax"])))


def test_env_vs_pgx_and_mixed_are_timed_round_robin_with_paired_ratios(capsys, monkeypatch):
    # `bench env` on the same timer: per batch size, the single-variant, pgx and mixed arms all
    # timed in every round; the ratio is the median of the rounds' pgx / mmc_jax ratios and the
    # mixed ratio the median of mmc_jax / mixed (mixed steps/s over single-variant steps/s).
    # The engines are replaced by counting arms (compiling three real ones takes about a
    # minute); what is checked is which runner each arm gets and how the rounds are paired.
    built = []

    def mmc_runner(variants, batch, scan_length):
        built.append(("mmc", list(variants), batch, scan_length))
        return counting_arm(1)

    def pgx_runner(batch, scan_length):
        built.append(("pgx", batch, scan_length))
        return counting_arm(10)

    monkeypatch.setattr(programs, "mmc_env_runner", mmc_runner)
    monkeypatch.setattr(programs, "pgx_env_runner", pgx_runner)
    main(
        "env --batch-sizes 2 --scan-length 3 --repeats 3 --movegen-batch 0 --vs-pgx --mixed "
        "--json".split()
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    mixed_specs = R.sample_variants(0, 2)
    assert built == [("mmc", ["gardner"], 2, 3), ("pgx", 2, 3), ("mmc", list(mixed_specs), 2, 3)]
    (row,) = result["rows"]
    rounds = row["seconds_per_scan_rounds"]
    assert set(rounds) == {"mmc_jax", "pgx", "mixed"}
    assert all(len(seconds) == 3 for seconds in rounds.values())
    single = rounds["mmc_jax"]
    ratios = [p / m for p, m in zip(rounds["pgx"], single, strict=True)]
    assert row["ratio"] == pytest.approx(float(np.median(ratios)))
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    mixed = [m / x for m, x in zip(single, rounds["mixed"], strict=True)]
    assert row["mixed_ratio"] == pytest.approx(float(np.median(mixed)))
    assert row["steps_per_s"] == pytest.approx(2 * 3 / float(np.median(single)))


# --------------------------------------------------------------------------------------------
# Rows as they are measured (issue 38): every finished row is printed and written out before
# the next one starts, and a time limit starts no new row once it has passed.


def fake_env_runners(monkeypatch, on_start=None):
    """`bench env`'s engines replaced by counting arms; `on_start(batch)` runs as a row starts."""

    def mmc_runner(variants, batch, scan_length):
        if on_start is not None:
            on_start(batch)
        return counting_arm(1)

    monkeypatch.setattr(programs, "mmc_env_runner", mmc_runner)
    monkeypatch.setattr(programs, "pgx_env_runner", lambda batch, scan_length: counting_arm(10))


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_env_prints_and_writes_each_row_before_the_next_starts(
    monkeypatch, capsys, tmp_path, as_json
):
    # What stdout and the --json-out file held when each row started: a kill during a row
    # loses that row only.
    path = tmp_path / "env.json"
    seen, printed = [], []

    def on_start(batch):
        printed.append(capsys.readouterr().out)
        seen.append((batch, json.loads(path.read_text()), "".join(printed)))

    fake_env_runners(monkeypatch, on_start)
    argv = "env --batch-sizes 2 3 4 --scan-length 2 --repeats 1 --movegen-batch 0 --vs-pgx "
    argv += f"--json-out {path}" + (" --json" if as_json else "")
    main(argv.split())
    printed.append(capsys.readouterr().out)
    assert [batch for batch, _, _ in seen] == [2, 3, 4]
    for done, (_, written, out) in enumerate(seen):
        assert [row["batch"] for row in written.get("rows", [])] == [2, 3, 4][:done]
        assert written["complete"] is False
        if as_json:
            lines = [json.loads(line) for line in out.splitlines()]
            assert [len(line["rows"]) for line in lines] == list(range(1, done + 1))
        else:
            assert [int(b) for b in re.findall(r"^batch +(\d+):", out, re.M)] == [2, 3, 4][:done]
    final = json.loads(path.read_text())
    assert final["complete"] is True and final["skipped"] == []
    assert [row["batch"] for row in final["rows"]] == [2, 3, 4]
    if as_json:  # the last line is the whole result, as the file is
        assert json.loads("".join(printed).strip().splitlines()[-1]) == final


def test_env_time_limit_of_zero_measures_one_row_and_names_the_rest(monkeypatch, capsys, tmp_path):
    started = []
    fake_env_runners(monkeypatch, started.append)
    monkeypatch.setattr(env, "legal_moves_per_second", lambda *a: pytest.fail("movegen ran"))
    path = tmp_path / "env.json"
    main(
        f"env --batch-sizes 2 3 4 --scan-length 2 --repeats 1 --movegen-batch 8 --time-limit 0 "
        f"--json --json-out {path}".split()
    )
    out, err = capsys.readouterr()
    result = json.loads(out.strip().splitlines()[-1])
    assert started == [2]
    assert [row["batch"] for row in result["rows"]] == [2]
    assert result["skipped"] == ["batch 3", "batch 4", "move generation at batch 8"]
    assert result["complete"] is True and json.loads(path.read_text()) == result
    (note,) = [line for line in err.splitlines() if "--time-limit" in line]
    assert "skipped batch 3, batch 4, move generation at batch 8" in note


def test_selfplay_time_limit_keeps_the_moves_and_skips_breakdown_and_memory(
    monkeypatch, capsys, tmp_path
):
    # The B=64 numbers lost in 2026-11-22's run: moves/s is written before the slow parts start.
    def runner(batch, plies, simulations, blocks, channels, mesh=None, dtype="float32"):
        assert batch == 2, "only the moves/s row may build a runner"
        return *counting_arm(1), (None, None, None)

    monkeypatch.setattr(programs, "mmc_selfplay_runner", runner)
    path = tmp_path / "selfplay.json"
    main(
        f"selfplay --batch 2 --plies 1 --repeats 2 --breakdown --memory-batch 4 --time-limit 0 "
        f"--json-out {path}".split()
    )
    out, err = capsys.readouterr()
    assert "self-play moves/s" in out
    result = json.loads(path.read_text())
    assert result["moves_per_s"] > 0 and result["complete"] is True
    assert result["skipped"] == ["breakdown", "memory at B=4"]
    assert "seconds_per_scan" not in result and "memory" not in result
    assert "skipped breakdown, memory at B=4" in err


def fake_process_run(config, iterations, processes, devices):
    return {"iteration_s": float(processes), "iterations_timed": 1, "wall_s": 1.0}


def fake_child(argv, environ):
    if argv[0] == "learner":
        return {"seconds": {"learner": 1.0, "inner_loop": 1.0, "inner_loop_vmap": 1.0}}
    return {"moves_per_s": 100.0}


@pytest.mark.parametrize(
    "argv, first_call, skipped",
    [
        ("iteration --configs gardner:cpu joat:quick", "gardner:cpu", ["joat:quick"]),
        (
            "processes --repeats 2",
            (1, 2),  # 1 process x 2 devices
            ["2 processes x 1 device #1", "1 process x 2 devices #2", "2 processes x 1 device #2"],
        ),
        (
            "xla-flags --batch-sizes 8 --rounds 1",
            ["selfplay", "--batch", "8"],
            [
                "selfplay B=8, project flags #1",
                "learner, xla defaults #1",
                "learner, project flags #1",
            ],
        ),
        ("memory --configs gardner:smoke joat:smoke", "gardner:smoke", ["joat:smoke"]),
    ],
    ids=["iteration", "processes", "xla-flags", "memory"],
)
def test_every_multi_row_benchmark_stops_at_its_time_limit(
    monkeypatch, capsys, tmp_path, argv, first_call, skipped
):
    # The first row always runs (a limit of 0 measures exactly one); the rest are named.
    calls = []
    monkeypatch.setattr(iteration, "time_config", lambda args, spec: calls.append(spec) or {})
    monkeypatch.setattr(
        processes, "iteration_seconds", lambda *a: calls.append(a[2:]) or fake_process_run(*a)
    )
    monkeypatch.setattr(xla_flags, "child_json", lambda *a: calls.append(a[0]) or fake_child(*a))
    monkeypatch.setattr(startup, "xla_flags_value", lambda environ: "--xla_fake=true")
    monkeypatch.setattr(memory, "measure", lambda spec: calls.append(spec) or {})
    path = tmp_path / "result.json"
    main([*argv.split(), "--time-limit", "0", "--json", "--json-out", str(path)])
    out, err = capsys.readouterr()
    assert calls == [first_call]
    result = json.loads(path.read_text())
    assert result == json.loads(out.strip().splitlines()[-1])
    assert result["complete"] is True and result["skipped"] == skipped
    assert "--time-limit 0 s reached; skipped " + ", ".join(skipped) in err


@pytest.mark.parametrize(
    "benchmark", ["env", "selfplay", "iteration", "processes", "xla-flags", "memory", "move"]
)
@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_bad_time_limit_is_one_line_before_any_work(capsys, benchmark, value):
    with pytest.raises(SystemExit) as exit_info:
        main([benchmark, "--time-limit", value])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"python -m mmc_jax.bench {benchmark}: error: argument --time-limit")


@pytest.mark.parametrize(
    "argv, message",
    [
        ("iteration --configs gardner", "--configs 'gardner': expected configs/NAME.py:PRESET"),
        ("memory --configs gardner", "--configs 'gardner': expected configs/NAME.py:PRESET"),
        ("iteration --arm gumbel", "--arm 'gumbel': expected NAME:OVERRIDES"),
        ("iteration --arm :--config.seed=1", "--arm ':--config.seed=1': expected NAME:OVERRIDES"),
        ("iteration --arm a:seed=1", "--arm 'a:seed=1': 'seed=1' is no --config.FIELD=VALUE"),
        ("iteration --arm a: --arm a:--config.seed=2", "--arm: two arms have the same name"),
    ],
)
def test_iteration_and_memory_refuse_a_bad_spec_or_arm_in_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv.split())
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: " + message in last, last


# --------------------------------------------------------------------------------------------
# `bench iteration`: every learner through the Algorithm contract, arms of config overrides


class CountingAlgorithm:
    """An algorithm stand-in for the timer: the data of iteration i is i."""

    batch_field = "games"

    def host_data(self, config, mesh, data, iteration):
        return iteration


def test_iteration_times_the_arms_round_robin_each_carrying_its_state_on(monkeypatch):
    calls = []

    def step_of(name):
        def step(state, data, key, index):
            calls.append((name, state, data, index))
            return state + 1, {"selfplay/frames": 12, "selfplay/games": 3}

        return step

    config = ml_collections.ConfigDict({"seed": 0, "games": 4})
    prepared = contract.Prepared(CountingAlgorithm(), config, None)
    arms = {name: iteration.Arm(prepared, None, step_of(name), 1.0) for name in ("a", "b")}
    monkeypatch.setattr(iteration, "checkpoint_seconds", lambda arm, state: 0.5)
    args = argparse.Namespace(warmup=1, repeats=2, json=True)
    timed = iteration.time_arms(args, arms, {"a": 0, "b": 100})
    # The warm-up of each arm, then a round of every arm, twice, each from its last state.
    assert calls == [
        ("a", 0, 0, 0),
        ("b", 100, 0, 0),
        ("a", 1, 1, 1),
        ("b", 101, 1, 1),
        ("a", 2, 2, 2),
        ("b", 102, 2, 2),
    ]
    timed["a"]["seconds"], timed["b"]["seconds"] = [1.0, 2.0], [3.0, 2.0]
    first = iteration.summary(arms["a"], timed["a"], None, [])
    second = iteration.summary(arms["b"], timed["b"], timed["a"], ["--config.seed=1"])
    assert "vs_first" not in first and second["vs_first"] == pytest.approx(2.0)  # of 3 and 1
    assert second["iteration_s"] == 2.5 and second["checkpoint_s"] == 0.5
    assert second["frames_per_s"] == pytest.approx(np.median([12 / 3, 12 / 2]))
    assert second["games_per_s"] == pytest.approx(np.median([3 / 3, 3 / 2]))
    assert second["batch"] == {"games": 4} and second["overrides"] == ["--config.seed=1"]


def test_iteration_names_a_model_that_does_not_fit_before_compiling():
    # gardner-cpu is a 2x32 network, gardner:smoke's a 1x8: one line, before any compile.
    with pytest.raises(SystemExit) as exit_info:
        main(["iteration", "--configs", "gardner:smoke", "--init-from", "gardner-cpu"])
    assert str(exit_info.value) == (
        "error: --init-from gardner-cpu: its parameters do not fit the config's network"
    )


def smoke_specs() -> dict[str, str]:
    """{learner: NAME:smoke} of the config files in configs/ with a smoke preset (the first
    file, by name, for a learner that several train)."""
    found = {}
    for name in contract.config_names():
        try:
            config = contract.load_config(f"{name}:smoke")
        except ValueError:  # no smoke preset
            continue
        found.setdefault(algorithms.name_of(config), f"{name}:smoke")
    return found


@pytest.mark.slow
def test_iteration_times_every_registered_learner_through_its_compiled_step(tmp_path, capsys):
    """One generic road (`mmc_jax.bench.contract`): each learner's smoke config prepared,
    its data and state made, its iteration compiled and called once, timed. A config whose
    data engine workers make plays its games in this process (`data.processes=1`, as the
    contract harness does: a pool's teardown can hang when SIGTERM reaches a worker's JAX
    thread instead of its main thread)."""
    specs = smoke_specs()
    assert sorted(specs) == sorted(algorithms.REGISTRY)
    pooled = [s for s in specs.values() if "processes" in contract.load_config(s).get("data", {})]
    runs = []
    for configs, arm in (
        ([s for s in specs.values() if s not in pooled], []),
        (pooled, ["--arm", "config:--config.data.processes=1"]),
    ):
        path = tmp_path / f"iteration{len(runs)}.json"
        argv = ["iteration", "--configs", *configs, "--warmup", "0", "--repeats", "1", *arm]
        main([*argv, "--json-out", str(path)])
        result = json.loads(path.read_text())
        assert result["complete"] and result["skipped"] == []
        runs += result["runs"]
    assert {run["algorithm"]: run["config"] for run in runs} == specs
    for run in runs:
        (arm,) = run["arms"].values()
        assert arm["compile_s"] > 0 and arm["iteration_s"] > 0 and arm["checkpoint_s"] > 0
        assert arm["frames_per_iteration"] > 0 and arm["frames_per_s"] > 0
    out = capsys.readouterr().out
    assert all(f"{spec} [config] (" in out for spec in specs.values())


def test_a_json_out_that_cannot_be_written_is_one_line_before_any_work(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["learner", "--json-out", str(tmp_path / "no" / "such" / "folder.json")])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--json-out" in last and "cannot write it" in last, last


@pytest.mark.slow
def test_memory_reports_the_packed_replay_sample_and_the_compiled_peak(tmp_path):
    path = tmp_path / "memory.json"
    main(["memory", "--configs", "gardner:smoke", "--json-out", str(path)])
    (run,) = json.loads(path.read_text())["runs"]
    assert run["config"] == "gardner:smoke"
    assert run["replay_bytes_per_sample"] <= 2048  # issue 38's target for a replay sample
    compiled = run["compiled_bytes"]
    assert compiled["alias"] > 0  # the iteration's state is donated
    assert (
        compiled["peak"]
        == compiled["argument"] + compiled["output"] - compiled["alias"] + (compiled["temp"])
    )


# --------------------------------------------------------------------------------------------
# experiments/bench/gpu.sh: one 8-minute call of the device tool, every finished part kept.

GPU_SH = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "gpu.sh"
FAKE_PYTHON = """#!{python} -SE
import os, pathlib, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(" ".join(args) + "\\n")
if "--workdir" in args:  # a training run: its metrics as the run loop writes them
    workdir = pathlib.Path(args[args.index("--workdir") + 1])
    workdir.mkdir(parents=True)
    (workdir / "metrics.jsonl").write_text('{{"step": 1}}\\n')
if "env" in args:  # a row, then stuck: the part's own limit must end it
    print("batch 64: a row", flush=True)
    time.sleep(60)
print("done", flush=True)
"""


def test_gpu_sh_part_budgets_fit_one_eight_minute_call():
    """Issue 50's device check: every default part but the study (which gets what is left)
    fits the deadline, and the deadline one call of the device tool."""
    text = GPU_SH.read_text()
    budgets = {name: int(seconds) for name, seconds in re.findall(r"\[(\w+)\]=(\d+)", text)}
    parts = re.search(r'PARTS=\$\{PARTS:-"([^"]+)"\}', text).group(1).split()
    assert parts == [
        "selfplay_pgx",
        "selfplay16k",
        "gardner_bf16",
        "joat_full",
        "gardner_f32",
        "study",
    ]
    assert set(parts) <= set(budgets)
    deadline = int(re.search(r"BUDGET=\$\{BUDGET:-(\d+)\}", text).group(1))
    assert sum(budgets[p] for p in parts if p != "study") <= deadline <= 470  # + start-up


def test_gpu_sh_keeps_every_finished_part(tmp_path):
    # A fake python: the learner finishes, env prints a row and hangs until the deadline cuts
    # it, and joat_full finds no time left. Each part's output, the benchmarks' --json-out and
    # --time-limit, and a line per part in parts.tsv are there; no timing is asserted beyond
    # the 3-s deadline that makes env time out (the fake starts without `site` or PYTHON*
    # variables, -SE: a `sitecustomize` that imported JAX once made the learner's start
    # take the whole deadline).
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    out, calls = tmp_path / "out", tmp_path / "calls"
    environ = {
        **os.environ,
        "PY": str(fake),
        "FAKE_CALLS": str(calls),
        "WORK": str(tmp_path / "work"),
        "BUDGET": "3",
        "MIN_PART": "1",
        "PARTS": "learner env joat_full",
    }
    done = subprocess.run(
        ["bash", str(GPU_SH), str(out)], env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    parts = [line.split("\t") for line in (out / "parts.tsv").read_text().splitlines()[1:]]
    assert [(name, status) for name, _, _, status in parts] == [
        ("learner", "ok"),
        ("env", "timed out"),
        ("joat_full", "skipped"),
    ]
    assert "done" in (out / "learner.log").read_text()
    assert "batch 64: a row" in (out / "env.log").read_text()  # printed before the kill
    lines = calls.read_text().splitlines()
    bench_calls = {line.split()[2]: line.split() for line in lines if "mmc_jax.bench" in line}
    assert set(bench_calls) == {"learner", "env"}
    assert bench_calls["learner"][-2:] == ["--json-out", str(out / "learner.json")]
    env_call = bench_calls["env"]
    assert env_call[-2:] == ["--json-out", str(out / "env.json")]
    assert env_call[env_call.index("--time-limit") + 1].isdigit()  # {LIMIT} filled in


def test_move_times_every_model_on_the_same_positions_with_ratios_to_the_first(capsys):
    main(
        [
            "move", "--models", "gardner-cpu", "joat-cpu", "--simulations", "2", "4",
            "--positions", "2", "--repeats", "1", "--json",
        ]
    )  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["complete"] and result["positions"] == 2
    assert set(result["first_search_seconds"]) == {"gardner-cpu", "joat-cpu"}
    assert [row["simulations"] for row in result["rows"]] == [2, 4]
    for row in result["rows"]:
        first, second = row["models"]
        assert (first["model"], second["model"]) == ("gardner-cpu", "joat-cpu")
        assert first["ratio"] == 1.0 and second["seconds_per_move"] > 0
        assert second["ratio"] == pytest.approx(
            second["seconds_per_move"] / first["seconds_per_move"]
        )


def test_move_names_a_model_it_cannot_load_in_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["move", "--models", str(tmp_path / "missing")])
    assert str(exit_info.value).startswith("error: --models ")
    assert "\n" not in str(exit_info.value)


def test_compile_measures_each_program_in_its_own_process_with_its_sizes(tmp_path, capsys):
    """`bench compile`: a row per program with its seconds by stage (summing to compile_s),
    the programs XLA compiled and the sizes of the main one, written as it is measured."""
    path = tmp_path / "compile.json"
    main(["compile", "--programs", "rules-step", "--json-out", str(path)])
    out = capsys.readouterr().out
    row = json.loads(path.read_text())["programs"]["rules-step"]
    assert "error" not in row, row
    stages = row["trace_s"] + row["lower_s"] + row["xla_s"]
    assert row["compile_s"] == pytest.approx(stages, abs=0.01) and row["xla_s"] > 0
    assert row["programs"] >= 1 and row["stablehlo_lines"] > 100 and row["hlo_lines"] > 100
    assert compile_programs.format_row(row) in out


def test_compile_ratios_pair_each_program_with_its_pgx_peer_and_report_failures():
    rows = {
        "env-scan": {"program": "env-scan", "compile_s": 3.0},
        "pgx-env": {"program": "pgx-env", "compile_s": 6.0},
        "selfplay-scan": {"program": "selfplay-scan", "compile_s": 9.0},
        "pgx-selfplay": {"program": "pgx-selfplay", "error": "timed out after 1 s"},
    }
    compile_programs.add_ratios(rows)
    assert rows["env-scan"]["vs_pgx"] == pytest.approx(0.5)
    assert "vs_pgx" not in rows["selfplay-scan"] and "vs_pgx" not in rows["pgx-env"]
    assert compile_programs.format_row(rows["pgx-selfplay"]).endswith("failed: timed out after 1 s")


def test_compile_refuses_an_unknown_program_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", "--programs", "nothing"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nothing'" in capsys.readouterr().err


@pytest.mark.usefixtures("fairy_stockfish")
def test_match_times_the_same_engine_match_per_bucket_min_with_ratios_to_the_first(capsys):
    main(
        [
            "match", "--games", "4", "--simulations", "2", "--nodes", "1",
            "--bucket-mins", "64", "1", "--json",
        ]
    )  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["complete"] and [arm["bucket_min"] for arm in result["arms"]] == [64, 1]
    first, second = result["arms"]
    assert first["ratio"] == 1.0
    assert second["ratio"] == pytest.approx(second["seconds"] / first["seconds"])
    for arm in result["arms"]:
        assert len(arm["results"]) == 4 and arm["plies"] > 0 and 0 <= arm["score"] <= 1
        assert 0 <= arm["tail_seconds"] <= arm["seconds"] and arm["tail_plies"] <= arm["plies"]
    assert result["same_games"] == (first["results"] == second["results"])


def test_match_refuses_an_odd_number_of_games_in_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["match", "--games", "3"])
    assert "--games 3: must be even" in capsys.readouterr().err
