"""What `--only report` writes: `results.md` and `results.json`, `games.png`, `transfer.png`
and `endpoints.png`; and the tables `--seed-level` prints."""

from __future__ import annotations

import json
import math

from experiments.adaptation.decisive.analysis import (
    SPEEDUP_THRESHOLD,
    UNREACHED,
    at,
    collect,
    endpoints,
    extension_cells,
    extension_summary,
    primary_variants,
    seed_level_endpoints,
    speedup_rows,
    unseen_rule_rows,
)
from experiments.adaptation.decisive.presets import GAME_ARMS, yardstick2
from experiments.adaptation.decisive.recipes import cell_procedure, procedure_name
from experiments.adaptation.decisive.store import Study, committed
from experiments.lab import report as lab_report
from experiments.lab.report import difference_text, interval
from experiments.lab.stats import minimum_detectable, t_interval


def primary_note(results: dict) -> str:
    """One line: the primary variants the analysis averages over, and a warning naming every
    variant that has cells but no primary curve (its `curve/` file missing, or no range),
    so that an average over fewer variants than played is never silent."""
    primary = primary_variants(results)
    played = sorted({c["variant"] for c in results["cells"]} - set(primary))
    line = f"primary variants: {', '.join(primary) or 'none'}"
    if played:
        left = ", ".join(played)
        line += (
            f" (warning: cells of {left} are left out: not primary, no calibrated mid with range)"
        )
    return line


def seed_level_table(results: dict, registered_seeds: int = 10) -> str:
    """`seed_level_endpoints` as markdown: per comparison the seeds, the mean difference of
    the per-seed means and its Student t 95% interval over the seeds, and Amendment 3's MDE
    at these seeds and at the `registered_seeds` it plans (projected from the same SD; "-"
    below 3 seeds)."""
    rows = [
        "| comparison (per-seed mean over the primary variants) | seeds | difference [95% CI] "
        f"| MDE | MDE at {registered_seeds} seeds |",
        "|---|---:|---|---:|---:|",
    ]
    for name, diffs in seed_level_endpoints(results):
        if diffs:
            mean, half = t_interval(diffs)
            cell = interval(mean, half)
            projected = None if "(Amendment 4" in name else registered_seeds
            mdes = [minimum_detectable(diffs), projected and minimum_detectable(diffs, projected)]
            mde = " | ".join("-" if m is None else f"{m:.3f}" for m in mdes)
            rows.append(f"| {name} | {len(diffs)} | {cell} | {mde} |")
    return "\n".join(rows)


def speedup_table(results: dict) -> str:
    """`speedup_rows` as markdown, at both registered values for unreached cells."""
    lines = [
        f"Speed-up in frames to {SPEEDUP_THRESHOLD} against the mid (Amendment 5): scratch "
        "frames / adaptation frames, geometric mean over the primary variants per seed, "
        "Student t over seeds.",
        "",
        "| arm | seeds | ratio [95% CI] | unreached at 8,192 | cells at T from the start | "
        "cells short of T |",
        "|---|---:|---|---|---:|---:|",
    ]
    low, high = (speedup_rows(results, unreached=u) for u in UNREACHED)
    for (arm, logs, started, short, cells), (_, logs8, *_) in zip(low, high, strict=True):
        if not logs:
            continue
        texts = []
        for values in (logs, logs8):
            mean, half = t_interval(values) if len(values) > 1 else (values[0], math.nan)
            texts.append(
                f"{math.exp(mean):.1f}x [{math.exp(mean - half):.1f}, {math.exp(mean + half):.1f}]"
            )
        lines.append(
            f"| {arm} | {len(logs)} | {texts[0]} | {texts[1]} | {started}/{cells} | "
            f"{short}/{cells} |"
        )
    return "\n".join(lines)


def amendment5_text(study: Study, results: dict) -> str:
    """The speed-up table, and for a preset with held-out components the D rows against the
    power preset's committed cells (at the same procedure only)."""
    parts = [speedup_table(results)]
    if study.preset.held_out_components:
        power = collect(committed("power", study.warn))
        same = (results.get("sensitivity") or {}).get("choice") == cell_procedure(
            study.preset, (results.get("sensitivity") or {}).get("choice")
        )
        if same:
            table = seed_level_table({**results, "cells": []})  # the header only
            rows = table.splitlines()[:2]
            for name, diffs in unseen_rule_rows(results, power):
                if diffs:
                    mean, half = t_interval(diffs)
                    mde = minimum_detectable(diffs)
                    rows.append(
                        f"| {name} | {len(diffs)} | {interval(mean, half)} | "
                        f"{'-' if mde is None else f'{mde:.3f}'} | - |"
                    )
            parts.append("\n".join(rows))
    return "\n\n".join(parts)


