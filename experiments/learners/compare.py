"""The learners at an equal CPU budget (issue 48): AlphaZero, supervised from Fairy-Stockfish,
supervised then AlphaZero, and TD(λ), each trained on Gardner for the same CPU time (data
generation included), then rated on the engine ladder. The protocol is registered in
experiments/learners/README.md before any result.

    python experiments/learners/compare.py train supervised          # one arm, resumable
    python experiments/learners/compare.py evaluate supervised       # its ladder (FSF 100/1000)
    python experiments/learners/compare.py report                    # the table, every arm
    python experiments/learners/compare.py status
    python experiments/learners/compare.py park supervised           # a run in progress, to git

`train` runs the arm's stages (`ARMS`) with the lab's CPU-budget runner
(`experiments.lab.runner`): `python -m mmc_jax.train` children, each stopped when the CPU time
of its whole process tree (the trainer, its dataset workers, their engines) reaches the stage's
share of `--cpu-minutes`: SIGTERM, so the run loop checkpoints the iteration in progress and
stops. CPU time, not wall time, so that the arms are equal on a machine shared with other work.
What each stage spent is kept in `<root>/<arm>/budget.json`; a killed `train` resumes the stage
where its checkpoint is, counting on from what was recorded (the CPU time since the last
record, at most one poll interval, is lost to the count: it is charged as 0).

SIGTERM or Ctrl-C to `train` stops the stage's child (it checkpoints the iteration in
progress), counts its CPU time to its end and leaves the stage unfinished. A run outlives its
machine through git: `park ARM` (the arm stopped) packs what its resume needs into
`experiments/learners/parked/ARM.tar.gz` (each stage's latest checkpoint, metrics, logs, the
budget record and an unfinished stage's dataset; no older checkpoint, no event file), to be
committed; on a fresh clone `train ARM` unpacks it when the arm's folder is absent and goes on
from it, the same run continuing. Once the arm is rated, delete the archive.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `experiments.lab` when run as a file
    sys.path.insert(0, str(ROOT))
from experiments.lab import report as lab_report  # noqa: E402
from experiments.lab import runner, stats  # noqa: E402
from experiments.lab.runner import park, read_budget  # noqa: E402

# The registered arms: stages of (name, config, share of the budget, overrides). A stage whose
# share is None takes what the earlier stages left. `{previous}` in an override is the
# workdir of the stage before (its final checkpoint). `num_iterations` is only a cap: the
# budget stops every stage.
# No periodic evaluation in any arm: the budget goes to learning, the ladder rates the end.
RUN = ["--config.num_iterations=100000", "--config.eval.every=0"]
# 600 engine games at 100 nodes, MultiPV 8: about 22 CPU-minutes on the 2-core machine
# (2.2 CPU-s a game, 57 positions a game, measured 2026-11-27; 400 nodes: about 4.3 s a game).
DATA = ["--config.data.games=600", "--config.data.nodes=100", "--config.data.multipv=8"]
# Amendment 3: the supervised half of `supervised_az` makes 300 of those games (the same first
# 12 shards), since 600 took its whole 30 CPU-minutes on the shared machine.
HALF_DATA = ["--config.data.games=300", *DATA[1:]]
ARMS = {
    "alphazero": [("az", "configs/gardner.py:cpu", None, RUN)],
    "supervised": [("sup", "configs/supervised.py:cpu", None, [*DATA, *RUN])],
    "supervised_az": [
        ("sup", "configs/supervised.py:cpu", 0.5, [*HALF_DATA, *RUN]),
        ("az", "configs/gardner.py:cpu", None, [*RUN, "--init_from={previous}"]),
    ],
    # Rated before the inverse-CDF minibatch sampler: it keeps the one it drew with.
    "td_lambda": [
        ("td", "configs/td_lambda.py:cpu", None, [*RUN, "--config.learner.sampler=gumbel"])
    ],
    # Round 2 (registered 2026-11-28, README): the supervised recipe with the data it can now
    # afford (rules of a995ed5: 0.77 CPU-s a game) and two shards of held-out games.
    "supervised_2400": [
        (
            "sup",
            "configs/supervised.py:cpu",
            None,
            ["--config.data.games=2400", *DATA[1:], "--config.data.holdout_shards=2", *RUN],
        )
    ],
    # Round 3 (registered 2026-11-28 09:00 UTC, README): round 2 beat AlphaZero, so its data
    # feeds AlphaZero: the first stage is `supervised_2400`'s run (the same dataset, remade
    # within the budget) stopped at 36 CPU-minutes, AlphaZero from it for the other 24.
    "supervised_2400_az": [
        (
            "sup",
            "configs/supervised.py:cpu",
            0.6,
            ["--config.data.games=2400", *DATA[1:], "--config.data.holdout_shards=2", *RUN],
        ),
        ("az", "configs/gardner.py:cpu", None, [*RUN, "--init_from={previous}"]),
    ],
    # The registered protocol's replication (README, "Second seeds"): the best arm and AlphaZero
    # were within 0.1 of each other, so each runs again under seed 1.
    "alphazero_s1": [("az", "configs/gardner.py:cpu", None, [*RUN, "--config.seed=1"])],
    "supervised_az_s1": [
        ("sup", "configs/supervised.py:cpu", 0.5, [*HALF_DATA, *RUN, "--config.seed=1"]),
        ("az", "configs/gardner.py:cpu", None, [*RUN, "--init_from={previous}", "--config.seed=1"]),
    ],
}
# Round 4 (registered 2026-11-28 11:47 UTC, README, before round 3 was rated): the best
# recipe on three more variants Fairy-Stockfish plays, its stages with `--config.variant`.
# Both candidates are listed; the rule in the README picks the one that is run.
ROUND4_RECIPES = ("supervised_2400", "supervised_2400_az")
ROUND4_VARIANTS = ("atomic", "extinction", "mallet")
for _recipe in ROUND4_RECIPES:
    for _variant in ROUND4_VARIANTS:
        ARMS[f"{_recipe}_{_variant}"] = [
            (name, config, share, [*overrides, f"--config.variant={_variant}"])
            for name, config, share, overrides in ARMS[_recipe]
        ]
# Amendment 4 (registered 2026-11-28 12:03 UTC, README, before round 3 was run again): a
# stage listed here starts from another arm's finished dataset (the same settings and seed: its
# shards are the ones the stage would make, bit for bit) and is charged the dataset's measured
# cost instead of making it again: (arm, stage) of the dataset, CPU seconds charged.
# 2,400 games x 0.77 CPU-s (data_cost.py, the cost the round-3 split was sized on).
PREPAID = {("supervised_2400_az", "sup"): (("supervised_2400", "sup"), 2400 * 0.77)}
PARKED = ROOT / "experiments" / "learners" / "parked"
EVALUATION = {"games": 400, "nodes": (100, 1000), "simulations": 32, "variant": "gardner"}


def arm_variant(arm: str) -> str:
    """The variant an arm learns and is rated on (the last `--config.variant` of its stages)."""
    variant = EVALUATION["variant"]
    for _, _, _, overrides in ARMS[arm]:
        for override in overrides:
            if override.startswith("--config.variant="):
                variant = override.split("=", 1)[1]
    return variant


def prepay(root: Path, arm: str, stage: str, workdir: Path) -> dict | None:
    """Copies the dataset PREPAID names into `workdir` (the stage not started yet) and returns
    the budget record's new fields: what is charged for it and where it came from (None for a
    stage PREPAID does not name)."""
    if (arm, stage) not in PREPAID:
        return None
    (source_arm, source_stage), charge = PREPAID[arm, stage]
    source = root / source_arm / source_stage / "dataset"
    manifest = source / "manifest.json"
    if not manifest.exists():
        raise SystemExit(
            f"error: {arm}/{stage} starts from {source}, which is not there: make it with "
            f"`python experiments/learners/compare.py train {source_arm}` (deterministic: the "
            "same shards), then run this again"
        )
    if (workdir / "dataset").exists() or (workdir / "checkpoints").exists():
        raise SystemExit(f"error: {workdir} was started already; move it aside to start anew")
    shutil.copytree(source, workdir / "dataset")
    return {
        "cpu_seconds": charge,
        "prepaid": charge,
        "prepaid_from": f"{source_arm}/{source_stage}",
        "prepaid_shards": len(json.loads(manifest.read_text())["shards"]),
    }


def train_arm(
    arm: str,
    root: Path,
    cpu_minutes: float,
    python: str,
    log,
    arms: dict | None = None,
    parked: Path | None = None,
) -> dict:
    """Runs (or resumes) every stage of `arm` to its CPU budget with the lab's runner (its
    PREPAID stages prepaid); returns the budget record. `arms`: the table of arms (default
    `ARMS`). `parked`: an archive of `park` to start from when the arm's folder is absent."""
    arms = ARMS if arms is None else arms
    return runner.train_arm(arm, root, cpu_minutes, python, log, arms, parked, prepay)


