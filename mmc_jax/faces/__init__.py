"""The rules' faces for other libraries, each over the Game contract (`mmc_jax.rules.contract`)
and each an optional extra:

- `pgx_env.make(spec)`: a pgx `Env` (`pip install 'mmc_jax[pgx]'`);
- `pettingzoo_env.env(spec)`: a PettingZoo AEC environment (`[pettingzoo]`);
- `openspiel_game`: registers the OpenSpiel game `mmc_minichess` (`[openspiel]`).

Import the module you need; this package imports none of them (their libraries are optional).
"""
