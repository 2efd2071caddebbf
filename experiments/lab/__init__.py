"""The lab floor: what every study script stands on, so that a script holds its protocol and
nothing else.

    runner    the CPU-budget runner: an arm's stages as `python -m mmc_jax.train` children,
              each stopped when the CPU time of its process tree reaches its share; `park`
              and `unpark`, a stopped run committed to git and resumed on a fresh clone
    archive   runs as tar.gz archives, the one format (`pack`, `unpack`): parked runs, an
              accelerator's pretraining brought back to the CPU
    stats     the registered-protocol statistics: Student t intervals, minimum detectable
              effects, the seeds a target MDE needs; the package's Wilson and normal
              intervals and Elo difference, under those names
    report    report helpers: timestamped logs, intervals and paired differences as text,
              figures without pyplot

Import it as `from experiments.lab import stats` (the scripts add the repository root to
`sys.path` first). It imports the package lazily where the package needs JAX.
"""
