"""MkDocs hook: lay out the source folders as the ``durably`` import tree for mkdocstrings.

The repository keeps the folders the design card fixes (runtime/, storage/,
adapters/...) and maps them into one ``durably`` namespace with setuptools'
``package-dir`` (pyproject.toml). griffe, which reads the sources for the API
reference, looks packages up as folders on a search path, so this hook builds
that path once per build: a temporary ``durably/`` whose entries are symlinks
to the mapped folders (and to the files of the folder ``durably`` itself maps
to, if any), and hands it to the python handler's ``paths``. The mapping is
read from pyproject.toml, so a moved package needs no change here.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parent.parent


def build_tree(root: Path, target: Path) -> Path:
    """Symlink ``root``'s ``package-dir`` mapping under ``target``; return ``target``."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    top = target / "durably"
    top.mkdir(parents=True)
    if "durably" in mapping:  # the facade's own folder: its modules sit at the top of the tree
        for entry in (root / mapping["durably"]).iterdir():
            if entry.suffix == ".py":
                (top / entry.name).symlink_to(entry)
    for name, folder in sorted(mapping.items(), key=lambda item: item[0].count(".")):
        parts = name.split(".")
        if parts[0] != "durably" or len(parts) == 1:
            continue
        link = top.joinpath(*parts[1:])
        if not link.parent.exists() or link.exists() or link.is_symlink():
            continue  # nested in a folder linked already (it is found there), or taken
        link.symlink_to(root / folder, target_is_directory=True)
    return target


@event_priority(100)  # before mkdocstrings reads its handlers' options
def on_config(config):
    """Put the import tree first on the python handler's search path."""
    tree = build_tree(ROOT, Path(tempfile.mkdtemp(prefix="durably-docs-")))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    handler = config["plugins"]["mkdocstrings"].config.setdefault("handlers", {}).setdefault("python", {})
    handler["paths"] = [str(tree), *handler.get("paths", [])]
    return config
