"""Run configs: `configs/<name>.py` defines `get_config(arg=None)`; `configs.common` holds the
builders every preset composes (network sizes, self-play, learner, evaluation, checkpoints).

Load them by file (`--config configs/joat.py:quick`) or as modules
(`from configs import joat; joat.get_config("quick")`).
"""
