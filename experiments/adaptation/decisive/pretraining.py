"""The stages before the games: the scratch references, the pretraining runs (copied from a
reused preset where the config is the same) and the choice of the inner procedure (the
sensitivity stage, or Amendment 3's rule on training tasks)."""

from __future__ import annotations

import time
from pathlib import Path

from experiments.adaptation.decisive.presets import PRESETS, Preset
from experiments.adaptation.decisive.recipes import (
    arm_config,
    candidate_procedures,
    joat_config,
    procedure_name,
    procedure_section,
    reference_config,
)
from experiments.adaptation.decisive.store import (
    ROOT,
    Study,
    committed,
    export,
    frames_at,
    reused,
    slug,
    write_pack,
)


def references(study: Study, variant: str, log) -> dict:
    """The scratch curve's runs: AlphaZero from scratch on `variant`, each curve checkpoint
    exported into the artefacts."""
    from mmc_jax import train

    preset = study.preset
    done = study.read("reference", f"{slug(variant)}.json")
    if done and set(done["frames"]) == {str(i) for i in preset.reference_iterations}:
        return done
    if shared_references(study, variant):
        log(f"reference {variant}: copied from the cpu preset's artefacts (the same recipe)")
        return study.read("reference", f"{slug(variant)}.json")
    workdir = study.workdir / "reference" / slug(variant)
    log(f"reference {variant}: {max(preset.reference_iterations)} iterations from scratch")
    started = time.time()
    train.train_to_end(reference_config(preset, variant), workdir, stream=log)
    frames = {}
    for iteration in preset.reference_iterations:
        frames[str(iteration)] = frames_at(workdir, iteration)
        export(
            workdir,
            iteration,
            study.reference_model(variant, iteration),
            {"description": f"{variant}: scratch reference, iteration {iteration}"},
        )
    return study.write(
        {"variant": variant, "frames": frames, "seconds": time.time() - started},
        "reference",
        f"{slug(variant)}.json",
    )


def shared_references(study: Study, variant: str) -> bool:
    """Takes the cpu preset's finished reference of `variant` when this preset trains the same
    one (references are CPU work): its record is written here and its models are read from the
    cpu preset's artefacts (`Study.reference_model`), not copied; whether it did."""
    cpu = PRESETS["cpu"]
    source = ROOT / "experiments" / "adaptation" / "decisive_cpu"
    same = (cpu.reference_preset, cpu.reference_iterations) == (
        study.preset.reference_preset,
        study.preset.reference_iterations,
    )
    if not same or study.artefacts.resolve() == source.resolve():
        return False
    info = committed("cpu", study.warn).read("reference", f"{slug(variant)}.json")
    if info is None:
        return False
    study.write(info, "reference", f"{slug(variant)}.json")
    return True


def pretrain(study: Study, arm: str, seed: int, choice: dict | None, log, pack=None) -> dict:
    """One pretraining run, exported into the artefacts (and added to `pack`)."""
    import jax

    from mmc_jax import train

    done = study.read("pretrain", f"{arm}_s{seed}.json")
    if done:
        return done
    source = reusable(study, arm, seed, choice)
    if source is not None:  # its model is read from there (`Study.pretrained_model`)
        info = {**source.read("pretrain", f"{arm}_s{seed}.json"), "from": source.preset_name}
        log(f"pretrain {arm} seed {seed}: the {source.preset_name} preset's run (the same config)")
        study.write(info, "pretrain", f"{arm}_s{seed}.json")
        if pack:
            write_pack(study, pack)
        return info
    config = arm_config(study.preset, arm, seed, choice)
    workdir = study.workdir / "pretrain" / f"{arm}_s{seed}"
    log(f"pretrain {arm} seed {seed}: {config.num_iterations} outer iterations")
    started = time.time()
    result = train.train_to_end(config, workdir, stream=log)
    step = int(result["iteration"])
    optimizer = (
        f"inner {choice}, eps {config.meta.outer_lr} constant, k {config.meta.inner_steps}"
        if arm.startswith("joat")
        else f"Adam b1 {config.learner.get('b1', 0.9)} lr {config.learner.learning_rate} "
        f"wd {config.learner.weight_decay}, {config.meta.updates_per_iteration} steps/iteration"
    )
    info = {
        "arm": arm,
        "seed": seed,
        "frames": frames_at(workdir, step),
        "iterations": step,
        "sequential_steps": step
        * int(config.meta.inner_steps)
        * int(config.meta.updates_per_iteration),
        "optimizer": optimizer,
        "tasks_per_iteration": int(config.meta.num_tasks),
        "games_per_task": int(config.meta.games_per_task),
        "seconds": time.time() - started,
        # The config fixes the run; the device only its floating-point rounding and its time.
        "device": jax.devices()[0].device_kind,
    }
    export(workdir, step, study.pretrained_model(arm, seed), {"description": f"{arm} s{seed}"})
    study.write(info, "pretrain", f"{arm}_s{seed}.json")
    if pack:
        write_pack(study, pack)
    return info