def report(study: Study, results: dict) -> str:
    """`results.md` (the current-result block, the endpoints, the score tables, the scratch
    curves, the long run, the pretraining runs) and `results.json`; returns the markdown."""
    preset = study.preset
    cells = results["cells"]
    variants = [v for v in preset.variants if any(c["variant"] == v for c in cells)]
    arms = [a for a in GAME_ARMS if any(c["arm"] == a for c in cells)]
    iterations = sorted({p["iteration"] for c in cells for p in c["points"]})
    finished_pretrain = sum(1 for v in results["pretrain"].values() if v)
    expected_cells = len(preset.variants) * len(preset.seeds) * (len(preset.arms) + 1)
    lines = [f"# The decisive adaptation study ({study.preset_name} preset)", ""]
    lines += ["## Current result", ""]
    lines.append(
        f"- Progress: {sum(1 for v in results['references'].values() if v)}/{len(preset.variants)}"
        f" references, {finished_pretrain}/{len(preset.arms) * len(preset.seeds)} pretraining"
        f" runs, {len(cells)}/{expected_cells} adaptation cells"
        + (", the long run done" if (results.get("long") or {}).get("complete") else "")
        + "."
    )
    if results.get("sensitivity"):
        s = results["sensitivity"]
        lines.append(
            f"- Adaptation procedure (and JOAT's inner loop): {procedure_name(s['choice'])}, "
            + (
                "chosen by held-out loss: "
                + ", ".join(f"{n} {m:.3f}" for n, m in s["means"].items())
                if "means" in s
                else f"{s.get('rule', 'registered')}"
            )
            + "."
        )
        cells_adapt = cell_procedure(preset, s["choice"])
        if cells_adapt != s["choice"]:  # a preset that fixes the cells' step (Amendment 5)
            lines[-1] = lines[-1].replace(
                "Adaptation procedure (and JOAT's inner loop)", "JOAT's inner loop"
            )
            lines.append(
                f"- The cells adapt with {procedure_name(cells_adapt)} (the preset's step)."
            )
    curves = {v: c for v, c in (results.get("curves") or {}).items() if c}
    primary = primary_variants(results)
    if curves:
        lines.append(
            "- Primary analysis (a mid where a random network scores <= "
            f"{preset.calibration_max:.2f}, and range >= {preset.min_range:.2f}: the final "
            "reference's score against the mid minus the random networks'): "
            + (", ".join(f"`{v}` (range {curves[v]['range']:.2f})" for v in primary) or "none")
            + ". Out (secondary only): "
            + (
                ", ".join(
                    f"`{v}` ("
                    + (f"range {c['range']:.2f}" if c.get("calibrated") else "no mid")
                    + ")"
                    for v, c in curves.items()
                    if v not in primary
                )
                or "none"
            )
            + ". Endpoints below are over the primary variants' cells (README, Amendment 2)."
        )
    if yardstick2(preset):
        lines.append(
            "- Endpoints at the pretraining-seed level (README, Amendment 3): per seed the mean "
            "over the primary variants of the paired cell difference, Student t over seeds; "
            "n = seeds, MDE at 80% power, 5% two-sided."
        )
        calibration2 = {v: c for v, c in (results.get("calibration2") or {}).items() if c}
        if calibration2:
            lines.append(
                f"- Yardstick 2 ({preset.whole_network_simulations} simulations) range "
                "(final reference minus a random network, against the mid): "
                + ", ".join(
                    f"`{v}` {c['range']:.2f}" + ("" if c["in"] else " (out)")
                    for v, c in calibration2.items()
                )
                + "."
            )
    for name, diffs in seed_level_endpoints(results) if yardstick2(preset) else endpoints(results):
        if diffs:
            lines.append(f"- {name}: {difference_text(diffs)}")
    if results.get("extension"):
        planned = extension_cells(results["extension"], preset.variants)
        lines.append(
            "- Amendment 4 (README): "
            + "; ".join(extension_summary(results["extension"]))
            + f"; {len(results['extension_cells'])}/{planned} of its cells in."
        )
        if len(results["extension_cells"]) < planned:
            lines.append(
                "- **Amendment 4 incomplete**: its rows cover the new seeds played so far; "
                "they are not findings before all its seeds are in."
            )
    if len(cells) < expected_cells:
        lines.append(
            "- **Incomplete**: the numbers above cover the cells played so far; "
            "no endpoint is a finding before all seeds are in."
        )
    lines.append("")
    head = " | ".join(f"it {i}" for i in iterations)
    if cells:
        lines += [
            "## Score against the mid reference (mean +- t 95% over seeds)",
            "",
            f"| variant | arm | {head} | zero-shot vs final | SEF at it 1 (speed-up) |",
            "|---|---|" + "---:|" * (len(iterations) + 2),
        ]
    for variant in variants:
        for arm in arms:
            rows = [c for c in cells if c["variant"] == variant and c["arm"] == arm]
            if not rows:
                continue
            texts = []
            for i in iterations:
                values = [at(i)(r) for r in rows if at(i)(r) is not None]
                if values:
                    m, h = t_interval(values)
                    texts.append(f"{m:.2f}" + (f" +- {h:.2f}" if h else ""))
                else:
                    texts.append("-")
            zs = t_interval([r["zero_shot_final"] for r in rows])
            sef = [at(1, "sef")(r) for r in rows if at(1, "sef")(r) is not None]
            speedup = [at(1, "speedup")(r) for r in rows if at(1, "speedup")(r) is not None]
            censored = any(at(1, "sef_censored")(r) for r in rows)
            sef_text = "-"
            if sef:
                sef_text = f"{sum(sef) / len(sef):,.0f}" + ("+" if censored else "")
                sef_text += f" ({sum(speedup) / len(speedup):.0f}x)" if speedup else ""
            lines.append(
                f"| `{variant}` | {arm} | " + " | ".join(texts) + f" | {zs[0]:.2f} | {sef_text} |"
            )
    if any(results["curves"].values()):
        lines += ["", "## The scratch curves (score against the mid reference)", ""]
        for variant, c in results["curves"].items():
            if c:
                lines.append(
                    f"- `{variant}` (mid = it{c['mid']}"
                    + ("" if c.get("calibrated", True) else ", NOT calibrated: no range")
                    + "): "
                    + ", ".join(f"{p['frames']:,} frames {p['score']:.2f}" for p in c["points"])
                )
    decided = [
        p["opening_decided"]
        for c in cells
        for p in c["points"]
        if p.get("opening_decided") is not None
    ]
    if decided:
        lines += [
            "",
            f"Games over before the opening ended: {100 * sum(decided) / len(decided):.1f}% "
            f"of the matches' games (mean over {len(decided)} matches).",
        ]
    long = results.get("long") or {}
    if long.get("points"):
        lines += [
            "",
            f"## Zero-shot transfer against pretraining frames (long run: {long['arm']}, seed "
            f"{preset.seeds[0]})",
            "",
            "Score against each variant's final reference, the yardstick's matches "
            "(`transfer.png`); primary variants marked *.",
            "",
            "| iteration | frames | "
            + " | ".join(f"`{v}`" + ("*" if v in primary else "") for v in preset.variants)
            + " | mean |",
            "|---:|---:|" + "---:|" * (len(preset.variants) + 1),
        ]
        for p in long["points"]:
            scores = [p["zero_shot_final"][v]["score"] for v in preset.variants]
            lines.append(
                f"| {p['iteration']} | {p['frames']:,} | "
                + " | ".join(f"{x:.2f}" for x in scores)
                + f" | {sum(scores) / len(scores):.3f} |"
            )
    if results.get("pretrain"):
        lines += [
            "",
            "## Pretraining runs",
            "",
            "| run | frames | sequential steps | optimizer | minutes |",
            "|---|---:|---:|---|---:|",
        ]
        for name, info in results["pretrain"].items():
            if info:
                lines.append(
                    f"| {name} | {info['frames']:,} | {info['sequential_steps']} "
                    f"| {info['optimizer']} | {info['seconds'] / 60:.1f} |"
                )
    text = "\n".join(lines) + "\n"
    study.path("results.md").write_text(text)
    study.path("results.json").write_text(json.dumps(results, indent=1))
    return text


