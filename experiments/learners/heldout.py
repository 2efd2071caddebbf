"""The held-out loss of a supervised run: did it learn the engine's play or its games?

    PYTHONPATH=. python experiments/learners/heldout.py --run runs/learners/supervised/sup \
        --games 50 --seed 1 --out experiments/learners/runs/supervised/heldout.json

Plays `--games` fresh Fairy-Stockfish games with the run's own dataset settings (its
`dataset/manifest.json`) under another `--seed` (so no game of the run's dataset comes back),
into `--data` (kept: a re-run reads it), and scores the run's final parameters with the
learner's loss on them and on up to `--rows` positions drawn from the run's own dataset. The
policy loss is a cross-entropy against soft targets, so each set's target entropy (the loss of
a perfect fit) is reported beside it. Written as JSON to `--out` and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def score(config, folder: str, params, network, rows: int) -> dict:
    import numpy as np

    from mmc_jax.algorithms import supervised
    from mmc_jax.training import learner

    data = supervised.load_dataset(config, folder)
    picked = np.random.default_rng(0).permutation(len(data["value"]))[:rows]
    batch = supervised.labelled_batch(data, picked)
    _, metrics = learner.loss_fn(params, network, batch, config.learner)
    target = batch.policy_target
    logs = np.log(np.where(target > 0, target, 1.0))
    return {
        "positions": int(len(data["value"])),
        "scored": int(len(picked)),
        "policy_loss": float(metrics["policy_loss"]),
        "target_entropy": float(-(target * logs).sum(-1).mean()),
        "value_loss": float(metrics["value_loss"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python experiments/learners/heldout.py",
        description="The loss of a supervised run's final parameters on its own data and on "
        "fresh engine games made with the same settings under another seed.",
    )
    parser.add_argument("--run", required=True, help="the supervised run's workdir")
    parser.add_argument("--games", type=int, default=50, help="fresh games (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="their seed (default 1; not the run's)")
    parser.add_argument("--rows", type=int, default=4096, help="positions scored per set")
    parser.add_argument("--data", default=None, help="where the fresh games go (RUN/../heldout)")
    parser.add_argument("--out", default=None, help="the JSON written (default: printed only)")
    args = parser.parse_args(argv)
    manifest_path = Path(args.run) / "dataset" / "manifest.json"
    if not manifest_path.is_file():
        parser.error(f"--run {args.run}: no dataset/manifest.json (not a supervised run)")
    if args.games < 1 or args.rows < 1:
        parser.error("--games and --rows must be positive")
    settings = json.loads(manifest_path.read_text())["settings"]
    if args.seed == settings["seed"]:
        parser.error(f"--seed {args.seed} is the run's own: its games would come back")

    from configs import supervised as supervised_config
    from mmc_jax.algorithms import supervised
    from mmc_jax.infra import checkpoint

    config = supervised_config.get_config("cpu").copy_and_resolve_references()
    config.unlock()
    config.variant, config.seed = settings["variant"], settings["seed"]
    for key, value in settings.items():
        if key not in ("variant", "seed"):
            config.data[key] = value
    config.data.games = sum(1 for _ in json.loads(manifest_path.read_text())["shards"]) * int(
        settings["shard_games"]
    )
    own = supervised.prepare_config(config)
    config.seed, config.data.games = args.seed, args.games
    config.data.shard_games = min(int(settings["shard_games"]), args.games)
    fresh = supervised.prepare_config(config)
    data = args.data or os.path.join(os.path.dirname(os.path.normpath(args.run)), "heldout")
    supervised.generate(fresh, data)
    network, params, _ = checkpoint.load_model(args.run)
    result = {
        "run": args.run,
        "settings": settings,
        "fresh_seed": args.seed,
        "fresh_games": args.games,
        "own": score(own, args.run, params, network, args.rows),
        "fresh": score(fresh, data, params, network, args.rows),
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
