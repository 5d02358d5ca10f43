"""The public surface: one facade, one error hierarchy, public imports in the docs.

Service builders import from ``durably``; adapter authors from ``durably.storage``
and ``durably.storage.conformance``; upcaster authors from ``durably.schemas``;
model adapters and the LangGraph bridge from their own packages. Everything
else is internal, so the README and docs must not teach it.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import durably
import durably.errors

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = {
    "durably",
    "durably.errors",
    "durably.storage",
    "durably.storage.conformance",
    "durably.schemas",
    "durably.models",
    "durably.models.openai",
    "durably.models.anthropic",
    "durably.integrations.langgraph",
    "durably.integrations.openai_agents",
    "durably.integrations.pydantic_ai",
}
#: Packages that are public so that an import path names them (entry points, ``durably.adapters.s3.S3Store``)
#: and the folders that hold public modules; their other modules are internal and underscored.
PUBLIC_CONTAINERS = {
    "durably.adapters",
    "durably.adapters.memory",
    "durably.adapters.filesystem",
    "durably.adapters.sqlite",
    "durably.adapters.s3",
    "durably.adapters.postgres",
    "durably.integrations",
}
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def imports_of(code: str) -> list[tuple[str, str | None]]:
    """``(module, name)`` for every import in ``code`` (name None for ``import module``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_the_docs_import_only_public_names(document):
    private = [
        f"{module}:{name}"
        for code in python_blocks(document)
        for module, name in imports_of(code)
        if module.split(".")[0] == "durably" and (module not in PUBLIC_MODULES or (name or "").startswith("_"))
    ]
    assert private == [], f"{document.name} imports internal names: {private}"


def test_the_check_catches_a_private_import():
    code = "from durably._loop.agent import HistoryPolicy\nfrom durably import Runtime\n"
    assert [m for m, _ in imports_of(code) if m not in PUBLIC_MODULES] == ["durably._loop.agent"]


def shipped_modules() -> list[str]:
    """Every module of the package, by the layout's one rule: runtime/ is ``durably``, a top-level folder X is ``durably.X``."""
    modules = []
    for folder, package in [
        ("runtime", "durably"),
        *((x, f"durably.{x}") for x in ("storage", "adapters", "schemas", "bench", "models")),
    ]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            modules.append(".".join([package, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]])))
    return modules


def test_every_internal_module_says_so_in_its_name():
    """A module is public (listed above) or has a segment with a leading underscore:
    ``durably._loop.actor``, ``durably.storage._codec``, ``durably.adapters.s3._store``.
    ``durably.bench`` is the one internal package without one: the top-level folder bench/ is run
    as ``durably bench``, never imported by users, and its package docstring says so."""
    public = PUBLIC_MODULES | PUBLIC_CONTAINERS
    unmarked = [
        name
        for name in shipped_modules()
        if name not in public
        and not name.startswith("durably.bench")
        and not any(part.startswith("_") for part in name.split(".")[1:])
    ]
    assert unmarked == []
    assert {"durably._loop.actor", "durably.storage._codec", "durably.adapters.s3._store"} <= set(shipped_modules())


@pytest.mark.parametrize(
    "module", sorted(PUBLIC_MODULES | PUBLIC_CONTAINERS - {"durably.adapters", "durably.integrations"})
)
def test_every_public_module_says_what_is_public(module):
    """``__all__`` is the public surface (``from m import *``, the API reference, the docstring check)."""
    imported = importlib.import_module(module)
    assert imported.__all__ and all(hasattr(imported, name) for name in imported.__all__), module


