"""The training algorithms, by name: `config.algorithm` picks the one `runloop.run` runs.

    from mmc_jax import algorithms
    result = runloop.run(algorithms.algorithm_for(config), config, workdir)

Each entry is an `Algorithm` (the contract in `mmc_jax.training.algorithm`: AlphaZero on one
variant; JOAT / Reptile over the rule space) and owns the state it checkpoints. A third
learner is one module here and one entry in `REGISTRY`. Configs written before the field
existed (an old checkpoint's saved config) name their algorithm by their sections: a `meta`
section is JOAT's.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import ml_collections

from mmc_jax.algorithms import alphazero, meta, recon, supervised, td_lambda
from mmc_jax.infra import checkpoint

REGISTRY = {
    algorithm.name: algorithm
    for algorithm in (
        alphazero.ALGORITHM,
        meta.ALGORITHM,
        recon.ALGORITHM,
        supervised.ALGORITHM,
        td_lambda.ALGORITHM,
    )
}
# The config section an algorithm cannot run without (and no other algorithm reads): each
# algorithm declares its own (`Algorithm.section`).
SECTIONS = {name: a.section for name, a in REGISTRY.items() if a.section is not None}


def name_of(config: ml_collections.ConfigDict) -> str:
    """`config.algorithm`, or the algorithm its sections imply when it has no such field.

    Raises:
      ValueError: an unknown name (the message lists the known ones), or a config whose
        sections belong to another algorithm.
    """
    implied = next((name for name, section in SECTIONS.items() if section in config), None)
    implied = implied or alphazero.ALGORITHM.name
    name = config.get("algorithm") or implied
    if name not in REGISTRY:
        raise ValueError(f"config.algorithm={name!r} is unknown; one of {sorted(REGISTRY)}")
    if name != implied:
        needs = SECTIONS.get(name)
        why = (
            f"needs a `{needs}` section" if needs else f"cannot use a `{SECTIONS[implied]}` section"
        )
        raise ValueError(f"config.algorithm={name!r} {why}: this config is {implied!r}'s")
    return name


def algorithm_for(config: ml_collections.ConfigDict):
    """The `Algorithm` of `name_of(config)`."""
    return REGISTRY[name_of(config)]


def model_kind(config: ml_collections.ConfigDict) -> checkpoint.ModelKind:
    """The `ModelKind` of a saved config: its algorithm's (`Algorithm.model_kind`)."""
    return algorithm_for(config).model_kind(config)


def open_model(
    path: str | os.PathLike,
    step: int | None = None,
    *,
    warn: Callable[[str], None] | None = None,
) -> checkpoint.Model:
    """The model of any learner at `path` (a run, one of its steps, an export or a shipped
    model's name: `checkpoint.open_model`), its parameters read as its algorithm lays them out.
    The model's `network` is what its players need beside the parameters."""
    extra = {} if warn is None else {"warn": warn}
    return checkpoint.open_model(path, step, kind_of=model_kind, **extra)
