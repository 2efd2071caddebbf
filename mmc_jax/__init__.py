"""mmc_jax: JAX-native meta-learning across 5x5 minichess rule variants.

The commands are the modules at the top (`python -m mmc_jax.train`, ...); the library is in parts
below them (`mmc_jax.rules`, `.model`, `.infra`, `.search`, `.uci`, `.training`, `.evaluation`,
`.algorithms`; README.md's layout). A library module is imported by its part's name
(`from mmc_jax.infra import startup`); the flat names of before 2026-11-26 are gone.
"""

from __future__ import annotations

__version__ = "0.1.0"
