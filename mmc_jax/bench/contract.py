"""A training config made a compiled step through the Algorithm contract, as `train` makes it:
what `iteration`, `memory` and `compile` measure, for every registered learner alike.

A config is named by a spec, `configs/NAME.py:PRESET` (any config file, with its argument), or
`NAME:PRESET` for the checkout's `configs/NAME.py`, and changed by `--config.FIELD=VALUE`
overrides, loaded as `train` loads its `--config` (`ml_collections.config_flags`, locked: a
misspelt field fails). Then the algorithm the config names (`algorithms.algorithm_for`) takes it
the run loop's road (`runloop.run`): `prepare_config`, `make_mesh`, a batch of 0 filled as
`train` fills it (`runloop.fill_batch`), `load_data` (in a temporary workdir: a learner whose
data is engine games plays them there), `init_state` and `compile`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import pathlib
import shlex
import tempfile
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import flags
from jax.sharding import Mesh
from ml_collections import config_flags

from mmc_jax import algorithms
from mmc_jax.infra import checkpoint, cli, sharding
from mmc_jax.training import runloop
from mmc_jax.training.algorithm import Algorithm, CompiledStep

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
SPEC_HELP = "configs/NAME.py:PRESET (any config file and its argument) or NAME:PRESET"


def config_file(spec: str) -> str:
    """`PATH.py[:ARG]` of a spec: as given, or the checkout's `configs/NAME.py:PRESET` for
    `NAME:PRESET`. ValueError (one line) for anything else."""
    path, colon, arg = spec.partition(":")
    if path.endswith(".py"):
        return spec
    if not colon or not arg or not path or "/" in path:
        raise ValueError(f"{spec!r}: expected {SPEC_HELP}")
    return f"{CONFIGS / path}.py:{arg}"


def config_names() -> list[str]:
    """The names of the checkout's config files (`configs/NAME.py` that define `get_config`;
    not the package's `__init__` or the shared builders), sorted."""
    return sorted(
        path.stem
        for path in CONFIGS.glob("*.py")
        if "def get_config(" in path.read_text(encoding="utf-8")
    )


def overrides_of(text: str) -> list[str]:
    """The `--config.FIELD=VALUE` words of `text` (split as a shell splits them); ValueError
    (one line) for a word that is no such override."""
    words = shlex.split(text)
    for word in words:
        if not word.startswith("--config.") or "=" not in word:
            raise ValueError(f"{word!r} is no --config.FIELD=VALUE override")
    return words


def load_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """The config `spec` names with `overrides` applied, locked, as `train --config SPEC
    OVERRIDES...` loads it. ValueError (one line) for a missing file, a bad preset, an unknown
    field or a bad value."""
    file_and_arg = config_file(spec)
    path = file_and_arg.partition(":")[0]
    if not os.path.isfile(path):
        raise ValueError(f"{spec}: no such config file {path!r}")
    config = _parsed(spec, file_and_arg, [])
    fields = cli.config_fields(config)
    for override in overrides:
        name = override[len("--config.") :].partition("=")[0]
        if name not in fields and not any(f.startswith(f"{name}.") for f in fields):
            near = difflib.get_close_matches(name, fields, n=2)
            hint = f" (did you mean {' or '.join(near)}?)" if near else ""
            raise ValueError(f"{spec}: config has no field {name!r}{hint}")
    return _parsed(spec, file_and_arg, list(overrides)) if overrides else config


def _parsed(spec: str, file_and_arg: str, overrides: list[str]) -> ml_collections.ConfigDict:
    """`ml_collections.config_flags`' reading of `--config=FILE_AND_ARG OVERRIDES...`."""
    argv = ["bench", f"--config={file_and_arg}", *overrides]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "the config", flag_values=flag_values, lock_config=True, sys_argv=argv
    )
    try:
        with warnings.catch_warnings():  # ml_collections loads the file with load_module()
            warnings.simplefilter("ignore", DeprecationWarning)
            flag_values(argv)
            config = flag_values.config
            config.get("seed")  # a config file that failed to load raises here
    except Exception as error:  # config files raise what they like
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        text = lines[-1] if lines else type(error).__name__
        raise ValueError(" ".join([spec, *overrides]) + f": {text}") from None
    return config


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A config as the run loop starts it: its algorithm, the prepared config (its batch filled
    where it was 0) and the mesh."""

    algorithm: Algorithm
    config: ml_collections.ConfigDict
    mesh: Mesh

    @property
    def batch(self) -> dict[str, int]:
        """{the algorithm's batch field: its value}."""
        field = self.algorithm.batch_field
        return {field: runloop.batch_size(self.config, field)}


def prepare(spec: str, overrides: Sequence[str] = ()) -> Prepared:
    """`spec` with `overrides` prepared by its algorithm, on its mesh, with a batch of 0 filled
    as `train` fills it (`runloop.fill_batch`). ValueError (one line) for a config that
    cannot run."""
    config = load_config(spec, overrides)
    algorithm = algorithms.algorithm_for(config)
    config = algorithm.prepare_config(config)
    mesh = algorithm.make_mesh(config)
    config, _ = runloop.fill_batch(algorithm, config, mesh)
    field = algorithm.batch_field
    sharding.check_batch_divisible(runloop.batch_size(config, field), mesh.size, field)
    return Prepared(algorithm, config, mesh)


def load_data(prepared: Prepared, log: Callable[[str], None]) -> Any:
    """The run's data argument (`Algorithm.load_data`), made in a temporary workdir that is
    gone afterwards (what a learner keeps of it is in memory by then)."""
    with tempfile.TemporaryDirectory(prefix="mmc_bench_data_") as workdir:
        return prepared.algorithm.load_data(prepared.config, prepared.mesh, workdir, log)


def init_state(prepared: Prepared, data: Any, init_from: str = "") -> Any:
    """A fresh state (`Algorithm.init_state`, from the config's seed), its parameters those of
    the model at `init_from` when given (a run, an export, a shipped name: as `train
    --init_from` starts). ValueError (one line) for a model that does not fit."""
    algorithm, config, mesh = prepared.algorithm, prepared.config, prepared.mesh
    state = algorithm.init_state(config, mesh, data, jax.random.key(int(config.seed)))
    if init_from:
        try:
            params = algorithms.open_model(init_from).params
        except (OSError, ValueError) as error:
            raise ValueError(f"--init-from {init_from}: {error}") from None
        want, got = checkpoint.leaf_shapes(state.params), checkpoint.leaf_shapes(params)
        if want != got:
            raise ValueError(
                f"--init-from {init_from}: its parameters do not fit the config's network"
            )
        state = state.replace(
            params=jax.tree.map(
                lambda t, p: jax.device_put(np.asarray(p, t.dtype), t.sharding),
                state.params,
                params,
            )
        )
    return state


def compile_step(prepared: Prepared, state: Any, data: Any) -> CompiledStep:
    """The compiled iteration (`Algorithm.compile`), for `state` (or the abstract state) and
    `data`, starting at iteration 0."""
    return prepared.algorithm.compile(prepared.config, prepared.mesh, state, data, 0)


def iteration_key(config: ml_collections.ConfigDict, iteration: int) -> jax.Array:
    """The key of iteration `iteration` (the same in every arm, so arms play the same games
    where their configs allow it)."""
    return jax.random.fold_in(jax.random.key(int(config.seed)), iteration)
