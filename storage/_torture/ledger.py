"""An append-only, fsynced JSON-lines ledger kept outside the store under test.

A crash test is only as good as its witness. The store cannot be its own
witness (its bugs are what is tested), so the process under test writes what it
was told was durable, and what it did to the outside world, here: one JSON
object per line, flushed and fsynced before the writer acts on it. A SIGKILL
can cut the last line short; ``entries`` skips such a torn tail (that line was
never fsynced whole, so nothing was acknowledged on it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class Ledger:
    """One ledger file. ``append(entry)`` is durable when it returns; ``entries()`` reads all whole lines.

    Several processes may append to one ledger: each line is one ``write`` of
    an ``O_APPEND`` descriptor, which POSIX keeps whole and in order.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def append(self, entry: dict[str, Any]) -> None:
        """Write ``entry`` (JSON-serialisable) as one line and fsync it. Blocking: a few ms."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self._fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
        os.fsync(self._fd)

    def entries(self) -> list[dict[str, Any]]:
        """Every whole line, in order; a torn or garbled line (a writer killed mid-write) is skipped."""
        if not self.path.exists():
            return []
        found = []
        for raw in self.path.read_bytes().split(b"\n"):
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict):
                found.append(entry)
        return found

    def close(self) -> None:
        """Close the descriptor (idempotent); ``append`` reopens it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
