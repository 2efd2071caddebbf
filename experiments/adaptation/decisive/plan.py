"""The plan: every stage in order until done or out of time (`run`; Amendment 4's new seeds
in `extend`), and what is done (`status`). The stages are called through their modules, so
that a test can stand in for one."""

from __future__ import annotations

import dataclasses
import time

from experiments.adaptation.decisive import games, pretraining
from experiments.adaptation.decisive.analysis import (
    decide_extension,
    extension_cells,
    extension_runs,
    extension_summary,
)
from experiments.adaptation.decisive.recipes import cell_procedure, procedure_name
from experiments.adaptation.decisive.store import DAMAGED_SUFFIX, Study, slug


def run(
    study: Study,
    log,
    *,
    only: str = "all",
    budget_minutes: float = 0.0,
    pack=None,
    seeds=None,
    variants=None,
) -> bool:
    """Runs the stages in order until done or out of time; True when everything is done."""
    preset = study.preset
    started = time.time()
    requested = seeds
    seeds = tuple(s for s in seeds or preset.seeds if s in preset.seeds)
    variants = variants or preset.variants

    def out_of_time() -> bool:
        return bool(budget_minutes) and time.time() - started > 60 * budget_minutes

    def want(stage: str) -> bool:
        return only == "all" or only == stage

    complete = True
    if want("references") or want("all"):
        for v in variants:
            if out_of_time():
                return False
            pretraining.references(study, v, log)
    if want("pretrain"):
        # The joint and gardner arms do not depend on the procedure: the seed-0 ones first
        # (the procedure's stage adapts them), and all of them in a pretraining-only run.
        for seed in seeds if only == "pretrain" else seeds[:1]:
            for arm in [a for a in preset.arms if not a.startswith("joat")]:
                if out_of_time():
                    return False
                pretraining.pretrain(study, arm, seed, None, log, pack)
    if preset.procedure_rule == "fixed":
        pretraining.sensitivity(study, log)  # (registered: written at once)
    if only == "pretrain" and study.read("sensitivity.json") is None:
        # A pretraining-only run (an accelerator's) does not decide the procedure. The JOAT
        # arms wait for `--only sensitivity` on the CPU and a second call.
        if preset.procedure_rule == "training_tasks":
            log("the JOAT arms wait for the step-size stage (`--only sensitivity`, Amendment 3)")
        else:
            log("the JOAT arms wait for the sensitivity stage (it needs the references)")
        return False
    if want("sensitivity") or want("all"):
        if out_of_time():
            return False
        pretraining.sensitivity(study, log)
    choice = (study.read("sensitivity.json") or {}).get("choice")
    for seed in seeds:
        if want("pretrain") or want("all"):
            for arm in preset.arms:
                if out_of_time():
                    return False
                pretraining.pretrain(study, arm, seed, choice, log, pack)
        if want("games") or want("all"):
            for v in variants:
                if out_of_time():
                    return False
                games.curve(study, v, log)
                games.whole_network_calibration(study, v, log)  # (a preset with yardstick 2)
                for arm in ("scratch", *preset.arms):
                    if arm != "scratch" and study.read("pretrain", f"{arm}_s{seed}.json") is None:
                        complete = False
                        continue
                    if out_of_time():
                        return False
                    games.cell(study, arm, seed, v, cell_procedure(preset, choice), log)
    if preset.extend and only in ("all", "pretrain", "games"):
        done = extend(study, log, only, choice, requested, variants, out_of_time, pack)
        complete = done and complete
    if want("long") or want("all"):
        if out_of_time():
            return False
        complete = games.long_run(study, choice, log) is not None and complete
    return complete


