"""What every command does before its first computation: the project's XLA flags, then the
persistent compilation cache (`mmc_jax.infra.cache`).

`XLA_CPU_FLAGS` turns off the YNNPACK fusions through which jaxlib 0.10's CPU backend runs
convolutions and matrix products by default (`--xla_cpu_experimental_ynn_fusion_type=`, an
empty list of fusion kinds), so they run on XLA's own Eigen kernels. For this project's small
5x5 convolutions that is as fast or faster in every path measured on the 2-core CPU, each arm
in its own process, alternated (`python -m mmc_jax.bench xla-flags --rounds 2`, medians,
experiments/bench/README.md): the vmapped JOAT inner loop 2.24x, the looped one 1.39x, the
learner 1.27x, self-play 1.07x at B=256 and 1.02x at B=64 (within its run-to-run noise). The
flags affect only the CPU backend, so GPU and TPU runs
compile as before. They are added only for the jaxlib versions known to have them
(`XLA_CPU_FLAGS_JAXLIB`, 0.10 and 0.11): XLA aborts on a flag it does not know, so another
version runs with its own defaults.

XLA reads `XLA_FLAGS` when JAX first initialises a backend; importing jax or any mmc_jax
module computes nothing, so calling `apply_xla_flags()` at the top of a command's `main` is
early enough (a process that has already computed keeps the flags it started with). A flag the
caller already put in `XLA_FLAGS` wins over the project's; `MMC_XLA_FLAGS=off` (or `0`,
`false`, `no`) adds none, to compare or to rule the flags out.

`MMC_CPU_DEVICES=N` (or `auto`: one per core) splits the CPU into N JAX devices
(`--xla_force_host_platform_device_count`). XLA:CPU runs a program's small kernels one at a
time, so on one device the search's loops keep one core busy; with a device per core every
device plays its own games (`sharding.map_games`) and the learner splits its minibatches. On
the 2-core CPU a `configs/gardner.py:cpu` iteration took 5.5-5.8 s on 2 devices against
7.0-7.8 s on one (experiments/bench/README.md). Off by default: every batch size must then
divide by N. It affects only the CPU backend.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping, MutableMapping

from mmc_jax.infra import cache, compile_log

XLA_FLAGS_ENV = "MMC_XLA_FLAGS"
CPU_DEVICES_ENV = "MMC_CPU_DEVICES"
CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"
XLA_CPU_FLAGS = ("--xla_cpu_experimental_ynn_fusion_type=",)
XLA_CPU_FLAGS_JAXLIB = ((0, 10), (0, 11))  # (major, minor) versions that know the flags


def jaxlib_version() -> tuple[int, int] | None:
    """(major, minor) of the installed jaxlib, without importing it (None: unknown)."""
    try:
        major, minor = importlib.metadata.version("jaxlib").split(".")[:2]
        return int(major), int(minor)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0].strip()


def cpu_devices(environ: Mapping[str, str] | None = None) -> int | None:
    """The CPU device count `MMC_CPU_DEVICES` asks for (`auto`: the cores this process may
    use); None when it is unset or empty. Anything else exits with a one-line error."""
    environ = os.environ if environ is None else environ
    value = environ.get(CPU_DEVICES_ENV, "").strip().lower()
    if not value:
        return None
    if value == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise SystemExit(f"error: {CPU_DEVICES_ENV}={value!r}: use a positive integer or 'auto'")


def xla_flags_value(
    environ: Mapping[str, str] | None = None, jaxlib: tuple[int, int] | None = None
) -> str | None:
    """The `XLA_FLAGS` value with the project's flags added (None: nothing to add, because
    `MMC_XLA_FLAGS` is off, `jaxlib` (default: the installed version) is not one of
    `XLA_CPU_FLAGS_JAXLIB`, or every flag is already there, under any value), and the CPU
    device count of `MMC_CPU_DEVICES` (whatever `MMC_XLA_FLAGS` and jaxlib say)."""
    environ = os.environ if environ is None else environ
    jaxlib = jaxlib_version() if jaxlib is None else jaxlib
    wanted = []
    off = environ.get(XLA_FLAGS_ENV, "").strip().lower() in cache.OFF_WORDS
    if not off and jaxlib in XLA_CPU_FLAGS_JAXLIB:
        wanted.extend(XLA_CPU_FLAGS)
    devices = cpu_devices(environ)
    if devices is not None:
        wanted.append(f"{CPU_DEVICES_FLAG}={devices}")
    current = environ.get("XLA_FLAGS", "")
    present = {_flag_name(word) for word in current.split()}
    missing = [flag for flag in wanted if _flag_name(flag) not in present]
    if not missing:
        return None
    return " ".join([current.strip(), *missing]).strip()


def apply_xla_flags(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Puts the project's flags into `environ["XLA_FLAGS"]` (default `os.environ`); returns the
    new value, or None when nothing changed (see `xla_flags_value`)."""
    environ = os.environ if environ is None else environ
    value = xla_flags_value(environ)
    if value is not None:
        environ["XLA_FLAGS"] = value
    return value


def start() -> str | None:
    """The start of a command: `apply_xla_flags()`, then `cache.enable_compilation_cache()` and
    the announcement of slow compiles (`compile_log.announce_slow_compiles`); returns the cache
    directory (None: off)."""
    apply_xla_flags()
    compile_log.announce_slow_compiles()
    return cache.enable_compilation_cache()
