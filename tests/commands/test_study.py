"""The decisive adaptation study (experiments/adaptation/study.py): every config of every
preset prepares, the statistics (scratch-equivalent frames, AUC, paired endpoints, minimum
detectable effect) on made-up numbers, the report on made-up cells, and, with real JAX work at
the smoke size, a resumed pretraining unit equal to an unbroken one whose pack archive
round-trips into another artefact folder."""

import dataclasses
import json
import math
from pathlib import Path

import chex
import jax
import numpy as np
import pytest
from scipy import stats

from experiments.adaptation import study
from experiments.adaptation.decisive import (
    analysis,
    games,
    plan,
    presets,
    pretraining,
    recipes,
    report,
    ship,
    store,
)
from experiments.lab import stats as lab_stats
from experiments.lab.report import Log
from mmc_jax.algorithms import meta


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_every_config_of_every_preset_prepares(name):
    preset = presets.PRESETS[name]
    names = recipes.prepare_all(preset)
    procedures = len(recipes.candidate_procedures(preset))
    expected = len(preset.variants) * (1 + procedures) + procedures * len(preset.seeds) * len(
        preset.arms
    )
    assert len(names) == expected


def test_presets_follow_the_protocol():
    cpu = presets.PRESETS["cpu"]
    joat = recipes.joat_config(cpu, 0)
    frames = cpu.pretrain_iterations * joat.meta.num_tasks * joat.meta.games_per_task
    frames *= joat.selfplay.num_plies
    assert frames >= 200_000  # at least 10x the last study's 20,480 frames per arm
    assert cpu.seeds == (0, 1, 2) and set(cpu.variants) == set(presets.VARIANTS)
    assert cpu.long_iterations * joat.meta.num_tasks * joat.meta.games_per_task * 32 >= 1_000_000
    gpu = presets.PRESETS["gpu"]
    assert recipes.joat_config(gpu, 0).network == joat.network  # the CPU can play its games
    choice = {"optimizer": "sgd", "learning_rate": 0.1}
    # Equal frames and sequential steps in every arm; eps constant; the procedure everywhere.
    steps = set()
    for arm in presets.ARMS + presets.CONTROL_ARMS:
        config = recipes.arm_config(cpu, arm, 0, choice)
        steps.add(config.meta.inner_steps * config.meta.updates_per_iteration)
        assert config.meta.num_tasks * config.meta.games_per_task == 64
        assert config.meta.outer_lr_schedule == "constant"
        assert (config.network.rule_planes == "descriptor") == arm.endswith("+desc")
        if arm.startswith("joat"):
            assert config.inner.optimizer == "sgd" and config.inner.learning_rate == 0.1
            assert config.inner.momentum == 0.0 and config.adapt.learner.optimizer == "sgd"
    assert steps == {8}
    # The Gardner-only control: one task, joint's steps, as many samples per step as joint's
    # mean over its 4 tasks' minibatches.
    control = recipes.arm_config(cpu, "gardner", 0, None)
    assert meta.training_variants(control) == ("gardner",)
    joint = recipes.arm_config(cpu, "joint", 0, None)
    assert control.learner.batch_size == 4 * joint.learner.batch_size
    adapt = recipes.adaptation_joat_config(cpu, choice)
    assert adapt.adapt.selfplay.batch_size == 16 and adapt.adapt.eval.opening == "policy"
    with pytest.raises(ValueError, match="sensitivity"):
        recipes.arm_config(cpu, "joat", 0, None)


def test_scratch_equivalent_frames_on_a_synthetic_curve():
    curve = [(0, 0.1), (4096, 0.3), (8192, 0.25), (16384, 0.5), (32768, 0.7)]
    sef = analysis.scratch_equivalent_frames
    assert sef(curve, 0.05) == (0.0, False)  # below the start: no frames needed
    assert sef(curve, 0.1) == (0.0, False)
    assert sef(curve, 0.2) == (pytest.approx(2048.0), False)  # halfway from 0.1 to 0.3
    # The dip at 8192 is ignored (running maximum): 0.4 lies between 0.3 (8192) and 0.5.
    frames, censored = sef(curve, 0.4)
    assert not censored and frames == pytest.approx(8192 + 8192 * 0.5)
    assert sef(curve, 0.7) == (32768.0, False)
    assert sef(curve, 0.9) == (32768.0, True)  # beyond the curve: a lower bound


def test_auc_and_minimum_detectable_effect():
    assert analysis.auc([(0, 0.2), (1, 0.4), (2, 0.4), (4, 0.6)]) == pytest.approx(
        (0.3 + 0.4 + 2 * 0.5) / 4
    )
    assert analysis.auc([(0, 0.3)]) == 0.3
    diffs = [0.1, -0.1] * 9  # sd 0.1029 over 18 cells
    mean, half = lab_stats.t_interval(diffs)
    assert mean == pytest.approx(0.0) and half == pytest.approx(
        2.110 * 0.10290 / math.sqrt(18), 1e-3
    )
    assert lab_stats.minimum_detectable(diffs) == pytest.approx(
        (2.110 + 0.863) * 0.10290 / math.sqrt(18), 1e-2
    )
    assert lab_stats.minimum_detectable([0.1, 0.2]) is None


def _cell(arm, seed, variant, scores, zero_shot, yardstick):
    points = [
        {
            "iteration": i,
            "frames": 512 * i,
            "matches": {
                "reference": {"score": s, "num_games": 64, "opening_decided": 0.0},
                "greedy": {"score": 0.9, "num_games": 64},
            },
        }
        for i, s in zip((0, 1, 2, 4), scores, strict=True)
    ]
    return {"arm": arm, "seed": seed, "variant": variant, "points": points,
            "zero_shot_final": {"score": zero_shot}, "procedure": {}, "mid": 2,
            "yardstick": yardstick}  # fmt: skip


