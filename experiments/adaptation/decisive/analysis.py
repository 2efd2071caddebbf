"""The registered analysis over the finished cells: AUC and scratch-equivalent frames, the
paired endpoints over (variant, seed) cells, the comparisons at the pretraining-seed level
(Amendment 3), Amendment 4's decision and rows, Amendment 5's speed-up and D rows. Student t
intervals and MDEs come from `experiments.lab.stats`."""

from __future__ import annotations

import dataclasses
import math

from experiments.adaptation.decisive.presets import ARMS, GAME_ARMS, yardstick, yardstick2
from experiments.adaptation.decisive.store import Study, slug
from experiments.lab.stats import minimum_detectable, seeds_needed, standard_deviation


def scratch_equivalent_frames(points: list[tuple[int, float]], score: float) -> tuple[float, bool]:
    """(frames, censored): the frames at which the scratch curve `points` [(frames, score)]
    first reaches `score`, the curve taken as its running maximum and linear between points;
    0 for a score at or below the curve's start, and (the last frames, True) for a score the
    curve never reaches."""
    points = sorted(points)
    best = []
    top = -math.inf
    for frames, s in points:
        top = max(top, s)
        best.append((frames, top))
    if score <= best[0][1]:
        return float(best[0][0]), False
    for (f0, s0), (f1, s1) in zip(best, best[1:], strict=False):
        if s1 >= score > s0:
            return f0 + (f1 - f0) * (score - s0) / (s1 - s0), False
    return float(best[-1][0]), True


def auc(points: list[tuple[int, float]]) -> float:
    """Mean score over the adaptation iterations [(iteration, score)], trapezoidal."""
    points = sorted(points)
    if len(points) == 1:
        return points[0][1]
    area = sum(
        (i1 - i0) * (s0 + s1) / 2 for (i0, s0), (i1, s1) in zip(points, points[1:], strict=False)
    )
    return area / (points[-1][0] - points[0][0])


def collect(study: Study) -> dict:
    """Everything finished so far, as one JSON-able dict."""
    preset = study.preset
    cells = {}
    for path in sorted(study.path("cells").glob("*.json")) if study.path("cells").is_dir() else []:
        c = study.read("cells", path.name)
        if c is None:  # damaged: moved aside, played again by the next run
            continue
        if c.get("yardstick") == yardstick(preset) and c.get("yardstick2") == yardstick2(preset):
            cells[(c["arm"], c["seed"], c["variant"])] = c  # (other yardsticks': history)
    decision = study.read("extension.json") if preset.extend else None
    curves = {v: study.read("curve", f"{slug(v)}.json") for v in preset.variants}
    curves = {
        v: c if c and c.get("yardstick") == yardstick(preset) else None for v, c in curves.items()
    }
    out = {
        "preset": study.preset_name,
        "settings": dataclasses.asdict(preset),
        "references": {v: study.read("reference", f"{slug(v)}.json") for v in preset.variants},
        "pretrain": {
            f"{a}_s{s}": study.read("pretrain", f"{a}_s{s}.json")
            for a in preset.arms
            for s in preset.seeds
        },
        "sensitivity": study.read("sensitivity.json"),
        "curves": curves,
        "cells": [],
        "long": study.read("long.json"),
        "calibration2": {v: study.read("curve2", f"{slug(v)}.json") for v in preset.variants}
        if yardstick2(preset)
        else None,
    }
    if decision:
        # Amendment 4's seeds: their cells apart, so every registered number stays the
        # registered seeds' (the extended comparisons read both lists, `seed_level_endpoints`).
        out["extension"] = {
            **decision,
            "pretrain": {
                f"{a}_s{s}": study.read("pretrain", f"{a}_s{s}.json")
                for s, arms in extension_runs(decision)
                for a in arms
            },
        }
        out["extension_cells"] = []
    for (arm, seed, variant), c in cells.items():
        row = {"arm": arm, "seed": seed, "variant": variant, "points": []}
        curve_points = None
        if curves.get(variant):
            curve_points = [(p["frames"], p["score"]) for p in curves[variant]["points"]]
        for p in c["points"]:
            score = p["matches"]["reference"]["score"]
            entry = {
                "iteration": p["iteration"],
                "frames": p["frames"],
                "score": score,
                "greedy": p["matches"].get("greedy", {}).get("score"),
                "opening_decided": p["matches"]["reference"].get("opening_decided"),
            }
            if curve_points:
                sef, censored = scratch_equivalent_frames(curve_points, score)
                entry.update(sef=sef, sef_censored=censored)
                if p["frames"]:
                    entry["speedup"] = sef / p["frames"]
            if "whole_network" in p:
                entry["score16"] = p["whole_network"]["match"]["score"]
                entry["policy_loss"] = p["whole_network"]["policy_loss"]
                entry["value_loss"] = p["whole_network"]["value_loss"]
            row["points"].append(entry)
        row["auc"] = auc([(p["iteration"], p["score"]) for p in row["points"]])
        for field in ("score16", "policy_loss", "value_loss"):
            if all(field in p for p in row["points"]):
                row[f"auc_{field}"] = auc([(p["iteration"], p[field]) for p in row["points"]])
        row["zero_shot_final"] = c["zero_shot_final"]["score"]
        if seed in preset.seeds:
            out["cells"].append(row)
        elif decision and arm in dict(extension_runs(decision)).get(seed, ()):
            out["extension_cells"].append(row)
    return out