# Amendment 1 (before the TD(λ) arm was trained): its model is also rated as the one-ply value
# player it trains as (`--search one-ply`, ladder_one_ply/), a second row beside the registered
# 32-simulation one.
ONE_PLY_ARMS = ("td_lambda",)


def ladders(arm: str) -> dict[str, str]:
    """The arm's ladders: {row label: folder in the arm's directory}."""
    out = {arm: "ladder"}
    if arm in ONE_PLY_ARMS:
        out[f"{arm} (one-ply)"] = "ladder_one_ply"
    return out


def evaluate_arm(arm: str, root: Path, python: str, log) -> dict:
    """The arm's final checkpoint exported to `<root>/<arm>/model` (`python -m mmc_jax.export`,
    its card naming the command that trained it: what is rated is what can be shipped and
    played), then on the ladder (random, greedy, FSF at EVALUATION's nodes); a TD(λ) model
    also as its one-ply player. Returns the first ladder's report."""
    budget = read_budget(root, arm)
    if "final" not in budget:
        raise SystemExit(f"error: {arm} is not trained yet: run `train {arm}` first")
    model = root / arm / "model"
    if not (model / "model.json").exists():
        command = [
            python, "-m", "mmc_jax.export", f"--checkpoint={budget['final']}", f"--out={model}",
            f"--command=python experiments/learners/compare.py train {arm}",
        ]  # fmt: skip
        log(f"{arm}: {' '.join(command)}")
        subprocess.run(command, cwd=ROOT, check=True)
    for folder in ladders(arm).values():
        out = root / arm / folder
        if (out / "ladder.json").exists():
            log(f"{arm}: {out} is rated already")
            continue
        search = ["--search=one-ply"] if folder == "ladder_one_ply" else []
        command = [
            python, "-m", "mmc_jax.evaluate", "ladder", f"--checkpoint={budget['final']}",
            f"--variant={arm_variant(arm)}", f"--games={EVALUATION['games']}",
            f"--simulations={EVALUATION['simulations']}", "--chain-games=0", *search,
            "--nodes", *map(str, EVALUATION["nodes"]), f"--out={out}",
        ]  # fmt: skip
        log(f"{arm}: {' '.join(command)}")
        subprocess.run(command, cwd=ROOT, check=True)
    return json.loads((root / arm / "ladder" / "ladder.json").read_text())