def plot(study: Study, results: dict) -> None:
    """`games.png` (score against the mid reference over adaptation frames, per variant, the
    scratch curve beside the arms) and `transfer.png` (the long run, zero-shot)."""
    cells = results["cells"]
    variants = [
        v
        for v in study.preset.variants
        if results["curves"].get(v) or any(c["variant"] == v for c in cells)
    ]
    if variants:
        columns = min(3, len(variants))
        rows = math.ceil(len(variants) / columns)
        figure = lab_report.figure(4.5 * columns, 3.4 * rows)
        for index, variant in enumerate(variants):
            axes = figure.add_subplot(rows, columns, index + 1)
            c = results["curves"].get(variant)
            if c:
                xs = [max(p["frames"], 1) for p in c["points"]]
                axes.plot(
                    xs, [p["score"] for p in c["points"]], "k--", marker="s", label="scratch recipe"
                )
            for arm in GAME_ARMS:
                arm_rows = [r for r in cells if r["variant"] == variant and r["arm"] == arm]
                if not arm_rows:
                    continue
                by_frames: dict = {}
                for r in arm_rows:
                    for p in r["points"]:
                        by_frames.setdefault(max(p["frames"], 1), []).append(p["score"])
                xs = sorted(by_frames)
                axes.plot(
                    xs, [sum(by_frames[x]) / len(by_frames[x]) for x in xs], marker="o", label=arm
                )
            axes.set_xscale("log")
            axes.set_ylim(-0.02, 1.02)
            axes.set_title(variant, fontsize=8)
            axes.set_xlabel("frames of training on the variant (1 = none)")
            axes.set_ylabel("score vs mid reference")
            axes.grid(alpha=0.3)
            if index == 0:
                axes.legend(fontsize=6)
        figure.tight_layout()
        figure.savefig(study.path("games.png"))
    long = results.get("long")
    if long and long.get("points"):
        figure = lab_report.figure(5, 3.4)
        axes = figure.add_subplot(1, 1, 1)
        for variant in study.preset.variants:
            xs = [p["frames"] for p in long["points"]]
            axes.plot(
                xs,
                [p["zero_shot_final"][variant]["score"] for p in long["points"]],
                marker=".",
                label=variant,
            )
        axes.axhline(0.5, color="grey", linewidth=0.6, linestyle="--")
        axes.set_xlabel(f"pretraining frames ({long['arm']})")
        axes.set_ylabel("zero-shot score vs final reference")
        axes.legend(fontsize=6)
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(study.path("transfer.png"))
    if yardstick2(study.preset):
        plot_seed_level(study, results)


