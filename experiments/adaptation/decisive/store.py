"""Where a study's files live (`Study`): small committed artefacts (one JSON per finished unit,
exported 2x32 models) and a heavy workdir; a damaged artefact set aside; another preset's
committed artefacts, read only; the pack of finished pretraining runs (`--pack`, `--unpack`)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

from experiments.adaptation.decisive.presets import PRESETS, Preset
from experiments.lab import archive

ROOT = Path(__file__).resolve().parents[3]


def slug(variant: str) -> str:
    """`variant` as a file name: every character that is not a letter or digit becomes `_`."""
    return "".join(c if c.isalnum() else "_" for c in variant)


DAMAGED_SUFFIX = ".damaged"


def warn_on_stderr(line: str) -> None:
    """A study's default `warn`: the line on stderr."""
    print(line, file=sys.stderr, flush=True)


def load_artefact(path: Path) -> tuple[dict | None, str | None]:
    """(the JSON object at `path`, None) when it reads; (None, None) when it is missing;
    (None, why) when it is damaged: not UTF-8 JSON (a copy cut short, a disk that filled
    up), or JSON that is not an object (every artefact is one)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None, None
    except UnicodeDecodeError as error:
        return None, f"not UTF-8 text: {error.reason} at byte {error.start}"
    try:
        info = json.loads(text)
    except json.JSONDecodeError as error:
        size = len(text.encode("utf-8"))
        where = f"line {error.lineno} column {error.colno} of {size} bytes"
        why = error.msg.removesuffix(" at")  # ("Unterminated string starting at")
        return None, f"not valid JSON: {why[0].lower()}{why[1:]} at {where}"
    if not isinstance(info, dict):
        return None, f"not a JSON object but {type(info).__name__}"
    return info, None


@dataclasses.dataclass(frozen=True)
class Study:
    """Where a study's files live: `artefacts` (small, committed) and `workdir` (heavy).
    `read_only`: another preset's committed artefacts, read and never changed; `warn` gets
    the one-line note of each damaged artefact (the study's log during a run)."""

    preset_name: str
    preset: Preset
    workdir: Path
    artefacts: Path
    read_only: bool = False
    warn: object = dataclasses.field(default=warn_on_stderr, compare=False, repr=False)

    def path(self, *parts: str) -> Path:
        return self.artefacts.joinpath(*parts)

    def read(self, *parts: str):
        """The JSON artefact at `parts`, or None when it is missing. A damaged one counts as
        missing, so that the plan computes its unit again: it is named in one line and moved
        aside to `<name>.damaged` (kept for inspection; left where it is in read-only
        artefacts)."""
        path = self.path(*parts)
        info, damage = load_artefact(path)
        if damage is None:
            return info
        if self.read_only:
            self.warn(f"warning: damaged artefact {path} ({damage}) is not used")
            return None
        moved = set_aside(path)
        self.warn(
            f"warning: damaged artefact {path} ({damage}) moved to {moved}; its unit is "
            "computed again"
        )
        return None

    def damaged(self, *parts: str) -> str | None:
        """Why the artefact at `parts` is damaged, or None (missing or readable); moves
        nothing (`--status`)."""
        return load_artefact(self.path(*parts))[1]

    def write(self, info: dict, *parts: str) -> dict:
        path = self.path(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(info, indent=1))
        os.replace(temporary, path)  # a unit is done exactly when its JSON exists
        return info

    def reference_model(self, variant: str, iteration: int) -> Path:
        """The exported reference of `variant` at `iteration`: this preset's own, or, when its
        reference of `variant` is the cpu preset's (`pretraining.shared_references`: the same
        record, nothing copied), the cpu preset's committed one."""
        own = self.path("models", "reference", slug(variant), f"it{iteration}")
        if own.exists():
            return own
        cpu = committed("cpu", self.warn)
        mine = load_artefact(self.path("reference", f"{slug(variant)}.json"))[0]
        theirs = load_artefact(cpu.path("reference", f"{slug(variant)}.json"))[0]
        if (
            mine is not None
            and mine == theirs
            and cpu.artefacts.resolve() != self.artefacts.resolve()
        ):
            return cpu.reference_model(variant, iteration)
        return own

    def pretrained_model(self, arm: str, seed: int) -> Path:
        """The exported pretraining run (`arm`, `seed`): this preset's own, or, when its record
        says it is another preset's run (`"from"`: reused, nothing copied), that preset's."""
        own = self.path("models", "pretrain", f"{arm}_s{seed}")
        if own.exists():
            return own
        info = load_artefact(self.path("pretrain", f"{arm}_s{seed}.json"))[0] or {}
        source = info.get("from")
        if source and source != self.preset_name:
            return committed(source, self.warn).pretrained_model(arm, seed)
        return own


def set_aside(path: Path) -> Path:
    """Moves the damaged file `path` to `<path>.damaged` (`.damaged.1`, ... when taken);
    returns where."""
    moved = path.with_name(path.name + DAMAGED_SUFFIX)
    number = 0
    while moved.exists():
        number += 1
        moved = path.with_name(f"{path.name}{DAMAGED_SUFFIX}.{number}")
    os.replace(path, moved)
    return moved


def export(workdir: Path, step: int | None, out: Path, info: dict) -> None:
    """The parameters of `workdir`'s checkpoint `step` as an exported model at `out`."""
    from mmc_jax.infra import checkpoint

    _, params, config = checkpoint.load_model(workdir, step)
    meta = checkpoint.load_metadata(workdir, step)
    extra = meta.get("extra") or {}
    write_model(
        out, config, params, {"step": int(meta["step"]), "frames": extra.get("frames"), **info}
    )


def write_model(out: Path, config, params, info: dict) -> None:
    """`params` as an exported model at `out`, replacing whatever is there."""
    from mmc_jax.infra import checkpoint

    if out.exists():
        shutil.rmtree(out)
    checkpoint.export_model(out, config, params, info)


def frames_at(workdir: Path, step: int) -> int:
    """The self-play frames of `workdir`'s run at iteration `step` (its metrics record)."""
    from mmc_jax.infra import metrics

    for record in metrics.read_metrics(workdir):
        if record.get("step") == step:
            return int(record["frames"])
    raise RuntimeError(f"no metrics record of iteration {step} in {workdir}")


def committed(preset_name: str, warn=warn_on_stderr) -> Study:
    """The committed artefacts of another preset (read only; its workdir is not used)."""
    artefacts = ROOT / "experiments" / "adaptation" / f"decisive_{preset_name}"
    return Study(preset_name, PRESETS[preset_name], Path("/nonexistent"), artefacts, True, warn)


def reused(study: Study) -> Study | None:
    """The committed artefacts of the preset `study` reuses (`Preset.reuse`), or None when it
    reuses none or they are its own artefacts."""
    if not study.preset.reuse:
        return None
    source = committed(study.preset.reuse, study.warn)
    if source.artefacts.resolve() == study.artefacts.resolve():
        return None
    return source


def write_pack(study: Study, pack: Path) -> None:
    """Every finished pretraining run (its exported model and JSON) into the tar.gz `pack`
    (`experiments.lab.archive`), rewritten whole after each run, so a time limit keeps what
    finished."""
    entries = []
    for info in sorted(study.path("pretrain").glob("*.json")):
        name = info.stem
        entries.append((info, f"pretrain/{info.name}"))
        entries.append((study.pretrained_model(*_arm_seed(name)), f"models/pretrain/{name}"))
    archive.pack(Path(pack), entries, manifest={"preset": study.preset_name})


def _arm_seed(name: str) -> tuple[str, int]:
    arm, _, seed = name.rpartition("_s")
    return arm, int(seed)


def unpack(study: Study, pack: Path) -> list[str]:
    """Extracts a pack into the artefacts; returns the runs it added."""
    added = []

    def check(names: list[str], manifest: dict | None) -> None:
        if manifest.get("preset") != study.preset_name:
            raise ValueError(
                f"{pack} holds preset {manifest.get('preset')!r} runs, not {study.preset_name!r}"
            )
        for name in names:
            if name.startswith("/") or ".." in Path(name).parts:
                raise ValueError(f"{pack}: unsafe path {name!r}")
            if name.startswith("pretrain/") and not study.path(name).exists():
                added.append(Path(name).stem)

    archive.unpack(pack, study.artefacts, check, manifest=True)
    return added
