"""Where the project keeps what it builds once and reuses: engines and compiled XLA programs.

`cache_root()` is `$MMC_CACHE`, else `$XDG_CACHE_HOME/mmc_jax`, else `~/.cache/mmc_jax`.

`enable_compilation_cache()` turns on JAX's persistent compilation cache in `cache_root()/xla`,
so a command that compiles a program it compiled before (a resumed run, a second evaluation of a
checkpoint, a study re-run) loads the executable instead of compiling it: on this 2-core CPU the
`gardner:smoke` iteration compiled in 92.9 s the first time and 27.6 s (tracing and lowering,
which no cache saves) the second. The cache holds executables of programs that took at least a
second to compile, keyed by JAX on the program, the compile options and the devices, so a hit is
the executable the compiler would have produced.

`MMC_COMPILE_CACHE=off` (or `0`, `false`, `no`) turns it off; `MMC_COMPILE_CACHE=DIR` puts it in
DIR. JAX's own `JAX_COMPILATION_CACHE_DIR`, when set, wins. `bench` never enables it: it reports
compile times. A multi-process run never enables it either: one process loaded a program from the
cache while another compiled it, and the first then waited in a collective past gloo's 30-second
deadline (a relaunched 2-process `train` failed that way in `tests/training/test_multiprocess.py`).
JAX's own remedy, `jax_share_binary_between_hosts` (process 0 compiles and hands the executable
to the others through the coordination service), does not work on the CPU: tried on 2026-11-28
with jax 0.10.2 (2 processes x 2 CPU devices, one jitted program over the global mesh), the
processes computed different cache keys for the same program (the compile options' and the
devices' hashes differ per process), so process 1 waited for a key process 0 never wrote, and
process 0 timed out in gloo. So the multi-process tests compile in every process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

COMPILE_CACHE_ENV = "MMC_COMPILE_CACHE"
OFF_WORDS = ("off", "0", "false", "no")


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$MMC_CACHE`, else `$XDG_CACHE_HOME/mmc_jax`, else `~/.cache/mmc_jax`."""
    environ = os.environ if environ is None else environ
    if environ.get("MMC_CACHE"):
        return Path(environ["MMC_CACHE"]).expanduser()
    base = environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "mmc_jax"


def compilation_cache_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """The directory `enable_compilation_cache` uses (None: off, or left to JAX's variable)."""
    environ = os.environ if environ is None else environ
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    setting = environ.get(COMPILE_CACHE_ENV, "").strip()
    if setting.lower() in OFF_WORDS:
        return None
    if setting:
        return str(Path(setting).expanduser())
    return str(cache_root(environ) / "xla")


def enable_compilation_cache(environ: Mapping[str, str] | None = None) -> str | None:
    """Point JAX's persistent compilation cache at `compilation_cache_dir()`; returns the
    directory, or None when it stays off (or JAX's own variable chose it, or this is one process
    of several: see the module docstring). Call it before the first compilation; a directory
    that cannot be created leaves the cache off (the command still runs, it only compiles
    again)."""
    import jax

    directory = compilation_cache_dir(environ)
    if directory is None or jax.distributed.is_initialized():
        return None
    first_use = not os.path.isdir(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    if not os.access(directory, os.W_OK):
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    if first_use:  # once per machine: where the programs go, and how to keep none
        print(
            f"note: compiled programs are kept in {directory}, so later starts load them "
            f"({COMPILE_CACHE_ENV}=off keeps none, {COMPILE_CACHE_ENV}=DIR puts them in DIR)",
            file=sys.stderr,
            flush=True,
        )
    return directory
