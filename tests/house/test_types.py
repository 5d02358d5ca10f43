"""The shipped package type-checks with ``mypy --strict`` and says so (PEP 561).

mypy reads a package as a folder named after it, so the test runs
``python -m mypy -p durably`` on the package as the wheel installs it (the
``shipped_tree`` fixture) with the ``[tool.mypy]`` configuration of
pyproject.toml, and names the source files in its report by the layout's one
rule (``durably.X`` is the top-level folder X for storage, adapters, schemas,
bench and models; everything else is in runtime/). Run it alone with::

    .venv/bin/python -m pytest -q tests/house/test_types.py -p no:cacheprovider
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_FOLDERS = {"storage", "adapters", "schemas", "bench", "models"}


def source_of(inside: str) -> str:
    """The source path of a file of the installed ``durably`` package (``durably/storage/_codec.py``)."""
    parts = inside.split("/")[1:]
    return "/".join(parts if parts[0] in TOP_FOLDERS else ["runtime", *parts])


def test_every_top_level_package_declares_py_typed(wheel) -> None:
    """PEP 561: the marker sits in each top-level source folder and travels in the wheel."""
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [
        folder for folder in ["", *sorted(TOP_FOLDERS)] if f"durably/{folder}/py.typed".replace("//", "/") not in names
    ]
    assert not missing, f"py.typed is not shipped in {missing} (add it to the folder and to package-data)"


@pytest.mark.timeout(1200)  # a cold mypy run of the whole package on a loaded 2-core machine
def test_mypy_strict_is_clean_on_the_shipped_package(shipped_tree: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / "build" / "mypy-cache"),
            "-p",
            "durably",
        ],
        cwd=shipped_tree,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPY_FORCE_COLOR": "0"},
        check=False,
    )
    report = re.sub(r"^(durably/\S+?\.py)", lambda m: source_of(m.group(1)), result.stdout + result.stderr, flags=re.M)
    assert result.returncode == 0, f"mypy --strict found errors:\n{report}"
    assert "Success" in report, report
