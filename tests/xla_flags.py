"""The XLA flags the tests add to the commands' own (`mmc_jax.infra.startup`): XLA:CPU without LLVM
optimisation of the generated code, and with its older fusion emitters.

The tests' programs are compiled once and run briefly, so optimising them costs more than it
saves: the smoke iterations, each compiled in a fresh process on the 2-core CPU, took 23 s of CPU
time instead of 35 for AlphaZero's and 28 instead of 45 for JOAT's; the belief and fair-analysis
tests 37 s instead of 70. XLA:CPU's older fusion emitters
(`--xla_cpu_use_fusion_emitters=false`) compile the same programs with less work on top of that:
AlphaZero's `gardner:cpu` iteration's XLA compile took 5.4-6.3 s instead of 8.7-8.9 (14.8-17.2 s
of CPU time instead of 22.6-24.0; `bench compile --programs alphazero-iteration` with the other
two flags, alternating runs on the idle CPU), and `pytest -n 2 tests/search tests/model` from
an empty cache 265 s instead of 334, although the one test there that runs long rather than
compiles (the recon belief over thousands of games) ran 99 s instead of 65 (2026-12-07,
background jobs stopped). The flags change the rounding of some floats (last bits) and let
XLA:CPU's max flush a subnormal input to zero, so every process of a test must have them (the
children inherit XLA_FLAGS: a command's `startup` keeps the flags it finds, and so does
`launch.start_local`), and a test of the optimised program removes them (`without_test_flags`).
"""

from __future__ import annotations

TEST_XLA_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_use_fusion_emitters=false",
)


def _name(flag: str) -> str:
    return flag.split("=", 1)[0]


def with_test_flags(value: str) -> str:
    """`XLA_FLAGS` value `value` plus the tests' flags (a flag already in it wins)."""
    present = {_name(flag) for flag in value.split()}
    return " ".join([value, *(f for f in TEST_XLA_FLAGS if _name(f) not in present)]).strip()


def without_test_flags(value: str) -> str:
    """`XLA_FLAGS` value `value` without the tests' flags: what the commands compile with."""
    names = {_name(flag) for flag in TEST_XLA_FLAGS}
    return " ".join(flag for flag in value.split() if _name(flag) not in names)
