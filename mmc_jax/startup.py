"""What every command does before its first computation: the project's XLA flags, then the
persistent compilation cache (`mmc_jax.cache`).

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
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping, MutableMapping

from mmc_jax import cache

XLA_FLAGS_ENV = "MMC_XLA_FLAGS"
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


def xla_flags_value(
    environ: Mapping[str, str] | None = None, jaxlib: tuple[int, int] | None = None
) -> str | None:
    """The `XLA_FLAGS` value with the project's flags added (None: nothing to add, because
    `MMC_XLA_FLAGS` is off, `jaxlib` (default: the installed version) is not one of
    `XLA_CPU_FLAGS_JAXLIB`, or every flag is already there, under any value)."""
    environ = os.environ if environ is None else environ
    jaxlib = jaxlib_version() if jaxlib is None else jaxlib
    if environ.get(XLA_FLAGS_ENV, "").strip().lower() in cache.OFF_WORDS:
        return None
    if jaxlib not in XLA_CPU_FLAGS_JAXLIB:
        return None
    current = environ.get("XLA_FLAGS", "")
    present = {_flag_name(word) for word in current.split()}
    missing = [flag for flag in XLA_CPU_FLAGS if _flag_name(flag) not in present]
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
    """The start of a command: `apply_xla_flags()`, then `cache.enable_compilation_cache()`;
    returns the cache directory (None: off)."""
    apply_xla_flags()
    return cache.enable_compilation_cache()
