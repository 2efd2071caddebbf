"""The games: the mid reference's calibration and the scratch curve, the second yardstick's
range, every adaptation cell (played, or copied from a reused preset) and the long run."""

from __future__ import annotations

import dataclasses
import time

from experiments.adaptation.decisive.presets import Preset, yardstick, yardstick2, yardstick_tag
from experiments.adaptation.decisive.pretraining import dataset, references, shared_references
from experiments.adaptation.decisive.recipes import (
    adaptation_joat_config,
    arm_config,
    joat_config,
    procedure_section,
)
from experiments.adaptation.decisive.store import (
    Study,
    committed,
    export,
    frames_at,
    reused,
    slug,
)


def play_match(
    network, params, variant, preset, key, opponent_model, opponent_simulations=None, compact=0
):
    """`adapt.match_summary` of a match of (network, params) against `opponent_model` on
    `variant` with the yardstick's settings of `preset` (games, simulations, opening), in the
    compacting arena down to `compact` games if given."""
    from mmc_jax import adapt
    from mmc_jax.evaluation import match

    opponent_network, opponent_params = opponent_model
    result = match.play_match(
        network,
        params,
        variant,
        "checkpoint",
        preset.games,
        preset.simulations,
        key,
        opponent_network=opponent_network,
        opponent_params=opponent_params,
        opponent_simulations=opponent_simulations,
        opening_plies=preset.opening_plies,
        opening="policy",
        sampled=preset.sampled,
        compact=compact,
    )
    return adapt.match_summary(result)


def random_init(preset: Preset, init_seed: int):
    """The scratch arm's start: (network, params) of configs/joat.py's network, rules hidden,
    initialised as `adapt --init_from scratch` does with `init_seed`."""
    from mmc_jax import adapt
    from mmc_jax.model import network as network_lib

    config = joat_config(preset, 0)
    network_config, params, _, _ = adapt.load_start("scratch", config, init_seed)
    return network_lib.make_network(network_config), params


def curve(study: Study, variant: str, log) -> dict:
    """Calibration (the mid reference) and the scratch curve's scores against it."""
    import jax

    from mmc_jax.infra import checkpoint

    preset = study.preset
    # The references' record first (the cpu preset's, copied when the recipe is the same;
    # nothing is trained here): it says where the reference models are, and a reused preset's
    # curve is shared only when both records agree.
    if study.read("reference", f"{slug(variant)}.json") is None:
        shared_references(study, variant)
    done = study.read("curve", f"{slug(variant)}.json")
    if (
        done
        and done.get("reference_iterations") == list(preset.reference_iterations)
        and done.get("yardstick") == yardstick(preset)
    ):
        return done  # (a curve of other references or another yardstick is played again)
    shared = shared_curve(study, variant)
    if shared is not None:
        log(f"curve {variant}: the {study.preset.reuse} preset's (the same references and mid)")
        return shared
    frames = references(study, variant, log)["frames"]  # (computed again if it was damaged)
    models = {
        it: checkpoint.load_model(study.reference_model(variant, it))[:2]
        for it in preset.reference_iterations
    }
    key = jax.random.key(7_000)
    network0, params0 = random_init(preset, preset.seeds[0])
    calibration = {}
    mid = preset.reference_iterations[-1]
    for it in preset.reference_iterations:
        score = play_match(network0, params0, variant, preset, key, models[it])
        calibration[str(it)] = score
        log(f"calibrate {variant}: random init vs reference it{it}: {score['score']:.3f}")
        if score["score"] <= preset.calibration_max:
            mid = it
            break
    points = [{"frames": 0, "source": "random init", "scores": []}]
    for init_seed in preset.seeds:
        network, params = random_init(preset, init_seed)
        points[0]["scores"].append(play_match(network, params, variant, preset, key, models[mid]))
    for it in preset.reference_iterations:
        network, params = models[it]
        result = play_match(network, params, variant, preset, key, models[mid])
        points.append({"frames": frames[str(it)], "source": f"it{it}", "scores": [result]})
    for p in points:
        p["score"] = sum(s["score"] for s in p["scores"]) / len(p["scores"])
    calibrated = any(c["score"] <= preset.calibration_max for c in calibration.values())
    spread = points[-1]["score"] - points[0]["score"]  # the final reference minus random nets
    log(
        f"curve {variant} (mid = it{mid}): "
        + ", ".join(f"{p['frames']}: {p['score']:.2f}" for p in points)
    )
    return study.write(
        {
            "variant": variant,
            "mid": mid,
            "final": max(preset.reference_iterations),
            # False: no reference is strong enough (a random net scores above the bound
            # against every one): the yardstick has little range on this variant.
            "calibrated": calibrated,
            "range": spread,
            # In the primary analysis: a mid, and range against it (Amendment 2).
            "primary": calibrated and spread >= preset.min_range,
            "reference_iterations": list(preset.reference_iterations),
            "yardstick": yardstick(preset),
            "calibration": calibration,
            "points": points,
        },
        "curve",
        f"{slug(variant)}.json",
    )