def extend(study: Study, log, only, choice, requested, variants, out_of_time, pack) -> bool:
    """Amendment 4's runs (`run`'s stages for its new seeds: the extended comparisons' arms'
    pretraining and their cells, no scratch); True when they are all done, False while the
    decision waits for the registered cells or out of time."""
    decision = decide_extension(study, log)
    if decision is None:
        return False
    complete = True
    for seed, arms in extension_runs(decision):
        if requested and seed not in requested:
            continue
        if only in ("all", "pretrain"):
            for arm in arms:
                if out_of_time():
                    return False
                pretraining.pretrain(study, arm, seed, choice, log, pack)
        if only in ("all", "games"):
            for v in variants:
                for arm in arms:
                    if study.read("pretrain", f"{arm}_s{seed}.json") is None:
                        complete = False
                        continue
                    if out_of_time():
                        return False
                    games.cell(study, arm, seed, v, cell_procedure(study.preset, choice), log)
    return complete


def extension_status(decision: dict | None, registered: int, done) -> list[str]:
    """`status`'s lines for Amendment 4: its decision per comparison and its pretraining runs
    (`done(*parts)` the state of one artefact)."""
    if not decision:
        return [f"Amendment 4: - (decided once the {registered} registered seeds' cells are in)"]
    lines = [f"Amendment 4 {line}" for line in extension_summary(decision)]
    for seed, arms in extension_runs(decision):
        lines += [f"pretrain {a} s{seed}: {done('pretrain', f'{a}_s{seed}.json')}" for a in arms]
    return lines


def status(study: Study) -> str:
    """What is done, one line per unit; a damaged artefact is not done and is named in a line
    of its own (it is moved aside only by a run, which computes its unit again)."""
    preset = study.preset
    notes: list[str] = []
    # Reads nothing into place and moves nothing: another preset's damaged files are noted.
    view = dataclasses.replace(study, read_only=True, warn=notes.append)
    damaged: list[str] = []

    def read(*parts: str):
        path = study.path(*parts)
        damage = study.damaged(*parts)
        if damage:
            damaged.append(
                f"damaged: {path} ({damage}); the next run moves it to "
                f"{path.name}{DAMAGED_SUFFIX} and computes its unit again"
            )
            return None
        return view.read(*parts)

    def done(*parts: str) -> str:
        before = len(damaged)
        if read(*parts):
            return "done"
        return "- (damaged)" if len(damaged) > before else "-"

    lines = []
    for v in preset.variants:
        lines.append(f"reference {v}: {done('reference', f'{slug(v)}.json')}")
        lines.append(f"curve {v}: {done('curve', f'{slug(v)}.json')}")
    choice = (read("sensitivity.json") or {}).get("choice")
    if preset.procedure_rule == "fixed":  # registered: known before the stage writes it
        choice = {"optimizer": "sgd", "learning_rate": float(preset.fixed_step)}
    for s in preset.seeds:
        for a in preset.arms:
            state = done("pretrain", f"{a}_s{s}.json")
            if state == "-" and a.startswith("joat") and choice is None:
                state = "- (waits for the procedure)"
            elif state == "-":
                source = pretraining.reusable(view, a, s, choice)
                state = f"- (the {source.preset_name} preset's run is reused)" if source else "-"
            lines.append(f"pretrain {a} s{s}: {state}")
    rule = {"training_tasks": "training tasks", "fixed": "registered"}.get(
        preset.procedure_rule, "held-out"
    )
    lines.append(
        f"sensitivity ({rule}): "
        + (f"done, {procedure_name(choice)}" if choice else done("sensitivity.json"))
    )
    total = len(preset.variants) * len(preset.seeds) * (len(preset.arms) + 1)
    if preset.extend:
        decision = read("extension.json")
        lines += extension_status(decision, len(preset.seeds), done)
        total += extension_cells(decision, preset.variants) if decision else 0
    folder = study.path("cells")
    names = sorted(path.name for path in folder.glob("*.json")) if folder.is_dir() else []
    have = sum(read("cells", name) is not None for name in names)
    broken = len(names) - have
    lines.append(f"cells: {have}/{total}" + (f" ({broken} damaged)" if broken else ""))
    long = read("long.json")
    if not preset.long_iterations:
        lines.append("long run: none in this preset")
    else:
        lines.append(f"long run: {'done' if long and long.get('complete') else '-'}")
    return "\n".join(lines + damaged + notes)
