"""The learners at an equal CPU budget (issue 48): AlphaZero, supervised from Fairy-Stockfish,
supervised then AlphaZero, and TD(λ), each trained on Gardner for the same CPU time (data
generation included), then rated on the engine ladder. The protocol is registered in
experiments/learners/README.md before any result.

    python experiments/learners/compare.py train supervised          # one arm, resumable
    python experiments/learners/compare.py evaluate supervised       # its ladder (FSF 100/1000)
    python experiments/learners/compare.py report                    # the table, every arm
    python experiments/learners/compare.py status
    python experiments/learners/compare.py park supervised           # a run in progress, to git

`train` runs the arm's stages (`ARMS`) as `python -m mmc_jax.train` children and stops each when
the CPU time of its whole process tree (the trainer, its dataset workers, their engines) reaches
the stage's share of `--cpu-minutes`: SIGTERM, so the run loop checkpoints the iteration in
progress and stops. CPU time, not wall time, so that the arms are equal on a machine shared with
other work. What each stage spent is kept in `<root>/<arm>/budget.json`; a killed `train`
resumes the stage where its checkpoint is, counting on from what was recorded (the CPU time
since the last record, at most one poll interval, is lost to the count: it is charged as 0).

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
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
POLL_SECONDS = 2.0

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


def process_tree_cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds of `root_pid` and every live descendant, each with the
    children it has waited for (so finished workers count through their parent)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
        parents[int(entry)] = int(fields[1])
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        times[int(entry)] = (utime + stime + cutime + cstime) / TICKS
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(times.get(pid, 0.0) for pid in tree)


def budget_path(root: Path, arm: str) -> Path:
    return root / arm / "budget.json"


def read_budget(root: Path, arm: str) -> dict:
    path = budget_path(root, arm)
    if not path.exists():
        return {"arm": arm, "stages": {}}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SystemExit(
            f"error: {path} is damaged ({error}); the arm's spent time is unknown"
        ) from None


def write_budget(root: Path, arm: str, budget: dict) -> None:
    path = budget_path(root, arm)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(budget, indent=1) + "\n")
    os.replace(temporary, path)


def stage_limits(arm: str, total_seconds: float, arms: dict | None = None) -> list[float]:
    """CPU seconds of each stage of `arm` (of `arms`, default `ARMS`): its share, the rest to
    the stage without one."""
    shares = [share for _, _, share, _ in (ARMS if arms is None else arms)[arm]]
    fixed = sum(share for share in shares if share is not None)
    if fixed > 1 or sum(share is None for share in shares) > 1:
        raise ValueError(f"arm {arm}: the shares add up to {fixed}, or two stages take the rest")
    return [total_seconds * (1 - fixed if share is None else share) for share in shares]


def prepay(root: Path, arm: str, stage: str, workdir: Path) -> dict:
    """Copies the dataset PREPAID names into `workdir` (the stage not started yet) and returns
    the budget record's new fields: what is charged for it and where it came from."""
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


def _parked_members(root: Path, arm: str) -> list[Path]:
    """The files of `root/arm` a resume needs, relative to `root`: per stage the latest
    checkpoint (the highest step), metrics, plots, logs; a stage's dataset while the stage
    is unfinished (its manifest only once done); the budget record. No lock, no event file."""
    budget = read_budget(root, arm)
    members = []
    for path in sorted((root / arm).rglob("*")):
        if not path.is_file():
            continue
        parts = path.relative_to(root / arm).parts
        if parts[-1] in ("lock.json", "budget.json.tmp") or "tensorboard" in parts:
            continue
        if len(parts) >= 3 and parts[1] == "checkpoints":
            steps = [int(p.name) for p in (root / arm / parts[0] / "checkpoints").iterdir()
                     if p.name.isdigit()]  # fmt: skip
            if not parts[2].isdigit() or int(parts[2]) != max(steps):
                continue
        if len(parts) >= 3 and parts[1] == "dataset" and parts[2] != "manifest.json":
            if budget["stages"].get(parts[0], {}).get("done"):
                continue
        members.append(path.relative_to(root))
    return members