def shared_curve(study: Study, variant: str) -> dict | None:
    """The `reuse` preset's committed curve of `variant` (its mid, calibration and scratch
    curve), written into this preset's artefacts, when both presets have the same references
    and yardstick; None otherwise."""
    preset, source = study.preset, reused(study)
    if source is None:
        return None
    theirs = source.read("curve", f"{slug(variant)}.json")
    same_references = source.read("reference", f"{slug(variant)}.json") == study.read(
        "reference", f"{slug(variant)}.json"
    )
    if (
        theirs is None
        or not same_references
        or theirs.get("yardstick") != yardstick(preset)
        or theirs.get("reference_iterations") != list(preset.reference_iterations)
    ):
        return None
    return study.write({**theirs, "from": source.preset_name}, "curve", f"{slug(variant)}.json")


def whole_network_calibration(study: Study, variant: str, log) -> dict | None:
    """The second yardstick's range on `variant` (Amendment 3): a random network (seed 0) and
    the final reference against the mid, both sides searching; the variant enters the
    16-simulation comparisons when the final reference's score minus the random network's is
    at least `min_range`. None for a preset without the second yardstick."""
    import jax

    from mmc_jax.infra import checkpoint

    preset = study.preset
    settings = yardstick2(preset)
    if settings is None:
        return None
    done = study.read("curve2", f"{slug(variant)}.json")
    curve_info = curve(study, variant, log)
    if done and done["yardstick2"] == settings and done["mid"] == curve_info["mid"]:
        return done
    if preset.reuse and curve_info.get("from"):  # the same mid: the reused preset's range
        theirs = committed(preset.reuse, study.warn).read("curve2", f"{slug(variant)}.json")
        if theirs and theirs["yardstick2"] == settings and theirs["mid"] == curve_info["mid"]:
            return study.write({**theirs, "from": preset.reuse}, "curve2", f"{slug(variant)}.json")
    searched = dataclasses.replace(preset, simulations=preset.whole_network_simulations)
    mid = checkpoint.load_model(study.reference_model(variant, curve_info["mid"]))[:2]
    final = checkpoint.load_model(study.reference_model(variant, curve_info["final"]))[:2]
    key = jax.random.key(7_000)
    random_score = play_match(*random_init(preset, 0), variant, searched, key, mid)["score"]
    final_score = play_match(*final, variant, searched, key, mid)["score"]
    spread = final_score - random_score
    log(
        f"yardstick 2 {variant}: random init {random_score:.3f}, final {final_score:.3f} "
        f"against the mid it{curve_info['mid']} (range {spread:.2f})"
    )
    return study.write(
        {
            "variant": variant,
            "mid": curve_info["mid"],
            "final": curve_info["final"],
            "random_vs_mid": random_score,
            "final_vs_mid": final_score,
            "range": spread,
            "in": spread >= preset.min_range,
            "yardstick2": settings,
        },
        "curve2",
        f"{slug(variant)}.json",
    )


_HELD_OUT: dict = {}  # (artefacts, variant) -> the held-out batch (self-play is recomputed)


def held_out_batch(study: Study, variant: str):
    """The final reference's held-out self-play draws of `variant` (`dataset`), computed once
    per process."""
    key = (str(study.artefacts.resolve()), variant)
    if key not in _HELD_OUT:
        _HELD_OUT[key] = dataset(study, variant)[1]
    return _HELD_OUT[key]


