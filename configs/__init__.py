"""Run configs: one file per algorithm, and what they all share, said here once.

Load a config by file (`python -m mmc_jax.train --config configs/joat.py:quick`) or as a module
(`from configs import joat; joat.get_config("quick")`). Each file's docstring gives only its
own: what it trains, its presets with their sizes, runtimes and results, its switches.

- `configs/<name>.py` defines `get_config(arg=None)`, which returns a locked `ConfigDict`;
  `config.algorithm` names its entry in `mmc_jax.algorithms.REGISTRY`.
- The preset is the part after the colon (`configs/joat.py:quick`; the file's `PRESETS`).
  Without one: `full` on an accelerator, `cpu` (with a note on stderr) on a CPU-only machine;
  `default` is `full`. `full` is sized for one accelerator (H100 class), `cpu` for a 2-core
  CPU; `smoke` is the tests' run and learns nothing.
- Any field can be overridden with `--config.<field>=<value>` (`--config.variant=atomic`); the
  config is locked, so a misspelt field is an error; `python -m mmc_jax.train --help` lists
  every field.
- Re-running a command on the same workdir resumes it.
- The header of every file: `configs.common` imported (or, for a config loaded by file path
  from outside the repository root, loaded from the `common.py` beside it), then
  `common.preset(arg, "configs/<name>.py", PRESETS)`. `configs.common` holds the builders the
  presets compose (network sizes, self-play, learner, evaluation, checkpoints).
"""
