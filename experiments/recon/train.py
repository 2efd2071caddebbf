"""Train the learned recon agent by self-play (`mmc_jax.algorithms.recon`).

    PYTHONPATH=. python experiments/recon/train.py --workdir /tmp/r41/run \\
        --budget-minutes 60 --games 64 --updates 32 --keep-every 20    # the README's run
    PYTHONPATH=. python experiments/recon/train.py --workdir /tmp/rl --iterations 2 --games 4

Each iteration plays `--games` self-play games (both sides the learned agent: network + one-ply
searches over `--worlds` boards sampled from each side's exact belief, for the window and for
the move), then takes `--updates` Adam steps. Runs until `--iterations` (in total) or
`--budget-minutes` of wall clock, printing a progress line with an ETA per iteration, and
checkpoints `<workdir>/checkpoint.pkl` (resumed when the command is run again with the same
settings). Evaluate with `experiments/recon/run.py --checkpoint <workdir>/checkpoint.pkl`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mmc_jax import rules as R
from mmc_jax.algorithms import recon as TL
from mmc_jax.infra.cli import integer_arg, positive_float_arg
from mmc_jax.search import recon_learned as L


def parse_args(argv):
    defaults, search = TL.TrainConfig(), L.SearchConfig()
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Stops at whichever of --iterations / --budget-minutes comes first; one is needed.",
    )
    add = parser.add_argument
    add("--workdir", required=True, help="run folder: checkpoint.pkl is written and resumed here")
    add("--variant", default=defaults.variant, help="a sensing variant (default recon)")
    add("--iterations", type=integer_arg("--iterations", 1), help="total iterations")
    add("--budget-minutes", type=positive_float_arg("--budget-minutes"), help="wall-clock budget")
    integers = (  # flag, minimum, default, what
        ("--games", 1, defaults.games, "self-play games per iteration"),
        ("--max-plies", 1, defaults.max_plies, "ply cap of self-play games, a draw"),
        ("--belief-size", 1, defaults.belief_size, "belief pad"),
        ("--moves-per-board", 1, defaults.moves_per_board, "opponent requests expanded per board"),
        ("--worlds", 1, search.worlds, "belief samples per search"),
        ("--candidates", 1, search.candidates, "requests evaluated per search"),
        ("--blocks", 0, search.blocks, "residual blocks"),
        ("--channels", 1, search.channels, "trunk width"),
        ("--updates", 1, defaults.updates, "Adam steps per iteration"),
        ("--minibatch", 1, defaults.minibatch, "examples per Adam step"),
    )
    for flag, minimum, default, what in integers:
        kind = integer_arg(flag, minimum)
        add(flag, type=kind, default=default, help=f"{what} (default {default})")
    add(
        "--explore",
        type=float,
        default=defaults.explore,
        help="share of self-play moves replaced by a random requestable move "
        f"(default {defaults.explore})",
    )
    add(
        "--adjudicate",
        type=float,
        default=defaults.adjudicate,
        help="a game that reaches the ply cap scores tanh(this x White's material lead) for "
        f"White (0: a draw; default {defaults.adjudicate})",
    )
    add(
        "--learning-rate",
        type=positive_float_arg("--learning-rate"),
        default=defaults.learning_rate,
        help=f"Adam step size (default {defaults.learning_rate})",
    )
    add(
        "--checkpoint-every",
        type=integer_arg("--checkpoint-every", 1),
        default=5,
        help="iterations between checkpoints (default 5)",
    )
    add(
        "--keep-every",
        type=integer_arg("--keep-every", 0),
        default=0,
        help="also keep the parameters of every Nth iteration as params-<N>.pkl (default 0: none)",
    )
    add(
        "--anchor",
        type=float,
        default=defaults.anchor,
        help="share of the world value's target that is the hand-written prior's value of the "
        f"board (default {defaults.anchor})",
    )
    add("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)  # fmt: skip
    if args.iterations is None and args.budget_minutes is None:
        parser.error("give --iterations or --budget-minutes (or both)")
    try:
        variant = R.check_variant(args.variant, sensing=True)
    except ValueError as error:
        parser.error(str(error))
    if not R.is_sense(variant):
        parser.error(f"{variant} is not a sensing variant (fog=sense:W)")
    if not 0 <= args.anchor <= 1:
        parser.error(f"--anchor must be in [0, 1], got {args.anchor}")
    if not args.adjudicate >= 0:
        parser.error(f"--adjudicate must be at least 0, got {args.adjudicate}")
    if not 0 <= args.explore <= 1:
        parser.error(f"--explore must be in [0, 1], got {args.explore}")
    if args.candidates > R.recon.PASS + 1:
        parser.error(f"--candidates must be at most {R.recon.PASS + 1}, got {args.candidates}")
    workdir = Path(args.workdir)
    if workdir.exists() and not workdir.is_dir():
        parser.error(f"--workdir {workdir} is a file")
    config = TL.TrainConfig(
        variant=variant,
        games=args.games,
        max_plies=args.max_plies,
        belief_size=args.belief_size,
        moves_per_board=args.moves_per_board,
        search=L.SearchConfig(
            worlds=args.worlds,
            candidates=args.candidates,
            blocks=args.blocks,
            channels=args.channels,
        ),
        updates=args.updates,
        minibatch=args.minibatch,
        learning_rate=args.learning_rate,
        explore=args.explore,
        adjudicate=args.adjudicate,
        anchor=args.anchor,
        seed=args.seed,
    )
    checkpoint = workdir / TL.CHECKPOINT
    if checkpoint.exists():
        saved = TL.load(checkpoint)[1]
        if saved != config:
            parser.error(f"{checkpoint} was written with other settings; use another --workdir")
    return args, config


def main(argv=None):
    args, config = parse_args(argv)
    print(f"config {config}", flush=True)
    TL.train(
        config,
        args.workdir,
        iterations=args.iterations,
        budget_minutes=args.budget_minutes,
        checkpoint_every=args.checkpoint_every,
        keep_every=args.keep_every,
        log=lambda line: print(line, flush=True),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
