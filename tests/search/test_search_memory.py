"""The compiled search grows linearly with its simulations (issue 52, item 1).

The page's 1,024 simulations used to take the server past 9 GiB while compiling: the backup's
value recurrence and the "nodes" walk's key chain were Python loops over the levels of a path,
up to `max_depth` (the number of simulations) long, whose results were stacked into one array.
XLA fused each level's whole chain into that array, so the program (and the compiler's memory
and time) grew with the square of the simulations: 1,970 lines of optimized HLO for the backup
at 16 simulations, 300,660 at 256 (4 minutes, 2 GiB of compiler memory). Both are `lax.scan`s
now. The check: XLA's compile-time analysis of the search at 32 and at 64 simulations (one
game, a toy network), the program's buffers and the program itself; before the fix its size
grew 3.5x per doubling. Nothing is run and nothing is timed.
"""

from __future__ import annotations

import jax
import pytest
from test_mcts import toy_recurrent_fn, toy_root

from mmc_jax.search import mcts

ACTIONS = 8
# Doubling the simulations doubles the tree: at most 2x, with this much room for the
# fixed-size parts (the root's arrays, the network) shrinking in share.
LINEAR = 2.3


def _analysis(walk: str, simulations: int):
    """(bytes: arguments + outputs + temporaries, characters of optimized HLO) of one
    compiled Gumbel search of one game."""
    recurrent_fn = toy_recurrent_fn(ACTIONS)
    root, invalid = toy_root(ACTIONS, 0)
    root = jax.tree.map(lambda x: x[:1], root)

    def run(params, key, root, invalid):
        return mcts.gumbel_muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=simulations,
            invalid_actions=invalid,
            walk=walk,
        )

    compiled = jax.jit(run).lower(jax.random.key(1), jax.random.key(2), root, invalid[:1]).compile()
    stats = compiled.memory_analysis()
    size = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    return size, len(compiled.as_text())


@pytest.mark.parametrize("walk", mcts.WALKS)
def test_the_compiled_search_grows_at_most_linearly_with_the_simulations(walk):
    memory_32, program_32 = _analysis(walk, 32)
    memory_64, program_64 = _analysis(walk, 64)
    assert memory_64 <= LINEAR * memory_32, (memory_32, memory_64)
    # The program does not depend on the simulations at all but for its constants.
    assert program_64 <= 1.3 * program_32, (program_32, program_64)