def paired(results: dict, a: str, b: str, metric, b_metric=None) -> list[float]:
    """a - b over the (variant, seed) cells both arms have; `metric(row)` a number or None."""
    b_metric = b_metric or metric
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    diffs = []
    for (arm, seed, variant), row in by.items():
        other = by.get((b, seed, variant))
        if arm != a or other is None:
            continue
        x, y = metric(row), b_metric(other)
        if x is not None and y is not None:
            diffs.append(x - y)
    return diffs


def at(iteration: int, field: str = "score"):
    """The metric `row -> value of `field` at adaptation iteration `iteration`` (None when the
    cell has no such point or field)."""

    def metric(row):
        for p in row["points"]:
            if p["iteration"] == iteration:
                return p.get(field)
        return None

    return metric


def primary_variants(results: dict) -> list[str]:
    """The variants of the primary analysis: a calibrated mid with range (Amendment 2)."""
    return [v for v, c in (results.get("curves") or {}).items() if c and c.get("primary")]


def endpoints(results: dict) -> list[tuple[str, list[float]]]:
    """The pre-registered endpoints over the primary variants: (name, paired differences)."""
    primary = set(primary_variants(results))
    results = {**results, "cells": [c for c in results["cells"] if c["variant"] in primary]}
    rows = []
    for arm in ARMS:
        rows.append((f"P1 {arm} - scratch, iteration 0", paired(results, arm, "scratch", at(0))))
        rows.append(
            (f"P1 {arm} - scratch, AUC", paired(results, arm, "scratch", lambda r: r["auc"]))
        )
    for suffix in ("", "+desc"):
        rows.append(
            (
                f"P2 joat{suffix} - joint{suffix}, iteration 1",
                paired(results, f"joat{suffix}", f"joint{suffix}", at(1)),
            )
        )
        rows.append(
            (
                f"P2 joat{suffix} - joint{suffix}, AUC",
                paired(results, f"joat{suffix}", f"joint{suffix}", lambda r: r["auc"]),
            )
        )
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    interaction = []
    for (arm, seed, variant), row in by.items():
        if arm != "joat+desc":
            continue
        others = [by.get((a, seed, variant)) for a in ("joint+desc", "joat", "joint")]
        if all(others):
            interaction.append(
                (row["auc"] - others[0]["auc"]) - (others[1]["auc"] - others[2]["auc"])
            )
    rows.append(("P2 interaction (Reptile gain with - without descriptor), AUC", interaction))
    for iteration in (1, 2):
        rows.append(
            (
                f"P3 joint+desc at 0 - joat at {iteration}",
                paired(results, "joint+desc", "joat", at(0), at(iteration)),
            )
        )
    # The Gardner-only control (secondary, added after the endpoints): does pretraining on
    # one game transfer, and does the rule space add to it?
    if any(c["arm"] == "gardner" for c in results["cells"]):
        for name, a, b in (
            ("C1 gardner - scratch", "gardner", "scratch"),
            ("C2 joint - gardner", "joint", "gardner"),
        ):
            rows.append((f"{name}, iteration 0", paired(results, a, b, at(0))))
            rows.append((f"{name}, AUC", paired(results, a, b, lambda r: r["auc"])))
    return rows


def seed_level(
    results: dict, a: str, b: str, metric, variants: list[str] | None = None
) -> list[float]:
    """Amendment 3's analysis unit: for each pretraining seed, the mean over `variants` (default
    the primary ones) of a's cell metric minus b's in the same (seed, variant); a seed missing
    a cell or a value in either arm is left out."""
    variants = primary_variants(results) if variants is None else variants
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    out = []
    for seed in sorted({r["seed"] for r in results["cells"]}):
        diffs = []
        for v in variants:
            x, y = by.get((a, seed, v)), by.get((b, seed, v))
            x, y = (metric(x) if x else None), (metric(y) if y else None)
            if x is None or y is None:
                break
            diffs.append(x - y)
        else:
            if diffs:
                out.append(sum(diffs) / len(diffs))
    return out


