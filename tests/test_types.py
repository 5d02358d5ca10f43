"""The shipped package type-checks with ``mypy --strict`` and says so (PEP 561).

The source folders are mapped into the ``durably`` namespace by setuptools
(``[tool.setuptools] package-dir``), which mypy cannot read, so the test lays
out the tree the wheel holds (symlinks to the sources, built from the same
``[tool.setuptools]`` tables) and runs ``python -m mypy -p durably`` on it with
the ``[tool.mypy]`` configuration of pyproject.toml. Run it alone with::

    .venv/bin/python -m pytest -q tests/test_types.py -p no:cacheprovider

Modules listed in the ``ignore_errors`` override of ``[tool.mypy]`` are not yet
clean (issue 13 item 3 empties that list); every other module must be.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
# Inside build/ (git-ignored): a fixed place, so mypy's cache there stays valid between runs.
STAGE = ROOT / "build" / "mypy"


def _package_dir(package: str) -> Path:
    """The source folder setuptools takes ``package`` from (``package-dir``, longest prefix wins)."""
    mapping: dict[str, str] = SETUPTOOLS.get("package-dir", {})
    parts = package.split(".")
    for cut in range(len(parts), -1, -1):
        prefix = ".".join(parts[:cut])
        if prefix in mapping:
            return ROOT / mapping[prefix] / Path(*parts[cut:])
    return ROOT / Path(*parts)


def _package_data(package: str) -> list[str]:
    """The package-data patterns that apply to ``package`` ("*" applies to every package)."""
    data: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})
    return [*data.get("*", []), *data.get(package, [])]


def shipped_files() -> dict[Path, Path]:
    """Map each file the wheel ships (path inside the wheel) to its source file."""
    files: dict[Path, Path] = {}
    for package in SETUPTOOLS["packages"]:
        source = _package_dir(package)
        target = Path(*package.split("."))
        for entry in sorted(source.iterdir()):
            if entry.is_file() and (
                entry.suffix == ".py"
                or any(fnmatch.fnmatch(entry.name, pattern) for pattern in _package_data(package))
            ):
                files[target / entry.name] = entry
    return files


def build_stage() -> dict[Path, Path]:
    """Lay out the wheel's tree under ``STAGE`` as symlinks; return wheel path -> source."""
    files = shipped_files()
    tree = STAGE / "durably"
    if tree.exists():
        for path in sorted(tree.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            path.unlink() if path.is_symlink() or path.is_file() else path.rmdir()
        tree.rmdir()
    for inside, source in files.items():
        link = STAGE / inside
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source)
    return files


def test_every_top_level_package_declares_py_typed() -> None:
    """PEP 561: the marker sits in each outermost regular package and is package data."""
    files = shipped_files()
    packages = {Path(*package.split(".")) for package in SETUPTOOLS["packages"]}
    regular = {package for package in packages if package / "__init__.py" in files}
    outermost = {package for package in regular if not any(parent in regular for parent in package.parents)}
    assert outermost, "no regular package found in [tool.setuptools] packages"
    missing = sorted(str(package) for package in outermost if package / "py.typed" not in files)
    assert not missing, f"py.typed is not shipped in {missing} (add it to the folder and to package-data)"


@pytest.mark.timeout(1200)  # a cold mypy run of the whole package on a loaded 2-core machine
def test_mypy_strict_is_clean_on_the_shipped_package() -> None:
    files = build_stage()
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "durably"],
        cwd=STAGE,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPY_FORCE_COLOR": "0"},
        check=False,
    )
    report = result.stdout + result.stderr
    # Name the source files, not the symlinks, so an error points at what to edit.
    for inside, source in files.items():
        report = report.replace(f"{inside}:", f"{source.relative_to(ROOT)}:")
    assert result.returncode == 0, f"mypy --strict found errors:\n{report}"
    assert "Success" in report, report
