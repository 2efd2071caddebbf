"""`python -m mmc_jax.export`: a params-only model from a checkpoint, small enough to ship.

    python -m mmc_jax.export --checkpoint runs/gardner_cpu --out mmc_jax/data/models/gardner-cpu \\
        --command "bash experiments/gardner_cpu/run.sh runs/gardner_cpu"

Writes `<out>/params.msgpack` (the network's parameters; no optimizer state, no replay: a 2x32
net is about 250 KB) and `<out>/model.json` (the run config, the observation layout, the source
checkpoint and step, frames trained, and the command that trained it). Every CLI that takes a
checkpoint (`evaluate`, `play`, `adapt --init_from`, `analyse`) takes such a folder, or the name
of a model shipped in `mmc_jax/data/models` (`python -m mmc_jax.export --list`). A model of
another observation layout is refused with the command to re-export it. Every learner exports
the same way: its algorithm says what its parameters are (`Algorithm.model_kind`) and how its
card describes them (`Algorithm.describe_model`), and `mmc_jax.algorithms.open_model` reads any
of them back; a sensing variant's model is played by the commands and arenas for sensing
variants (docs/play.md). `--out` may be a `gs://` folder. `--out` inside a run's
workdir (or its checkpoints) is refused: the export would shadow the run's checkpoints. Exporting
an exported (or shipped) model copies it, its card keeping where the parameters came from.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mmc_jax import algorithms
from mmc_jax.infra import checkpoint, cli, storage


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.export",
        description="Write a params-only model (params.msgpack + model.json) from a checkpoint.",
    )
    parser.add_argument("--checkpoint", help="run workdir or <workdir>/checkpoints/<step>")
    cli.add_integer(parser, "--step", 0, default=None)
    parser.add_argument("--out", help="output folder (created)")
    parser.add_argument("--command", default=None, help="the command that trained the run")
    parser.add_argument("--list", action="store_true", help="list the shipped models and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, folder in checkpoint.shipped_models().items():
            with open(os.path.join(folder, checkpoint.EXPORT_FILE), encoding="utf-8") as f:
                record = json.load(f)
            print(f"{name}: {record.get('description', '')} ({record.get('num_params')} params)")
        return 0
    if not args.checkpoint or not args.out:
        parser.error("--checkpoint and --out are required (or --list)")
    if storage.is_remote(args.out):  # a bucket: written through etils.epath
        try:
            storage.require_packages(args.out)
        except storage.MissingPackage as error:
            parser.error(f"--out {args.out}: {error}")
    else:
        cli.check_output_folder(parser, "--out", args.out)
    run = checkpoint.run_workdir_of(args.out)
    if run is not None:  # its model.json would be loaded in place of the run's checkpoints
        parser.error(
            f"--out {args.out}: inside the run in {run}, where an export would shadow its "
            f"checkpoints; write it elsewhere, e.g. --out {run.rstrip('/')}-model"
        )
    model = cli.open_or_fail(
        parser, args.checkpoint, args.step, "--checkpoint", opener=algorithms.open_model
    )
    config = model.config
    algorithm = algorithms.algorithm_for(config)
    if model.exported:  # a copy: the card keeps where the parameters came from
        info = {k: model.record.get(k) for k in ("source", "step", "frames", "games")}
        info["command"] = args.command or model.record.get("command", "(not recorded)")
        info["description"] = model.record.get("description", "")
        info["copied_from"] = model.source
    else:  # the card says what was exported: the step loaded (the newest intact one)
        extra = model.record.get("extra") or {}
        info = {
            "source": model.source,
            "step": model.step,
            "frames": extra.get("frames"),
            "games": extra.get("games"),
            "command": args.command or "(not recorded)",
            "description": algorithm.describe_model(config, model.step),
        }
    kind = algorithm.model_kind(config)
    out = checkpoint.export_model(args.out, config, model.params, info, kind)
    size = sum(p.stat().length for p in storage.to_path(out).iterdir())
    print(f"wrote {out} ({size / 1024:.0f} KB): step {info['step']} of {info['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
