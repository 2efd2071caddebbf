"""One harness for the Algorithm contract, over every registered learner
(`mmc_jax.algorithms.REGISTRY`; a learner registered without a smoke config here fails).

For each: its smoke config trains two iterations through the one run loop; a second run of the
same config stopped by SIGTERM after iteration 1 and run again resumes to the unbroken run's
parameters, optimizer state and metrics bit for bit, without tracing its iteration again; every
record has the run loop's keys; `python -m mmc_jax.export` writes its model and
`mmc_jax.algorithms.open_model` reads it back with the same parameters, as the algorithm's
`model_kind` lays them out. One compiled iteration per learner serves the three runs
(`jit_per_config`).
"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path
from typing import Any, NamedTuple

import chex
import jax
import numpy as np
import pytest
from runs_support import smoke, traced_functions

from configs import recon, supervised, td_lambda
from mmc_jax import algorithms, export
from mmc_jax.infra import metrics
from mmc_jax.training import runloop


def _preset_smoke(module, **fields):
    def make():
        config = module.get_config("smoke").copy_and_resolve_references()
        config.unlock()
        config.num_iterations = 2
        for dotted, value in fields.items():
            section, name = dotted.split("__")
            config[section][name] = value
        return config

    return make


# The smoke config of every registered learner (two iterations).
SMOKE = {
    "alphazero": lambda: smoke("alphazero", 2),
    "joat": lambda: smoke("joat", 2),
    "recon": _preset_smoke(recon),
    "supervised": _preset_smoke(supervised, data__processes=1),
    "td_lambda": _preset_smoke(td_lambda),
}
# The keys every record of the run loop has, whatever the learner (`selfplay/games` only for
# a learner that plays games: the record's neutral core, `CompiledStep`).
RECORD_KEYS = ("step", "iteration", "frames", "games", "selfplay/frames")
PLAYS_GAMES = {
    "alphazero": True,
    "joat": True,
    "recon": True,
    "supervised": False,
    "td_lambda": True,
}


def test_every_registered_learner_has_a_smoke_config_here():
    assert sorted(SMOKE) == sorted(algorithms.REGISTRY)


def test_a_new_learner_writes_at_most_eight_methods_and_every_default_has_a_purpose():
    """Issue 68: the contract's required methods are few, and each default lives in a class
    named for its purpose (host data, checkpoint layout, memory fit, command text, the model),
    not in one long list on `Algorithm`."""
    from mmc_jax.training import algorithm as contract

    assert len(contract.Algorithm.__abstractmethods__) <= 8
    assert len(contract.ReplicatedAlgorithm.__abstractmethods__) <= 8
    groups = (
        contract.HostData,
        contract.CheckpointLayout,
        contract.MemoryFit,
        contract.CommandText,
        contract.ModelExport,
    )
    own = {name for name in vars(contract.Algorithm) if callable(getattr(contract.Algorithm, name))}
    declared = {"__init__", "prepare_config", "make_mesh"}  # the instance's own declarations
    assert own - declared == set(contract.Algorithm.__abstractmethods__)
    grouped = [name for group in groups for name in vars(group) if not name.startswith("__")]
    assert len(grouped) == len(set(grouped)), "a default in two groups"
    public = {
        name
        for name in dir(contract.Algorithm)
        if not name.startswith("_") and callable(getattr(contract.Algorithm, name))
    }
    assert public == set(grouped) | own - {"__init__"}


class Learner(NamedTuple):
    """A registered learner's unbroken two-iteration smoke run, shared by the tests here."""

    name: str
    algorithm: Any
    result: runloop.RunResult
    workdir: Path  # the unbroken run's (never changed by a test)
    root: Path  # where a test makes its own runs
    log: str  # the unbroken run's progress
    first: Any  # its parameters after iteration 1 (host arrays)


def params_after(algorithm, config, workdir) -> tuple[runloop.RunResult, dict[int, Any]]:
    """A run of `config` and its parameters after each iteration (host arrays)."""
    seen = {}

    def keep(iteration, state, record):
        seen[iteration] = jax.device_get(state.params)

    return runloop.run(algorithm, config, workdir, on_eval=keep, stream=None), seen


def optimizer_section(name: str, config):
    """The config section a learner's optimizer reads: `learner`, but Reptile's per-task
    procedure (JOAT with `meta.fresh_inner_state`) reads `inner`."""
    if name == "joat" and config.meta.fresh_inner_state:
        return config.inner
    return config.learner


def largest_change(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))  # fmt: skip


@pytest.fixture(scope="module", params=sorted(SMOKE))
def learner(request, tmp_path_factory) -> Learner:
    name = request.param
    root = tmp_path_factory.mktemp(name)
    algorithm = algorithms.REGISTRY[name]
    log, seen = io.StringIO(), {}

    def keep(iteration, state, record):
        seen[iteration] = jax.device_get(state.params)

    result = runloop.run(algorithm, SMOKE[name](), root / "unbroken", on_eval=keep, stream=log)
    return Learner(name, algorithm, result, root / "unbroken", root, log.getvalue(), seen[1])