def reusable(study: Study, arm: str, seed: int, choice: dict | None) -> Study | None:
    """The `reuse` preset's committed artefacts when they hold the pretraining run (`arm`, `seed`)
    with exactly the config this preset would train (JOAT: with this preset's procedure
    `choice` against the one that preset chose); None otherwise."""
    source = reused(study)
    if source is None:
        return None
    if source.read("pretrain", f"{arm}_s{seed}.json") is None:
        return None
    if not (source.pretrained_model(arm, seed) / "model.json").exists():
        return None
    if arm.startswith("joat"):
        theirs = (source.read("sensitivity.json") or {}).get("choice")
        if choice is None or theirs is None:
            return None
    else:
        theirs = None
    mine = arm_config(study.preset, arm, seed, choice).to_dict()
    if mine != arm_config(source.preset, arm, seed, theirs).to_dict():
        return None
    return source


def _draw_fn(network, config):
    import jax

    from mmc_jax.training import games as games_lib
    from mmc_jax.training import selfplay

    def draw(params, rules_b, games, key):
        games, trajectory = games_lib.play_games(
            network, params, rules_b, games, key, config, False
        )
        return games, selfplay.compute_targets(trajectory, bootstrap=True)

    return jax.jit(draw)


def dataset(study: Study, variant: str):
    """(adaptation draws, held-out batch): self-play of the variant's final reference, in
    draws the size of an adaptation iteration (deterministic; recomputed, not stored)."""
    final = study.reference_model(variant, max(study.preset.reference_iterations))
    return selfplay_draws(study, final, variant)


def selfplay_draws(study: Study, model: Path, variant: str):
    """(adaptation draws, held-out batch): `dataset_draws` draws of the exported `model`'s
    self-play on `variant` (its own search settings; `adapt_games` games of the adaptation's
    plies each, keys 10,000 + i), the first (up to 5) to adapt on, the rest held out."""
    import jax
    import jax.numpy as jnp
    import ml_collections

    from mmc_jax import rules as R
    from mmc_jax.infra import checkpoint
    from mmc_jax.training import games as games_lib
    from mmc_jax.training import learner

    preset = study.preset
    network, params, saved = checkpoint.load_model(model)
    config = saved.copy_and_resolve_references()
    with config.unlocked():
        config.selfplay.batch_size = preset.adapt_games
        config.selfplay.num_plies = int(joat_config(preset, 0).adapt.selfplay.num_plies)
    config = ml_collections.FrozenConfigDict(config)
    rules_b = R.batch(variant, preset.adapt_games)
    games = games_lib.init_games(rules_b, False)
    draw = _draw_fn(network, config)
    draws = []
    for index in range(preset.dataset_draws):
        games, batch = draw(params, rules_b, games, jax.random.key(10_000 + index))
        draws.append(jax.device_get(batch))
    held = draws[5:] if len(draws) > 5 else draws[-1:]
    held_out = learner.Batch(
        *(jnp.concatenate([getattr(d, f) for d in held]) for f in learner.Batch._fields)
    )
    return draws[: max(1, min(5, len(draws) - 1))], held_out


