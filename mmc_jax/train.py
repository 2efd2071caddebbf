"""`python -m mmc_jax.train`: AlphaZero on one variant, or JOAT meta-training, resumable.

    python -m mmc_jax.train --config configs/joat.py:quick --workdir runs/joat     # meta-training
    python -m mmc_jax.train --config configs/gardner.py:cpu --workdir runs/gardner_cpu \\
        --config.variant=atomic
    python -m mmc_jax.train --config configs/gardner.py --workdir runs/gardner     # accelerator

`config.algorithm` names what is trained, one of `mmc_jax.algorithms.REGISTRY` (AlphaZero,
JOAT / Reptile, supervised, TD(λ), recon: configs/ has one file each), and this command names
none of them: every algorithm runs in the one loop of `mmc_jax.training.runloop.run`: a progress
line per iteration with an ETA, `metrics.jsonl`, TensorBoard events, PNG plots, orbax
checkpoints and the files its algorithm keeps in the workdir (JOAT: `tasks.txt`, every task
with its sampling weight); evaluation every `eval.every` iterations. Re-running the same
command resumes from the latest checkpoint (a finished workdir says so and trains nothing).
SIGTERM or Ctrl-C stop after the iteration in progress, which is checkpointed (during
start-up: before the first iteration). A
non-finite loss stops the run before anything of that iteration is saved, and a re-run resumes
from a step a finite iteration ran from. One run at a time per workdir: a second is refused,
naming the first (`runloop.workdir_lock`). `--init_from MODEL` starts a fresh workdir from a
model's parameters (a run's workdir, a checkpoint step, an exported model or a shipped name: a
supervised run's result into AlphaZero or JOAT, say) with a fresh optimizer state; the config's
network must have the same shape (a difference is named with the flag that fixes it), and a
resumed run ignores it. The workdir may be a bucket
(`--workdir gs://BUCKET/runs/joat`, with the `gcs` extra installed; docs/cloud.md).

Presets: the part after the colon (`configs/gardner.py:cpu`); the presets, their sizes and
their measured runtimes are in each config file's docstring. Without a preset, every config
picks `cpu` when no accelerator is present and says so. Every config field
can be overridden with `--config.<field>=<value>` (the config is locked: a misspelt field is
an error naming the nearest valid fields); `--help` lists them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
import ml_collections

from mmc_jax import algorithms, uci
from mmc_jax.infra import checkpoint as checkpoint_lib
from mmc_jax.infra import cli, storage
from mmc_jax.model import network as network_lib
from mmc_jax.training import runloop
from mmc_jax.uci import workers


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
    `iteration`, `start_iteration`, `compile_seconds` and `stopped` (see `runloop.run`). A
    signal (SIGTERM, Ctrl-C) ends the call early with `stopped` True: callers that go on to
    use the run as finished use `train_to_end`."""
    result = runloop.run(
        algorithm_for(config),
        config,
        workdir,
        devices=devices,
        stream=stream,
        init_params=init_params,
    )
    return result.record


Stopped = runloop.Stopped


def train_to_end(config: ml_collections.ConfigDict, workdir: str | os.PathLike, **kwargs):
    """`train`, raising `Stopped` when a signal ended the run early, so that a caller which
    exports, scores or marks the run done never takes a stopped run for a finished one."""
    record = train(config, workdir, **kwargs)
    if record["stopped"]:
        raise Stopped(f"{workdir}: stopped at iteration {record['iteration']}")
    return record


def start_from(init_from: str, config: ml_collections.ConfigDict) -> tuple[Any, str]:
    """(params, label) of the model at `init_from` (`checkpoint.load_model`: a workdir, a
    checkpoint step, an exported model or a shipped name) for a run of `config`.

    Raises:
      FileNotFoundError: no such model.
      ValueError: its network's shape differs from `config.network` (one line naming the
        fields, with the overrides that make them agree).
    """
    try:
        _, params, saved = checkpoint_lib.load_model(init_from)
    except ValueError as error:
        raise ValueError(f"--init_from {init_from}: {error}") from None
    theirs, ours = network_lib.shape_of(saved.network), network_lib.shape_of(config.network)
    differ = [name for name in theirs if theirs[name] != ours[name]]
    if differ:
        raise ValueError(
            f"--init_from {init_from}: its network differs from config.network in "
            + ", ".join(f"{n} ({theirs[n]}, the config's {ours[n]})" for n in differ)
            + "; start from a model of the same shape or pass "
            + " ".join(f"--config.network.{n}={theirs[n]}" for n in differ)
        )
    shipped = str(init_from) in checkpoint_lib.shipped_models()
    return params, f"--init_from {init_from if shipped else storage.absolute(init_from)}"


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
    init_from = flags.FLAGS.init_from
    if init_from:
        cli.check_model_path("--init_from", init_from)
    try:
        algorithm = algorithm_for(config)
        algorithm.prepare_config(config)
        params, label = start_from(init_from, config) if init_from else (None, "")
        cli.make_workdir(workdir)
        result = runloop.run(algorithm, config, workdir, init_params=params, init_label=label)
    except (ValueError, FloatingPointError, OSError, uci.EngineError) as error:
        cli.fail(str(error))
    except runloop.Interrupted:
        cli.exit_at_once(130)  # the run said what is kept
    except KeyboardInterrupt as stop:
        print("interrupted before training started; nothing was lost", file=sys.stderr)
        raise SystemExit(143 if isinstance(stop, workers.Terminated) else 130) from None
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
    flags.DEFINE_string(
        "init_from",
        None,
        "Start a fresh workdir from this model's parameters: a run's workdir, a checkpoint "
        "step, an exported model or a shipped name (e.g. a supervised run into "
        "configs/gardner.py); its network must have the config's shape. A resume ignores it.",
        flag_values=flag_values,
    )


if __name__ == "__main__":
    from absl import app

    define_flags()
    cli.define_distributed_flags()
    app.run(main, flags_parser=cli.absl_flags_parser(__doc__))