def test_the_readme_example_imports_only_durably():
    section = (ROOT / "README.md").read_text().split("## Embedding it", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    modules = {module for module, _ in imports_of(example) if module.startswith("durably")}
    assert modules <= {"durably", "durably.models.openai"}, modules


def test_every_public_name_resolves_and_is_listed():
    assert durably.__all__ == sorted(durably.__all__) and len(set(durably.__all__)) == len(durably.__all__)
    for name in durably.__all__:
        assert getattr(durably, name) is not None, name
    assert isinstance(durably.__version__, str) and durably.__version__[0].isdigit()
    assert set(dir(durably)) >= set(durably.__all__) | {"__version__"}
    with pytest.raises(AttributeError):
        durably.NoSuchName  # noqa: B018


def test_the_facade_names_are_the_runtime_classes():
    from durably._runtime import Runtime
    from durably._tools.tool import tool

    assert durably.Runtime is Runtime and durably.tool is tool


def test_the_type_checking_imports_match_the_lazy_table():
    """Type checkers and the API reference read the ``TYPE_CHECKING`` imports; the
    runtime reads ``_LAZY``: they must name the same things from the same modules."""
    tree = ast.parse(Path(durably.__file__).read_text())
    guarded = next(
        node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    static = {
        alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert static == durably._LAZY
    assert set(durably.__all__) == set(durably._LAZY) | {n for n in durably.errors.__all__ if n in durably.__all__}


def all_durably_errors() -> set[type]:
    seen: set[type] = set()
    todo = [durably.errors.DurablyError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen


def test_every_durably_error_is_defined_in_durably_errors():
    for module in (
        "durably",
        "durably.storage",
        "durably.storage._crypto",
        "durably.adapters.sqlite",
        "durably.adapters.s3",
        "durably.adapters.postgres",
        "durably.adapters.filesystem",
        "durably.integrations.langgraph",
        "durably.integrations.openai_agents",
        "durably.integrations.pydantic_ai",
        "durably._cli.main",
        "durably._console",
        "durably.models.openai",
        "durably._torture.harness",
        "durably._upkeep.migrate",
        "durably._upkeep.retention",
    ):
        importlib.import_module(module)
    misplaced = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in all_durably_errors()
        if cls.__module__.startswith("durably.") and cls.__module__ != "durably.errors"
    )
    assert misplaced == []
    defined = {cls.__name__ for cls in all_durably_errors() if cls.__module__ == "durably.errors"}
    assert set(durably.errors.__all__) == defined | {"DurablyError"}


def test_no_error_inherits_a_meaning_it_does_not_have():
    from durably.errors import (
        ConsoleNotInstalledError,
        DefinitionMigrationError,
        DefinitionNotRegisteredError,
        DurablyError,
        KeyConfigError,
    )

    assert not issubclass(DefinitionMigrationError, DefinitionNotRegisteredError)
    assert not issubclass(ConsoleNotInstalledError, DefinitionNotRegisteredError)
    assert issubclass(KeyConfigError, DurablyError) and issubclass(KeyConfigError, ValueError)


def test_storage_re_exports_are_the_same_classes():
    import durably.storage
    import durably.storage._errors

    for name in durably.storage._errors.__all__:
        assert getattr(durably.storage._errors, name) is getattr(durably.errors, name)
        assert getattr(durably.storage, name) is getattr(durably.errors, name)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///a.db?synchronus=FULL",
        "sqlite:///a.db?busy_timeout=soon",
        "sqlite:///a.db?create=1&create=1",
        "s3://bucket?concurency=4",
        "s3://bucket?concurrency=x",
        "s3://?region=x",
        "file:///tmp/x?creat=1",
        "memory://x?a=1",
        "memory://x/path",
        "postgresql://h/db?pool_max=ten",
        "postgresql://h/db?schema=a&schema=b",
        "postgresql://h/db?shema=fleet",
        "nosuch://x",
        "sqlite:/agents.db",
        "sqlite:agents.db",
        "file:/tmp/x",
        "memory:x",
    ],
)
def test_every_adapter_refuses_a_bad_url_with_the_same_error(url):
    from durably.storage import open_store

    with pytest.raises(durably.InvalidStoreURLError) as caught:
        open_store(url)
    assert isinstance(caught.value, ValueError) and caught.value.url


def test_a_scheme_without_slashes_is_refused_not_read_as_a_relative_path():
    from durably.storage import open_store

    with pytest.raises(durably.InvalidStoreURLError, match=r"sqlite:///relative.db") as caught:
        open_store("sqlite:/agents.db")  # urlsplit reads it as sqlite:///agents.db: the relative agents.db
    assert caught.value.url == "sqlite:/agents.db"
    assert open_store("SQLite:///agents.db") is not None  # the scheme's case does not matter