def test_report_pairs_arms_over_variant_and_seed_on_the_primary_variants(tmp_path):
    preset = dataclasses.replace(
        presets.PRESETS["smoke"], variants=("atomic", "rifle", "extinction"), seeds=(0, 1)
    )
    s = store.Study("test", preset, tmp_path / "work", tmp_path / "art")
    yardstick = presets.yardstick(preset)
    gains = {"scratch": 0.0, "joint": 0.1, "joat": 0.2, "joint+desc": 0.3, "joat+desc": 0.3}
    # atomic: calibrated with range (primary); rifle: no mid (secondary only, its cells carry
    # an opposite effect that must not reach the endpoints); extinction: an older yardstick.
    for variant, primary in (("atomic", True), ("rifle", False), ("extinction", True)):
        s.write(
            {"variant": variant, "mid": 2, "final": 2, "calibration": {},
             "calibrated": primary, "range": 0.8, "primary": primary,
             "yardstick": yardstick if variant != "extinction" else {"games": 64},
             "points": [{"frames": 0, "score": 0.1}, {"frames": 4096, "score": 0.5},
                        {"frames": 8192, "score": 0.9}]},
            "curve", f"{store.slug(variant)}.json",
        )  # fmt: skip
        for seed in preset.seeds:
            for arm, gain in gains.items():
                gain = gain if primary else -gain
                noise = 0.01 * seed
                scores = [0.1 + gain + noise, 0.3 + gain, 0.35 + gain, 0.4 + gain]
                ys = yardstick if variant != "extinction" else {"games": 64}
                s.write(_cell(arm, seed, variant, scores, 0.2 + gain, ys), "cells",
                        f"{arm}_s{seed}_{store.slug(variant)}.json")  # fmt: skip
    s.write(
        {"arm": "joint+desc", "complete": True, "points": [
            {"iteration": 50, "frames": 102_400,
             "zero_shot_final": {v: {"score": 0.3} for v in preset.variants}}]},
        "long.json",
    )  # fmt: skip
    results = analysis.collect(s)
    assert analysis.primary_variants(results) == ["atomic"]
    assert len(results["cells"]) == 20  # atomic and rifle; extinction's yardstick is another
    joat_atomic = next(c for c in results["cells"] if c["arm"] == "joat" and c["seed"] == 0)
    first = joat_atomic["points"][1]
    # 0.5 against the mid reference after one iteration (512 frames): 4096 on the curve.
    assert first["sef"] == pytest.approx(4096) and first["speedup"] == pytest.approx(8)
    ends = dict(analysis.endpoints(results))
    assert ends["P2 joat - joint, iteration 1"] == pytest.approx([0.1] * 2)
    assert ends["P1 joat+desc - scratch, AUC"] == pytest.approx([0.3] * 2)
    assert ends["P2 interaction (Reptile gain with - without descriptor), AUC"] == pytest.approx(
        [-0.1] * 2
    )
    text = report.report(s, results)
    assert "## Current result" in text and "P2 joat - joint, iteration 1: +0.100" in text
    assert "Primary analysis" in text and "`rifle` (no mid)" in text
    assert "| 50 | 102,400 | 0.30 | 0.30 | 0.30 | 0.300 |" in text  # the long run's table
    assert "Incomplete" in text  # extinction's cells are to be played again
    report.plot(s, results)
    assert (tmp_path / "art" / "games.png").stat().st_size > 0
    assert json.loads((tmp_path / "art" / "results.json").read_text())["preset"] == "test"


def test_command_line_errors_are_one_line(tmp_path, capsys):
    for argv, message in (
        (["--preset", "smoke", "--seeds", "7"], "not among the preset's"),
        (["--preset", "smoke", "--variants", "nonsense=1"], "--variants"),
        (["--preset", "smoke", "--variants", "dark"], "not among the preset's"),
        (["--preset", "smoke", "--iterations", "0"], "at least 1"),
        (["--preset", "smoke", "--artefacts", __file__], "is a file, not a folder"),
    ):
        with pytest.raises(SystemExit) as error:
            study.main([*argv, "--workdir", str(tmp_path)])
        assert error.value.code == 2
        assert message in capsys.readouterr().err
    assert study.main(["--preset", "smoke", "--workdir", str(tmp_path), "--status"]) == 0
    assert "cells: 0/" in capsys.readouterr().out


@pytest.mark.slow
def test_a_resumed_pretraining_unit_equals_an_unbroken_one_and_its_pack_round_trips(tmp_path):
    from mmc_jax.infra import checkpoint

    preset = presets.PRESETS["smoke"]
    log = Log(tmp_path / "study.log")
    unbroken = store.Study("smoke", preset, tmp_path / "a", tmp_path / "a_art")
    info = pretraining.pretrain(unbroken, "joint", 0, None, log)
    assert info["iterations"] == preset.pretrain_iterations and info["frames"] > 0
    # Broken: one iteration, then the same unit asked for all of them resumes its workdir.
    short = dataclasses.replace(preset, pretrain_iterations=1)
    broken = store.Study("smoke", short, tmp_path / "b", tmp_path / "b_art")
    pretraining.pretrain(broken, "joint", 0, None, log)
    (broken.path("pretrain", "joint_s0.json")).unlink()  # the unit is not finished
    resumed = store.Study("smoke", preset, tmp_path / "b", tmp_path / "b_art")
    assert pretraining.pretrain(resumed, "joint", 0, None, log)["iterations"] == 2
    _, want, _ = checkpoint.load_model(unbroken.pretrained_model("joint", 0))
    _, got, _ = checkpoint.load_model(resumed.pretrained_model("joint", 0))
    chex.assert_trees_all_equal(want, got)
    # A finished unit is read, not rerun (a run would call the log, here None).
    assert pretraining.pretrain(resumed, "joint", 0, None, None) == resumed.read(
        "pretrain", "joint_s0.json"
    )
    # The pack: written after the unit, read into a fresh artefact folder.
    pack = tmp_path / "pack.tgz"
    store.write_pack(unbroken, pack)
    fresh = store.Study("smoke", preset, tmp_path / "c", tmp_path / "c_art")
    assert store.unpack(fresh, pack) == ["joint_s0"]
    assert fresh.read("pretrain", "joint_s0.json") == unbroken.read("pretrain", "joint_s0.json")
    _, unpacked, _ = checkpoint.load_model(fresh.pretrained_model("joint", 0))
    chex.assert_trees_all_equal(want, unpacked)
    other = store.Study("cpu", preset, tmp_path / "d", tmp_path / "d_art")
    with pytest.raises(ValueError, match="preset 'smoke'"):
        store.unpack(other, pack)


def test_a_stopped_pretraining_unit_is_not_exported_recorded_or_followed(tmp_path, monkeypatch):
    """A GPU call's time limit SIGTERMed a pretraining run at iteration 83 of 100: the study
    exported it, recorded it as finished (83 iterations) and packed it, then started the next
    unit. A stopped unit now leaves no artefact, and the sitting ends there (rc 143)."""
    from mmc_jax import train

    calls = []

    def stopped(config, workdir, **kwargs):
        calls.append(Path(workdir).name)
        return {"iteration": 1, "stopped": True}

    monkeypatch.setattr(train, "train", stopped)
    workdir = tmp_path / "w"
    status = study.main(["--preset", "smoke", "--workdir", str(workdir), "--only", "pretrain"])
    assert status == 143
    assert calls == ["joint_s0"]  # no unit after the stopped one
    artefacts = store.Study("smoke", presets.PRESETS["smoke"], workdir, workdir / "artefacts")
    assert artefacts.read("pretrain", "joint_s0.json") is None
    assert not artefacts.pretrained_model("joint", 0).exists()
    assert "stopped (" in (workdir / "study.log").read_text()


