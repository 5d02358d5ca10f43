"""The previous release's ``durably`` taken from this repository's history, to run beside this build.

The rolling-upgrade tests run the 0.1 release (``PREVIOUS_RELEASE``, the newest
code that reads only frame formats 1 to 3 and snapshots up to version 5) in a
process of its own on the store this build wrote. ``previous_release_tree`` is
the fixture that builds its importable tree (import it into a module whose tests
take ``previous_release``); ``old`` runs python in that tree.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

#: The 0.1 release's commit: the newest code that reads only frame formats 1-3 and snapshots up to v5.
PREVIOUS_RELEASE = "87352458f0de0b46c9e060c7771a03f2de007712"
REPO = Path(__file__).resolve().parents[2]
#: Where each source folder goes in an importable ``durably`` tree (pyproject's package-dir).
LAYOUT = {
    "runtime": "durably",
    "storage": "durably/storage",
    "adapters": "durably/adapters",
    "schemas": "durably/schemas",
    "models": "durably/models",
    "bench": "durably/bench",
}


@pytest.fixture(scope="module", name="previous_release")
def previous_release_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that imports as the previous release's ``durably`` (put it first on ``PYTHONPATH``);
    the test is skipped when this clone's history lacks that commit (a shallow clone, an export)."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE, *LAYOUT],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:  # a shallow clone or an exported tree: nothing to run the old code from
        pytest.skip(f"the previous release {PREVIOUS_RELEASE[:7]} is not in this clone's history")
    source, tree = tmp_path_factory.mktemp("release-0.1-src"), tmp_path_factory.mktemp("release-0.1")
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as archive:
        archive.extractall(source, filter="data")
    for folder, target in LAYOUT.items():  # parents first: runtime becomes durably/
        shutil.move(source / folder, tree / target)
    return tree


def old(tree: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the previous release's python ``args`` in a process of its own (``tree``: the fixture's folder)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=240, check=False
    )
