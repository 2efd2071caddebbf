"""`mmc_jax.bench`'s round-robin timer: every arm timed once per round, each carrying its own
state on, and the per-round ratios paired by round (no timing is asserted, only the protocol)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmc_jax import bench


def counting_arm(step: int):
    """A jitted `run(state, key) -> state` that adds `step` to a counter: how many calls saw it."""
    return jax.jit(lambda state, key: state + step), jnp.zeros((), jnp.int32)


def test_every_arm_gets_its_compile_time_and_one_scan_time_per_round():
    arms = {"mmc_jax": counting_arm(1), "pgx": counting_arm(10)}
    timed = bench.time_scans_interleaved(arms, rounds=3, verbose=False)
    assert set(timed) == {"mmc_jax", "pgx"}
    for name in arms:
        assert len(timed[name]["seconds"]) == 3
        assert all(s > 0 for s in timed[name]["seconds"])
        assert timed[name]["compile_s"] > 0


def test_round_ratios_pair_the_rounds_in_order():
    timed = {"mmc_jax": {"seconds": [1.0, 2.0, 4.0]}, "pgx": {"seconds": [6.0, 6.0, 6.0]}}
    assert bench.round_ratios(timed, "pgx") == [6.0, 3.0, 1.5]
    timed["pgx"]["seconds"].pop()
    with pytest.raises(ValueError):  # unpaired rounds are a bug, never a silent shorter list
        bench.round_ratios(timed, "pgx")


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

    bench.time_scans_interleaved({"mmc_jax": (Spy(), state)}, rounds=4, verbose=False)
    assert seen == [0, 1, 2, 3, 4]  # warm-up from the start, then each round from the last


@pytest.mark.slow
def test_selfplay_vs_pgx_reports_the_median_ratio_of_paired_rounds(capsys):
    # End to end on a tiny search (2 games, 1 ply, 2 simulations, 1x8 net): every arm timed in
    # every round, and the JSON's ratio is the median of the rounds' pgx / mmc_jax ratios.
    bench.main(
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

    monkeypatch.setattr(bench, "mmc_env_runner", mmc_runner)
    monkeypatch.setattr(bench, "pgx_env_runner", pgx_runner)
    bench.main(
        "env --batch-sizes 2 --scan-length 3 --repeats 3 --movegen-batch 0 --vs-pgx --mixed "
        "--json".split()
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    mixed_specs = bench.R.sample_variants(0, 2)
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
