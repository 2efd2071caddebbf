"""The module graph of `mmc_jax`: no import cycle, no upward import, no use of another module's
`_private` names (read with `ast`, lazy imports inside functions included).

Layers, bottom to top (a module may import its own layer or lower ones):
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mmc_jax"

LAYERS = (
    {"rules", "storage", "cache", "startup", "sharding", "mcts"},
    {"network", "elo", "metrics", "uci", "distributed"},
    {"search", "learner", "checkpoint", "belief"},
    {"selfplay", "policies", "pimc"},
    {"match", "arena", "runloop"},
    {"alphazero", "pgn", "ladder", "cli", "engine"},
    {"meta"},
    {
        "train",
        "adapt",
        "evaluate",
        "play",
        "explore",
        "bench",
        "analyse",
        "export",
        "serve",
        "launch",
        "__main__",
        "__init__",
    },
)
__doc__ += "\n".join(f"  {i}: {', '.join(sorted(layer))}" for i, layer in enumerate(LAYERS))


def top_module(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def layer_of(name: str) -> int:
    for index, layer in enumerate(LAYERS):
        if name in layer:
            return index
    raise AssertionError(f"mmc_jax.{name} is in no layer of tests/test_architecture.py")


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(imported top-level mmc_jax module, names taken from it) of every import in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mmc_jax" and len(parts) > 1:
                    found.append((parts[1], []))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package_parts[: len(package_parts) - node.level + 1])
                module = base + (node.module.split(".") if node.module else [])
            else:
                module = (node.module or "").split(".")
            if module[0] != "mmc_jax":
                continue
            names = [a.name for a in node.names]
            if len(module) > 1:
                found.append((module[1], names))
            else:
                found.extend((name, []) for name in names)
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = top_module(path)
        for target, _ in imports(path):
            if target != source:
                edges.setdefault(source, set()).add(target)
        edges.setdefault(source, set())
    return edges


def test_every_module_has_a_layer():
    for name in graph():
        layer_of(name)


def test_no_upward_import():
    upward = [
        f"{source} (layer {layer_of(source)}) imports {target} (layer {layer_of(target)})"
        for source, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(source)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_no_cross_module_private_names():
    private = []
    for path in PACKAGE.rglob("*.py"):
        source = top_module(path)
        for target, names in imports(path):
            if target == source:
                continue
            private += [f"{path.name} imports {target}.{n}" for n in names if n.startswith("_")]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {  # names bound to mmc_jax modules of another top-level module
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmc_jax")
            for alias in node.names
            if ((node.module or "").split(".") + [alias.name])[1] != source
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                private.append(f"{path.name} uses {node.value.id}.{node.attr}")
    assert not private, "\n".join(private)


@pytest.mark.parametrize("name", ["train", "adapt", "evaluate", "play", "explore", "bench"])
def test_command_line_tools_are_the_top_layer(name):
    assert layer_of(name) == len(LAYERS) - 1