def plot_seed_level(study: Study, results: dict) -> None:
    """`endpoints.png`: every score comparison at the pretraining-seed level (the losses are on
    another scale and stay in results.md): each seed's difference as a dot, the mean with its
    Student t 95% interval as a bar, the MDE as a tick either side of 0."""
    rows = [(n, d) for n, d in seed_level_endpoints(results) if d and "loss" not in n]
    if not rows:
        return
    figure = lab_report.figure(7.5, 0.32 * len(rows) + 1.2)
    axes = figure.add_subplot(1, 1, 1)
    for y, (_, diffs) in enumerate(reversed(rows)):
        mean, half = t_interval(diffs)
        axes.scatter(diffs, [y] * len(diffs), s=9, color="grey", alpha=0.6, zorder=2)
        axes.errorbar(mean, y, xerr=half, fmt="o", color="black", capsize=3, zorder=3)
        mde = minimum_detectable(diffs)
        if mde is not None:
            axes.plot([-mde, mde], [y, y], "|", color="tab:red", markersize=8, zorder=1)
    axes.axvline(0.0, color="black", linewidth=0.6)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([f"{n} (n={len(d)})" for n, d in reversed(rows)], fontsize=6)
    axes.set_xlabel(
        "difference in score vs mid (dots: seeds; bar: mean, t 95%; red ticks: +-MDE)", fontsize=7
    )
    axes.grid(alpha=0.3, axis="x")
    figure.tight_layout()
    figure.savefig(study.path("endpoints.png"))