def sensitivity(study: Study, log) -> dict:
    """The adaptation procedure, decided from the seed-0 joint starts: held-out loss (policy
    + value, on the final reference's self-play) after one and two procedures of each
    candidate, mean over variants and starts; the lowest wins."""
    import jax
    import ml_collections

    from mmc_jax.infra import checkpoint
    from mmc_jax.training import learner

    done = study.read("sensitivity.json")
    if done:
        return done
    preset = study.preset
    if preset.procedure_rule == "training_tasks":
        return procedure_on_training_tasks(study, log)
    if preset.procedure_rule == "fixed":  # Amendment 5: registered, nothing to choose
        choice = {"optimizer": "sgd", "learning_rate": float(preset.fixed_step)}
        log(f"procedure: {procedure_name(choice)} for JOAT's inner loop (registered)")
        return study.write({"rule": "fixed (registered)", "choice": choice}, "sensitivity.json")
    cpu = committed("cpu", study.warn)
    decided = cpu.read("sensitivity.json") if study.preset_name != "cpu" else None
    if decided is not None:
        # One procedure for the whole study: a larger preset adapts as the cpu preset decided.
        log(f"sensitivity: the cpu preset's choice ({cpu.path('sensitivity.json')})")
        return study.write({**decided, "from": "cpu"}, "sensitivity.json")
    seed = preset.seeds[0]
    starts = [a for a in ("joint", "joint+desc") if a in preset.arms]
    joat = joat_config(preset, 0)
    procedure = jax.jit(learner.inner_procedure, static_argnums=(3, 4))
    rows = []
    for variant in preset.variants:
        adapt_draws, held_out = dataset(study, variant)
        for arm in starts:
            network, params0, saved = checkpoint.load_model(study.pretrained_model(arm, seed))
            net_config = ml_collections.FrozenConfigDict(saved.network)

            def losses(params, inner, network=network, held_out=held_out):
                _, metrics = learner.loss_fn(params, network, held_out, inner)
                return float(metrics["policy_loss"]) + float(metrics["value_loss"])

            for choice in candidate_procedures(preset):
                inner = ml_collections.FrozenConfigDict(procedure_section(joat.inner, choice))
                params, out = params0, {"0": losses(params0, inner)}
                for j in range(2):
                    draw = adapt_draws[j % len(adapt_draws)]
                    params, _ = procedure(params, draw, jax.random.key(j), net_config, inner)
                    out[str(j + 1)] = losses(params, inner)
                rows.append({"variant": variant, "arm": arm, "procedure": choice, "loss": out})
        log(
            f"sensitivity {variant}: "
            + ", ".join(
                f"{r['arm']} {procedure_name(r['procedure'])} {r['loss']['1']:.3f}"
                for r in rows
                if r["variant"] == variant
            )
        )
    scores = {}
    for r in rows:
        name = procedure_name(r["procedure"])
        scores.setdefault(name, []).append((r["loss"]["1"] + r["loss"]["2"]) / 2)
    means = {name: sum(v) / len(v) for name, v in scores.items()}
    best = min(means, key=means.get)
    choice = next(c for c in candidate_procedures(preset) if procedure_name(c) == best)
    log(f"sensitivity: {best} chosen (" + ", ".join(f"{n} {m:.4f}" for n, m in means.items()) + ")")
    return study.write(
        {
            "criterion": "mean held-out loss (policy + value) after 1 and 2 procedures",
            "means": means,
            "choice": choice,
            "rows": rows,
        },
        "sensitivity.json",
    )


def training_tasks(preset: Preset) -> list[str]:
    """The first `procedure_tasks` fog-free training points of the preset's task space, in
    `meta.task_weights` order (never a held-out variant)."""
    from mmc_jax import rules as R
    from mmc_jax.algorithms import meta

    tasks = [t for t in meta.task_weights(joat_config(preset, 0)) if not R.has_fog(t)]
    return tasks[: preset.procedure_tasks]


