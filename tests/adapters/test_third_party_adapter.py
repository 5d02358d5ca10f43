"""Adapters from other packages: URL scheme discovery, and a third-party adapter passing the kit.

``tests/third_party/onefile_store`` is a stand-alone adapter project written from
docs/writing-an-adapter.md alone: its own pyproject declaring the entry point, its
own module, its own kit test module. Here it is "installed" the way installers
do it, as a ``*.dist-info`` directory with ``entry_points.txt`` on the path (which
is all ``importlib.metadata`` looks at), without touching the shared venv.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

import durably.storage._registry as registry
from durably.adapters.filesystem import FileSystemStore
from durably.adapters.memory import MemoryStore
from durably.storage import UnknownSchemeError, known_schemes, open_store, register_store

pytest_plugins = ["pytester"]

PROJECT = Path(__file__).resolve().parents[1] / "third_party" / "onefile_store"


def install(project: Path, site: Path) -> None:
    """Make ``project`` importable from ``site`` with the entry points its pyproject declares."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    dist_info = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    lines = []
    for group, entries in meta["entry-points"].items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in entries.items()), ""]
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    shutil.copy(project / "onefile_store.py", site)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The third-party project installed on this process's path for one test."""
    site = tmp_path / "site"
    install(PROJECT, site)
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("onefile_store", None)


def test_builtin_schemes_are_found_through_entry_points(tmp_path) -> None:
    assert {"file", "memory", "sqlite"} <= set(known_schemes())
    assert type(open_store("memory://")) is MemoryStore
    store = open_store(tmp_path.as_uri())
    assert type(store) is FileSystemStore and store.root == tmp_path


def test_unknown_scheme_lists_the_known_schemes() -> None:
    with pytest.raises(UnknownSchemeError) as raised:
        open_store("nosuchscheme://somewhere")
    message = str(raised.value)
    assert "nosuchscheme" in message
    for scheme in ("file", "memory", "sqlite"):
        assert scheme in message
    with pytest.raises(UnknownSchemeError, match="memory"):
        open_store("no-scheme-at-all")


def test_register_store_adds_a_scheme_for_this_process(monkeypatch) -> None:
    # register_store has no undo; restore the process-wide table after this test.
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))

    class NotebookStore(MemoryStore):
        pass

    register_store("NoteBook", NotebookStore)
    assert "notebook" in known_schemes()
    assert type(open_store("notebook://x")) is NotebookStore
    assert type(open_store("NOTEBOOK://x")) is NotebookStore, "schemes are case-insensitive, as in RFC 3986"


def test_an_installed_package_is_found_by_its_entry_point(installed, tmp_path) -> None:
    assert "onefile" in known_schemes()
    store = open_store(f"onefile://{tmp_path}/store.pickle")
    assert type(store).__name__ == "OneFileStore"
    assert type(store).__module__ == "onefile_store"


def test_the_third_party_project_passes_the_kit(pytester, monkeypatch) -> None:
    """Its author's own test module (docs section 5), run in a fresh pytest process as they would."""
    project = pytester.path / "onefile_store"
    shutil.copytree(PROJECT, project)
    install(PROJECT, pytester.path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path / "site"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(project)
    result = pytester.run(sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "tests", timeout=120)
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] >= 35
    assert "PytestDeprecationWarning" not in result.stdout.str() + result.stderr.str(), "the kit's run is warning-free"
    # Its optional parts are skipped, each with the reason shown.
    result.stdout.fnmatch_lines(
        [
            "*SKIPPED [[]4[]]*optional capability 'blobs' not declared by OneFileStore*",
            "*SKIPPED [[]1[]]*concurrent_instances is False*",
        ]
    )
