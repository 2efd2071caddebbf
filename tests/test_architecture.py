"""The module graph of `mmc_jax`: its parts are folders in layers, no part imports a higher part
or a command, no import cycle, no use of another module's `_private` names (read with `ast`,
lazy imports inside functions included).

The commands are the modules at the top of `mmc_jax/` (`python -m mmc_jax.NAME`), and the
command packages (`COMMAND_PACKAGES`: a command of several modules, run through its
`__main__.py`); below them the parts, bottom to top (a part may import its own layer or lower
ones, never a command):
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mmc_jax"

PARTS = (
    {"rules"},  # the rules kernel: a pure, jitted function of the rule space
    {"faces"},  # the rules as a pgx Env, a PettingZoo environment, an OpenSpiel game
    {"model"},  # the network
    {"infra"},  # storage, caches, start-up, devices, metrics, checkpoints, CLI pieces
    {"search", "uci"},  # the batched search; the UCI client and the engine build
    {"training"},  # self-play, the learner, the one run loop
    {"evaluation"},  # players, matches, arenas, Elo, PGN, the fog player, the ladder
    {"algorithms"},  # AlphaZero and JOAT / Reptile, as the run loop runs them
)
COMMANDS = "commands"
# Commands of several modules (one per benchmark): `python -m mmc_jax.bench` runs bench/__main__.py.
COMMAND_PACKAGES = {"bench"}
__doc__ += "\n".join(f"  {i}: {', '.join(sorted(layer))}" for i, layer in enumerate(PARTS))


def module_of(path: Path, package: Path = PACKAGE) -> str:
    """The dotted name of a module under `mmc_jax` (the rules kernel counts as one module)."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[0] == "rules":
        return "rules"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "__init__"


def part_of(module: str) -> str:
    head = module.split(".")[0]
    return head if (PACKAGE / head).is_dir() and head not in COMMAND_PACKAGES else COMMANDS


def layer_of(module: str) -> int:
    part = part_of(module)
    if part == COMMANDS:
        return len(PARTS)
    for index, layer in enumerate(PARTS):
        if part in layer:
            return index
    raise AssertionError(f"mmc_jax/{part}/ is a part in no layer of tests/test_architecture.py")


def resolve(module: list[str], name: str | None = None) -> str:
    """The module an import names: `mmc_jax.a.b` (and `b`'s `name` when that is a module)."""
    dotted = module[1:] + ([name] if name else [])
    while dotted:
        path = PACKAGE.joinpath(*dotted)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return module_of(
                path.with_suffix(".py")
                if path.with_suffix(".py").is_file()
                else path / "__init__.py"
            )
        dotted.pop()
    return "__init__"


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(imported mmc_jax module, names taken from it) of every import in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mmc_jax" and len(parts) > 1:
                    found.append((resolve(parts), []))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package_parts[: len(package_parts) - node.level + 1])
                module = base + (node.module.split(".") if node.module else [])
            else:
                module = (node.module or "").split(".")
            if module[0] != "mmc_jax":
                continue
            for alias in node.names:
                target = resolve(module, alias.name)
                taken = (
                    []
                    if target == resolve(module + [alias.name]) and target != resolve(module)
                    else [alias.name]
                )
                found.append((target, taken))
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = module_of(path)
        for target, _ in imports(path):
            if target != source:
                edges.setdefault(source, set()).add(target)
        edges.setdefault(source, set())
    return edges


def test_every_part_has_a_layer():
    for name in graph():
        layer_of(name)


def test_no_part_imports_a_higher_part_or_a_command():
    upward = [
        f"{source} ({part_of(source)}) imports {target} ({part_of(target)})"
        for source, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(source)
    ]
    assert not upward, "\n".join(upward)


def test_no_algorithm_imports_another():
    """Issue 68: what learners share (self-play games, config checks, the probe, evaluation of
    parameters) lives below them, in training/ and evaluation/, not in one of them."""
    learners = [name for name in graph() if name.startswith("algorithms.")]  # not the registry
    leaning = [
        f"{source} imports {target}"
        for source in learners
        for target in graph()[source]
        if target in learners
    ]
    assert not leaning, "\n".join(leaning)


