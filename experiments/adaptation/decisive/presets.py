"""The decisive study's arms, held-out variants and presets (the protocol's sizes), and the
yardsticks every curve point and cell is scored with."""

from __future__ import annotations

import dataclasses

ARMS = ("joint", "joat", "joint+desc", "joat+desc")  # the factorial of the endpoints


# The control the issue asks for if time allows: joint's objective, frames and sequential steps
# on Gardner alone (all of a meta-batch's games on it). Added on 2026-11-26 (fourth sitting),
# after the endpoints were reported: its comparisons are secondary (README, "Gardner-only").
CONTROL_ARMS = ("gardner",)


# The scratch curve's checkpoints (configs/gardner.py:cpu iterations of 4,096 frames): 4k-262k
# frames. Amended on 2026-11-26 from (1, 2, 4, 8, 16) after the first calibrations: against
# the 66k-frame references a random network still scored 0.28-0.42 on four of five variants,
# so no mid reference with range existed (README, "Amendment").
REFERENCE_ITERATIONS = (1, 2, 4, 8, 16, 32, 64)


GAME_ARMS = ("scratch",) + ARMS + CONTROL_ARMS


# The six fog-free held-out variants of configs/joat.py (fog goes to a later study).
VARIANTS = (
    "atomic",
    "rifle",
    "extinction",
    "capture=rifle,goal=extinction",
    "gardner,start=shuffle:17,colour=other",
    "baby,capture=atomic,goal=king",
)


# The variants of the primary analysis (Amendment 2's calibration: a mid with range).
PRIMARY_VARIANTS = (
    "atomic",
    "extinction",
    "capture=rifle,goal=extinction",
    "baby,capture=atomic,goal=king",
)


OLD_ADAM = "adam"  # the old inner procedure: Adam with b1 = 0, fresh per task, lr 1e-3


@dataclasses.dataclass(frozen=True)
class Preset:
    """The study's sizes. `joat_preset` gives the network, tasks, games, plies, simulations
    and k of pretraining (configs/joat.py); the rest is the protocol."""

    joat_preset: str
    pretrain_iterations: int  # outer iterations of every arm
    reference_preset: str  # configs/gardner.py preset of the scratch curve
    reference_iterations: tuple[int, ...]  # curve checkpoints (reference iterations)
    seeds: tuple[int, ...] = (0, 1, 2)
    variants: tuple[str, ...] = VARIANTS
    arms: tuple[str, ...] = ARMS + CONTROL_ARMS
    num_tasks: int = 0  # 0: the joat preset's tasks per outer iteration
    games_per_task: int = 0  # 0: the joat preset's G
    adapt_points: tuple[int, ...] = (0, 1, 2, 4)
    adapt_games: int = 16  # games per adaptation iteration
    # The yardstick (Amendment 2, registered 2026-11-26 before any cell was played with it):
    # raw policies (0 simulations) sampling every move from their softmax, 256 games after a
    # paired 2-ply policy opening. The first yardstick (64 games, a deterministic 16-simulation
    # search, 4-ply opening) had no range on 5 of the 6 variants (README, "Second calibration").
    games: int = 256  # games per match
    simulations: int = 0  # evaluation search, both sides (0: the raw policy)
    opening_plies: int = 2
    sampled: bool = True  # every move sampled from the mover's own policy (match.py)
    step_sizes: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)  # SGD candidates
    dataset_draws: int = 8  # reference self-play draws per variant (5 adapt + 3 held out)
    calibration_max: float = 0.25  # the mid reference: random init scores at most this
    # A variant is in the primary analysis when it has a mid and the final reference's score
    # against it minus the random networks' is at least this (Amendment 2).
    min_range: float = 0.3
    long_iterations: int = 0  # 0: no long run
    long_every: int = 0
    # How the inner procedure is chosen: "held_out" (the sensitivity stage of 2026-11-26, on
    # the held-out variants' reference self-play, the old Adam among the candidates) or
    # "training_tasks" (Amendment 3's arm-neutral rule: `procedure_tasks` fog-free training
    # points, the self-play of the exported model `procedure_data`, a path from the project
    # root; SGD only, the grid extended by 3x past a winner at its end).
    procedure_rule: str = "held_out"
    procedure_tasks: int = 8
    procedure_data: str = ""
    # A preset whose committed pretraining runs this one copies where the run's config is
    # exactly this preset's (Amendment 3 reuses the cpu preset's seeds 0-2).
    reuse: str = ""
    # The second yardstick (Amendment 3): every cell's points also played against the mid
    # with this many simulations on both sides (the value head drives the search), and the
    # adapted network's held-out policy and value loss on the final reference's self-play;
    # the endpoints then also at the pretraining-seed level. 0: neither.
    whole_network_simulations: int = 0
    # Amendment 5's addendum (registered 2026-12-08, before any `heldout1` cell): the second
    # yardstick's matches of a cell in the compacting arena (`match.play_match(compact=N)`,
    # buffers down to N games), which plays the same matches in distribution in a fraction of
    # the time. 0: the full arena. Recorded in every cell it plays (`yardstick2_arena`).
    compact_arena: int = 0
    # Amendment 4 (registered 2026-11-29, before its first run): each comparison (a, b) here
    # whose yardstick-1 AUC MDE at the registered `seeds` exceeds `mde_target` gets more
    # pretraining seeds of a and b (no scratch cells), as many as that spread needs (at most
    # `max_seeds`); decided once, from the spread alone (`extension.json`).
    extend: tuple[tuple[str, str], ...] = ()
    mde_target: float = 0.05
    max_seeds: int = 30
    # Amendment 5 (registered 2026-12-07, before its runs): whole rule components absent from
    # the joint and JOAT arms' pretraining region ("capture=atomic", "goal=extinction");
    # `procedure_rule` "fixed" pretrains JOAT's inner loop with SGD `fixed_step` and plays the
    # cells with SGD `adapt_step` (0: the same), one preset per step of the registered grid.
    held_out_components: tuple[str, ...] = ()
    fixed_step: float = 0.0
    adapt_step: float = 0.0


