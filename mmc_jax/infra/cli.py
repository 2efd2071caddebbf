"""Shared pieces of the command-line tools: argparse types and model loading with one-line
errors (argparse prints `usage` and the error, and exits 2)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib.util
import io
import os
import pathlib
import sys
import textwrap
from typing import Any

import ml_collections
from etils import epath

from mmc_jax import rules as R
from mmc_jax.infra import cache, checkpoint, compile_log, startup, storage

VARIANT_HELP = (
    f"a variant spec: a name ({', '.join(R.VARIANTS)}), a name with overrides "
    "('gardner,capture=atomic'), or overrides alone (docs/rules.md, 'The rule space')"
)


def variant_arg(name: str) -> str:
    """argparse type: a variant spec, returned in its canonical spelling."""
    try:
        return R.check_variant(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def any_variant_arg(name: str) -> str:
    """argparse type: a variant spec, sensing variants (`fog=sense:W`) included, canonical
    (for the commands that play both games: evaluate, play)."""
    try:
        return R.check_variant(name, sensing=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def games_arg(text: str) -> int:
    try:
        games = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--games must be an integer, got {text!r}") from None
    if games <= 0:
        raise argparse.ArgumentTypeError(f"--games must be positive, got {games}")
    if games % 2:
        raise argparse.ArgumentTypeError(
            f"--games must be even (the model plays half the games as White), got {games}"
        )
    return games


def integer_arg(flag: str, minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if value < minimum:
            kind = {1: "positive", 0: "non-negative"}.get(minimum, f">= {minimum}")
            raise argparse.ArgumentTypeError(f"{flag} must be {kind}, got {value}")
        return value

    return parse


def add_integer(parser, flag: str, minimum: int, **kwargs) -> argparse.Action:
    """Adds the integer option `flag` to `parser` (`integer_arg(flag, minimum)`: a value below
    `minimum` is a one-line usage error naming `flag`); `kwargs` go to `add_argument`, whose
    action it returns."""
    return parser.add_argument(flag, type=integer_arg(flag, minimum), **kwargs)


def positive_float_arg(flag: str):
    """An argparse type: a number > 0, else a one-line usage error naming `flag`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be positive, got {value}")
        return value

    return parse


def load_or_fail(parser, path: str, step: int | None, flag: str):
    """(network, params, config) of `open_or_fail`."""
    model = open_or_fail(parser, path, step, flag)
    return model.network, model.params, model.config


def open_or_fail(
    parser, path: str, step: int | None, flag: str, opener=checkpoint.open_model
) -> checkpoint.Model:
    """`opener(path, step)` (default `checkpoint.open_model`; any learner's model:
    `mmc_jax.algorithms.open_model`), or an argparse error naming `flag` (one line)."""
    try:
        return opener(path, step)
    except (FileNotFoundError, ValueError, storage.MissingPackage) as error:
        parser.error(f"{flag} {path}: {error}")


def fail(message: str, status: int = 2) -> None:
    """Prints `error: message` alone on stderr and exits with `status` (no traceback)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(status)


def exit_at_once(status: int = 130) -> None:
    """Flushes stdout and stderr and ends the process now, skipping Python's shutdown: after
    a second Ctrl-C an iteration may still run in XLA's threads, and tearing the interpreter
    down under it crashed (exit -11). Call it only once everything worth keeping is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _refuse_bucket(parser, flag: str, path: str) -> None:
    # These outputs are written with `open`; only run directories (--workdir) may be buckets.
    if storage.is_remote(path):
        parser.error(
            f"{flag} {path}: only a local path is supported here; write it locally and copy it "
            "(gcloud storage cp -r)"
        )


