"""One small ladder and tournament run through the CLI, shared by test_ladder.py and
test_pgn.py (cached for the process: the compiles dominate on 2 CPU cores).

The model is a tiny random network (1 block x 8 channels) saved as two checkpoint steps; the
rungs are random, greedy and Fairy-Stockfish at 1 and 10 nodes, 2 games each and 2 between
neighbouring rungs: 14 games in one batch. test_explore.py plays 2 variants x 7 games so that
its batch of 14 reuses the compiled step.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mmc_jax import evaluate
from mmc_jax import rules as R
from mmc_jax.infra import checkpoint
from mmc_jax.model import network

TINY = dict(num_blocks=1, channels=8, policy_channels=4, value_channels=2, value_hidden=8)
LADDER_GAMES = 14  # 4 rungs x 2 games + 3 neighbour pairs x 2 games


@functools.cache
def workdir() -> str:
    """A run with checkpoints at steps 1 and 2 of a tiny random network."""
    root = tempfile.mkdtemp(prefix="mmc_ladder_")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    path = os.path.join(root, "tiny")
    config = ml_collections.ConfigDict(dict(variants=["gardner"], network=TINY))
    net = network.make_network(config.network)
    # Random values of the right shapes: `init_params` would compile for several seconds.
    shapes = jax.eval_shape(
        lambda key: network.init_params(net, key, R.OBS_SHAPE), jax.random.key(0)
    )
    for step in (1, 2):
        rng = np.random.default_rng(step)
        params = jax.tree.map(
            lambda s, rng=rng: jnp.asarray(0.1 * rng.standard_normal(s.shape), s.dtype), shapes
        )
        checkpoint.save_checkpoint(path, step, {"params": params}, config=config)
    return path


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = evaluate.main(argv)
    return status, out.getvalue(), err.getvalue()


COMMON = [
    "--variant", "gardner",
    "--games", "2",
    "--chain-games", "2",
    "--nodes", "1", "10",
    "--simulations", "2",
    "--max-plies", "40",
    "--bootstrap", "50",
]  # fmt: skip


@functools.cache
def ladder() -> dict:
    """`evaluate ladder` on the tiny run: {status, stdout, stderr, out, pgn}."""
    out = os.path.join(workdir(), "ladder_out")
    pgn_path = os.path.join(workdir(), "ladder.pgn")
    status, stdout, stderr = _run_cli(
        ["ladder", "--checkpoint", workdir(), *COMMON, "--out", out, "--pgn", pgn_path]
    )
    return dict(status=status, stdout=stdout, stderr=stderr, out=out, pgn=pgn_path)


@functools.cache
def tournament() -> dict:
    """`evaluate tournament` over both saved steps of the tiny run, without games between the
    rungs: 16 games, the same padded batch as the ladder's 14."""
    out = os.path.join(workdir(), "tournament_out")
    argv = ["tournament", "--run", workdir(), *COMMON, "--chain-games", "0", "--out", out]
    status, stdout, stderr = _run_cli(argv)
    return dict(status=status, stdout=stdout, stderr=stderr, out=out)
