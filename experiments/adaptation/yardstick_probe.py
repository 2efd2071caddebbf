"""Which match settings give the decisive study's yardstick range? (README, Amendment 2)

For each held-out variant: a random network (seed 0) against every scratch reference
checkpoint, and every checkpoint against the final one, under one match setting. A yardstick
has range on a variant when the random network's score falls well below 0.5 as the references
get stronger and the checkpoints' scores against the final one rise with their frames.

    python experiments/adaptation/yardstick_probe.py --simulations 0 --sampled      # registered
    python experiments/adaptation/yardstick_probe.py --simulations 0                # argmax
    python experiments/adaptation/yardstick_probe.py --simulations 16 --opening-plies 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `experiments.*` and `configs` when run as a file
    sys.path.insert(0, str(ROOT))
from experiments.adaptation.decisive.games import play_match, random_init  # noqa: E402
from experiments.adaptation.decisive.presets import PRESETS  # noqa: E402
from experiments.adaptation.decisive.store import Study  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulations", type=int, default=0, help="both sides (0: raw policy)")
    parser.add_argument("--opening-plies", type=int, default=2)
    parser.add_argument("--games", type=int, default=64, help="per match (even)")
    parser.add_argument("--sampled", action="store_true", help="sample every move (match.py)")
    parser.add_argument("--out", type=Path, help="also write the table as JSON here")
    args = parser.parse_args(argv)
    if args.games <= 0 or args.games % 2:
        parser.error(f"--games must be positive and even, got {args.games}")
    import jax

    from mmc_jax.infra import checkpoint

    preset = dataclasses.replace(
        PRESETS["cpu"],
        simulations=args.simulations,
        opening_plies=args.opening_plies,
        games=args.games,
        sampled=args.sampled,
    )
    artefacts = Path(__file__).resolve().parent / "decisive_cpu"
    study = Study("cpu", preset, Path("/nonexistent"), artefacts)
    its = preset.reference_iterations
    final = its[-1]
    table = {}
    for variant in preset.variants:
        started = time.time()
        try:
            models = {
                it: checkpoint.load_model(study.reference_model(variant, it))[:2] for it in its
            }
        except FileNotFoundError as error:
            print(f"error: {variant}: {error}", file=sys.stderr)
            return 1
        network0, params0 = random_init(preset, 0)
        key = jax.random.key(7_000)
        row = {
            "random_vs": [
                play_match(network0, params0, variant, preset, key, models[it])["score"]
                for it in its
            ],
            "vs_final": [
                play_match(*models[it], variant, preset, key, models[final])["score"]
                for it in its[:-1]
            ],
        }
        table[variant] = row
        print(
            f"{variant} ({time.time() - started:.0f} s)\n"
            f"  random vs it{list(its)}: " + ", ".join(f"{x:.2f}" for x in row["random_vs"]) + "\n"
            f"  it{list(its[:-1])} vs it{final}: " + ", ".join(f"{x:.2f}" for x in row["vs_final"]),
            flush=True,
        )
    if args.out:
        args.out.write_text(
            json.dumps({"settings": vars(args) | {"out": str(args.out)}, "table": table}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