PRESETS = {
    # The tests' and the dry run's sizes: every stage, nothing learnt.
    "smoke": Preset(
        joat_preset="smoke",
        pretrain_iterations=2,
        reference_preset="smoke",
        reference_iterations=(1, 2),
        seeds=(0,),
        variants=("atomic", "gardner,start=shuffle:17,colour=other"),
        adapt_points=(0, 1),
        adapt_games=4,
        games=4,
        step_sizes=(0.1,),
        dataset_draws=3,
        long_iterations=2,
        long_every=1,
    ),
    # The protocol on a 2-core CPU, over several sittings: 100 outer iterations x 4
    # tasks x 16 games x 32 plies = 204,800 frames and 800 sequential steps per arm.
    "cpu": Preset(
        joat_preset="cpu",
        pretrain_iterations=100,
        reference_preset="cpu",
        reference_iterations=REFERENCE_ITERATIONS,
        long_iterations=500,
        long_every=50,
    ),
    # Pretraining on one H100 (the games then run on the CPU: `--unpack`): the same network
    # and k, 16 tasks x 64 games per outer iteration, 16x the frames of the cpu preset.
    "gpu": Preset(
        joat_preset="cpu",
        pretrain_iterations=100,
        reference_preset="cpu",
        reference_iterations=REFERENCE_ITERATIONS,
        num_tasks=16,
        games_per_task=64,
        long_iterations=500,
        long_every=50,
    ),
    # Amendment 3 (issue 49): the cpu preset's recipe with ten pretraining seeds of the
    # rules-hidden arms joint, JOAT and gardner, on the 4 primary variants; seeds 0-2 are the
    # cpu preset's committed runs where their config is this one's (joint and gardner always,
    # JOAT if the step-size rule picks the cpu preset's step again). The inner procedure is
    # chosen on training tasks from the long run's final network's self-play.
    "power": Preset(
        joat_preset="cpu",
        pretrain_iterations=100,
        reference_preset="cpu",
        reference_iterations=REFERENCE_ITERATIONS,
        seeds=tuple(range(10)),
        variants=PRIMARY_VARIANTS,
        arms=("joint", "joat", "gardner"),
        step_sizes=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0),
        procedure_rule="training_tasks",
        procedure_data="experiments/adaptation/decisive_cpu/models/long/it500",
        reuse="cpu",
        whole_network_simulations=16,
        extend=(("joat", "joint"), ("joint", "gardner")),
    ),
}


# Amendment 5 (issue 69): the power preset's recipe with capture=atomic and goal=extinction
# held out of the joint and JOAT pretraining region, JOAT's inner loop at Amendment 3's SGD 0.3,
# the cells at SGD 0.3 (`heldout`) and 1.0 (`heldout1`). `heldout` copies the gardner runs and
# the gardner and scratch cells of `power` (the same configs); `heldout1` copies the
# pretraining of `heldout`.
PRESETS["heldout"] = dataclasses.replace(
    PRESETS["power"],
    procedure_rule="fixed",
    fixed_step=0.3,
    reuse="power",
    held_out_components=("capture=atomic", "goal=extinction"),
    extend=(("joat", "joint"), ("joint", "gardner")),
)


PRESETS["heldout1"] = dataclasses.replace(
    PRESETS["heldout"], reuse="heldout", adapt_step=1.0, compact_arena=16
)


def yardstick(preset: Preset) -> dict:
    """The match settings every curve point and cell is scored with: a curve or a cell
    scored with other settings is played again."""
    return {
        "games": preset.games,
        "simulations": preset.simulations,
        "opening_plies": preset.opening_plies,
        "opening": "policy",
        "sampled": preset.sampled,
    }


def yardstick2(preset: Preset) -> dict | None:
    """The second yardstick's settings (Amendment 3), or None for a preset without it (a cell
    recorded with other settings is played again)."""
    if not preset.whole_network_simulations:
        return None
    return {
        **yardstick(preset),
        "simulations": preset.whole_network_simulations,
        "held_out": "policy and value loss on the final reference's self-play draws 5-7",
    }


def yardstick_tag(preset: Preset) -> str:
    """A short name of `yardstick(preset)` for workdir names (g256-s0-o2-sampled)."""
    tag = f"g{preset.games}-s{preset.simulations}-o{preset.opening_plies}"
    return tag + ("-sampled" if preset.sampled else "")