def test_a_second_study_process_on_a_workdir_is_refused(tmp_path, capsys):
    from mmc_jax.infra import storage

    with storage.workdir_lock(tmp_path):
        status = study.main(["--preset", "smoke", "--workdir", str(tmp_path), "--only", "pretrain"])
    assert status == 2
    assert "in use" in capsys.readouterr().err


def test_ship_exports_the_best_arm_with_the_studys_adaptation_and_a_card(tmp_path):
    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint

    preset = dataclasses.replace(presets.PRESETS["smoke"], variants=("atomic",), seeds=(0, 1))
    s = store.Study("test", preset, tmp_path / "work", tmp_path / "art")
    yardstick = presets.yardstick(preset)
    choice = {"optimizer": "sgd", "learning_rate": 0.3}
    s.write({"choice": choice, "means": {}}, "sensitivity.json")
    s.write(
        {"variant": "atomic", "mid": 2, "final": 2, "calibration": {}, "calibrated": True,
         "range": 0.8, "primary": True, "yardstick": yardstick,
         "points": [{"frames": 0, "score": 0.1}, {"frames": 4096, "score": 0.9}]},
        "curve", "atomic.json",
    )  # fmt: skip
    gains = {"scratch": 0.0, "gardner": 0.05, "joint": 0.1, "joat": 0.2, "joint+desc": 0.25,
             "joat+desc": 0.3}  # fmt: skip
    for seed in preset.seeds:
        for arm, gain in gains.items():
            gain += 0.05 * seed  # seed 1 is the better seed of every arm
            scores = [0.1 + gain, 0.3 + gain, 0.35 + gain, 0.4 + gain]
            s.write(_cell(arm, seed, "atomic", scores, 0.2, yardstick), "cells",
                    f"{arm}_s{seed}_atomic.json")  # fmt: skip
            if arm != "scratch":
                s.write({"frames": 4096, "iterations": 2, "sequential_steps": 16,
                         "optimizer": "sgd 0.3"}, "pretrain", f"{arm}_s{seed}.json")  # fmt: skip
    with pytest.raises(ValueError, match="primary cells played"):
        incomplete = analysis.collect(s)
        incomplete["cells"] = incomplete["cells"][1:]
        ship.ship(s, incomplete, tmp_path / "nothing")
    config = recipes.arm_config(preset, "joat+desc", 1, choice)
    network_config, params, _, _ = adapt.load_start("scratch", config, 0)
    checkpoint.export_model(s.pretrained_model("joat+desc", 1), config, params, {"step": 2})
    card = ship.ship(s, analysis.collect(s), tmp_path / "shipped")
    assert (card["arm"], card["seed"]) == ("joat+desc", 1)
    assert card["mean_auc_by_arm"]["joat+desc"] > card["mean_auc_by_arm"]["scratch"]
    info = json.loads((tmp_path / "shipped" / "model.json").read_text())
    assert info["card"]["arm"] == "joat+desc" and info["frames"] == 4096
    learner = info["config"]["adapt"]["learner"]
    assert learner["optimizer"] == "sgd" and learner["learning_rate"] == 0.3
    assert info["config"]["adapt"]["eval"] == json.loads(json.dumps(config.adapt.eval.to_dict()))
    assert info["card"]["yardstick"] == yardstick
    _, shipped, _, _ = adapt.load_start(str(tmp_path / "shipped"), None)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(shipped), jax.tree.leaves(params), strict=True)
    )


def test_power_preset_extends_cpu_and_reuses_its_committed_runs(tmp_path):
    """Amendment 3: ten seeds of the rules-hidden arms on the primary variants, the cpu preset's
    recipe; its committed seed 0-2 runs are copied where the config is the same (JOAT only
    under the step it was trained with), not trained again."""
    from mmc_jax.infra import checkpoint

    cpu, power = presets.PRESETS["cpu"], presets.PRESETS["power"]
    assert power.seeds == tuple(range(10)) and set(power.seeds) > set(cpu.seeds)
    assert power.arms == ("joint", "joat", "gardner")
    assert power.variants == presets.PRIMARY_VARIANTS and set(power.variants) < set(cpu.variants)
    assert all("sgd" == c["optimizer"] for c in recipes.candidate_procedures(power))
    assert {"optimizer": presets.OLD_ADAM} in recipes.candidate_procedures(cpu)
    for arm in ("joint", "gardner"):
        assert recipes.arm_config(power, arm, 5, None) == recipes.arm_config(cpu, arm, 5, None)
    s = store.Study("power", power, tmp_path / "work", tmp_path / "art")
    cpu_choice = store.committed("cpu").read("sensitivity.json")["choice"]
    assert pretraining.reusable(s, "joint", 2, None).preset_name == "cpu"
    assert pretraining.reusable(s, "gardner", 0, None).preset_name == "cpu"
    assert pretraining.reusable(s, "joint", 3, None) is None  # a new seed: trained
    assert pretraining.reusable(s, "joat", 1, cpu_choice).preset_name == "cpu"
    other = {"optimizer": "sgd", "learning_rate": 1.0}
    assert (
        pretraining.reusable(s, "joat", 1, other) is None
        and pretraining.reusable(s, "joat", 1, None) is None
    )
    # A reused unit is recorded, not copied: its model is read from the cpu preset's artefacts
    # (issue 68: artefacts are not kept twice; the log says so; no training workdir is made).
    lines = []
    info = pretraining.pretrain(s, "joint", 1, None, lines.append)
    assert info["from"] == "cpu" and info["seed"] == 1 and info["frames"] == 204_800
    assert not (tmp_path / "work").exists() and "the same config" in lines[0]
    assert not s.path("models", "pretrain", "joint_s1").exists()
    assert s.pretrained_model("joint", 1) == store.committed("cpu").pretrained_model("joint", 1)
    _, want, _ = checkpoint.load_model(store.committed("cpu").pretrained_model("joint", 1))
    _, got, _ = checkpoint.load_model(s.pretrained_model("joint", 1))
    chex.assert_trees_all_equal(want, got)
    # The cpu preset's own artefacts never reuse themselves.
    assert pretraining.reusable(store.committed("cpu"), "joint", 0, None) is None
    status = plan.status(s)
    assert "pretrain joint s1: done" in status and "pretrain joint s3: -\n" in status
    assert "pretrain gardner s2: - (the cpu preset's run is reused)" in status
    assert "pretrain joat s0: - (waits for the procedure)" in status and "cells: 0/160" in status