def whole_network_point(
    study: Study, network, params, variant: str, seed: int, iteration: int, choice: dict, mid
) -> dict:
    """The second yardstick at one adaptation point: the match against the mid with
    `whole_network_simulations` on both sides (keys paired over arms by seed and point) and
    the held-out policy and value loss."""
    import jax
    import ml_collections

    from mmc_jax.training import learner

    preset = study.preset
    searched = dataclasses.replace(preset, simulations=preset.whole_network_simulations)
    key = jax.random.fold_in(jax.random.key(seed + 2_000_003), iteration)
    match = play_match(network, params, variant, searched, key, mid, compact=preset.compact_arena)
    inner = procedure_section(joat_config(preset, 0).inner, choice)
    _, metrics = learner.loss_fn(
        params, network, held_out_batch(study, variant), ml_collections.FrozenConfigDict(inner)
    )
    return {
        "simulations": preset.whole_network_simulations,
        "match": match,
        "policy_loss": float(metrics["policy_loss"]),
        "value_loss": float(metrics["value_loss"]),
    }


def cell(study: Study, arm: str, seed: int, variant: str, choice: dict, log) -> dict:
    """One adaptation cell: `arm`'s seed-`seed` start adapted to `variant` and evaluated."""
    import jax

    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint
    from mmc_jax.model import network as network_lib

    name = f"{arm}_s{seed}_{slug(variant)}"
    done = study.read("cells", f"{name}.json")
    preset = study.preset
    curve_info = curve(study, variant, log)
    if (
        done
        and done["mid"] == curve_info["mid"]
        and done.get("final") == curve_info["final"]
        and done.get("yardstick") == yardstick(preset)
        and done.get("yardstick2") == yardstick2(preset)
    ):
        return done  # (a cell of another mid, final reference or yardstick is played again)
    shared = shared_cell(study, arm, seed, variant, choice, curve_info)
    if shared is not None:
        log(f"cell {name}: the {shared['from']} preset's (the same start and procedure)")
        return shared
    # One workdir per mid reference and yardstick: an interrupted cell resumes with its
    # evaluated points, and a cell played against another mid starts afresh (a kept workdir
    # holds only the last checkpoints, so its earlier points could not be evaluated again).
    tag = yardstick_tag(preset)
    workdir = study.workdir / "games" / f"{name}_vs_it{curve_info['mid']}_{tag}"
    mid = study.reference_model(variant, curve_info["mid"])
    final = study.reference_model(variant, curve_info["final"])
    init = "scratch" if arm == "scratch" else str(study.pretrained_model(arm, seed))
    started = time.time()
    joat = adaptation_joat_config(preset, choice)
    results = adapt.run_adaptation(
        variant,
        init,
        workdir,
        iterations=max(preset.adapt_points),
        eval_at=list(preset.adapt_points),
        config=joat,
        num_games=preset.games,
        num_simulations=preset.simulations,
        reference=str(mid),
        head_to_head=False,
        seed=seed,  # the same evaluation keys in every arm: paired over (variant, seed)
        init_seed=seed,
        stream=None,
    )
    network_config, params0, _, _ = adapt.load_start(init, joat, seed)
    zero_shot = play_match(
        network_lib.make_network(network_config),
        params0,
        variant,
        preset,
        jax.random.fold_in(jax.random.key(seed + 1_000_003), 300),
        checkpoint.load_model(final)[:2],
    )
    points = [
        {"iteration": p["iteration"], "frames": p["frames"], "matches": p["matches"]}
        for p in results["points"]
    ]
    whole = ""
    if yardstick2(preset) is not None:
        network = network_lib.make_network(network_config)
        mid_model = checkpoint.load_model(mid)[:2]
        for p in points:
            i = p["iteration"]
            params = params0 if i == 0 else checkpoint.load_model(workdir, i)[1]
            p["whole_network"] = whole_network_point(
                study, network, params, variant, seed, i, choice, mid_model
            )
        whole = f"; {preset.whole_network_simulations} sims " + ", ".join(
            f"{p['iteration']}: {p['whole_network']['match']['score']:.2f}" for p in points
        )
    log(
        f"cell {name}: vs mid "
        + ", ".join(f"{p['iteration']}: {p['matches']['reference']['score']:.2f}" for p in points)
        + whole
        + f"; zero-shot vs final {zero_shot['score']:.2f}"
    )
    return study.write(
        {
            "arm": arm,
            "seed": seed,
            "variant": variant,
            "procedure": choice,
            "mid": curve_info["mid"],
            "final": curve_info["final"],
            "yardstick": yardstick(preset),
            **({"yardstick2": yardstick2(preset)} if yardstick2(preset) else {}),
            **(
                {"yardstick2_arena": f"compacting, down to {preset.compact_arena} games"}
                if yardstick2(preset) and preset.compact_arena
                else {}
            ),
            "points": points,
            "zero_shot_final": zero_shot,
            "seconds": time.time() - started,
        },
        "cells",
        f"{name}.json",
    )


