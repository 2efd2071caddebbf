"""The decisive adaptation study (`experiments/adaptation/study.py`, the command; the protocol
is registered in experiments/adaptation/README.md), split by role, bottom to top:

    presets      the arms, variants and presets (`Preset`, `PRESETS`) and the yardsticks
    store        where a study's files live (`Study`): JSON units, exported models, the pack
    recipes      the configs of every run: references, each arm, the adaptation
    pretraining  the stages before the games: references, pretraining, the inner procedure
    games        calibration, the scratch curves, the adaptation cells, the long run
    analysis     the registered statistics over the cells: AUC, SEF, the endpoints, the
                 seed-level comparisons, Amendment 4's decision, Amendment 5's speed-up
    report       results.md and the plots
    ship         the shipped pretrained start and its card
    plan         the stages in order under a time budget, and `--status`
"""
