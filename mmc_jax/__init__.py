"""mmc_jax: JAX-native meta-learning across 5x5 minichess rule variants.

The commands are the modules at the top (`python -m mmc_jax.train`, ...); the library is in parts
below them (`mmc_jax.rules`, `.model`, `.infra`, `.search`, `.uci`, `.training`, `.evaluation`,
`.algorithms`; README.md's layout). Until 2026-11-26 the library modules sat at the top too, and
scripts written against them (the prepared accelerator run of `../shared/device/` among them)
still work: `from mmc_jax import startup` and `import mmc_jax.meta` give the module of its part,
the very same module object (`OLD_NAMES`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

# The library modules' flat names before the parts, and the part each moved to.
OLD_NAMES = {
    "network": "model",
    **dict.fromkeys(
        ("storage", "cache", "startup", "sharding", "distributed", "metrics", "checkpoint", "cli"),
        "infra",
    ),
    "mcts": "search",
    "belief": "search",
    **dict.fromkeys(("selfplay", "learner", "runloop"), "training"),
    **dict.fromkeys(("policies", "elo", "match", "arena", "pgn", "pimc", "ladder"), "evaluation"),
    "alphazero": "algorithms",
    "meta": "algorithms",
}


def __getattr__(name: str):
    """`from mmc_jax import startup` (an old flat name): the module of its part."""
    if name in OLD_NAMES:
        return importlib.import_module(f"{__name__}.{OLD_NAMES[name]}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _OldNameFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import mmc_jax.meta` (an old flat name): `sys.modules` gets the part's module under the
    old name too; the module keeps its own `__spec__`."""

    def __init__(self):
        self.specs = {}

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package == __name__ and name in OLD_NAMES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        name = spec.name.partition(".")[2]
        module = importlib.import_module(f"{__name__}.{OLD_NAMES[name]}.{name}")
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # The import system stamped the alias's spec on the module: give it back its own.
        module.__spec__ = self.specs[module.__spec__.name]


if not any(isinstance(finder, _OldNameFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldNameFinder())
