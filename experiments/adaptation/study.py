"""The decisive adaptation study: does pretraining over the rule space make a never-played
variant fast to learn, and does Reptile (JOAT) add to joint training?

    python experiments/adaptation/study.py --preset cpu --budget-minutes 120    # one sitting
    python experiments/adaptation/study.py --preset cpu --status                # what is left
    python experiments/adaptation/study.py --preset gpu --only pretrain --pack out/pretrain.tgz
    python experiments/adaptation/study.py --preset cpu --unpack out/pretrain.tgz
    python experiments/adaptation/study.py --preset smoke --workdir /tmp/study_smoke   # plumbing

The same command every sitting: every unit of work (a reference run, a pretraining run, a
calibration, an adaptation cell) writes its small result into the artefact folder
(`experiments/adaptation/decisive_<preset>/`, committed as units finish: exported parameters of
2x32 networks, about 250 KB each, and one JSON per unit), and a unit whose result is there is
skipped. Heavy state (checkpoints with replay rings) stays in `--workdir` (runs/study_<preset>)
and makes an interrupted training run resume bit-exactly on the same machine; on a fresh
machine an unfinished unit starts again, a finished one is read from the artefacts.

The protocol (pre-registered in experiments/adaptation/README.md):

  yardstick   per held-out variant, AlphaZero from scratch with the best single-variant recipe
              (configs/gardner.py:cpu, the preset's `reference_preset`), a checkpoint after
              each of `reference_iterations` (4k, 8k, 16k, 33k, 66k frames on the CPU
              preset): the scratch curve. The mid-strength reference is the weakest of them
              against which a random network scores <= 0.25; every curve point is scored
              against it. Matches are the yardstick's (Amendment 2, 2026-11-26): `games`
              games of raw policies (`simulations` 0) that sample every move from their own
              softmax after a paired `opening_plies`-ply policy opening, so the score sees
              the network, not the search. Scratch-equivalent frames (SEF) of a score:
              the frames at which the curve (its running maximum, linear between points)
              first reaches it; speed-up = SEF / adaptation frames.
  arms        {rules hidden, rules descriptor} x {joint (k = 1), JOAT (Reptile)}, pretrained
              over the rule-space tasks of configs/joat.py (the held-out variants never drawn)
              with equal self-play frames and sequential gradient steps; plus scratch (a
              random network adapted by the same procedure).
                joint   k joint steps per iteration on the mean task gradient, persistent Adam
                        (b1 0.9, lr 1e-3, weight decay 1e-4)
                joat    per task k steps of the inner procedure from phi, phi += eps (mean theta
                        - phi), eps constant 1 (neither arm anneals)
  procedure   the inner procedure (JOAT's inner loop and every arm's adaptation, one
              function: `learner.inner_procedure`) is chosen by the sensitivity stage before
              JOAT is pretrained: plain SGD at each of `step_sizes` against the old fresh Adam
              (b1 = 0), from the seed-0 joint starts, by held-out loss on each variant's
              reference self-play after one and two procedures.
  games       per (arm, seed, variant): `mmc_jax.adapt` for max(adapt_points) iterations of
              `adapt_games` games each; at each point `games` colour-balanced games against
              the mid reference (primary, the yardstick's matches) and greedy (secondary);
              at iteration 0 also against the final reference (zero-shot).
  long        the better rules-descriptor arm (zero-shot) pretrained to `long_iterations`,
              a checkpoint every `long_every`, each played zero-shot: transfer against
              pretraining frames.

Amendment 3 (README, registered 2026-11-27): the `power` preset, ten pretraining seeds of
joint, JOAT and gardner (rules hidden) on the primary variants, the cpu preset's committed
runs and curves reused where their config is the same, the inner procedure chosen on training
tasks (`procedure_on_training_tasks`), a second yardstick (`whole_network_point`: matches at
16 simulations, held-out policy and value loss) and every endpoint at the pretraining-seed
level (`seed_level`).

Outputs in the artefact folder: `results.json`, `results.md` (current-result block first, the
pre-registered endpoints with paired t intervals and minimum detectable effects), `games.png`
(score against adaptation frames per variant beside the scratch curve) and `transfer.png`.

The parts, by role, are the modules of `experiments/adaptation/decisive/` (its docstring lists
them); this file is the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `experiments.*` and `configs` when run as a file
    sys.path.insert(0, str(ROOT))
from experiments.adaptation.decisive.analysis import collect, primary_variants  # noqa: E402
from experiments.adaptation.decisive.plan import run, status  # noqa: E402
from experiments.adaptation.decisive.presets import PRESETS  # noqa: E402
from experiments.adaptation.decisive.recipes import prepare_all  # noqa: E402
from experiments.adaptation.decisive.report import (  # noqa: E402
    amendment5_text,
    plot,
    primary_note,
    report,
    seed_level_table,
)
from experiments.adaptation.decisive.ship import ship  # noqa: E402
from experiments.adaptation.decisive.store import Study, unpack  # noqa: E402
from experiments.lab.report import Log  # noqa: E402


def main(argv=None) -> int:
    """The command (module docstring); returns its exit status."""
    parser = argparse.ArgumentParser(
        prog="python experiments/adaptation/study.py",
        description="The decisive adaptation study (resumable; the same command every sitting).",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--workdir", default=None, help="heavy state (default runs/study_PRESET)")
    parser.add_argument(
        "--artefacts",
        default=None,
        help="small results, committed (default experiments/adaptation/decisive_PRESET; "
        "the smoke preset: WORKDIR/artefacts)",
    )
    parser.add_argument("--budget-minutes", type=float, default=0.0, help="stop between units")
    parser.add_argument(
        "--only",
        choices=("all", "references", "pretrain", "sensitivity", "games", "long", "report"),
        default="all",
    )
    parser.add_argument(
        "--ship",
        default=None,
        metavar="FOLDER",
        help="after the report: export the best pretrained start (mean AUC over the primary "
        "cells) with the study's adaptation settings and its card into FOLDER, exit",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="a subset of the preset's seeds (power: or of Amendment 4's, once decided)",
    )
    parser.add_argument("--variants", nargs="+", help="a subset of the preset's variants")
    parser.add_argument("--iterations", type=int, help="pretraining iterations (a dry run: 1)")
    parser.add_argument("--pack", default=None, help="archive every finished pretraining run here")
    parser.add_argument("--unpack", default=None, help="add a pack's runs to the artefacts, exit")
    parser.add_argument("--status", action="store_true", help="say what is done, exit")
    parser.add_argument(
        "--seed-level",
        action="store_true",
        help="print the endpoints at the pretraining-seed level from the committed cells, exit",
    )
    parser.add_argument("--prepare", action="store_true", help="validate every config, exit")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset]
    if args.iterations is not None:
        if args.iterations < 1:
            parser.error("--iterations must be at least 1")
        preset = dataclasses.replace(preset, pretrain_iterations=args.iterations)
    if args.budget_minutes < 0:
        parser.error("--budget-minutes must be >= 0")
    workdir = Path(args.workdir or f"runs/study_{args.preset}")
    for flag, path in (("--workdir", workdir), ("--artefacts", args.artefacts)):
        if path is not None and Path(path).exists() and not Path(path).is_dir():
            parser.error(f"{flag} {path} is a file, not a folder")
    if args.artefacts:
        artefacts = Path(args.artefacts)
    elif args.preset == "smoke":
        artefacts = workdir / "artefacts"
    else:
        artefacts = ROOT / "experiments" / "adaptation" / f"decisive_{args.preset}"
    seeds = tuple(args.seeds) if args.seeds else None
    allowed = set(preset.seeds) | (set(range(preset.max_seeds)) if preset.extend else set())
    if seeds and not set(seeds) <= allowed:
        parser.error(
            f"--seeds {list(seeds)} not among the preset's {list(preset.seeds)}"
            + (f" (or Amendment 4's, below {preset.max_seeds})" if preset.extend else "")
        )
    variants = None
    if args.variants:
        from mmc_jax import rules as R

        try:
            variants = tuple(R.canonical(v) for v in args.variants)
        except ValueError as error:
            parser.error(f"--variants: {error}")
        known = {R.canonical(v): v for v in preset.variants}
        unknown = [v for v in variants if v not in known]
        if unknown:
            parser.error(f"--variants {unknown} not among the preset's {list(preset.variants)}")
        variants = tuple(known[v] for v in variants)
    study = Study(args.preset, preset, workdir, artefacts)
    if args.status:
        print(status(study))
        return 0
    if args.seed_level:
        results = collect(study)
        print(primary_note(results))
        print(seed_level_table(results))
        if results["cells"] and primary_variants(results):
            print()
            print(amendment5_text(study, results))
        return 0
    from mmc_jax.infra import startup

    startup.start()  # persistent compile cache: a relaunched sitting loads its programs
    if args.prepare:
        names = prepare_all(preset)
        print(f"{len(names)} configs prepared")
        return 0
    workdir.mkdir(parents=True, exist_ok=True)
    artefacts.mkdir(parents=True, exist_ok=True)
    log = Log(workdir / "study.log")
    study = dataclasses.replace(study, warn=log)  # a damaged artefact's note in study.log too
    if args.unpack:
        try:
            added = unpack(study, Path(args.unpack))
        except (OSError, ValueError, KeyError, tarfile.TarError) as error:
            print(f"error: --unpack {args.unpack}: {error}", file=sys.stderr)
            return 2
        log(f"unpacked {len(added)} runs: {', '.join(added) or 'none new'}")
        return 0
    complete = True
    if args.only != "report":
        from mmc_jax import train
        from mmc_jax.infra import storage

        try:
            with storage.workdir_lock(workdir):  # one study process per workdir
                complete = run(
                    study,
                    log,
                    only=args.only,
                    budget_minutes=args.budget_minutes,
                    pack=Path(args.pack) if args.pack else None,
                    seeds=seeds,
                    variants=variants,
                )
        except storage.WorkdirBusy as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            log("interrupted: finished units are kept; rerun the same command to continue")
            return 130
        except train.Stopped as error:
            # A signal (a time limit's SIGTERM) stopped a training unit: it is not exported,
            # recorded or packed, and no later unit starts.
            log(f"stopped ({error}): finished units are kept; rerun the same command to continue")
            return 143
    results = collect(study)
    text = report(study, results)
    plot(study, results)
    print(text)
    if args.ship:
        try:
            card = ship(study, results, Path(args.ship))
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        log(f"shipped {card['arm']} seed {card['seed']} to {args.ship}")
    log(
        ("done" if complete else "stopped (rerun to continue)")
        + f"; results: {study.path('results.md')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