def test_smoke_training_writes_the_neutral_record_core_and_the_line_shows_only_it(learner):
    name, workdir, log = learner.name, learner.workdir, learner.log
    assert learner.result.start_iteration == 0 and learner.result.record["iteration"] == 2
    records = metrics.read_metrics(workdir)
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        missing = [key for key in RECORD_KEYS if key not in record]
        assert not missing, (name, missing)
        losses = [key for key in record if key.startswith("train/")]
        assert losses and all(np.isfinite(record[key]) for key in losses), (name, losses)
        assert ("selfplay/games" in record) == PLAYS_GAMES[name], name
    assert records[-1]["frames"] == sum(r["selfplay/frames"] for r in records)
    line = next(line for line in log.splitlines() if line.startswith("it 2/2"))
    assert (" games " in line) == PLAYS_GAMES[name] and runloop.loss_text(records[-1]) in line
    assert " 0.0 KiB" not in log and "loss pi 0.000" not in line, log
    assert (workdir / "tasks.txt").is_file() == (name == "joat")  # JOAT's own run file


def test_a_run_stopped_by_sigterm_resumes_bit_identically_without_tracing_again(learner):
    name, algorithm, unbroken = learner.name, learner.algorithm, learner.result
    workdir = learner.root / "stopped"

    def stop_after_the_first(iteration, state, record):
        if iteration == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    stopped = runloop.run(
        algorithm, SMOKE[name](), workdir, on_eval=stop_after_the_first, stream=None
    )
    assert stopped.stopped and stopped.record["iteration"] == 1, name
    log = io.StringIO()
    with traced_functions() as traced:  # the same config: its compiled iteration is reused
        resumed = runloop.run(algorithm, SMOKE[name](), workdir, stream=log)
    assert f"resumed from {workdir}/checkpoints/1" in log.getvalue(), name
    assert "iteration" not in traced, (name, traced)
    assert resumed.start_iteration == 1 and resumed.record["iteration"] == 2
    chex.assert_trees_all_equal(resumed.state.params, unbroken.state.params)
    chex.assert_trees_all_equal(resumed.state.opt_state, unbroken.state.opt_state)
    ours, theirs = metrics.read_metrics(workdir), metrics.read_metrics(learner.workdir)
    assert [r["step"] for r in ours] == [1, 2]
    # A learner with a replay ring restored it (SelfPlayAlgorithm's record says so).
    assert ours[1].get("replay/restored", 1) == 1 and "no replay ring" not in log.getvalue()
    for mine, unbroken_record in zip(ours, theirs, strict=True):
        keys = ["frames", "selfplay/frames", *[k for k in unbroken_record if k[:6] == "train/"]]
        assert {k: mine[k] for k in keys} == {k: unbroken_record[k] for k in keys}, name
    again = io.StringIO()
    finished = runloop.run(algorithm, SMOKE[name](), workdir, stream=again)
    assert finished.start_iteration == 2 and "already finished" in again.getvalue()


def test_its_model_exports_and_loads_back_as_its_algorithm_lays_it_out(learner, capsys):
    name, algorithm, workdir = learner.name, learner.algorithm, learner.workdir
    out = learner.root / "model"
    assert export.main(["--checkpoint", str(workdir), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    card = json.loads((out / "model.json").read_text())
    config = algorithms.open_model(workdir).config
    assert card["step"] == 2 and card["config"]["algorithm"] == name
    assert card["description"] == algorithm.describe_model(config, 2)
    assert card["observation_layout"] == algorithm.model_kind(config).obs_layout
    model = algorithms.open_model(out)
    assert model.exported and model.step == 2
    kind = algorithm.model_kind(model.config)
    assert model.sensing == kind.sensing
    chex.assert_trees_all_equal_shapes(model.params, kind.template)
    host = jax.device_get(learner.result.state.params)
    chex.assert_trees_all_equal(jax.device_get(model.params), host)


def test_its_learning_rate_schedule_and_clip_are_honoured(learner):
    """Every learner builds its optimizer from its `learner` section (`make_optimizer`): a
    warm-up from 0 over 10^8 steps (a learning rate under 2e-9 at every step of the run) and a
    clip of 1e-30 (Adam divides by the clipped gradient's own scale, so an update shrinks to
    ~1e-22 of the learning rate) each hold the parameters still in iteration 2; unscheduled
    and unclipped, iteration 2 moves them by more than 1e-4."""
    algorithm, root = learner.algorithm, learner.root
    assert largest_change(learner.result.state.params, learner.first) > 1e-4
    config = SMOKE[learner.name]()
    section = optimizer_section(learner.name, config)
    section.update(lr_schedule="warmup_cosine", warmup_steps=10**8, decay_steps=2 * 10**8)
    section.weight_decay = 0.0
    scheduled, seen = params_after(algorithm, config, root / "scheduled")
    assert largest_change(scheduled.state.params, seen[1]) < 1e-6
    config = SMOKE[learner.name]()
    optimizer_section(learner.name, config).update(max_grad_norm=1e-30, weight_decay=0.0)
    clipped, seen = params_after(algorithm, config, root / "clipped")
    assert largest_change(clipped.state.params, seen[1]) < 1e-12
