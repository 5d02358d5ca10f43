"""Starting a child process on the same adapter: the class by module and name, and an alike ``sys.path``."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def load_class(module: str, qualname: str) -> type:
    """The class ``qualname`` (nested names allowed) of ``module``. Raises ``ImportError``, ``AttributeError``."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not isinstance(found, type):
        raise ImportError(f"{module}:{qualname} is not a class")
    return found


def child_environment() -> dict[str, str]:
    """This process's environment with its ``sys.path`` as ``PYTHONPATH``, so a child imports what we import."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    return env


async def read_all(stream: Any) -> bytes:
    """Everything left on a child's output stream (``b""`` when there is none)."""
    if stream is None:
        return b""
    chunks = []
    try:
        async for chunk in stream:
            chunks.append(chunk)
    except Exception:
        pass
    return b"".join(chunks)
