"""What a new user meets first, from a clean clone: errors that say what to do, names that are public,
objects that print usefully. Each test is one finding of the first-use review."""

from __future__ import annotations

import subprocess
import sys

import pytest

import durably


@pytest.mark.parametrize("module, extra", [("durably.models.openai", "openai"),
                                           ("durably.models.anthropic", "anthropic")])
def test_a_model_adapter_without_its_vendor_client_names_the_extra(module, extra):
    code = (f"import sys\nsys.modules[{extra!r}] = None  # the vendor client is not installed\n"
            "import durably\n"
            f"try:\n    import {module}\n"
            "except durably.ExtraNotInstalledError as exc:\n"
            "    assert isinstance(exc, ImportError) and exc.extra == " + repr(extra) + ", exc\n"
            "    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"pip install 'durably[{extra}]'" in proc.stdout and module in proc.stdout
