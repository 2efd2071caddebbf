"""The shipped start: the pretrained network the study's rule picks, exported with the
study's adaptation settings and a card (how it was trained, what it scored)."""

from __future__ import annotations

from pathlib import Path

from experiments.adaptation.decisive.analysis import primary_variants, seed_level
from experiments.adaptation.decisive.presets import yardstick, yardstick2
from experiments.adaptation.decisive.recipes import adaptation_joat_config, procedure_name
from experiments.adaptation.decisive.store import Study, write_model
from experiments.lab.report import interval
from experiments.lab.stats import t_interval


def _start_name(out: Path) -> str:
    """What `adapt --init_from` takes for the folder `out`: a shipped model's name when `out`
    is in the package's models, else the path."""
    from mmc_jax.infra import checkpoint

    shipped = Path(checkpoint.SHIPPED_DIR).resolve()
    return out.name if Path(out).resolve().parent == shipped else str(out)


def ship(study: Study, results: dict, out: Path) -> dict:
    """Exports the best pretrained start into `out`: the arm with the highest mean AUC over the
    primary variants' cells (every seed), its seed with the highest mean AUC there; the
    model's `adapt` section is the study's (the chosen procedure, the yardstick's matches), and
    `model.json` carries a card: how it was trained and what it scored. ValueError before every
    primary cell is played."""
    from mmc_jax.infra import checkpoint

    preset = study.preset
    primary = primary_variants(results)
    cells = [c for c in results["cells"] if c["variant"] in primary]
    expected = len(primary) * len(preset.seeds) * (len(preset.arms) + 1)
    if not primary or len(cells) < expected:
        raise ValueError(
            f"{len(cells)}/{expected} primary cells played: nothing is shipped before the "
            "endpoints are complete"
        )

    def mean_auc(arm, seed=None):
        values = [c["auc"] for c in cells if c["arm"] == arm and seed in (None, c["seed"])]
        return sum(values) / len(values)

    if yardstick2(preset):
        # Amendment 3's rule, fixed before its cells: JOAT if P2's AUC interval at the
        # pretraining-seed level lies wholly above 0, otherwise joint; always seed 0.
        p2 = seed_level(results, "joat", "joint", lambda r: r["auc"])
        mean, half = t_interval(p2)
        arm = "joat" if len(p2) > 1 and mean - half > 0 else "joint"
        seed = preset.seeds[0]
        chosen_by = (
            f"Amendment 3: JOAT if JOAT - joint AUC at the pretraining-seed level is above 0 "
            f"(here {interval(mean, half)}, n={len(p2)}), else "
            f"joint; always seed {seed}, fixed before any cell (not chosen on its scores)"
        )
        per_seed = {
            s: sum(c["auc"] for c in cells if c["arm"] == arm and c["seed"] == s) / len(primary)
            for s in preset.seeds
        }
        arm_mean, arm_half = t_interval(list(per_seed.values()))
        selection = {
            "arm_mean_auc": arm_mean,
            "arm_mean_auc_ci95": [arm_mean - arm_half, arm_mean + arm_half],
            "per_seed_auc": {str(s): v for s, v in per_seed.items()},
            "note": "the shipped seed's own scores below are one of these seeds, not a selection",
            "absent": "the rules-told (+desc) arms: not in Amendment 3 (3 seeds each, history "
            "in decisive_cpu/)",
        }
    else:
        arm = max(preset.arms, key=mean_auc)
        seed = max(preset.seeds, key=lambda s: mean_auc(arm, s))
        chosen_by = (
            "the highest mean AUC (adaptation iterations 0-4, score against the mid "
            "reference) over the primary variants' cells of every seed, then its best seed"
        )
        selection = None
    choice = results["sensitivity"]["choice"]
    _, params, saved = checkpoint.load_model(study.pretrained_model(arm, seed))
    config = saved.copy_and_resolve_references()
    with config.unlocked():
        # The study's procedure and adaptation games; `adapt`'s own evaluation stays the
        # pretraining config's (the card gives the scores on the study's yardstick).
        evaluation = config.adapt.eval
        config.adapt = adaptation_joat_config(preset, choice).adapt
        config.adapt.eval = evaluation
    pretrain_info = results["pretrain"][f"{arm}_s{seed}"]
    mine = [c for c in results["cells"] if c["arm"] == arm and c["seed"] == seed]
    card = {
        "arm": arm,
        "seed": seed,
        "trained": (
            f"{arm} over the rule space of configs/joat.py:{preset.joat_preset} (the 8 "
            f"held-out variants never drawn), {pretrain_info['frames']:,} self-play frames, "
            f"{pretrain_info['sequential_steps']} sequential steps, {pretrain_info['optimizer']}"
        ),
        "adaptation": procedure_name(choice) + f", {preset.adapt_games} games per iteration",
        "yardstick": yardstick(preset),
        "chosen_by": chosen_by,
        **(
            {
                "selection": selection,
                "reproduces": f"`python -m mmc_jax.adapt --init_from {_start_name(out)} "
                "--variant V` adapts "
                f"with this start's `adapt` section: {procedure_name(choice)}, "
                f"{preset.adapt_games} games per iteration, the study's inner procedure",
            }
            if selection
            else {}
        ),
        "mean_auc_by_arm": {a: mean_auc(a) for a in (*preset.arms, "scratch")},
        "scores": {
            c["variant"]: {
                "primary": c["variant"] in primary,
                "auc": c["auc"],
                "vs_mid": {str(p["iteration"]): p["score"] for p in c["points"]},
                "zero_shot_vs_final": c["zero_shot_final"],
            }
            for c in mine
        },
        "results": f"experiments/adaptation/{study.artefacts.name}/results.md",
    }
    write_model(
        out,
        config,
        params,
        {
            "step": pretrain_info["iterations"],
            "frames": pretrain_info["frames"],
            "description": (
                f"the decisive study's shipped start by Amendment 3's rule ({arm}, seed {seed})"
                if selection
                else f"the decisive study's best pretrained start ({arm}, seed {seed})"
            ),
            "command": f"python experiments/adaptation/study.py --preset {study.preset_name} "
            f"--only report --ship {out}",
            "card": card,
        },
    )
    return card
