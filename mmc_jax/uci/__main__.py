"""`python -m mmc_jax.uci ...` (see `mmc_jax.uci.cli`)."""

import sys

from mmc_jax.uci.cli import main

sys.exit(main())
