"""`python -m mmc_jax.export`: a params-only model from a checkpoint, small enough to ship.

    python -m mmc_jax.export --checkpoint runs/gardner_cpu --out mmc_jax/data/models/gardner-cpu \\
        --command "bash experiments/gardner_cpu/run.sh runs/gardner_cpu"

Writes `<out>/params.msgpack` (the network's parameters; no optimizer state, no replay: a 2x32
net is about 250 KB) and `<out>/model.json` (the run config, the observation layout, the source
checkpoint and step, frames trained, and the command that trained it). Every CLI that takes a
checkpoint (`evaluate`, `play`, `adapt --init_from`, `analyse`) takes such a folder, or the name
of a model shipped in `mmc_jax/data/models` (`python -m mmc_jax.export --list`). A model of
another observation layout is refused with the command to re-export it. A reconnaissance run
(`configs/recon.py`) exports to `<out>/model.msgpack` (its own format: the parameters and the
search sizes) with the same card; the recon arena (`experiments/recon/run.py --agents
learned,... --checkpoint`) takes that folder. `--out` inside a run's
workdir (or its checkpoints) is refused: the export would shadow the run's checkpoints. Exporting
an exported (or shipped) model copies it, its card keeping where the parameters came from.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax

from mmc_jax.infra import checkpoint, cli


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
    cli.check_output_folder(parser, "--out", args.out)
    run = checkpoint.run_workdir_of(args.out)
    if run is not None:  # its model.json would be loaded in place of the run's checkpoints
        parser.error(
            f"--out {args.out}: inside the run in {run}, where an export would shadow its "
            f"checkpoints; write it elsewhere, e.g. --out {run.rstrip('/')}-model"
        )
    recon_card = _export_recon(parser, args)
    if recon_card is not None:
        print(recon_card)
        return 0
    model = cli.open_or_fail(parser, args.checkpoint, args.step, "--checkpoint")
    config = model.config
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
            "description": f"{config.get('variant') or 'meta-training'}: "
            f"{config.network.num_blocks}x{config.network.channels} net, step {model.step}",
        }
    out = checkpoint.export_model(args.out, config, model.params, info)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"wrote {out} ({size / 1024:.0f} KB): step {info['step']} of {info['source']}")
    return 0


def _export_recon(parser: argparse.ArgumentParser, args) -> str | None:
    """Exports a reconnaissance run (or copies a recon model) into `args.out` and returns the
    line to print; None when `args.checkpoint` is not one (the board-game export follows)."""
    from mmc_jax.algorithms import recon

    source, meta = args.checkpoint, {}
    if not (os.path.isfile(source) or os.path.isfile(os.path.join(source, recon.MODEL_FILE))):
        try:  # a workdir: its config names the algorithm (no parameters read)
            meta = checkpoint.load_metadata(source)
        except (FileNotFoundError, checkpoint.CheckpointDamaged, OSError, ValueError):
            return None
        if (meta.get("config") or {}).get("algorithm") != recon.ALGORITHM.name:
            return None
    if args.step is not None:
        parser.error("--step: a recon run exports its latest intact checkpoint; drop --step")
    try:
        params, search = recon.load_model(source)
    except ValueError as error:
        if os.path.isfile(source):
            return None  # not a recon model file: the generic export says what it is
        parser.error(f"--checkpoint {source}: {error}")
    os.makedirs(args.out, exist_ok=True)
    recon.save_model(os.path.join(args.out, recon.MODEL_FILE), params, search)
    step = meta.get("step")  # a workdir's newest intact step (None for a model file or folder)
    info = {
        "format": recon.MODEL_FORMAT,
        "config": {"algorithm": recon.ALGORITHM.name, "search": dict(search._asdict())},
        "source": os.path.abspath(source),
        "step": step,
        "command": args.command or "(not recorded)",
        "description": f"recon: ReconNet {search.blocks}x{search.channels}, step {step}",
        "num_params": int(sum(x.size for x in jax.tree.leaves(params))),
    }
    with open(os.path.join(args.out, checkpoint.EXPORT_FILE), "w", encoding="utf-8") as handle:
        json.dump(info, handle, indent=1)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    return f"wrote {args.out} ({size / 1024:.0f} KB): step {step} of {info['source']} (recon)"


if __name__ == "__main__":
    sys.exit(main())
