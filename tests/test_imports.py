"""The project's packages import one way: no cycle among their modules (imports at any depth of the code form a
DAG), no import up the floors (gpuctl -> stacks and policy -> components -> fleet), and no module too long to read
in one sitting."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("gpuctl", "stacks", "policy", "fleet", "components")
# Each package's floor: a module imports its own floor's and lower floors' modules only.
FLOORS = {"fleet": 0, "components": 1, "stacks": 2, "policy": 2, "gpuctl": 3}
MAX_LINES = 600


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports: at the top, or inside a function (a deferred import still closes a
    circle, it only hides it from the interpreter)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    found = set()
    for target in targets:
        while target and target not in known:  # `from gpuctl.cli import X`: the module gpuctl.cli
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    known = modules()
    assert {"gpuctl.diff", "gpuctl.report", "gpuctl.summary", "stacks.config", "policy.rules",
            "fleet.labels"} <= set(known)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None


def test_the_walk_sees_imports_made_inside_functions() -> None:
    """gpuctl.report imports gpuctl.check only where it prints policies: still an edge of the graph."""
    known = modules()
    assert {"gpuctl.diff", "gpuctl.summary", "gpuctl.check"} <= imports("gpuctl.report", known["gpuctl.report"], known)


def test_no_module_imports_up_the_floors() -> None:
    """The fleet facts depend on nothing above them; the components on no stack, policy or command; and so on."""
    known = modules()
    upward = sorted(f"{name} -> {target}" for name, path in known.items() for target in imports(name, path, known)
                    if FLOORS[target.split(".")[0]] > FLOORS[name.split(".")[0]])
    assert upward == []


def test_fleet_imports_only_fleet() -> None:
    known = modules()
    assert {target for name, path in known.items() if name.startswith("fleet")
            for target in imports(name, path, known)} <= {name for name in known if name.startswith("fleet")}


def test_no_module_is_too_long_to_hold_in_mind() -> None:
    long = {str(path.relative_to(ROOT)): lines for path in modules().values()
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their own seams (at most {MAX_LINES} lines each): {long}"


def test_an_installed_copy_has_every_package():
    """A non-editable install (a wheel) ships every package directory, subpackages included."""
    import tomllib

    from setuptools import find_namespace_packages

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_namespace_packages(where=str(ROOT), include=found["include"]))
    wanted = {name.rpartition(".")[0] if path.name != "__init__.py" else name for name, path in modules().items()}
    assert wanted <= shipped, f"pyproject.toml's packages leave out {sorted(wanted - shipped)}"
