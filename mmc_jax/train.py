"""`python -m mmc_jax.train`: AlphaZero on one variant, or JOAT meta-training, resumable.

    python -m mmc_jax.train --config configs/joat.py:quick --workdir runs/joat     # meta-training
    python -m mmc_jax.train --config configs/gardner.py:cpu --workdir runs/gardner_cpu \\
        --config.variant=atomic
    python -m mmc_jax.train --config configs/gardner.py --workdir runs/gardner     # accelerator

A config with a `meta` section (configs/joat.py) trains `mmc_jax.meta.ALGORITHM` (JOAT /
Reptile over several variants); any other config `mmc_jax.alphazero.ALGORITHM`. Both run in
the one loop of `mmc_jax.runloop.run`: a progress line per iteration with an ETA,
`metrics.jsonl`, TensorBoard events, PNG plots and orbax checkpoints in the workdir;
evaluation every `eval.every` iterations. Re-running the same command resumes from the latest
checkpoint (a finished workdir says so and trains nothing). SIGTERM or Ctrl-C stop after the
iteration in progress, which is checkpointed. A non-finite loss stops the run before anything of
that iteration is saved.

Presets: the part after the colon (`configs/gardner.py:cpu`); the presets, their sizes and
their measured runtimes are in each config file's docstring. Without a preset, configs/joat.py
and configs/gardner.py pick `cpu` when no accelerator is present and say so. Every config field
can be overridden with `--config.<field>=<value>` (the config is locked: a misspelt field is
an error naming the nearest valid fields); `--help` lists them.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
from typing import Any

import ml_collections

from mmc_jax import alphazero, meta, runloop


def is_meta_config(config: ml_collections.ConfigDict) -> bool:
    """A meta-training config (it has a `meta` section, e.g. configs/joat.py)."""
    return "meta" in config


def algorithm_for(config: ml_collections.ConfigDict) -> runloop.Algorithm:
    """`meta.ALGORITHM` for a config with a `meta` section, else `alphazero.ALGORITHM`."""
    return meta.ALGORITHM if is_meta_config(config) else alphazero.ALGORITHM


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


def config_fields(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """Every leaf field of `config` as a dotted name (`selfplay.batch_size`, ...)."""
    names = []
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            names.extend(config_fields(value, f"{prefix}{key}."))
        else:
            names.append(f"{prefix}{key}")
    return names


def _config_help(config: ml_collections.ConfigDict | None) -> str:
    if config is None:
        return "(give --config to list its fields)"
    lines = []
    for name in config_fields(config):
        node: Any = config
        for part in name.split("."):
            node = node[part]
        lines.append(f"  --config.{name}={node!r}")
    return "\n".join(lines)


def _nearest(name: str, config: ml_collections.ConfigDict | None) -> str:
    if config is None:
        return ""
    close = difflib.get_close_matches(name, config_fields(config), n=3, cutoff=0.5)
    return f"; did you mean {', '.join('config.' + c for c in close)}?" if close else ""


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _config_file_flag(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _load_config_quietly(path_and_arg: str | None) -> ml_collections.ConfigDict | None:
    """The config a `--config FILE[:ARG]` names, or None when it cannot be loaded (only for
    `--help` and hints: the real load reports its own error)."""
    if not path_and_arg:
        return None
    path, _, arg = path_and_arg.partition(":")
    try:
        spec = importlib.util.spec_from_file_location("_mmc_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.get_config(arg) if arg else module.get_config()
    except Exception:
        return None


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing with one-line errors: a misspelt `--config.` field names the nearest
    valid ones, a bad config file or value says what is wrong; `--help` lists the fields."""
    from absl import flags

    if "--help" in argv or "-h" in argv or "--helpfull" in argv:
        config = _load_config_quietly(_config_file_flag(argv[1:]))
        print(__doc__)
        print("Flags:\n  --config FILE[:PRESET]   run config")
        print("  --workdir DIR            run directory")
        print("  --coordinator_address, --num_processes, --process_id   multi-process runs")
        print("\nConfig fields (override with --config.<field>=<value>):")
        print(_config_help(config))
        raise SystemExit(0)
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        missing = [a for a in argv[1:] if a.startswith("--config.")]
        config = _load_config_quietly(_config_file_flag(argv[1:]))
        hint = ""
        for arg in missing:
            name = arg[len("--config.") :].split("=", 1)[0]
            if config is not None and name not in config_fields(config):
                hint = _nearest(name, config)
                text = f"config has no field {name!r}"
                break
        _fail(text + hint)
    except Exception as error:  # config files raise what they like (ValueError, KeyError...)
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        _fail(f"--config: {text}")
    return []


def main(argv) -> None:
    """absl entry point: train `FLAGS.config` in `FLAGS.workdir`."""
    from absl import flags, logging

    if len(argv) > 1:
        _fail(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    config = flags.FLAGS.config
    workdir = flags.FLAGS.workdir
    if config is None:
        _fail("--config is required, e.g. --config configs/joat.py:quick")
    if not workdir:
        _fail("--workdir is required, e.g. --workdir runs/joat")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        _fail(f"--workdir {workdir} is a file, not a directory")
    algorithm = algorithm_for(config)
    try:
        algorithm.prepare_config(config)
        os.makedirs(workdir, exist_ok=True)
        if not os.access(workdir, os.W_OK):
            _fail(f"--workdir {workdir} is not writable")
        result = runloop.run(algorithm, config, workdir)
    except (ValueError, FloatingPointError, OSError) as error:
        _fail(str(error))
    except KeyboardInterrupt:
        print("interrupted before training started; nothing was lost", file=sys.stderr)
        raise SystemExit(130) from None
    if not result.stopped:
        where = os.path.abspath(workdir)
        print(
            f"done: {where}/metrics.jsonl (metrics), {where}/plots/ (plots), "
            f"{where}/checkpoints/ (checkpoints)"
        )
        if is_meta_config(config):
            held_out = [v for v in str(config.get("holdout", "")).split(",") if v] or ["dark"]
            print(
                "next: python -m mmc_jax.adapt "
                f"--variant {held_out[0]} --init_from {workdir} --workdir runs/adapt_{held_out[0]}"
            )
        else:
            print(
                f"next: python -m mmc_jax.evaluate --checkpoint {workdir} "
                f"--variant {config.variant} --opponent greedy --games 400"
            )


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
    app.run(main, flags_parser=parse_flags)