@pytest.mark.slow
def test_the_step_size_rule_adapts_on_training_tasks_only(tmp_path):
    """Amendment 3's step-size stage at the smoke size: training tasks (never a held-out
    variant), the joint, gardner and scratch starts, the grid extended past a winner at its
    end, the choice written where every later stage reads it."""
    from mmc_jax import adapt
    from mmc_jax import rules as R
    from mmc_jax.infra import checkpoint

    preset = dataclasses.replace(
        presets.PRESETS["smoke"],
        arms=("joint", "joat", "gardner"),
        step_sizes=(0.03, 0.3),
        procedure_rule="training_tasks",
        procedure_tasks=1,
        procedure_data=str(tmp_path / "data"),
    )
    s = store.Study("test", preset, tmp_path / "work", tmp_path / "art")
    assert recipes.candidate_procedures(preset) == [
        {"optimizer": "sgd", "learning_rate": 0.03},
        {"optimizer": "sgd", "learning_rate": 0.3},
    ]
    config = recipes.joat_config(preset, 0)
    for init_seed, out in ((7, tmp_path / "data"), (1, s.pretrained_model("joint", 0)),
                           (2, s.pretrained_model("gardner", 0))):  # fmt: skip
        _, params, _, _ = adapt.load_start("scratch", config, init_seed)
        checkpoint.export_model(out, config, params, {"step": 0})
    with pytest.raises(ValueError, match="pretrain it"):
        pretraining.sensitivity(s, lambda line: None)
    for arm in ("joint", "gardner"):
        s.write({"arm": arm, "seed": 0}, "pretrain", f"{arm}_s0.json")
    lines = []
    info = pretraining.sensitivity(s, lines.append)
    (task,) = info["tasks"]
    held_out = {R.canonical(v) for v in meta.parse_variants(config.holdout, "holdout")}
    assert {R.canonical(v) for v in presets.VARIANTS} <= held_out
    assert R.canonical(task) not in held_out and not R.has_fog(task)
    assert info["starts"] == ["joint s0", "gardner s0", "scratch s0"]
    assert {r["start"] for r in info["rows"]} == {"joint", "gardner", "scratch"}
    etas = sorted(float(name.split()[1]) for name in info["means"])
    assert {0.03, 0.3} <= set(etas)
    assert len(etas) == 2 + len(info["extensions"]) <= 5
    assert info["choice"]["learning_rate"] in etas
    assert info["choice"] == s.read("sensitivity.json")["choice"]
    assert any("chosen" in line for line in lines)


def test_seed_level_endpoints_average_variants_within_a_seed_then_t_over_seeds(tmp_path):
    """Amendment 3's unit: per pretraining seed the mean over the primary variants of the
    paired difference, Student t over the seeds; a seed missing a cell is left out; the cpu
    preset's yardstick (and so its committed cells) is unchanged by the second yardstick."""
    assert presets.yardstick2(presets.PRESETS["cpu"]) is None
    assert set(presets.yardstick(presets.PRESETS["cpu"])) == {
        "games", "simulations", "opening_plies", "opening", "sampled"
    }  # fmt: skip
    power = presets.PRESETS["power"]
    assert presets.yardstick2(power)["simulations"] == 16
    assert (
        recipes.adaptation_joat_config(power, {"optimizer": "sgd", "learning_rate": 0.3}).adapt[
            "checkpoint"
        ]["max_to_keep"]
        == len(power.adapt_points) + 1
    )
    preset = dataclasses.replace(
        presets.PRESETS["smoke"],
        variants=("atomic", "extinction"),
        seeds=(0, 1, 2, 3),
        arms=("joint", "joat", "gardner"),
        whole_network_simulations=16,
    )
    s = store.Study("test", preset, tmp_path / "work", tmp_path / "art")
    y1, y2 = presets.yardstick(preset), presets.yardstick2(preset)
    for v in preset.variants:
        s.write({"variant": v, "mid": 2, "final": 2, "calibrated": True, "range": 0.8,
                 "primary": True, "yardstick": y1, "reference_iterations": [1, 2],
                 "points": [{"frames": 0, "score": 0.1}, {"frames": 4096, "score": 0.9}]},
                "curve", f"{v}.json")  # fmt: skip
        s.write({"variant": v, "mid": 2, "range": 0.4 if v == "atomic" else 0.1,
                 "in": v == "atomic", "yardstick2": y2}, "curve2", f"{v}.json")  # fmt: skip
    want = {}  # joat - joint per seed: the mean over the two variants
    for seed in preset.seeds:
        for arm in ("scratch", "joint", "joat", "gardner"):
            for k, v in enumerate(preset.variants):
                if (arm, seed, v) == ("joat", 3, "extinction"):
                    continue  # seed 3 is incomplete: left out
                gain = {"joat": 0.02 * seed + 0.04 * k, "joint": 0.0}.get(arm, -0.1)
                cell = _cell(arm, seed, v, [0.3 + gain] * 4, 0.2, y1)
                cell["yardstick2"] = y2
                for j, p in enumerate(cell["points"]):
                    p["whole_network"] = {"match": {"score": 0.4 + gain}, "policy_loss": 2.0 - j,
                                          "value_loss": 0.5 - gain}  # fmt: skip
                s.write(cell, "cells", f"{arm}_s{seed}_{v}.json")
            want[seed] = 0.02 * seed + 0.02
    results = analysis.collect(s)
    diffs = analysis.seed_level(results, "joat", "joint", lambda r: r["auc"])
    np.testing.assert_allclose(diffs, [want[0], want[1], want[2]])
    rows = dict(analysis.seed_level_endpoints(results))
    np.testing.assert_allclose(rows["P2 joat - joint, AUC"], diffs)
    # The 16-simulation AUC only on atomic (the variant with range): joat's gain there is 0.02 s.
    np.testing.assert_allclose(
        rows["P2 joat - joint, 16-simulation AUC (1 variants with range)"], [0.0, 0.02, 0.04, 0.06]
    )
    np.testing.assert_allclose(
        rows["P2 joat - joint, held-out value loss AUC (lower is better)"], [-d for d in diffs]
    )
    np.testing.assert_allclose(
        rows["P2 joat - joint, held-out policy loss AUC (lower is better)"], [0.0] * 3
    )
    text = report.report(s, results)
    mean, half = lab_stats.t_interval(diffs)
    assert (
        f"P2 joat - joint, AUC: {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}] (n=3" in text
    )
    assert "pretraining-seed level" in text and "`extinction` 0.10 (out)" in text
    # `--seed-level` names what it averages over, and warns of played variants it leaves out.
    assert report.primary_note(results) == "primary variants: atomic, extinction"
    without = {**results, "curves": {**results["curves"], "extinction": None}}
    assert report.primary_note(without) == (
        "primary variants: atomic (warning: cells of extinction are left out: not primary, "
        "no calibrated mid with range)"
    )
    # `--seed-level`: the same numbers as a table, for any preset's committed cells.
    table = report.seed_level_table(results)
    sd = float(np.std(diffs, ddof=1))
    mde3 = (stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2)) * sd / np.sqrt(3)
    mde10 = (stats.t.ppf(0.975, 9) + stats.t.ppf(0.8, 9)) * sd / np.sqrt(10)
    assert (
        f"| P2 joat - joint, AUC | 3 | {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}] "
        f"| {mde3:.3f} | {mde10:.3f} |" in table
    )


