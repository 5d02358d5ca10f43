"""The built wheel: only the ``durably`` package, and the facade works from it.

The wheel is built by pip from a copy of the source tree (so the checkout gets
no build/ or egg-info), installed without dependencies into a folder of its
own, and imported by a Python that does not run ``site`` (so the editable
install of this checkout cannot answer instead): the dependencies come from this
environment's site-packages, durably only from the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_only_the_durably_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"durably", f"durably-{version('durably')}.dist-info"}
    assert "durably/__init__.py" in names and "durably/errors.py" in names
    assert "durably/schemas/record-v1.cddl" in names  # package data travels with it
    assert not [
        n for n in names if n.startswith(("durably/runtime/", "durably/facade/"))
    ]  # each folder is in the wheel once
    metadata = zipfile.ZipFile(wheel).read(f"durably-{version('durably')}.dist-info/METADATA").decode()
    assert "Provides-Extra: all" in metadata and "Provides-Extra: testing" in metadata
    assert f"Version: {version('durably')}" in metadata  # one source: pyproject.toml


def test_the_facade_imports_from_the_installed_wheel(shipped_tree, tmp_path):
    target = shipped_tree
    paths = dict.fromkeys([str(target), *(p for p in sys.path if p.rstrip("/").endswith("site-packages"))])
    code = (
        "import durably; print(durably.__version__, durably.Runtime, durably.tool); "
        "import durably._runtime, durably._cli.main; print(durably.__file__); print(durably._runtime.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    first, facade, runtime = proc.stdout.splitlines()
    assert first.startswith(f"{version('durably')} <class 'durably._runtime.Runtime'> <function tool")
    assert facade == str(target / "durably" / "__init__.py")
    assert runtime == str(target / "durably" / "_runtime.py")