def decide_extension(study: Study, log) -> dict | None:
    """Amendment 4's decision, made once and kept in `extension.json`: for each comparison
    (a, b) of `preset.extend`, the SD of its per-seed yardstick-1 AUC differences over the
    registered seeds, the MDE at those seeds, and the seeds N it needs for `mde_target` (the
    registered number when its MDE is within it). Reads no difference's mean. None before
    every registered seed has both arms' primary cells (nothing is decided early)."""
    preset = study.preset
    if not preset.extend:
        return None
    decided = study.read("extension.json")
    if decided:
        return decided
    results = collect(study)
    comparisons = []
    for a, b in preset.extend:
        diffs = seed_level(results, a, b, lambda r: r["auc"])
        if len(diffs) < len(preset.seeds):
            return None
        mde = minimum_detectable(diffs)
        registered = len(preset.seeds)
        n = (
            registered
            if mde <= preset.mde_target
            else seeds_needed(diffs, preset.mde_target, preset.max_seeds)
        )
        sd = standard_deviation(diffs)
        comparisons.append(
            {"a": a, "b": b, "sd": sd, "mde": mde, "seeds": n, "extended": n > registered}
        )
    decision = {
        "rule": "README, Amendment 4 (registered 2026-11-29)",
        "registered_seeds": list(preset.seeds),
        "mde_target": preset.mde_target,
        "max_seeds": preset.max_seeds,
        "comparisons": comparisons,
    }
    study.write(decision, "extension.json")
    log("Amendment 4: " + "; ".join(extension_summary(decision)))
    return decision


def extension_summary(decision: dict) -> list[str]:
    """One phrase per comparison of Amendment 4's decision: its MDE at the registered seeds
    and whether (and how far) it was extended."""
    registered = len(decision["registered_seeds"])
    return [
        f"{c['a']} - {c['b']}: MDE {c['mde']:.3f} at {registered} seeds, "
        + (f"extended to {c['seeds']} seeds" if c["extended"] else "not extended")
        for c in decision["comparisons"]
    ]


def extension_cells(decision: dict, variants) -> int:
    """How many cells Amendment 4's decision plays: each new seed's arms on every variant."""
    return len(variants) * sum(len(arms) for _, arms in extension_runs(decision))


def extension_runs(decision: dict) -> list[tuple[int, tuple[str, ...]]]:
    """(seed, arms) for each of Amendment 4's new seeds, in order: the arms of every extended
    comparison whose N reaches that seed."""
    first = max(decision["registered_seeds"]) + 1
    runs = []
    for seed in range(first, max((c["seeds"] for c in decision["comparisons"]), default=0)):
        arms: list[str] = []
        for c in decision["comparisons"]:
            if seed < c["seeds"]:
                arms += [x for x in (c["a"], c["b"]) if x not in arms]
        runs.append((seed, tuple(arms)))
    return runs


SEED_LEVEL_COMPARISONS = (
    ("P2", "joat", "joint"),
    ("P1", "joint", "scratch"),
    ("P1", "joat", "scratch"),
    ("C1", "gardner", "scratch"),
    ("C2", "joint", "gardner"),
)


def seed_level_endpoints(results: dict) -> list[tuple[str, list[float]]]:
    """Amendment 3's comparisons, each a list of per-seed differences (Student t over seeds):
    yardstick 1 (AUC, iteration 0 and 1 where registered), then yardstick 2 (the
    16-simulation AUC on the variants with its range, the held-out losses' AUC on every
    primary variant; lower loss is better)."""
    in16 = [v for v, c in (results.get("calibration2") or {}).items() if c and c.get("in")]
    in16 = [v for v in primary_variants(results) if v in in16]
    rows = []
    for tag, a, b in SEED_LEVEL_COMPARISONS:
        name = f"{tag} {a} - {b}"
        rows.append((f"{name}, AUC", seed_level(results, a, b, lambda r: r["auc"])))
        point = 1 if tag == "P2" else 0
        rows.append((f"{name}, iteration {point}", seed_level(results, a, b, at(point))))
    for tag, a, b in SEED_LEVEL_COMPARISONS:
        name = f"{tag} {a} - {b}"
        if in16:
            rows.append(
                (
                    f"{name}, 16-simulation AUC ({len(in16)} variants with range)",
                    seed_level(results, a, b, lambda r: r.get("auc_score16"), in16),
                )
            )
        for loss in ("policy_loss", "value_loss"):
            rows.append(
                (
                    f"{name}, held-out {loss.replace('_', ' ')} AUC (lower is better)",
                    seed_level(results, a, b, lambda r, loss=loss: r.get(f"auc_{loss}")),
                )
            )
    return rows + extension_endpoints(results)