def check_output_folder(parser, flag: str, folder: str) -> None:
    """Refuses (argparse error) an output folder that cannot be created or written, before any
    game is played: a bucket, a file in its place, or a parent that is not writable."""
    _refuse_bucket(parser, flag, folder)
    folder = os.path.abspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        parser.error(f"{flag} {folder} is a file, not a folder")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        parser.error(f"{flag} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK):
        parser.error(f"{flag} {folder}: {existing} is not writable")


def check_output_file(parser, flag: str, path: str) -> None:
    """Refuses (argparse error) an output file in a bucket, whose folder is missing or that is a
    folder, before any game is played."""
    _refuse_bucket(parser, flag, path)
    path = os.path.abspath(path)
    if os.path.isdir(path):
        parser.error(f"{flag} {path} is a folder, not a file")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        parser.error(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        parser.error(f"{flag} {path}: the folder {folder} is not writable")


# ---------------------------------------------------------------------------------------------
# absl CLIs (train, adapt): run directories and config-file flags with one-line errors


def checked_path(flag: str, path: str) -> epath.Path:
    """`path` as an `epath.Path`; fails (one line) for a `gs://` path without the `gcs` extra."""
    try:
        return storage.to_path(path)
    except storage.MissingPackage as error:
        fail(f"{flag} {path}: {error}")


def check_model_path(flag: str, path: str) -> None:
    """Fails (one line, with a "did you mean" for a misspelt shipped name) when `path` is
    neither an exported model (or a shipped model's name) nor a directory."""
    folder = checked_path(flag, path)
    if not checkpoint.is_exported(path) and not folder.is_dir():
        fail(f"{flag} {path}: no such checkpoint directory{checkpoint.shipped_hint(path)}")


def check_workdir(workdir: str) -> None:
    """Fails (one line) for a `--workdir` that cannot hold a run: a `gs://` one without the
    `gcs` extra installed, a file in its place, or an exported model's folder."""
    path = checked_path("--workdir", workdir)
    if path.exists() and not path.is_dir():
        fail(f"--workdir {workdir} is a file, not a directory")
    exported = (path / checkpoint.EXPORT_FILE).is_file()
    if exported and not (path / checkpoint.CHECKPOINT_SUBDIR).is_dir():
        fail(
            f"--workdir {workdir} holds an exported model ({checkpoint.EXPORT_FILE}): a run "
            "there would be confused with it; pass another --workdir"
        )


def make_workdir(workdir: str) -> None:
    """Creates `--workdir` and fails (one line) when files cannot be written into it."""
    storage.to_path(workdir).mkdir(parents=True, exist_ok=True)
    reason = storage.unwritable_reason(workdir)
    if reason:
        fail(f"--workdir {workdir} {reason}")


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


def _unknown_flag_hint(flag: str | None, config: ml_collections.ConfigDict | None) -> str:
    """For an unknown `--flag`: the config fields it may mean (`--iterations` ->
    `--config.num_iterations`), and where every flag and field is listed."""
    if not flag:
        return ""
    fields = config_fields(config) if config is not None else []
    by_last = {field.rsplit(".", 1)[-1]: field for field in fields}
    close = [field for field in fields if field.rsplit(".", 1)[-1] == flag]
    close += [
        by_last[name]
        for name in difflib.get_close_matches(flag, list(by_last), n=3, cutoff=0.6)
        if by_last[name] not in close
    ]
    close += [field for field in fields if flag in field and field not in close][:2]
    where = "--help lists the flags" + (" and the config fields" if config is not None else "")
    if close:
        close.sort(key=lambda field: field.count("."))  # the top-level fields first
        fixes = ", ".join(f"--config.{field}" for field in close[:3])
        return f"; a config field is set with --config.<field>: did you mean {fixes}? ({where})"
    return f" ({where})"


def _nearest(name: str, config: ml_collections.ConfigDict | None) -> str:
    if config is None:
        return ""
    close = difflib.get_close_matches(name, config_fields(config), n=3, cutoff=0.5)
    return f"; did you mean {', '.join('config.' + c for c in close)}?" if close else ""


def _config_file_flag(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def load_preset(name: str, preset: str) -> ml_collections.ConfigDict:
    """`configs/<name>.py:<preset>` of the project's checkout (benchmarks; commands load their
    `--config` through absl's flag)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "configs" / f"{name}.py"
    return _config_module(path).get_config(preset)


def _config_module(path: str | os.PathLike):
    """The config file at `path`, executed as a module."""
    spec = importlib.util.spec_from_file_location("_mmc_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_config_quietly(path_and_arg: str | None) -> ml_collections.ConfigDict | None:
    """The config a `--config FILE[:ARG]` names, or None when it cannot be loaded (only for
    `--help` and hints: the real load reports its own error)."""
    if not path_and_arg:
        return None
    path, _, arg = path_and_arg.partition(":")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its notes come with the real load
            module = _config_module(path)
            return module.get_config(arg) if arg else module.get_config()
    except Exception:
        return None


LIBRARY_FLAG_MODULES = ("absl", "chex", "orbax", "jax", "flax", "etils", "tensorflow")


def flag_help_lines(flag_values=None) -> list[str]:
    """`--name (default: value)` and its help, for every flag the command defined (those of
    absl and the libraries, such as --verbosity, left out; `--helpfull` lists them all)."""
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    lines, seen = [], set()
    for module, defined in flag_values.flags_by_module_dict().items():
        if module.startswith(LIBRARY_FLAG_MODULES):
            continue
        for flag in defined:
            if flag.name in seen:
                continue
            seen.add(flag.name)
            default = flag.default
            if isinstance(default, (list, tuple)):
                default = ",".join(str(x) for x in default) or "none"
            shown = "" if default is None else f" (default: {default})"
            lines.append(f"  --{flag.name}{shown}")
            lines.extend(
                textwrap.wrap(str(flag.help), 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
            )
    return lines


def absl_flags_parser(doc: str):
    """An absl `flags_parser` with one-line errors: a misspelt `--config.` field names the
    nearest valid ones, a bad config file or value says what is wrong; `--help` prints `doc`,
    the flags and the fields of the given `--config`."""
    return functools.partial(_parse_flags, doc)


def _parse_flags(doc: str, argv: list[str]) -> list[str]:
    from absl import flags

    if "--help" in argv or "-h" in argv or "--helpfull" in argv:
        config = _load_config_quietly(_config_file_flag(argv[1:]))
        print(doc)
        print("Flags:")
        print("\n".join(flag_help_lines()))
        print("\nConfig fields (override with --config.<field>=<value>):")
        print(_config_help(config))
        raise SystemExit(0)
    given = _config_file_flag(argv[1:])
    if given is not None:
        path = given.split(":", 1)[0]
        if not os.path.isfile(path):
            fail(f"--config {given}: no such config file {path!r}")
        config = _load_config_quietly(given)
        for arg in argv[1:]:
            if not arg.startswith("--config."):
                continue
            name = arg[len("--config.") :].split("=", 1)[0]
            if config is not None and name not in config_fields(config):
                known = {f.rsplit(".", 1)[0] for f in config_fields(config)}
                if name not in known:  # a whole section may be overridden by its fields only
                    fail(f"config has no field {name!r}" + _nearest(name, config))
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        text = lines[0] if lines else type(error).__name__
        if text.endswith(":") and len(lines) > 1:
            text = f"{text} {lines[-1]}"
        missing = [a for a in argv[1:] if a.startswith("--config.")]
        config = _load_config_quietly(_config_file_flag(argv[1:]))
        hint = _unknown_flag_hint(getattr(error, "flagname", None), config)
        for arg in missing:
            name = arg[len("--config.") :].split("=", 1)[0]
            if config is not None and name not in config_fields(config):
                hint = _nearest(name, config)
                text = f"config has no field {name!r}"
                break
        fail(text + hint)
    except Exception as error:  # config files raise what they like (ValueError, KeyError...)
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        fail(f"--config: {lines[-1] if lines else type(error).__name__}")
    return []


def define_distributed_flags() -> None:
    """The multi-process flags (`--coordinator_address`, `--num_processes`, `--process_id`)."""
    from mmc_jax.infra import distributed

    distributed.define_flags()


def absl_start(argv: list[str]) -> None:
    """The start of an absl `main`: no stray arguments, the project's XLA flags
    (`startup.apply_xla_flags`), the multi-process runtime when the command line or the cluster
    asks for it (before any other JAX call), the compilation cache, and orbax's INFO logs off
    unless `--verbosity` is given. Errors are one line (`fail`)."""
    from absl import flags, logging

    from mmc_jax.infra import distributed

    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    startup.apply_xla_flags()  # before anything initialises a backend
    try:
        distributed.initialize_from_flags()
    except (ValueError, RuntimeError) as error:
        fail(f"multi-process start-up: {error}")
    compile_log.announce_slow_compiles()
    cache.enable_compilation_cache()
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