def procedure_on_training_tasks(study: Study, log) -> dict:
    """Amendment 3's arm-neutral step-size rule: from the seed-0 joint and gardner starts and
    the scratch start (init seed 0), each SGD step size adapts on the training tasks' draws of
    `procedure_data`'s self-play; the lowest mean held-out loss (policy + value) after one and
    two procedures wins, the grid extended by 3x past a winner at either end (at most three
    times). Written as `sensitivity.json`, which every later stage reads."""
    import jax
    import ml_collections

    from mmc_jax import adapt
    from mmc_jax.infra import checkpoint
    from mmc_jax.model import network as network_lib
    from mmc_jax.training import learner

    preset = study.preset
    seed = preset.seeds[0]
    data = ROOT / preset.procedure_data
    if not (data / "model.json").exists():
        raise ValueError(f"the step-size rule's data network {data} is not there")
    joat = joat_config(preset, 0)
    starts = []
    for arm in ("joint", "gardner"):
        if study.read("pretrain", f"{arm}_s{seed}.json") is None:
            raise ValueError(f"the step-size rule adapts the {arm} seed-{seed} start: pretrain it")
        network, params, saved = checkpoint.load_model(study.pretrained_model(arm, seed))
        starts.append((arm, network, params, ml_collections.FrozenConfigDict(saved.network)))
    network_config, params, _, _ = adapt.load_start("scratch", joat, seed)
    starts.append(
        (
            "scratch",
            network_lib.make_network(network_config),
            params,
            ml_collections.FrozenConfigDict(network_config),
        )
    )
    tasks = training_tasks(preset)
    procedure = jax.jit(learner.inner_procedure, static_argnums=(3, 4))
    datasets = {task: selfplay_draws(study, data, task) for task in tasks}
    rows = []

    def evaluate(eta: float) -> float:
        choice = {"optimizer": "sgd", "learning_rate": float(eta)}
        inner = ml_collections.FrozenConfigDict(procedure_section(joat.inner, choice))
        values = []
        for task, (adapt_draws, held_out) in datasets.items():
            for name, network, params0, net_config in starts:

                def losses(params, network=network, held_out=held_out):
                    _, metrics = learner.loss_fn(params, network, held_out, inner)
                    return float(metrics["policy_loss"]) + float(metrics["value_loss"])

                params, out = params0, {"0": losses(params0)}
                for j in range(2):
                    draw = adapt_draws[j % len(adapt_draws)]
                    params, _ = procedure(params, draw, jax.random.key(j), net_config, inner)
                    out[str(j + 1)] = losses(params)
                rows.append({"task": task, "start": name, "procedure": choice, "loss": out})
                values.append((out["1"] + out["2"]) / 2)
        mean = sum(values) / len(values)
        log(f"step-size rule: sgd {eta:g} mean held-out loss {mean:.4f}")
        return mean

    means = {float(eta): evaluate(eta) for eta in preset.step_sizes}
    extensions = []
    for _ in range(3):
        best = min(means, key=means.get)
        if len(means) > 1 and best == min(means):
            extension = best / 3
        elif len(means) > 1 and best == max(means):
            extension = best * 3
        else:
            break
        extensions.append(extension)
        means[extension] = evaluate(extension)
    best = min(means, key=means.get)
    interior = min(means) < best < max(means)
    choice = {"optimizer": "sgd", "learning_rate": best}
    log(f"step-size rule: sgd {best:g} chosen" + ("" if interior else " (at the grid's end)"))
    return study.write(
        {
            "rule": "Amendment 3: training tasks, arm-neutral",
            "criterion": "mean held-out loss (policy + value) after 1 and 2 procedures, over "
            "training tasks and the joint, gardner and scratch starts",
            "tasks": tasks,
            "starts": [f"{name} s{seed}" for name, *_ in starts],
            "data": preset.procedure_data,
            "means": {
                procedure_name({"optimizer": "sgd", "learning_rate": e}): m
                for e, m in sorted(means.items())
            },
            "extensions": extensions,
            "interior": interior,
            "choice": choice,
            "rows": rows,
        },
        "sensitivity.json",
    )
