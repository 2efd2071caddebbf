"""The rules' caches hold concrete values: a variant first built inside a trace (as
`alphazero`'s `eval_shape` over `R.batch` does) is usable outside it afterwards."""

import jax

from mmc_jax import rules as R

# A spelling no other test builds, so this test is its first use in the session.
SPEC = "start=shuffle:233,capture=rifle,goal=king,colour=other"


def test_a_variant_first_built_inside_a_trace_is_concrete_afterwards():
    jax.eval_shape(lambda: R.batch(SPEC, 2))
    rules = R.get(SPEC)
    assert not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(rules))
    # The study's crash: meta-training's task sampling after an AlphaZero run (a leaked tracer).
    assert R.is_playable(SPEC) in (True, False)
