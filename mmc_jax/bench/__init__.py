"""Benchmarks: `python -m mmc_jax.bench NAME` (`__main__`), one module per benchmark.

    env         random-play env steps per second, against pgx (`env`)
    selfplay    self-play moves per second with the search, against pgx (`selfplay`)
    learner     the learner's and JOAT's inner loop's steps per second (`learner`)
    iteration   seconds per training iteration of any learner, through its compiled step
    memory      XLA's memory analysis of one training iteration, compiled, never run
    processes   the overhead of several processes joined by gloo
    xla-flags   the project's XLA flags against XLA's defaults
    move        seconds per engine move of models side by side
    compile     compile seconds and program sizes of every program, from an empty cache

Shared: `common` (rows written as they are measured, the round-robin timers, the flags),
`programs` (the random-play and self-play programs over mmc_jax and pgx), `contract` (a config
made a compiled step through the Algorithm contract, for `iteration`, `memory` and `compile`).
Each module's docstring says what it measures and how. Nothing is imported here, so that
`python -m mmc_jax.bench.compile PROGRAM` (the compile benchmark's child) starts clean.
"""