def extension_endpoints(results: dict) -> list[tuple[str, list[float]]]:
    """Amendment 4's rows, after every registered one: each extended comparison's per-seed
    differences (yardstick 1, AUC and the registered iteration) over seeds 0 to N-1."""
    decision = results.get("extension") or {}
    merged = {**results, "cells": results["cells"] + results.get("extension_cells", [])}
    tags = {(a, b): tag for tag, a, b in SEED_LEVEL_COMPARISONS}
    rows = []
    for c in decision.get("comparisons", []):
        if not c["extended"]:
            continue
        a, b, n = c["a"], c["b"], c["seeds"]
        tag = tags.get((a, b), "")
        within = {**merged, "cells": [r for r in merged["cells"] if r["seed"] < n]}
        name = f"{tag} {a} - {b}".strip()
        point = 1 if tag == "P2" else 0
        label = f"(Amendment 4, seeds 0-{n - 1})"
        rows.append((f"{name}, AUC {label}", seed_level(within, a, b, lambda r: r["auc"])))
        rows.append((f"{name}, iteration {point} {label}", seed_level(within, a, b, at(point))))
    return rows


SPEEDUP_THRESHOLD = 0.4  # Amendment 5: the score against the mid both curves must reach


ADAPT_RESOLUTION = 512.0  # one adaptation iteration's frames: a start already at T


UNREACHED = (4096.0, 8192.0)  # a cell short of T after 2,048 frames (registered, sensitivity)


def speedup_rows(results: dict, threshold: float = SPEEDUP_THRESHOLD, unreached: float = 4096.0):
    """Amendment 5's speed-up in frames, per arm: for each seed the geometric mean over the
    primary variants of F_s / F_a (scratch-curve frames to `threshold` against the mid over the
    cell's adaptation frames to it, both curves as running maxima, linear between points; a
    cell starting at or above it counts one adaptation iteration, one short of it after its
    last point `unreached` frames). Returns [(arm, per-seed log ratios, started, unreached,
    cells)]."""
    primary = primary_variants(results)
    scratch_frames = {}
    for v in primary:
        curve_points = [(p["frames"], p["score"]) for p in results["curves"][v]["points"]]
        scratch_frames[v] = scratch_equivalent_frames(curve_points, threshold)[0]
    by = {(r["arm"], r["seed"], r["variant"]): r for r in results["cells"]}
    rows = []
    for arm in [a for a in GAME_ARMS if any(r["arm"] == a for r in results["cells"])]:
        logs, started, short, cells = [], 0, 0, 0
        for seed in sorted({r["seed"] for r in results["cells"]}):
            ratios = []
            for v in primary:
                row = by.get((arm, seed, v))
                if row is None:
                    break
                points = [(p["frames"], p["score"]) for p in row["points"]]
                frames, censored = scratch_equivalent_frames(points, threshold)
                cells += 1
                if censored:
                    short += 1
                    frames = unreached
                elif min(points)[1] >= threshold:
                    started += 1
                if not censored:
                    frames = max(frames, ADAPT_RESOLUTION)
                ratios.append(math.log(scratch_frames[v] / frames))
            else:
                if ratios:
                    logs.append(sum(ratios) / len(ratios))
        rows.append((arm, logs, started, short, cells))
    return rows


def unseen_rule_rows(results: dict, other: dict) -> list[tuple[str, list[float]]]:
    """Amendment 5's D rows: this preset's joint and JOAT minus `other`'s (Amendment 3's, the
    same variants, seeds and procedure) per seed, yardstick 1: what holding the rule out costs."""
    theirs = [{**r, "arm": f"{r['arm']}@{other['preset']}"} for r in other["cells"]]
    merged = {**results, "cells": results["cells"] + theirs}
    rows = []
    for arm in ("joint", "joat"):
        name = f"D {arm} - {arm}@{other['preset']}"
        rows.append(
            (
                f"{name}, AUC",
                seed_level(merged, arm, f"{arm}@{other['preset']}", lambda r: r["auc"]),
            )
        )
        rows.append(
            (f"{name}, iteration 0", seed_level(merged, arm, f"{arm}@{other['preset']}", at(0)))
        )
    return rows