@pytest.mark.slow
def test_the_second_yardstick_plays_the_whole_network_and_reads_held_out_losses(
    tmp_path, monkeypatch
):
    """Yardstick 2 at the smoke size on random networks: the searched match against the mid
    and the held-out losses at a point, and the range calibration, written once."""
    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint
    from mmc_jax.model import network as network_lib

    preset = dataclasses.replace(
        presets.PRESETS["smoke"], variants=("atomic",), whole_network_simulations=2
    )
    s = store.Study("test", preset, tmp_path / "work", tmp_path / "art")
    config = recipes.joat_config(preset, 0)
    from configs import gardner

    reference = gardner.get_config("smoke")
    reference.variant = "atomic"
    for it in preset.reference_iterations:
        network_config, params, _, _ = adapt.load_start("scratch", config, 10 + it)
        with reference.unlocked():
            reference.network = network_config
        checkpoint.export_model(s.reference_model("atomic", it), reference, params, {"step": it})
    s.write({"variant": "atomic", "mid": 1, "final": 2, "calibrated": True, "range": 0.5,
             "primary": True, "yardstick": presets.yardstick(preset),
             "reference_iterations": list(preset.reference_iterations), "points": []},
            "curve", "atomic.json")  # fmt: skip
    searched = []  # the simulations of every match played
    match = games.play_match

    def recording(network, params, variant, preset, *args, **kwargs):
        searched.append(preset.simulations)
        return match(network, params, variant, preset, *args, **kwargs)

    monkeypatch.setattr(games, "play_match", recording)
    lines = []
    info = games.whole_network_calibration(s, "atomic", lines.append)
    assert info["mid"] == 1 and info["yardstick2"]["simulations"] == 2
    assert info["range"] == info["final_vs_mid"] - info["random_vs_mid"]
    assert games.whole_network_calibration(s, "atomic", None) == info  # read, not replayed
    network_config, params, _, _ = adapt.load_start("scratch", config, 0)
    mid = checkpoint.load_model(s.reference_model("atomic", 1))[:2]
    choice = {"optimizer": "sgd", "learning_rate": 0.3}
    network = network_lib.make_network(network_config)
    point = games.whole_network_point(s, network, params, "atomic", 0, 1, choice, mid)
    assert point["match"]["num_games"] == preset.games and point["simulations"] == 2
    assert searched == [2, 2, 2] and any("range" in line for line in lines)
    assert point["policy_loss"] > 0 and point["value_loss"] >= 0
    again = games.whole_network_point(s, network, params, "atomic", 0, 1, choice, mid)
    assert again["policy_loss"] == point["policy_loss"] and again["match"] == point["match"]
    # A whole cell: every point's adapted parameters (kept checkpoints) under both yardsticks.
    s.write(
        {**info, "yardstick2": {**info["yardstick2"], "stale": True}}, "curve2", "atomic.json"
    )  # (a calibration of other settings is played again)
    assert games.whole_network_calibration(s, "atomic", lines.append)["yardstick2"] == (
        presets.yardstick2(preset)
    )
    cell = games.cell(s, "scratch", 0, "atomic", choice, lines.append)
    assert cell["yardstick2"] == presets.yardstick2(preset)
    zero, one = cell["points"]
    assert zero["whole_network"] == games.whole_network_point(
        s, network, params, "atomic", 0, 0, choice, mid
    )  # the start itself at point 0 (scratch, init seed 0)
    assert (
        one["iteration"] == 1
        and one["whole_network"]["policy_loss"] != (zero["whole_network"]["policy_loss"])
    )  # the adapted parameters at point 1
    assert "; 2 sims 0: " in lines[-1]
    row = analysis.collect(s)["cells"][0]
    assert row["auc_policy_loss"] == pytest.approx(
        (zero["whole_network"]["policy_loss"] + one["whole_network"]["policy_loss"]) / 2
    )


def _atomic_study(tmp_path, **changes):
    """(study, yardstick 1, yardstick 2, step-size choice) of a 3-seed study of Amendment 3's
    arms on atomic alone, its step-size stage and calibrated curve written; `changes` to the
    preset."""
    preset = dataclasses.replace(
        presets.PRESETS["smoke"],
        variants=("atomic",),
        seeds=(0, 1, 2),
        arms=("joint", "joat", "gardner"),
        whole_network_simulations=16,
        **changes,
    )
    s = store.Study("test", preset, tmp_path / "work", tmp_path / "art")
    y1, y2 = presets.yardstick(preset), presets.yardstick2(preset)
    choice = {"optimizer": "sgd", "learning_rate": 0.3}
    s.write({"choice": choice, "means": {}}, "sensitivity.json")
    s.write({"variant": "atomic", "mid": 2, "final": 2, "calibrated": True, "range": 0.8,
             "primary": True, "yardstick": y1, "reference_iterations": [1, 2],
             "points": [{"frames": 0, "score": 0.1}, {"frames": 4096, "score": 0.9}]},
            "curve", "atomic.json")  # fmt: skip
    return s, y1, y2, choice


@pytest.mark.parametrize(
    ("gains", "shipped"), [((0.1, 0.12, 0.11), "joat"), ((0.1, -0.1, 0), "joint")]
)
def test_amendment_3_ships_joat_only_above_joint_at_the_seed_level_and_always_seed_0(
    tmp_path, gains, shipped
):
    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint

    s, y1, y2, choice = _atomic_study(tmp_path)
    preset = s.preset
    for seed in preset.seeds:
        for arm in ("scratch", "joint", "joat", "gardner"):
            # seed 2 is every arm's best seed; joat - joint per seed is `gains`
            gain = {"joat": 0.1 * seed + gains[seed], "joint": 0.1 * seed}.get(arm, 0.0)
            cell = _cell(arm, seed, "atomic", [0.2 + gain] * 4, 0.2, y1)
            s.write({**cell, "yardstick2": y2}, "cells", f"{arm}_s{seed}_atomic.json")
            if arm != "scratch":
                s.write({"frames": 4096, "iterations": 2, "sequential_steps": 16,
                         "optimizer": "x"}, "pretrain", f"{arm}_s{seed}.json")  # fmt: skip
    config = recipes.arm_config(preset, shipped, 0, choice)
    _, params, _, _ = adapt.load_start("scratch", config, 0)
    checkpoint.export_model(s.pretrained_model(shipped, 0), config, params, {"step": 2})
    card = ship.ship(s, analysis.collect(s), tmp_path / "shipped")
    assert (card["arm"], card["seed"]) == (shipped, 0)  # never the best seed (2)
    assert "Amendment 3" in card["chosen_by"] and "n=3" in card["chosen_by"]
    per_seed = card["selection"]["per_seed_auc"]
    assert len(per_seed) == 3 and card["selection"]["arm_mean_auc"] == pytest.approx(
        sum(per_seed.values()) / 3
    )
    assert "sgd 0.3" in card["reproduces"]
    assert "+desc" in card["selection"]["absent"]
    info = json.loads((tmp_path / "shipped" / "model.json").read_text())
    assert "Amendment 3's rule" in info["description"]


