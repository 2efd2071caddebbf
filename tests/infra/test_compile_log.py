"""Compile events (`mmc_jax.infra.compile_log`): the tally `bench compile` reports, and the
announcement that keeps a slow compile from waiting in silence."""

from __future__ import annotations

import io

import jax
import jax.numpy as jnp

from mmc_jax.infra import compile_log


def _fresh_program(n: int):
    """A jitted function no other test compiled (its constant differs)."""
    return jax.jit(lambda x: jnp.tanh(x) * n + jnp.float32(n) / 7.0)


def test_tally_counts_each_stage_of_a_compile_and_the_programs():
    with compile_log.Tally() as tally:
        _fresh_program(11)(jnp.ones(3)).block_until_ready()
    summary = tally.summary()
    assert summary["programs"] >= 1
    assert summary["trace_s"] > 0 and summary["lower_s"] > 0 and summary["xla_s"] > 0
    assert abs(summary["compile_s"] - (summary["trace_s"] + summary["lower_s"] +
                                       summary["xla_s"])) < 0.01  # fmt: skip
    assert any("<lambda>" in name for name, _ in summary["slowest"])
    # Closed: a later compile is not counted.
    _fresh_program(12)(jnp.ones(3)).block_until_ready()
    assert tally.summary()["programs"] == summary["programs"]


def test_a_compile_past_the_threshold_is_announced_then_timed():
    stream = io.StringIO()
    announcer = compile_log.Announcer(0.0, stream).install()

    def program_of_the_announcement_test(x):
        return jnp.sin(x) * 13.0

    try:
        jax.jit(program_of_the_announcement_test)(jnp.ones(3)).block_until_ready()
    finally:
        announcer.uninstall()
    lines = stream.getvalue().splitlines()
    name = "the program jit(program_of_the_announcement_test)"
    assert any(line.startswith(f"compiled {name} in ") for line in lines), lines
    # The package's big programs by what they are.
    assert compile_log.describe("jit(_arena)") == "the match arena"
    assert compile_log.describe("jit(meta_step)") == "the meta-training iteration"


def test_a_compile_under_the_threshold_or_said_by_the_caller_is_not_announced():
    stream = io.StringIO()
    announcer = compile_log.Announcer(60.0, stream).install()
    try:
        _fresh_program(14)(jnp.ones(3)).block_until_ready()
    finally:
        announcer.uninstall()
    assert stream.getvalue() == ""
    stream = io.StringIO()
    announcer = compile_log.Announcer(0.0, stream).install()
    try:
        with compile_log.said_by_caller():
            _fresh_program(15)(jnp.ones(3)).block_until_ready()
    finally:
        announcer.uninstall()
    assert stream.getvalue() == ""


def test_every_engine_program_is_announced_by_what_it_does():
    """The engine's compiled programs (its module's `jax.jit` functions) each have a name in
    the announcements, not `the program jit(_name)`."""
    from mmc_jax.evaluation import model_engine

    jitted = [
        name
        for name, value in vars(model_engine).items()
        if callable(value) and hasattr(value, "lower") and hasattr(value, "__wrapped__")
    ]
    assert len(jitted) >= 6
    unnamed = [n for n in jitted if compile_log.describe(f"jit({n})").startswith("the program")]
    assert not unnamed
