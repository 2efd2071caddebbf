"""`python -m mmc_jax.train`: AlphaZero on one variant, or JOAT meta-training, resumable.

    python -m mmc_jax.train --config configs/joat.py:quick --workdir runs/joat     # meta-training
    python -m mmc_jax.train --config configs/gardner.py:cpu --workdir runs/gardner_cpu \\
        --config.variant=atomic
    python -m mmc_jax.train --config configs/gardner.py --workdir runs/gardner     # accelerator

`config.algorithm` names what is trained (`mmc_jax.algorithms.REGISTRY`): "joat" (configs/joat.py)
trains `mmc_jax.algorithms.meta.ALGORITHM` (JOAT /
Reptile over several variants); any other config `mmc_jax.algorithms.alphazero.ALGORITHM`. Both run
in the one loop of `mmc_jax.training.runloop.run`: a progress line per iteration with an ETA,
`metrics.jsonl`, TensorBoard events, PNG plots and orbax checkpoints in the workdir (and for
meta-training `tasks.txt`, every task with its sampling weight);
evaluation every `eval.every` iterations. Re-running the same command resumes from the latest
checkpoint (a finished workdir says so and trains nothing). SIGTERM or Ctrl-C stop after the
iteration in progress, which is checkpointed (during start-up: before the first iteration). A
non-finite loss stops the run before anything of that iteration is saved, and a re-run resumes
from a step a finite iteration ran from. One run at a time per workdir: a second is refused,
naming the first (`runloop.workdir_lock`). The workdir may be a bucket
(`--workdir gs://BUCKET/runs/joat`, with the `gcs` extra installed; docs/cloud.md).

Presets: the part after the colon (`configs/gardner.py:cpu`); the presets, their sizes and
their measured runtimes are in each config file's docstring. Without a preset, configs/joat.py
and configs/gardner.py pick `cpu` when no accelerator is present and say so. Every config field
can be overridden with `--config.<field>=<value>` (the config is locked: a misspelt field is
an error naming the nearest valid fields); `--help` lists them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
import ml_collections

from mmc_jax import algorithms
from mmc_jax.algorithms import meta
from mmc_jax.infra import cli, storage
from mmc_jax.training import runloop


def is_meta_config(config: ml_collections.ConfigDict) -> bool:
    """A meta-training config (`config.algorithm` "joat", e.g. configs/joat.py)."""
    return algorithms.name_of(config) == meta.ALGORITHM.name


def algorithm_for(config: ml_collections.ConfigDict) -> runloop.Algorithm:
    """The algorithm `config.algorithm` names (`mmc_jax.algorithms.REGISTRY`)."""
    return algorithms.algorithm_for(config)


def train(
    config: ml_collections.ConfigDict,
    workdir: str | os.PathLike,
    *,
    devices=None,
    stream=sys.stdout,
    init_params: Any = None,
) -> dict[str, Any]:
    """Trains (or resumes) until `config.num_iterations`; returns the last metrics record plus
    `iteration`, `start_iteration` and `compile_seconds` (see `runloop.run`)."""
    result = runloop.run(
        algorithm_for(config),
        config,
        workdir,
        devices=devices,
        stream=stream,
        init_params=init_params,
    )
    return result.record


TASKS_FILE = "tasks.txt"


def write_task_list(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> str:
    """Writes a meta-training run's tasks (its variants after `prepare_config`, with their
    sampling weights), one a line, to `<workdir>/tasks.txt`; returns the file's path. The
    start-up and progress lines can then name a count and a few."""
    weights = meta.task_weights(config)
    lines = [f"# {len(config.variants)} tasks of {storage.absolute(workdir)}: weight, variant"]
    lines += [f"{weights[variant]:.4g}\t{variant}" for variant in config.variants]
    path = storage.join(workdir, TASKS_FILE)
    storage.write_atomically(path, "\n".join(lines) + "\n")
    return path


def main(argv) -> None:
    """absl entry point: train `FLAGS.config` in `FLAGS.workdir`."""
    from absl import flags

    cli.absl_start(argv)
    config = flags.FLAGS.config
    workdir = flags.FLAGS.workdir
    if config is None:
        cli.fail("--config is required, e.g. --config configs/joat.py:quick")
    if not workdir:
        cli.fail("--workdir is required, e.g. --workdir runs/joat")
    cli.check_workdir(workdir)
    try:
        algorithm = algorithm_for(config)
        algorithm.prepare_config(config)
        cli.make_workdir(workdir)
        if is_meta_config(config) and jax.process_index() == 0:
            write_task_list(config, workdir)
        result = runloop.run(algorithm, config, workdir)
    except (ValueError, FloatingPointError, OSError) as error:
        cli.fail(str(error))
    except KeyboardInterrupt:
        print("interrupted before training started; nothing was lost", file=sys.stderr)
        raise SystemExit(130) from None
    if not result.stopped and jax.process_index() == 0:
        where = storage.absolute(workdir)
        print(
            f"done: {where}/metrics.jsonl (metrics), {where}/plots/ (plots), "
            f"{where}/checkpoints/ (checkpoints)"
        )
        print(f"next: {algorithm.next_command(config, workdir)}")


def define_flags(flag_values=None) -> None:
    """Defines `--config` (an ml_collections config file, locked) and `--workdir`."""
    from absl import flags
    from ml_collections import config_flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Run config file, e.g. configs/joat.py:quick or configs/gardner.py:cpu; fields are "
        "overridden with --config.<field>=<value>.",
        flag_values=flag_values,
        lock_config=True,
    )
    flags.DEFINE_string(
        "workdir",
        None,
        "Run directory (checkpoints, metrics, plots); re-running resumes.",
        flag_values=flag_values,
    )


if __name__ == "__main__":
    from absl import app

    define_flags()
    cli.define_distributed_flags()
    app.run(main, flags_parser=cli.absl_flags_parser(__doc__))
