"""No import circle between the shipped package's modules.

The graph is read from the sources, every import statement counted wherever it
stands: at the top, inside a function (a lazy import) or under ``TYPE_CHECKING``
(a circle a type checker needs is a circle of ideas all the same). Folders map
to import names by the layout's one rule: runtime/ is ``durably``, every other
top-level source folder X is ``durably.X``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"runtime": "durably", **{x: f"durably.{x}" for x in ("storage", "adapters", "schemas", "bench", "models")}}


def modules() -> dict[str, Path]:
    """Import name -> source file, for every module of the package."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([package, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]]))
            found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (``from a import b`` names module ``a.b`` when it is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {target for target in targets if target in known and target != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circle():
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()}
    assert circles(graph) == []


def test_the_check_sees_a_circle_behind_type_checking():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from durably._runtime import Runtime\n"
    path = ROOT / "build" / "circle_probe.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    assert imports("durably._fleet.scan", path, {"durably._runtime"}) == {"durably._runtime"}


#: Rooms that build on others, and the rooms below them that may never import them.
UPPER = (
    "durably._children",
    "durably._fleet",
    "durably._operate",
    "durably._reading",
    "durably._upkeep",
    "durably._cli",
    "durably._console",
    "durably._torture",
    "durably.integrations",
    "durably.bench",
    "durably._runtime",
)
CORE = ("durably._loop", "durably._tools", "durably._journal")
STORE_SIDE = ("durably.storage", "durably.adapters", "durably.schemas")
#: The one arrow up, on purpose: the conformance kit hands adapter authors the runtime's agent-level torture
#: harness (``TortureConformance``), imported when first used.
ALLOWED_UP = {("durably.storage.conformance", "durably._torture.testing")}


def test_the_arrows_point_one_way():
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()}
    wrong = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if (name, target) in ALLOWED_UP:
                continue
            if name.startswith(CORE) and target.startswith(UPPER):
                wrong.append(f"{name} -> {target}")
            if name.startswith(STORE_SIDE) and not target.startswith((*STORE_SIDE, "durably.errors")):
                wrong.append(f"{name} -> {target}")
    assert wrong == []
