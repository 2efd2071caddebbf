"""The memory estimate of one iteration (`mmc_jax.training.memory`, issue 38): close to XLA's
own figure for the compiled iteration, a batch of 0 filled from it, and an iteration that cannot
fit refused with it before anything is built."""

from __future__ import annotations

import re

import pytest

from configs import gardner, joat
from mmc_jax.algorithms import alphazero, meta
from mmc_jax.bench import contract
from mmc_jax.bench import memory as bench_memory
from mmc_jax.training import memory, runloop

MIB = 2**20


@pytest.mark.parametrize(
    "spec",
    [pytest.param(s, marks=pytest.mark.slow) for s in ("gardner:smoke", "joat:smoke")],
)
def test_the_estimate_is_within_a_factor_of_two_of_the_compiled_iteration(spec):
    """What a run prints and checks before it allocates agrees with XLA's memory analysis of
    the same iteration compiled on the CPU (arguments + outputs - donated + temporaries).
    `python -m mmc_jax.bench memory --configs gardner:cpu gardner:full joat:cpu joat:full`
    gives 0.94-1.38 at the presets' own sizes (experiments/bench/README.md)."""
    run = bench_memory.measure(spec)
    assert run["estimate_bytes"]["state"] == run["state_bytes"]
    assert 0.5 <= run["estimate_over_peak"] <= 2.0, run


def test_fill_batch_takes_the_largest_power_of_two_that_fits_half_the_memory():
    def at(batch):  # 1 MiB of state, 0.5 MiB per game
        return memory.Estimate(state=MIB, selfplay=batch * MIB // 2, learner=0)

    limit = 2 * (MIB + 300 * MIB // 2)  # half of it holds 300 games
    assert memory.fill_batch(at, limit, devices=1) == 256
    assert memory.fill_batch(at, limit, devices=3) == 255  # a multiple of the devices
    assert memory.fill_batch(at, 10 * 2**40, devices=1) == memory.FILL_MAX  # capped
    assert memory.fill_batch(at, MIB, devices=1) == memory.FILL_MIN  # none fits: the check says


@pytest.mark.parametrize("name, limit", [("alphazero", 256 * MIB), ("joat", 2048 * MIB)])
def test_a_batch_of_zero_fills_the_device_from_the_estimate(monkeypatch, name, limit):
    """JOAT's field is games per task; its state holds a ring per training task, so it needs
    more memory for the same games."""
    algorithm, config = {
        "alphazero": (alphazero.ALGORITHM, gardner.get_config("cpu")),
        "joat": (meta.ALGORITHM, joat.get_config("cpu")),
    }[name]
    section, key = algorithm.batch_field.split(".")
    config[section][key] = 0
    config = algorithm.prepare_config(config)
    mesh = algorithm.make_mesh(config)
    monkeypatch.setattr(runloop, "_memory_limit", lambda mesh: (limit, 1, "memory of a test"))

    filled, changed = runloop.fill_batch(algorithm, config, mesh)
    batch = runloop.batch_size(filled, algorithm.batch_field)
    assert changed and batch >= memory.FILL_MIN and batch & (batch - 1) == 0
    assert runloop.estimate_memory(algorithm, filled, mesh).total <= limit / 2
    bigger = runloop.with_batch(algorithm, filled, 2 * batch)
    assert runloop.estimate_memory(algorithm, bigger, mesh).total > limit / 2

    line = runloop.memory_line(runloop.check_memory(algorithm, filled, mesh), mesh, "filled")
    assert re.fullmatch(
        r"memory: one iteration needs about [\d.]+ [KMG]iB per device \(state [\d.]+ [KMG]iB, "
        r"self-play [\d.]+ [KMG]iB, learner [\d.]+ [KM]iB\) of the [\d.]+ [MG]iB of memory of a "
        r"test; filled",
        line,
    ), line
    unchanged, changed = runloop.fill_batch(algorithm, filled, mesh)
    assert not changed and runloop.batch_size(unchanged, algorithm.batch_field) == batch


def test_an_iteration_that_cannot_fit_is_refused_with_its_estimate(tmp_path, monkeypatch):
    """A state that fits but a search that does not (a million simulations per move): one
    line with the estimate, before the games are built."""
    algorithm, config = alphazero.ALGORITHM, gardner.get_config("smoke")
    config.selfplay.num_simulations = 10**6

    def no_games(*args, **kwargs):
        raise AssertionError("the games were built before the memory check")

    monkeypatch.setattr(algorithm, "setup", no_games)
    with pytest.raises(ValueError) as error:
        runloop.run(algorithm, config, tmp_path / "run", stream=None)
    message = str(error.value)
    assert message.startswith("selfplay.batch_size=8: one iteration needs about "), message
    assert re.search(r"self-play [\d.]+ [GT]iB, learner .* more than the [\d.]+ [GT]iB", message)
    assert "\n" not in message and not (tmp_path / "run").exists()


def test_joat_full_fills_the_device_with_at_most_as_many_games_as_alphazero(monkeypatch):
    """configs/joat.py:full sets G = 0: on an 80 GiB card it plays n x G games at once with
    n x G <= FILL_MAX (AlphaZero's cap), and `adapt` gets the same G per draw (issue 50)."""
    algorithm = meta.ALGORITHM
    config = algorithm.prepare_config(joat.get_config("full"))
    assert config.meta.games_per_task == 0 and config.adapt.selfplay.batch_size == 0
    mesh = algorithm.make_mesh(config)
    monkeypatch.setattr(runloop, "_memory_limit", lambda mesh: (80 * 2**30, 1, "an 80 GiB card"))
    filled, changed = runloop.fill_batch(algorithm, config, mesh)
    games = filled.meta.games_per_task
    assert changed and games >= 8 * 128  # the card was nearly idle at 7 x 128
    assert filled.meta.num_tasks * games <= memory.FILL_MAX < filled.meta.num_tasks * 2 * games
    assert filled.adapt.selfplay.batch_size == games
    assert runloop.estimate_memory(algorithm, filled, mesh).total <= 40 * 2**30


def test_fill_batch_respects_an_algorithms_maximum():
    def at(batch):
        return memory.Estimate(state=MIB, selfplay=batch, learner=0)

    assert memory.fill_batch(at, 2**40, devices=1, maximum=2340) == 2048
    assert memory.fill_batch(at, 2**40, devices=1, maximum=1) == memory.FILL_MIN


def test_bench_resolves_a_full_presets_batch_before_building_it():
    """`bench iteration --gardner-preset full` crashed on batch 0 (issue 50): the bench now
    resolves the fill-the-device batch as `train` does."""
    for name, field in (("gardner", "selfplay.batch_size"), ("joat", "meta.games_per_task")):
        config = contract.prepare(f"{name}:full").config
        assert runloop.batch_size(config, field) >= memory.FILL_MIN
