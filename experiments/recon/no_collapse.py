"""Does recon self-play still collapse? The final checkpoint of a CPU-budgeted `train --config
configs/recon.py:cpu` run against information-gain sensing + PIMC (issue 47 item 4). The protocol
is registered in experiments/recon/README.md ("No collapse") before the run.

    python experiments/recon/no_collapse.py train        # to 60 CPU-minutes; resumable
    python experiments/recon/no_collapse.py evaluate     # 100 games of the final checkpoint
    python experiments/recon/no_collapse.py status       # spent, trained, evaluated; the curve
    python experiments/recon/no_collapse.py park         # a stopped run into git; `train` resumes

`--run N` picks a registered run (RUNS; 1 by default), each in its own folder.

`train` runs `python -m mmc_jax.train` as a child and stops it (SIGTERM: the iteration in
progress is checkpointed) when the CPU time of its process tree reaches `--cpu-minutes`, with
the lab's CPU-budget runner (`experiments.lab.runner`, the learners comparison's); what was
spent is kept in
`<root>/recon/budget.json`, so a killed `train` resumes counting. CPU time, not wall time: the
machine is shared. `evaluate` plays the final checkpoint, never a snapshot chosen afterwards,
with experiments/recon/run.py. `park` packs a stopped run into
`experiments/recon/parked/<folder>.tar.gz` to commit; `train` on a fresh clone goes on from it
(the learners comparison's `park`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `experiments.lab` and `mmc_jax` when run as a file
    sys.path.insert(0, str(ROOT))
from experiments.lab import report, runner  # noqa: E402

# The registered runs (experiments/recon/README.md, "No collapse"), each one stage: the cpu
# preset (its periodic evaluation against entropy-pimc every 25 iterations included, and paid
# from the budget; `num_iterations` only a cap) with the run's overrides, and its default folder.
# Runs 1-3 ran before the inverse-CDF minibatch sampler: they keep the sampler they drew with
# (the same distribution, other draws), so that each reproduces bit for bit.
GUMBEL = "--config.learner.sampler=gumbel"
RUNS = {
    1: ([GUMBEL], "recon_no_collapse"),  # the preset as it is
    2: ([GUMBEL, "--config.selfplay.explore=0.1"], "recon_no_collapse_run2"),  # exploration
    # Run 2 did not collapse but scored 0.51: its guard plus replay across 4 iterations.
    3: (
        [GUMBEL, "--config.selfplay.explore=0.1", "--config.replay.iterations=4"],
        "recon_no_collapse_run3",
    ),
    # Run 3 scored 0.59: its recipe with the measured speed levers (the inverse-CDF sampler,
    # the preset's default now; refilled self-play slots at half the slots), to buy iterations.
    4: (
        [
            "--config.selfplay.explore=0.1",
            "--config.replay.iterations=4",
            "--config.selfplay.refill=True",
            "--config.selfplay.games=32",
        ],
        "recon_no_collapse_run4",
    ),
}


def arms(run: int) -> dict:
    overrides = ["--config.num_iterations=100000", *RUNS[run][0]]
    return {"recon": [("recon", "configs/recon.py:cpu", None, overrides)]}


CPU_MINUTES = 60.0
EVALUATION = ["--agents", "learned,entropy-pimc", "--first-only", "--games", "100",
              "--max-plies", "100", "--seed", "0"]  # fmt: skip
# Collapse, as registered: at least 90% of an iteration's self-play games end undecided (no
# king taken: `selfplay/decisive`, before the material adjudication), 10 iterations in a row.
PASSIVE_SHARE, PASSIVE_RUN = 0.9, 10


def parked_archive(run: int) -> Path:
    return ROOT / "experiments" / "recon" / "parked" / f"{RUNS[run][1]}.tar.gz"


def final_workdir(root: Path) -> Path:
    return root / "recon" / "recon"


def evaluation_command(root: Path) -> list[str]:
    out = ["--checkpoint", str(final_workdir(root)), "--out", str(root / "evaluation")]
    return [sys.executable, "experiments/recon/run.py", *EVALUATION, *out]


def collapse(records: list[dict]) -> int | None:
    """The first iteration of the first run of `PASSIVE_RUN` passive iterations (None: none)."""
    run = 0
    for record in records:
        passive = 1.0 - float(record.get("selfplay/decisive", 1.0)) >= PASSIVE_SHARE
        run = run + 1 if passive else 0
        if run == PASSIVE_RUN:
            return int(record["iteration"]) - PASSIVE_RUN + 1
    return None


def status(root: Path) -> str:
    from mmc_jax.infra import metrics

    budget = runner.read_budget(root, "recon")
    spent = sum(s.get("cpu_seconds", 0.0) for s in budget.get("stages", {}).values()) / 60
    records = metrics.read_metrics(final_workdir(root))
    lines = [f"spent {spent:.1f} of {CPU_MINUTES:.0f} CPU-min, {len(records)} iterations"]
    for record in records:
        if any(key.startswith("eval/") for key in record):
            scores = {k: round(v, 3) for k, v in record.items() if k.startswith("eval/")}
            lines.append(f"iteration {record['iteration']}: {json.dumps(scores)}")
    first = collapse(records)
    lines.append("no collapse so far" if first is None else f"collapsed from iteration {first}")
    results = root / "evaluation" / "results.json"
    lines.append(f"evaluated: {results}" if results.exists() else "not evaluated")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python experiments/recon/no_collapse.py",
        description="The final checkpoint of a CPU-budgeted recon self-play run against "
        "information-gain sensing + PIMC (issue 47 item 4).",
    )
    parser.add_argument("action", choices=("train", "evaluate", "status", "park"))
    parser.add_argument(
        "--run", type=int, choices=sorted(RUNS), default=1, help="the registered run (default 1)"
    )
    parser.add_argument(
        "--root", type=Path, help="the run's folder (default runs/<the run's name>)"
    )
    args = parser.parse_args(argv)
    if args.root is None:
        args.root = ROOT / "runs" / RUNS[args.run][1]
    args.root.mkdir(parents=True, exist_ok=True)
    log = report.clock
    if args.action == "train":
        runner.train_arm(
            "recon",
            args.root,
            CPU_MINUTES,
            sys.executable,
            log,
            arms=arms(args.run),
            parked=parked_archive(args.run),
        )
        log(f"trained: {final_workdir(args.root)}; next: no_collapse.py evaluate --run {args.run}")
    elif args.action == "park":
        runner.park(args.root, "recon", parked_archive(args.run), log)
        return 0
    elif args.action == "evaluate":
        if not runner.read_budget(args.root, "recon").get("final"):
            parser.error(f"no finished run under {args.root} (run `train` first)")
        done = subprocess.run(evaluation_command(args.root), cwd=ROOT, check=False)
        if done.returncode != 0:
            raise SystemExit(f"error: experiments/recon/run.py exited {done.returncode}")
    print(status(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
