"""The configs of every run of the study: the scratch references, each arm's pretraining,
the candidate inner procedures and the adaptation (`prepare_all` validates them all)."""

from __future__ import annotations

from experiments.adaptation.decisive.presets import ARMS, CONTROL_ARMS, OLD_ADAM, Preset


def joat_config(preset: Preset, seed: int):
    """configs/joat.py (the preset's) with the study's iterations, tasks, games and seed, no
    periodic evaluation, a checkpoint every tenth of the run."""
    from configs import joat

    config = joat.get_config(preset.joat_preset)
    config.seed = seed
    config.num_iterations = preset.pretrain_iterations
    if preset.num_tasks:
        config.meta.num_tasks = preset.num_tasks
    if preset.games_per_task:
        config.meta.games_per_task = preset.games_per_task
    config.eval.every = 0
    config.checkpoint.every = max(1, preset.pretrain_iterations // 10)
    config.checkpoint.max_to_keep = 2
    return config


def procedure_section(base, choice: dict):
    """`base` (an inner-learner section) set to the chosen procedure: {"optimizer": "sgd",
    "learning_rate": eta} (plain SGD, no momentum, no weight decay) or {"optimizer": "adam"}
    (the old one: Adam, b1 = 0, lr 1e-3, fresh per task)."""
    section = base.copy_and_resolve_references()
    with section.unlocked():
        section.optimizer = choice["optimizer"]
        section.weight_decay = 0.0
        if choice["optimizer"] == "sgd":
            section.momentum = 0.0
            section.learning_rate = float(choice["learning_rate"])
    return section


def arm_config(preset: Preset, arm: str, seed: int, choice: dict | None):
    """The pretraining config of `arm` (equal frames and sequential steps in every arm).
    JOAT arms need the procedure `choice` (their inner loop)."""
    config = joat_config(preset, seed)
    k = int(config.meta.inner_steps)
    if arm.endswith("+desc"):
        config.network.rule_planes = "descriptor"
    if arm.startswith("joat"):
        if choice is None:
            raise ValueError("a JOAT arm needs the chosen inner procedure (sensitivity stage)")
        config.meta.outer_lr = 1.0
        config.meta.outer_lr_schedule = "constant"
        config.inner = procedure_section(config.inner, choice)
        config.inner.steps = k
        config.adapt.learner = procedure_section(config.adapt.learner, choice)
    elif arm.startswith("joint") or arm == "gardner":
        config.meta.inner_steps = 1
        config.meta.fresh_inner_state = False
        config.meta.updates_per_iteration = k
        config.learner.batch_size = int(config.inner.batch_size)
        if arm == "gardner":
            # One task, Gardner, with every game of the meta-batch; joint averages n tasks'
            # gradients of one minibatch each, so one minibatch of n times the size here.
            tasks = int(config.meta.num_tasks)
            config.task_space.size = 0
            config.task_weights = type(config)({"gardner": 1.0})
            config.meta.num_tasks = 1
            config.meta.games_per_task = tasks * int(config.meta.games_per_task)
            config.learner.batch_size = tasks * int(config.inner.batch_size)
    else:
        raise ValueError(f"unknown arm {arm!r}; one of {ARMS + CONTROL_ARMS}")
    if arm != "gardner":  # (the gardner arm reads no task region: its runs stay shared)
        hold_out_components(config, preset.held_out_components)
    return config


def hold_out_components(config, components: tuple[str, ...]) -> None:
    """Removes whole rule components ("capture=atomic", "goal=extinction") from `config`'s
    task region (Amendment 5): no task drawn from it has one."""
    for component in components:
        field, _, value = component.partition("=")
        section = config.task_space
        if field == "capture" and value in section.captures:
            section.captures = tuple(c for c in section.captures if c != value)
        elif field == "goal" and any(p.split("/")[0] == value for p in section.goal_fogs):
            section.goal_fogs = tuple(p for p in section.goal_fogs if p.split("/")[0] != value)
        else:
            raise ValueError(f"held-out component {component!r} is not in the task region")


def cell_procedure(preset: Preset, choice: dict | None) -> dict | None:
    """The procedure the cells adapt with: the preset's `adapt_step` (SGD) or the chosen one."""
    if preset.adapt_step:
        return {"optimizer": "sgd", "learning_rate": float(preset.adapt_step)}
    return choice


def reference_config(preset: Preset, variant: str):
    """AlphaZero from scratch on `variant` with the best single-variant recipe, every curve
    iteration's checkpoint kept."""
    from configs import gardner

    config = gardner.get_config(preset.reference_preset)
    config.variant = variant
    config.seed = 0
    config.num_iterations = max(preset.reference_iterations)
    config.eval.every = 0
    config.checkpoint.every = 1
    config.checkpoint.keep_period = 1
    return config


def adaptation_joat_config(preset: Preset, choice: dict):
    """configs/joat.py (the preset's) with the chosen procedure as `adapt`'s learner and the
    study's evaluation settings; `adapt.adaptation_config` builds each cell's run from it."""
    config = joat_config(preset, 0)
    config.adapt.learner = procedure_section(config.adapt.learner, choice)
    config.adapt.learner.steps = int(config.meta.inner_steps)
    config.adapt.selfplay.batch_size = preset.adapt_games
    config.adapt.eval.opponents = ("greedy",)
    config.adapt.eval.max_plies = 0  # the rules' ply cap, as in training
    config.adapt.eval.opening_plies = preset.opening_plies
    with config.adapt.eval.unlocked():
        config.adapt.eval.opening = "policy"
        config.adapt.eval.sampled = preset.sampled
    config.adapt.checkpoint.save_replay = False
    if preset.whole_network_simulations:  # every point's parameters, for the second yardstick
        config.adapt.checkpoint.max_to_keep = len(preset.adapt_points) + 1
    return config


def prepare_all(preset: Preset) -> list[str]:
    """Builds and validates every config the preset runs (reference, each arm and seed, each
    candidate procedure's adaptation); returns their names. The tests call it for every preset."""
    from mmc_jax import adapt
    from mmc_jax.algorithms import alphazero, meta

    names = []
    for variant in preset.variants:
        alphazero.ALGORITHM.prepare_config(reference_config(preset, variant))
        names.append(f"reference {variant}")
    for choice in candidate_procedures(preset):
        for seed in preset.seeds:
            for arm in preset.arms:
                meta.ALGORITHM.prepare_config(arm_config(preset, arm, seed, choice))
                names.append(f"{arm} s{seed} {choice}")
        joat = adaptation_joat_config(preset, choice)
        for variant in preset.variants:
            network = joat.network.copy_and_resolve_references()
            run = adapt.adaptation_config(variant, max(preset.adapt_points), network, config=joat)
            alphazero.ALGORITHM.prepare_config(run)
            names.append(f"adapt {variant} {choice}")
    return names


def candidate_procedures(preset: Preset) -> list[dict]:
    """The inner procedures the preset chooses among: SGD at each step size, and under the
    held-out rule also the old fresh Adam."""
    sgd = [{"optimizer": "sgd", "learning_rate": float(eta)} for eta in preset.step_sizes]
    return ([{"optimizer": OLD_ADAM}] if preset.procedure_rule == "held_out" else []) + sgd


def procedure_name(choice: dict) -> str:
    """A procedure's short name in logs and tables ("sgd 0.3", "adam b1=0 (fresh)")."""
    if choice["optimizer"] == "sgd":
        return f"sgd {choice['learning_rate']:g}"
    return "adam b1=0 (fresh)"
