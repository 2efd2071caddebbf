"""Analyse one position: the search's move distribution and value for the side to move.

    python -m mmc_jax.analyse --variant dark --fen "4k/5/2n2/5/K4 w - - 0 1" \\
        [--checkpoint RUN] [--simulations 32] [--worlds 8] [--seed 0] [--omniscient] [--json]

Under fog the FEN is the start of the player's observation history: it knows its own pieces,
what it sees and the opponent's material as in the FEN, not where the hidden pieces stand
(`belief.initial_belief(exact=False)`); the search is `fog.fair_search` over `--worlds`
sampled worlds, deterministic given `--seed` (sequential halving without Gumbel noise; the
seed drives the world sampling). `--omniscient` searches the true position instead: an UPPER
BOUND that reads hidden squares, labelled so in the output. Without fog the search is
`search.run_search`, as everywhere else.

Without `--checkpoint` the network is a fresh, untrained `PolicyValueNet` with parameters
from seed 0 (the output says so); with it, `mmc_jax.infra.checkpoint.load_model` (a run, an
exported model or a shipped model's name). `--json` prints one object with `policy` (UCI
move -> probability) and `value`, plus the settings. Bad input (FEN, variant, checkpoint)
ends with a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax import rules as R
from mmc_jax.infra import cli, startup
from mmc_jax.model import network as network_lib
from mmc_jax.training import fog as fog_lib
from mmc_jax.training import memory

UNTRAINED_SEED = 0


@functools.partial(
    jax.jit,
    static_argnames=("network", "omniscient", "num_simulations", "num_worlds", "num_candidates"),
)
def _analyse(
    params, rules, state, key, *, network, omniscient, num_simulations, num_worlds, num_candidates
):
    """(policy [1, 1225], value [1], consistent candidates [1]) of one position (batch of 1)."""
    planes = R.legal_planes(rules, state)
    if omniscient:
        out = fog_lib.omniscient_search(
            network, params, rules, state, key, num_simulations=num_simulations, gumbel_scale=0.0
        )
        value = out.search_tree.summary().value
        return out.action_weights, value, jnp.full((1,), -1, jnp.int32)
    games = fog_lib.start_games(state, exact=False)
    _, out = fog_lib.mover_fair_search(
        network,
        params,
        rules,
        games,
        planes,
        key,
        num_worlds=num_worlds,
        num_simulations=num_simulations,
        num_candidates=num_candidates,
    )
    return out.action_weights, out.value, out.num_consistent


def analyse_position(
    network,
    params,
    variant: str,
    fen: str,
    *,
    num_simulations: int = 32,
    num_worlds: int = 8,
    num_candidates: int = 32,
    seed: int = 0,
    omniscient: bool = False,
) -> dict[str, Any]:
    """The search's policy (UCI -> probability over the legal moves) and value of `fen`.

    Raises ValueError for a bad variant or FEN, a finished position, or a search whose tree
    cannot fit in memory (`memory.check_search`).
    """
    rules = R.get(variant)
    state = R.from_fen(fen)
    legal = R.legal_moves(variant, fen)
    if not legal or R.result(variant, fen) is not None:
        raise ValueError(f"the game is over in {fen!r}: no move to analyse")
    fog = bool(rules.fog)
    # One line before anything compiles (issue 52): a tree per world under fair PIMC.
    memory.check_search(num_simulations, num_worlds if fog and not omniscient else 1)
    mode = "omniscient (upper bound: reads hidden squares)" if omniscient and fog else None
    if mode is None:
        mode = "fair PIMC" if fog else "search (perfect information)"
    # Perfect-information variants: run_search on the true state is the fair search.
    weights, value, consistent = _analyse(
        params,
        R.stack([rules]),
        jax.tree.map(lambda x: x[None], state),
        jax.random.key(seed),
        network=network,
        omniscient=omniscient or not fog,
        num_simulations=num_simulations,
        num_worlds=num_worlds,
        num_candidates=num_candidates,
    )
    weights = np.asarray(weights)[0]
    policy = {move: float(weights[R.uci_to_action(variant, fen, move)]) for move in legal}
    policy = dict(sorted(policy.items(), key=lambda kv: (-kv[1], kv[0])))
    return {
        "variant": variant,
        "fen": fen,
        "mode": mode,
        "simulations": num_simulations,
        "worlds": num_worlds if fog and not omniscient else None,
        "consistent_candidates": int(np.asarray(consistent)[0]) if fog and not omniscient else None,
        "seed": seed,
        "policy": policy,
        "value": float(np.asarray(value)[0]),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.analyse",
        description="Search one position and print the move distribution and value.",
    )
    parser.add_argument("--variant", required=True, help="variant name or spec")
    parser.add_argument("--fen", required=True, help="the position (start of the history)")
    parser.add_argument("--checkpoint", default=None, help="run workdir (default: untrained)")
    cli.add_integer(parser, "--simulations", 1, default=32)
    cli.add_integer(parser, "--worlds", 1, default=8, help="fog: K")
    cli.add_integer(parser, "--candidates", 1, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--omniscient", action="store_true", help="search the true position (upper bound)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    startup.start()

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    try:
        R.check_variant(args.variant)
        R.from_fen(args.fen)
    except ValueError as error:
        return fail(str(error))
    if args.checkpoint is None:
        network = network_lib.PolicyValueNet()
        params = network_lib.init_params(network, jax.random.key(UNTRAINED_SEED), R.OBS_SHAPE)
        source = f"untrained network (seed {UNTRAINED_SEED})"
    else:
        from mmc_jax.infra import checkpoint, storage

        try:
            network, params, _ = checkpoint.load_model(args.checkpoint)
        except (FileNotFoundError, ValueError, OSError, storage.MissingPackage) as error:
            return fail(f"cannot load checkpoint {args.checkpoint!r}: {error}")
        source = f"checkpoint {args.checkpoint}"
    try:
        result = analyse_position(
            network,
            params,
            args.variant,
            args.fen,
            num_simulations=args.simulations,
            num_worlds=args.worlds,
            num_candidates=args.candidates,
            seed=args.seed,
            omniscient=args.omniscient,
        )
    except ValueError as error:
        return fail(str(error))
    result["network"] = source
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['variant']}  {result['fen']}")
    print(f"network: {source}; {result['mode']}; {args.simulations} simulations", end="")
    if result["worlds"]:
        print(f" x {result['worlds']} worlds ({result['consistent_candidates']} consistent", end="")
        print(f" of {args.candidates} candidates)", end="")
    print(f"; seed {args.seed}")
    print(f"value (side to move): {result['value']:+.3f}")
    for move, p in result["policy"].items():
        print(f"  {move:7s} {p:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
