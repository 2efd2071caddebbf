"""The CPU-budget runner: an arm's stages, each a `python -m mmc_jax.train` child stopped when
the CPU time of its whole process tree (the trainer, its dataset workers, their engines)
reaches the stage's share of the arm's budget.

An arm is a list of stages `(name, config, share, overrides)`: `share` a fraction of the
budget, or None for the one stage that takes what the others leave; `{previous}` in an
override is the workdir of the stage before (its final checkpoint). The stop is SIGTERM, so
the run loop checkpoints the iteration in progress and stops. CPU time, not wall time, so that
arms are equal on a machine shared with other work. What each stage spent is kept in
`<root>/<arm>/budget.json`; a killed runner resumes the stage where its checkpoint is, counting
on from what was recorded (the CPU time since the last record, at most one poll interval, is
lost to the count: it is charged as 0).

A run outlives its machine through git: `park` (the arm stopped) packs what its resume needs
into one archive (each stage's latest checkpoint, metrics, logs, the budget record and an
unfinished stage's dataset; no older checkpoint, no event file), to be committed; on a fresh
clone `train_arm(..., parked=archive)` unpacks it when the arm's folder is absent and goes on
from it, the same run continuing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from experiments.lab import archive as archives

ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
POLL_SECONDS = 2.0


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
    """Where the arm's budget record is kept."""
    return root / arm / "budget.json"


def read_budget(root: Path, arm: str) -> dict:
    """The arm's budget record (`{"arm", "stages": {name: {"cpu_seconds", "done"}}, ...}`), an
    empty one before its first stage; SystemExit when the file is damaged."""
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
    """Writes the arm's budget record, replacing the old one atomically."""
    path = budget_path(root, arm)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(budget, indent=1) + "\n")
    os.replace(temporary, path)


def stage_limits(arm: str, total_seconds: float, arms: dict) -> list[float]:
    """CPU seconds of each stage of `arm` (of the table `arms`): its share, the rest to the
    stage without one."""
    shares = [share for _, _, share, _ in arms[arm]]
    fixed = sum(share for share in shares if share is not None)
    if fixed > 1 or sum(share is None for share in shares) > 1:
        raise ValueError(f"arm {arm}: the shares add up to {fixed}, or two stages take the rest")
    return [total_seconds * (1 - fixed if share is None else share) for share in shares]


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
        archives.pack(archive, [(root / member, str(member)) for member in members])
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

    def check(names: list[str], manifest: dict | None) -> None:
        if not names or any(Path(n).parts[0] != arm for n in names):
            raise SystemExit(f"error: {archive} does not hold a parked {arm}")

    try:
        archives.unpack(archive, root, check)
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
    arms: dict,
    parked: Path | None = None,
    prepay: Callable[[Path, str, str, Path], dict | None] | None = None,
) -> dict:
    """Runs (or resumes) every stage of `arm` (of the table `arms`) to its CPU budget; returns
    the budget record. `parked`: an archive of `park` to start from when the arm's
    folder is absent. `prepay(root, arm, stage, workdir)`: called once before a stage starts;
    a dict it returns (the stage's data made by another run, and its charge in
    `cpu_seconds`) goes into the stage's record, None leaves the stage as it is."""
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
        paid = None if prepay is None or "prepaid" in record else prepay(root, arm, name, workdir)
        if paid is not None:
            record.update(paid)
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