def park(root: Path, arm: str, archive: Path, log) -> Path:
    """Packs what resuming `arm` needs (`_parked_members`) into `archive` (replaced
    atomically), holding each stage's workdir lock so that a live run is refused."""
    from mmc_jax.infra import storage

    if not budget_path(root, arm).exists():
        raise SystemExit(f"error: {root / arm} holds no run of {arm} to park")
    stages = [p for p in sorted((root / arm).iterdir()) if (p / "lock.json").exists()]
    with contextlib.ExitStack() as locks:
        for stage in stages:
            try:
                locks.enter_context(storage.workdir_lock(stage))
            except storage.WorkdirBusy as error:
                raise SystemExit(f"error: {error}; stop `train {arm}` first") from None
        members = _parked_members(root, arm)
        archive.parent.mkdir(parents=True, exist_ok=True)
        temporary = archive.with_name(archive.name + ".tmp")
        with tarfile.open(temporary, "w:gz") as tar:
            for member in members:
                tar.add(root / member, arcname=str(member))
        os.replace(temporary, archive)
    budget = read_budget(root, arm)
    spent = sum(r["cpu_seconds"] for r in budget["stages"].values()) / 60
    size = archive.stat().st_size / 1e6
    log(f"{arm}: parked at {spent:.1f} CPU-min in {archive} ({size:.1f} MB, {len(members)} "
        f"files); commit it, and `train {arm}` on a fresh clone resumes it")  # fmt: skip
    return archive


def unpark(root: Path, arm: str, archive: Path, log) -> bool:
    """Unpacks `archive` into `root` when the arm's folder is absent (never over a run
    that is there); returns whether it did."""
    if (root / arm).exists() or not archive.exists():
        return False
    root.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            names = tar.getnames()
            if not names or any(Path(n).parts[0] != arm for n in names):
                raise SystemExit(f"error: {archive} does not hold a parked {arm}")
            tar.extractall(root, filter="data")
    except (tarfile.TarError, OSError, EOFError) as error:
        shutil.rmtree(root / arm, ignore_errors=True)
        raise SystemExit(f"error: {archive} cannot be unpacked ({error})") from None
    log(f"{arm}: resumed from {archive} (parked: delete it once the arm is rated)")
    return True


class _StopSignals:
    """SIGTERM / SIGINT to the runner while a stage's child runs: the child is asked to stop
    (SIGTERM: it checkpoints the iteration in progress) and the runner keeps counting its CPU
    time until it has, instead of dying with the work since its last poll uncounted."""

    def __init__(self, child: subprocess.Popen):
        self.child, self.by, self.previous = child, None, {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self.previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        del frame
        self.by = self.by or signal.Signals(signum).name
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def __enter__(self) -> _StopSignals:
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}


