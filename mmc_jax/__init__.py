"""mmc_jax: JAX-native meta-learning across 5x5 minichess rule variants."""

__version__ = "0.1.0"