def shared_cell(study: Study, arm: str, seed: int, variant: str, choice: dict, curve_info: dict):
    """The `reuse` preset's committed cell (`arm`, `seed`, `variant`), written into this
    preset's artefacts, when it was played from the same start (scratch, or a pretraining run
    this preset copied from there) with the same procedure, mid, final reference and
    yardsticks (Amendment 5's gardner and scratch cells at SGD 0.3); None otherwise."""
    preset, source = study.preset, reused(study)
    if source is None:
        return None
    if arm != "scratch":
        mine = study.read("pretrain", f"{arm}_s{seed}.json") or {}
        if mine.get("from") != source.preset_name:
            return None
    name = f"{arm}_s{seed}_{slug(variant)}"
    theirs = source.read("cells", f"{name}.json")
    if (
        theirs is None
        or theirs.get("procedure") != choice
        or theirs["mid"] != curve_info["mid"]
        or theirs.get("final") != curve_info["final"]
        or theirs.get("yardstick") != yardstick(preset)
        or theirs.get("yardstick2") != yardstick2(preset)
    ):
        return None
    return study.write({**theirs, "from": source.preset_name}, "cells", f"{name}.json")


def long_run(study: Study, choice: dict, log) -> dict | None:
    """The better descriptor arm (zero-shot against the final references, seed-0 cells) to
    `long_iterations`, each kept checkpoint played zero-shot on every variant."""
    import jax

    from mmc_jax import train
    from mmc_jax.infra import checkpoint

    preset = study.preset
    if not preset.long_iterations:
        return None
    done = study.read("long.json")
    if done and done.get("complete"):
        return done
    candidates = [a for a in ("joint+desc", "joat+desc") if a in preset.arms]
    means = {}
    for arm in candidates:
        cells = [
            study.read("cells", f"{arm}_s{preset.seeds[0]}_{slug(v)}.json") for v in preset.variants
        ]
        if any(c is None for c in cells):
            return None  # decided once the seed-0 cells of both arms are played
        means[arm] = sum(c["zero_shot_final"]["score"] for c in cells) / len(cells)
    arm = max(means, key=means.get)
    config = arm_config(preset, arm, preset.seeds[0], choice)
    config.num_iterations = preset.long_iterations
    config.checkpoint.every = preset.long_every
    config.checkpoint.keep_period = preset.long_every
    workdir = study.workdir / "long" / arm
    log(f"long run: {arm} to {preset.long_iterations} outer iterations (zero-shot means {means})")
    train.train_to_end(config, workdir, stream=log)
    info = {"arm": arm, "zero_shot_means": means, "points": [], "complete": False}
    for step in range(preset.long_every, preset.long_iterations + 1, preset.long_every):
        out = study.path("models", "long", f"it{step}")
        if not (out / "model.json").exists():
            export(workdir, step, out, {"description": f"{arm} long run, iteration {step}"})
        network, params = checkpoint.load_model(out)[:2]
        scores = {}
        for variant in preset.variants:
            final = study.reference_model(variant, max(preset.reference_iterations))
            scores[variant] = play_match(
                network,
                params,
                variant,
                preset,
                jax.random.key(9_000),
                checkpoint.load_model(final)[:2],
            )
        info["points"].append(
            {"iteration": step, "frames": frames_at(workdir, step), "zero_shot_final": scores}
        )
        mean = sum(s["score"] for s in scores.values()) / len(scores)
        log(f"long run it{step}: zero-shot mean {mean:.3f}")
    info["complete"] = True
    return study.write(info, "long.json")