# ---------------------------------------------------------------------------------------------
# Damaged artefacts (issue 52, item 5): written by hand, no training


def _damage(path: Path, text: str | bytes = '{"variant": "atomic", "fra') -> Path:
    """`path` as a write cut short leaves it (truncated JSON; bytes: not even text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_status_counts_only_readable_cells_and_names_each_damaged_artefact(tmp_path, capsys):
    """A truncated cell used to count ("cells: 108/108") and a truncated reference to be
    "done"; now `--status` counts what reads, names each damaged file in one line, and moves
    nothing (only a run does)."""
    preset = presets.PRESETS["smoke"]
    work = tmp_path / "work"
    s = store.Study("smoke", preset, work, work / "artefacts")
    s.write({"variant": "atomic", "frames": {"1": 1, "2": 2}}, "reference", "atomic.json")
    scores = [0.1, 0.2, 0.3, 0.4]
    s.write(_cell("joint", 0, "atomic", scores, 0.1, presets.yardstick(preset)), "cells",
            "joint_s0_atomic.json")  # fmt: skip
    cell = _damage(s.path("cells", "joat_s0_atomic.json"), '{"arm": "joat", "seed": 0, "poi')
    reference = _damage(s.path("reference", "gardner_start_shuffle_17_colour_other.json"))
    binary = _damage(s.path("long.json"), b"\xff\xfe")
    text = plan.status(s)
    total = len(preset.variants) * len(preset.seeds) * (len(preset.arms) + 1)
    assert f"cells: 1/{total} (1 damaged)" in text, text
    assert "reference atomic: done" in text
    assert "reference gardner,start=shuffle:17,colour=other: - (damaged)" in text
    assert "long run: -" in text
    for path in (cell, reference, binary):
        line = next(line for line in text.splitlines() if str(path) in line)
        assert line.startswith(f"damaged: {path} (not "), line
        assert line.endswith(f"moves it to {path.name}.damaged and computes its unit again")
        assert path.exists()  # moved by a run, not by --status
    assert study.main(["--preset", "smoke", "--workdir", str(work), "--status"]) == 0
    out = capsys.readouterr()
    assert f"damaged: {cell} (not valid JSON: " in out.out and "Traceback" not in out.err


def test_a_damaged_artefact_is_named_moved_aside_and_counts_as_missing(tmp_path):
    """`Study.read` of a truncated JSON (it used to raise a bare JSONDecodeError naming no
    file) names the file in one line, moves it to `<name>.damaged` and returns None, so the
    plan computes the unit again; the report skips a damaged cell instead of dying."""
    preset = presets.PRESETS["smoke"]
    notes = []
    s = store.Study("smoke", preset, tmp_path / "work", tmp_path / "art", warn=notes.append)
    path = _damage(s.path("reference", "atomic.json"))
    assert s.read("reference", "atomic.json") is None
    assert notes == [
        f"warning: damaged artefact {path} (not valid JSON: unterminated string starting "
        f"at line 1 column 23 of 26 bytes) moved to {path}.damaged; its unit is computed again"
    ]
    assert not path.exists() and path.with_name("atomic.json.damaged").read_text().endswith("fra")
    _damage(path, "[1, 2]")  # valid JSON, but no artefact is a list
    assert s.read("reference", "atomic.json") is None
    assert "(not a JSON object but list)" in notes[-1]
    assert path.with_name("atomic.json.damaged.1").exists()  # the first one is kept too
    scores = [0.1, 0.2, 0.3, 0.4]
    s.write(_cell("joint", 0, "atomic", scores, 0.1, presets.yardstick(preset)), "cells",
            "joint_s0_atomic.json")  # fmt: skip
    damaged_cell = _damage(s.path("cells", "joat_s0_atomic.json"), '{"arm": "jo')
    results = analysis.collect(s)
    assert [(c["arm"], c["seed"]) for c in results["cells"]] == [("joint", 0)]
    assert not damaged_cell.exists() and str(damaged_cell) in notes[-1]
    # Another preset's committed artefacts are read only: named, not used, never moved.
    other = store.Study("cpu", preset, tmp_path / "w2", tmp_path / "art2", True, notes.append)
    theirs = _damage(other.path("sensitivity.json"), "{")
    assert other.read("sensitivity.json") is None and theirs.exists()
    assert notes[-1] == (
        f"warning: damaged artefact {theirs} (not valid JSON: expecting property name enclosed "
        "in double quotes at line 1 column 2 of 1 bytes) is not used"
    )


def test_the_plan_computes_a_damaged_unit_again(tmp_path, monkeypatch):
    """A truncated reference of a preset that shares the cpu preset's references is copied
    again from them; a truncated cell is played again (here up to the adaptation, which the
    test stops) instead of the run dying with a traceback."""
    from mmc_jax import adapt

    gpu = presets.PRESETS["gpu"]
    s = store.Study("gpu", gpu, tmp_path / "work", tmp_path / "art", warn=lambda line: None)
    committed = store.committed("cpu").read("reference", "atomic.json")
    path = _damage(s.path("reference", "atomic.json"))
    assert pretraining.references(s, "atomic", print) == committed
    assert json.loads(path.read_text()) == committed
    assert path.with_name("atomic.json.damaged").exists()

    preset = presets.PRESETS["smoke"]
    lines = []
    s = store.Study("smoke", preset, tmp_path / "w", tmp_path / "a", warn=lines.append)
    s.write({"choice": {"optimizer": "sgd", "learning_rate": 0.1}}, "sensitivity.json")
    s.write({"variant": "atomic", "frames": {"1": 8, "2": 16}}, "reference", "atomic.json")
    s.write({"variant": "atomic", "mid": 1, "final": 2, "calibrated": True, "range": 0.5,
             "primary": True, "reference_iterations": [1, 2],
             "yardstick": presets.yardstick(preset), "calibration": {},
             "points": [{"frames": 0, "score": 0.1}]}, "curve", "atomic.json")  # fmt: skip
    cell = _damage(s.path("cells", "scratch_s0_atomic.json"), '{"arm": "scratch", "se')

    class Replayed(Exception):
        pass

    def run_adaptation(variant, init, workdir, **kwargs):
        raise Replayed(variant, init)

    monkeypatch.setattr(adapt, "run_adaptation", run_adaptation)
    with pytest.raises(Replayed) as replayed:
        plan.run(s, lines.append, only="games", variants=("atomic",))
    assert replayed.value.args == ("atomic", "scratch")
    assert any(str(cell) in line and "moved to" in line for line in lines), lines


# ---------------------------------------------------------------------------------------------
# Amendment 4: more seeds where the registered MDE misses its target, decided from the spread


def test_seeds_needed_is_the_fewest_whose_projected_mde_meets_the_target():
    diffs = [0.1, -0.05, 0.08, 0.0, 0.12, -0.02]
    n = lab_stats.seeds_needed(diffs, 0.05, 30)
    assert (
        lab_stats.minimum_detectable(diffs, n) <= 0.05 < lab_stats.minimum_detectable(diffs, n - 1)
    )
    assert lab_stats.seeds_needed(diffs, 0.001, 30) == 30  # capped
    assert lab_stats.seeds_needed(diffs, 10.0, 30) == len(diffs)


def test_amendment_4_decides_once_from_the_spread_and_plays_only_the_extended_arms(
    tmp_path, monkeypatch
):
    s, y1, y2, _ = _atomic_study(
        tmp_path, extend=(("joat", "joint"), ("joint", "gardner")), mde_target=0.05, max_seeds=12
    )
    preset = s.preset

    def write_cell(arm, seed, score):
        cell = _cell(arm, seed, "atomic", [score] * 4, 0.2, y1)
        s.write({**cell, "yardstick2": y2}, "cells", f"{arm}_s{seed}_atomic.json")

    # joat - joint: the same +0.02 every seed (no spread: not extended); joint - gardner:
    # spread 0.1 around +0.05 (extended). The means differ between the comparisons; only
    # the spreads decide.
    joint = {0: 0.4, 1: 0.5, 2: 0.45}
    gardner = {0: 0.45, 1: 0.35, 2: 0.3}
    for seed in preset.seeds:
        write_cell("joint", seed, joint[seed])
        write_cell("joat", seed, joint[seed] + 0.02)
        if seed < 2:
            write_cell("gardner", seed, gardner[seed])
    assert analysis.decide_extension(s, print) is None  # gardner seed 2 missing: nothing decided
    assert "decided once the 3 registered" in plan.status(s)
    write_cell("gardner", 2, gardner[2])
    decision = analysis.decide_extension(s, print)
    p2, c2 = decision["comparisons"]
    assert not p2["extended"] and p2["seeds"] == 3
    diffs = [joint[k] - gardner[k] for k in preset.seeds]
    assert c2["extended"] and c2["seeds"] == lab_stats.seeds_needed(diffs, 0.05, 12)
    assert "mean" not in c2 and c2["sd"] == pytest.approx(np.std(diffs, ddof=1))
    runs = analysis.extension_runs(decision)
    assert runs == [(seed, ("joint", "gardner")) for seed in range(3, c2["seeds"])]

    # Decided once: a later registered cell changes nothing.
    write_cell("gardner", 2, 0.0)
    assert analysis.decide_extension(s, print) == decision

    # The run plays the extended arms' new seeds only: no JOAT, no scratch.
    played, trained = [], []
    monkeypatch.setattr(games, "cell", lambda st, arm, seed, v, *a: played.append((arm, seed)))
    monkeypatch.setattr(
        pretraining, "pretrain", lambda st, arm, seed, *a: trained.append((arm, seed))
    )
    plan.extend(s, print, "pretrain", None, None, preset.variants, lambda: False, None)
    assert trained == [(arm, seed) for seed, arms in runs for arm in arms]
    for seed, arms in runs[:2]:
        for arm in arms:
            s.write({"frames": 4096, "iterations": 2, "sequential_steps": 16, "optimizer": "x"},
                    "pretrain", f"{arm}_s{seed}.json")  # fmt: skip
    assert not plan.extend(s, print, "games", None, None, preset.variants, lambda: False, None)
    assert played == [(arm, seed) for seed, arms in runs[:2] for arm in arms]

    assert "Amendment 4 incomplete" in report.report(s, analysis.collect(s))

    # Their cells stay apart: the registered rows keep 3 seeds, Amendment 4's rows read N.
    for seed, _ in runs:
        write_cell("joint", seed, 0.5)
        write_cell("gardner", seed, 0.4)
        write_cell("joat", seed, 0.9)  # not an extended arm at that seed: left out
    results = analysis.collect(s)
    assert {c["seed"] for c in results["cells"]} == {0, 1, 2}
    assert {c["arm"] for c in results["extension_cells"]} == {"joint", "gardner"}
    rows = dict(analysis.seed_level_endpoints(results))
    assert len(rows["C2 joint - gardner, AUC"]) == 3
    extended = rows[f"C2 joint - gardner, AUC (Amendment 4, seeds 0-{c2['seeds'] - 1})"]
    assert len(extended) == c2["seeds"] and extended[3:] == pytest.approx([0.1] * len(runs))
    assert not any("P2" in name and "Amendment 4" in name for name in rows)
    assert f"extended to {c2['seeds']} seeds" in plan.status(s)
    text = report.report(s, results)
    assert "Amendment 4 (README)" in text and "Amendment 4 incomplete" not in text
    assert "**Incomplete**" in text  # (joat and scratch of seed 0-2 were never played here)
    report.plot(s, results)  # the seed-level forest plot, Amendment 4's rows among them
    assert s.path("endpoints.png").stat().st_size > 0


def test_amendment_5_holds_whole_components_out_and_reuses_only_identical_units(tmp_path):
    """Amendment 5: no joint or JOAT pretraining task has an atomic capture or the extinction
    goal; the gardner runs (which read no task region) and the gardner and scratch cells at
    the same step are Amendment 3's, copied; a cell at the other step, or from a start this
    preset trained, is played anew."""
    heldout, power = presets.PRESETS["heldout"], presets.PRESETS["power"]
    sgd = {"optimizer": "sgd", "learning_rate": 0.3}
    for arm in ("joint", "joat"):
        tasks = list(meta.task_weights(recipes.arm_config(heldout, arm, 4, sgd)))
        assert len(tasks) == 64
        assert not [t for t in tasks if "atomic" in t or "extinction" in t]
        assert recipes.arm_config(heldout, arm, 4, sgd) != recipes.arm_config(power, arm, 4, sgd)
    assert recipes.arm_config(heldout, "gardner", 4, None) == recipes.arm_config(
        power, "gardner", 4, None
    )
    assert recipes.cell_procedure(heldout, sgd) == sgd
    assert recipes.cell_procedure(presets.PRESETS["heldout1"], sgd)["learning_rate"] == 1.0
    with pytest.raises(ValueError, match="not in the task region"):
        recipes.hold_out_components(recipes.joat_config(heldout, 0), ("capture=explode",))

    s = store.Study("heldout", heldout, tmp_path / "work", tmp_path / "art")
    assert pretraining.reusable(s, "gardner", 12, None).preset_name == "power"
    assert pretraining.reusable(s, "joint", 0, None) is None
    lines = []
    assert pretraining.sensitivity(s, lines.append)["choice"] == sgd  # registered, not chosen
    assert "sgd 0.3, fixed (registered)" in report.report(s, analysis.collect(s))  # no selection
    s1 = store.Study("heldout1", presets.PRESETS["heldout1"], tmp_path / "w1", tmp_path / "a1")
    pretraining.sensitivity(s1, lines.append)
    text = report.report(s1, analysis.collect(s1))
    assert "JOAT's inner loop: sgd 0.3" in text and "The cells adapt with sgd 1" in text
    curve_info = store.committed("power").read("curve", "atomic.json")
    got = games.shared_cell(s, "scratch", 3, "atomic", sgd, curve_info)
    want = store.committed("power").read("cells", "scratch_s3_atomic.json")
    assert got == {**want, "from": "power"}
    assert (
        games.shared_cell(s, "scratch", 3, "atomic", {**sgd, "learning_rate": 1.0}, curve_info)
        is None
    )
    assert games.shared_cell(s, "gardner", 3, "atomic", sgd, curve_info) is None  # not copied yet
    pretraining.pretrain(s, "gardner", 3, None, lines.append)
    assert games.shared_cell(s, "gardner", 3, "atomic", sgd, curve_info)["from"] == "power"


def test_speed_up_in_frames_reads_both_curves_at_the_threshold():
    """F_s / F_a at T = 0.4, a start at T counted as one adaptation iteration and a cell short
    of T at the registered frames; geometric mean over variants within a seed."""
    curve = {
        "primary": True,
        "points": [{"frames": 0, "score": 0.2}, {"frames": 8192, "score": 0.6}],
    }
    # The scratch curve reaches 0.4 at 4,096 frames.

    def row(arm, scores):
        frames = (0, 512, 1024, 2048)
        return {
            "arm": arm,
            "seed": 0,
            "variant": "atomic",
            "points": [{"frames": f, "score": x} for f, x in zip(frames, scores, strict=True)],
        }

    results = {
        "curves": {"atomic": curve},
        "cells": [
            row("joint", (0.3, 0.5, 0.5, 0.5)),  # reaches 0.4 at 256 frames: counted as 512
            row("joat", (0.45, 0.5, 0.5, 0.5)),  # at T from the start: 512
            row("gardner", (0.3, 0.3, 0.35, 0.35)),  # short: 4,096 (8,192)
            row("scratch", (0.2, 0.2, 0.3, 0.5)),  # 1024 + 1024 * 0.1 / 0.2 = 1,536
        ],
    }
    rows = {
        arm: (logs, started, short)
        for arm, logs, started, short, _ in analysis.speedup_rows(results)
    }
    assert math.exp(rows["joint"][0][0]) == pytest.approx(8.0)
    assert math.exp(rows["joat"][0][0]) == pytest.approx(8.0) and rows["joat"][1] == 1
    assert math.exp(rows["gardner"][0][0]) == pytest.approx(1.0) and rows["gardner"][2] == 1
    assert math.exp(rows["scratch"][0][0]) == pytest.approx(4096 / 1536)
    eight = {arm: logs for arm, logs, *_ in analysis.speedup_rows(results, unreached=8192.0)}
    assert math.exp(eight["gardner"][0]) == pytest.approx(0.5)


def test_a_shared_reference_is_read_from_the_cpu_preset_not_copied(tmp_path):
    """Issue 68: the cpu preset's references serve every preset that trains the same ones; a
    preset records them and reads their models from the cpu preset's artefacts, so no model
    is committed twice."""
    s = store.Study("power", presets.PRESETS["power"], tmp_path / "work", tmp_path / "art")
    assert s.reference_model("atomic", 8) == s.path("models", "reference", "atomic", "it8")
    assert pretraining.shared_references(s, "atomic")
    cpu = store.committed("cpu")
    assert s.read("reference", "atomic.json") == cpu.read("reference", "atomic.json")
    assert not s.path("models").exists()
    assert s.reference_model("atomic", 8) == cpu.reference_model("atomic", 8)
    assert (s.reference_model("atomic", 8) / "model.json").exists()


def test_a_committed_curve_without_its_reference_record_still_finds_the_cpu_models(tmp_path):
    """Issue 69's cells in a fresh checkout: the heldout preset's curve is committed, its
    references' record (a copy of the cpu preset's) was not; the curve's stage writes the
    record, so the cell's mid is the cpu preset's committed model, not a missing folder."""
    s = store.Study("heldout", presets.PRESETS["heldout"], tmp_path / "work", tmp_path / "art")
    committed_curve = store.committed("heldout").read("curve", "atomic.json")
    s.write(committed_curve, "curve", "atomic.json")
    assert s.read("reference", "atomic.json") is None
    info = games.curve(s, "atomic", lambda line: None)
    assert info == committed_curve
    cpu = store.committed("cpu")
    assert s.read("reference", "atomic.json") == cpu.read("reference", "atomic.json")
    mid = s.reference_model("atomic", info["mid"])
    assert mid == cpu.reference_model("atomic", info["mid"]) and (mid / "model.json").exists()


def test_a_fresh_sgd_1_preset_shares_its_reused_presets_curve_without_playing(
    tmp_path, monkeypatch
):
    """heldout1 in a fresh checkout: its references' record is copied before the curve is
    compared, so the curve is heldout's committed one (`"from": "heldout"`), not played again."""
    s = store.Study("heldout1", presets.PRESETS["heldout1"], tmp_path / "work", tmp_path / "art")

    def no_match(*args, **kwargs):
        raise AssertionError("the curve was played again")

    monkeypatch.setattr(games, "play_match", no_match)
    info = games.curve(s, "atomic", lambda line: None)
    assert info == {**store.committed("heldout").read("curve", "atomic.json"), "from": "heldout"}