def test_the_training_command_names_no_algorithm():
    """Issue 68: `train` runs whatever `config.algorithm` names through the registry; what one
    algorithm keeps in a workdir (JOAT's task list) is its own hook (`write_run_files`)."""
    named = sorted(target for target in graph()["train"] if target.startswith("algorithms."))
    assert not named, named


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
        source = module_of(path)
        for target, names in imports(path):
            if target == source:
                continue
            private += [f"{path.name} imports {target}.{n}" for n in names if n.startswith("_")]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {  # names bound to another mmc_jax module
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmc_jax")
            for alias in node.names
            if resolve((node.module or "").split("."), alias.name) != source
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


@pytest.mark.parametrize(
    "name", ["train", "adapt", "evaluate", "play", "explore", "bench", "serve", "engine"]
)
def test_the_commands_sit_at_the_top_of_the_package(name):
    runs = PACKAGE / (f"{name}/__main__.py" if name in COMMAND_PACKAGES else f"{name}.py")
    assert runs.is_file() and part_of(name) == COMMANDS


def test_every_folder_is_a_part_and_the_top_holds_only_commands():
    folders = {str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")}
    # One level: a part holds modules, and so does a command package.
    assert folders - {"."} == set().union(*PARTS) | COMMAND_PACKAGES
    commands = [p for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    commands += [PACKAGE / name / "__main__.py" for name in COMMAND_PACKAGES]
    for path in commands:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE)
        assert "def main(" in text, f"mmc_jax/{where} is no command: move it into a part"


def test_the_old_flat_module_names_are_gone_and_no_import_hook_remains():
    import importlib
    import sys

    import mmc_jax

    for name in ("meta", "startup", "runloop", "network", "pimc"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"mmc_jax.{name}")
        assert not hasattr(mmc_jax, name) or getattr(mmc_jax, name).__name__.count(".") == 2
    assert not any(type(f).__module__.startswith("mmc_jax") for f in sys.meta_path)
    assert "meta_path" not in (PACKAGE / "__init__.py").read_text(encoding="utf-8")


def test_the_algorithm_registry_names_every_config_and_refuses_a_wrong_name():
    import ml_collections

    from configs import gardner, joat
    from mmc_jax import algorithms
    from mmc_jax.algorithms import alphazero, meta

    assert algorithms.algorithm_for(gardner.get_config("smoke")) is alphazero.ALGORITHM
    assert algorithms.algorithm_for(joat.get_config("smoke")) is meta.ALGORITHM
    # A config saved before the field existed names its algorithm by its sections.
    for config, name in (
        (gardner.get_config("smoke"), "alphazero"),
        (joat.get_config("smoke"), "joat"),
    ):
        old = config.to_dict()
        del old["algorithm"]
        assert algorithms.name_of(ml_collections.ConfigDict(old)) == name
    for bad, message in (("muzero", "unknown; one of"), ("joat", "needs a `meta` section")):
        config = gardner.get_config("smoke")
        config.algorithm = bad
        with pytest.raises(ValueError, match=message):
            algorithms.algorithm_for(config)
    config = joat.get_config("smoke")
    config.algorithm = "alphazero"
    with pytest.raises(ValueError, match="cannot use a `meta` section"):
        algorithms.algorithm_for(config)


# ---------------------------------------------------------------------------------------------
# Function length: phases written inline are cut into named functions (issue 37)

MAX_FUNCTION_LINES = 100  # from the `def` line to the function's last line, docstring included
# Allowed to be longer only until they are cut (empty since runloop._run and bench's main,
# bench_selfplay and bench_learner were cut). Nothing belongs here: cut a long function into
# named phases instead.
LONG_FUNCTIONS_ALLOWED: set[str] = set()


def function_lengths(path: Path, package: Path = PACKAGE) -> dict[str, int]:
    """{module.qualified_name: lines} of every function and method in `path`, nested ones
    included (their lines count in the enclosing function too)."""
    lengths = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name)
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), module_of(path, package))
    return lengths


def long_functions(package: Path = PACKAGE) -> dict[str, int]:
    """{function: lines} of the functions over `MAX_FUNCTION_LINES` outside the rules kernel."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] != "rules":
            found.update(
                {
                    n: lines
                    for n, lines in function_lengths(path, package).items()
                    if lines > MAX_FUNCTION_LINES
                }
            )
    return found


def test_no_function_outside_the_rules_kernel_is_longer_than_the_limit():
    too_long = {
        n: lines for n, lines in long_functions().items() if n not in LONG_FUNCTIONS_ALLOWED
    }
    assert not too_long, "\n".join(
        f"{n}: {lines} lines (at most {MAX_FUNCTION_LINES}): cut it into named phases"
        for n, lines in sorted(too_long.items())
    )
    # An allowed function that has been cut leaves the list.
    assert LONG_FUNCTIONS_ALLOWED <= set(long_functions()), (
        f"no longer long, remove from LONG_FUNCTIONS_ALLOWED: "
        f"{sorted(LONG_FUNCTIONS_ALLOWED - set(long_functions()))}"
    )


def test_the_length_check_finds_a_long_function_outside_the_rules_kernel(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))  # + `def`: one over
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "long.py").write_text(f"def phases():\n{body}\n")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "kernel.py").write_text(f"def step():\n{body}\n")
    assert long_functions(tmp_path) == {"evaluation.long.phases": MAX_FUNCTION_LINES + 1}