def report(root: Path) -> str:
    """The markdown table of every trained and evaluated arm."""
    rows = [
        "| arm | CPU-min (stages) | vs random | vs greedy | vs FSF 100 | vs FSF 1000 "
        "| Elo - FSF 100 |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        budget = read_budget(root, arm)
        if not budget["stages"]:
            continue
        stages = ", ".join(
            f"{name} {record['cpu_seconds'] / 60:.1f}" for name, record in budget["stages"].items()
        )
        for label, folder in ladders(arm).items():
            ladder_file = root / arm / folder / "ladder.json"
            cells = ["-"] * 5
            if ladder_file.exists():
                ladder = json.loads(ladder_file.read_text())
                opponents = ("random", "greedy", "engine:nodes=100", "engine:nodes=1000")
                cells = [_score_cell(ladder, opponent) for opponent in opponents]
                cells.append(_elo_cell(ladder, "engine:nodes=100"))
            rows.append(f"| {label} | {stages} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# The registered read of the second seeds (README, "Second seeds"): each recipe's seeds
# averaged against Fairy-Stockfish at 100 nodes, and supervised_az minus AlphaZero per seed
# with its spread over the seeds.
SEEDS = {
    "alphazero": ("alphazero", "alphazero_s1"),
    "supervised_az": ("supervised_az", "supervised_az_s1"),
}


def seeds_report(root: Path, opponent: str = "engine:nodes=100") -> str | None:
    """The second seeds' table against `opponent` (None until every seed of `SEEDS` is
    rated): per recipe each seed's score and their mean, then the difference of the two
    recipes per seed, its mean and half its range (with two seeds, the spread is all there
    is: no interval over seeds is claimed)."""
    scores = {}
    for recipe, arms in SEEDS.items():
        for seed, arm in enumerate(arms):
            ladder_file = root / arm / "ladder" / "ladder.json"
            if not ladder_file.exists():
                return None
            ladder = json.loads(ladder_file.read_text())
            rungs = {rung["opponent"]: rung for rung in _model(ladder)["rungs"]}
            scores[recipe, seed] = rungs[opponent]["score"]
    first, second = SEEDS
    seeds = range(len(SEEDS[first]))

    def cells(values, form):
        return " | ".join(format(v, form) for v in values)

    rows = [
        f"| recipe | {cells((f'seed {s}' for s in seeds), 's')} | mean |",
        "|---|" + "---|" * (len(seeds) + 1),
    ]
    for recipe in SEEDS:
        values = [scores[recipe, s] for s in seeds]
        rows.append(f"| {recipe} | {cells(values, '.3f')} | {sum(values) / len(values):.3f} |")
    diffs = [scores[second, s] - scores[first, s] for s in seeds]
    mean, half = sum(diffs) / len(diffs), (max(diffs) - min(diffs)) / 2
    rows.append(f"| {second} - {first} | {cells(diffs, '+.3f')} | {mean:+.3f} (± {half:.3f}) |")
    return "\n".join(rows)


def _model(ladder: dict) -> dict:
    return ladder["models"][0]


def _score_cell(ladder: dict, opponent: str) -> str:
    rungs = {rung["opponent"]: rung for rung in _model(ladder)["rungs"]}
    if opponent not in rungs:
        return "-"
    rung = rungs[opponent]
    low, high = rung["score_ci95"]
    return f"{rung['score']:.3f} [{low:.3f}, {high:.3f}]"


# Amendment 2 (after the supervised arm's ladder, before any other arm was rated): the
# registered Elo column was the ladder's Bradley-Terry fit, which with no chain games rates
# the model against the random rung alone (the engine rungs meet no one else), so any model
# that beats random 400-0 sits at 400 log10(801) = 1161, the prior's bound. The column is the
# Elo difference to Fairy-Stockfish at 100 nodes instead, 400 log10(s / (1 - s)) of the score
# s against it (`stats.elo_difference`, the package's), its interval the score interval's
# image (the map is monotone).
def elo_text(score: float) -> str:
    """The Elo difference a score means, signed and rounded: "+inf" at 1, "-inf" at 0."""
    difference = stats.elo_difference(score)
    if difference is None:
        difference = math.inf if score >= 1.0 else -math.inf
    return f"{difference:+.0f}"


def _elo_cell(ladder: dict, opponent: str) -> str:
    rungs = {rung["opponent"]: rung for rung in _model(ladder)["rungs"]}
    if opponent not in rungs:
        return "-"
    rung = rungs[opponent]
    low, high = (elo_text(x) for x in rung["score_ci95"])
    return f"{elo_text(rung['score'])} [{low}, {high}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("train", "evaluate", "report", "status", "park"))
    parser.add_argument(
        "arm", nargs="?", choices=tuple(ARMS), help="the arm (train, evaluate, park)"
    )
    parser.add_argument("--root", default="runs/learners", help="where the arms' workdirs go")
    parser.add_argument(
        "--cpu-minutes", type=float, default=60.0,
        help="CPU budget per arm, data generation included (default 60: 30 minutes of 2 cores)",
    )  # fmt: skip
    parser.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command in ("train", "evaluate", "park") and args.arm is None:
        parser.error(f"{args.command} needs an arm: one of {', '.join(ARMS)}")
    if not args.cpu_minutes > 0 or not math.isfinite(args.cpu_minutes):
        parser.error(f"--cpu-minutes must be a positive number, got {args.cpu_minutes}")
    root = Path(args.root)
    log = lab_report.clock
    if args.command == "train":
        parked = PARKED / f"{args.arm}.tar.gz"
        budget = train_arm(args.arm, root, args.cpu_minutes, args.python, log, parked=parked)
        log(f"{args.arm}: trained, final checkpoint {budget['final']}")
        log(f"next: python experiments/learners/compare.py evaluate {args.arm} --root {root}")
    elif args.command == "evaluate":
        evaluate_arm(args.arm, root, args.python, log)
        print(report(root))
    elif args.command == "report":
        print(report(root))
        seeds = seeds_report(root)
        if seeds:
            print(f"\nSecond seeds, against Fairy-Stockfish at 100 nodes:\n{seeds}")
    elif args.command == "park":
        park(root, args.arm, PARKED / f"{args.arm}.tar.gz", log)
    else:
        for arm in ARMS:
            budget = read_budget(root, arm)
            spent = sum(r["cpu_seconds"] for r in budget["stages"].values()) / 60
            done = "final" in budget
            evaluated = (root / arm / "ladder" / "ladder.json").exists()
            parked = " (parked)" if (PARKED / f"{arm}.tar.gz").exists() else ""
            print(
                f"{arm}: {spent:.1f} CPU-min spent, trained {done}, evaluated {evaluated}{parked}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
