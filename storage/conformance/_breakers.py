"""How the kit makes a backend fail by itself, without the adapter author's help.

Two faults need nothing from the author. A store that talks to a server over
sockets has them cut under it: the kit finds the sockets the store opened (the
process's descriptors before and after), and shuts each one down, which is what
a restarted server or a dropped network does to a driver. A store that keeps
files under the test location gets a full disk: the process's file-size limit
(``RLIMIT_FSIZE``) drops to zero, so every write to a regular file fails, in
every thread (Python ignores ``SIGXFSZ``, so the write fails with ``EFBIG``
instead of killing the process). This works for root too, where a read-only
``chmod`` would stop nothing.

A third fault needs the author to hand over the server: ``ServerControl`` is
what the ``backend_server`` hook returns, and the kit kills and restarts it.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

#: Where the process's open descriptors are listed: Linux, then the BSDs and macOS.
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


class ServerControl(Protocol):
    """A backend server the kit may kill and start again (what ``backend_server(tmp_path)`` returns)."""

    async def kill(self) -> None:
        """Stop the server the way a crash does (no clean shutdown): its connections drop."""

    async def restart(self) -> None:
        """Start the server again on the same address and data; return once it accepts connections."""


def socket_fds() -> set[int]:
    """The descriptors of this process that are connected stream sockets, or an empty set when unknown.

    A socket pair (an event loop's wake-up pipe) has no peer address and is left
    out: shutting it down would break the loop, not the store.
    """
    for directory in _FD_DIRS:
        if os.path.isdir(directory):
            break
    else:
        return set()
    found: set[int] = set()
    for name in os.listdir(directory):
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=fd)
        except OSError:
            continue  # closed since it was listed, or not a socket Python can wrap
        try:
            if sock.type == socket.SOCK_STREAM and sock.getpeername():
                found.add(fd)
        except OSError:
            pass  # not connected: a listening socket, or one being closed
        finally:
            sock.detach()  # the descriptor stays the store's; only the wrapper goes
    return found


def cut_sockets(fds: set[int]) -> int:
    """Shut down (both directions) each socket in ``fds``; the descriptors stay open for their owner.

    Args:
        fds: Descriptors from ``socket_fds``.

    Returns:
        How many were still sockets and were cut.
    """
    cut = 0
    for fd in fds:
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            continue  # closed by its owner meanwhile
        try:
            sock.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            pass  # already shut down or reset by the peer: cut either way
        finally:
            sock.detach()
    return cut


def holds_files(root: Path) -> bool:
    """Whether any regular file exists under ``root`` (the store keeps its data in files there)."""
    return root.exists() and any(path.is_file() for path in root.rglob("*"))


def full_disk_reason() -> str | None:
    """Why ``full_disk`` cannot run on this platform, or None when it can."""
    try:
        import resource
    except ImportError:
        return "this platform has no resource limits (RLIMIT_FSIZE): the kit cannot fill the disk"
    if not hasattr(resource, "RLIMIT_FSIZE") or not hasattr(signal, "SIGXFSZ"):
        return "this platform has no RLIMIT_FSIZE: the kit cannot fill the disk"
    if signal.getsignal(signal.SIGXFSZ) != signal.SIG_IGN:
        return "SIGXFSZ is not ignored in this process: a write past the file-size limit would kill it"
    return None


@contextmanager
def full_disk() -> Iterator[None]:
    """While entered, every write to a regular file by this process fails (``EFBIG``), as on a full disk.

    Call ``full_disk_reason()`` first: on a platform it names, this raises
    ``OSError`` from ``setrlimit``.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