def train_arm(
    arm: str,
    root: Path,
    cpu_minutes: float,
    python: str,
    log,
    arms: dict | None = None,
    parked: Path | None = None,
) -> dict:
    """Runs (or resumes) every stage of `arm` to its CPU budget; returns the budget record.
    `arms`: the table of arms (default `ARMS`; experiments/recon/no_collapse.py passes its own).
    `parked`: an archive of `park` to start from when the arm's folder is absent."""
    arms = ARMS if arms is None else arms
    if parked is not None:
        unpark(root, arm, parked, log)
    budget = read_budget(root, arm)
    if budget.get("cpu_minutes", cpu_minutes) != cpu_minutes:
        raise SystemExit(
            f"error: {arm} was started with --cpu-minutes {budget['cpu_minutes']}; "
            f"resume with the same budget or use another --root"
        )
    budget["cpu_minutes"] = cpu_minutes
    limits = stage_limits(arm, 60 * cpu_minutes, arms)
    previous = None
    for (name, config, _, overrides), limit in zip(arms[arm], limits, strict=True):
        workdir = root / arm / name
        record = budget["stages"].setdefault(name, {"cpu_seconds": 0.0, "done": False})
        if record["done"]:
            log(f"{arm}/{name}: done ({record['cpu_seconds'] / 60:.1f} CPU-min)")
            previous = workdir
            continue
        if (arm, name) in PREPAID and "prepaid" not in record:
            record.update(prepay(root, arm, name, workdir))
            write_budget(root, arm, budget)
            log(f"{arm}/{name}: dataset of {record['prepaid_from']}, charged "
                f"{record['prepaid'] / 60:.1f} CPU-min")  # fmt: skip
        args = [o.replace("{previous}", str(previous)) for o in overrides]
        command = [python, "-m", "mmc_jax.train", f"--config={config}", f"--workdir={workdir}"]
        command += args
        left = limit - record["cpu_seconds"]
        log(f"{arm}/{name}: {left / 60:.1f} of {limit / 60:.1f} CPU-min left: {' '.join(command)}")
        workdir.mkdir(parents=True, exist_ok=True)
        with open(workdir.parent / f"{name}.log", "a", encoding="utf-8") as out:
            child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            spent_before, stopped, started = record["cpu_seconds"], False, time.time()
            used = 0.0
            last_note = started
            with _StopSignals(child) as interrupted:
                while child.poll() is None:
                    time.sleep(POLL_SECONDS)
                    # Never down: a child that exits before its parent waits for it takes its
                    # CPU time out of the tree's count; what was counted stays spent.
                    used = max(used, process_tree_cpu_seconds(child.pid))
                    record["cpu_seconds"] = spent_before + used
                    write_budget(root, arm, budget)
                    if not stopped and record["cpu_seconds"] >= limit:
                        log(f"{arm}/{name}: budget reached ({limit / 60:.1f} CPU-min); stopping")
                        child.send_signal(signal.SIGTERM)
                        stopped = True
                    if time.time() - last_note > 120:
                        last_note = time.time()
                        rate = used / max(time.time() - started, 1e-9)
                        eta = (limit - record["cpu_seconds"]) / max(rate, 1e-9)
                        log(
                            f"{arm}/{name}: {record['cpu_seconds'] / 60:.1f} of {limit / 60:.1f} "
                            f"CPU-min ({rate:.2f} cores), about {eta / 60:.0f} min to go"
                        )
        if interrupted.by and not stopped:  # counted to the child's end; not done
            record["wall_seconds"] = record.get("wall_seconds", 0.0) + time.time() - started
            write_budget(root, arm, budget)
            raise SystemExit(
                f"{arm}/{name}: stopped by {interrupted.by} at {record['cpu_seconds'] / 60:.1f} "
                f"of {limit / 60:.1f} CPU-min, its iteration in progress checkpointed; "
                f"`train {arm}` resumes it, `park {arm}` packs it for git"
            )
        if child.returncode not in (0, -signal.SIGTERM) and not stopped:
            raise SystemExit(
                f"error: {arm}/{name} failed (exit {child.returncode}); see "
                f"{workdir.parent / (name + '.log')}; re-run to resume"
            )
        record["wall_seconds"] = record.get("wall_seconds", 0.0) + time.time() - started
        if not (workdir / "checkpoints").is_dir():  # e.g. a budget spent on the dataset alone
            write_budget(root, arm, budget)
            raise SystemExit(
                f"error: {arm}/{name} spent its {limit / 60:.1f} CPU-min without saving a "
                f"checkpoint (see {workdir.parent / (name + '.log')}): nothing to rate or to "
                "start from; give the stage more budget or less to do"
            )
        record["done"] = True
        write_budget(root, arm, budget)
        previous = workdir
    budget["final"] = str(previous)
    write_budget(root, arm, budget)
    return budget


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
# s against it, its interval the score interval's image (the map is monotone).
def elo_difference(score: float) -> float:
    """400 log10(s / (1 - s)): the Elo difference a score `score` means (+-inf at 1 and 0)."""
    if score <= 0.0:
        return -math.inf
    if score >= 1.0:
        return math.inf
    return 400.0 * math.log10(score / (1.0 - score))


def _elo_cell(ladder: dict, opponent: str) -> str:
    rungs = {rung["opponent"]: rung for rung in _model(ladder)["rungs"]}
    if opponent not in rungs:
        return "-"
    rung = rungs[opponent]
    low, high = (elo_difference(x) for x in rung["score_ci95"])
    return f"{elo_difference(rung['score']):+.0f} [{low:+.0f}, {high:+.0f}]"


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

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

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
