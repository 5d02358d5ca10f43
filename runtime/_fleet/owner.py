"""Who holds a lease, told apart per process incarnation, and whether that holder is still alive.

A host name and a pid do not tell processes apart: a restarted container keeps
its hostname and, as pid 1, its pid; a fleet with a stable ``worker_id`` keeps
its name across restarts. An owner named by them alone would make the new
process take its dead predecessor's lease for a live one and wait out the TTL.
So the owner string carries the process incarnation: the kernel's boot id, the
pid namespace, the pid and the process start time (``/proc/<pid>/stat`` field
22, clock ticks since boot), plus a random nonce per ``Runtime``. Two processes can share a pid only across
a reboot or a pid namespace, and then their boot id, namespace or start time
differ; the start time also catches pid reuse on a long-lived host.

Liveness is only ever decided for a holder on this host (same hostname, boot
id and pid namespace): a process there that is gone, or whose pid now belongs
to a younger process, is dead. A holder elsewhere is ``REMOTE``: no process
check here can tell; its heartbeat does, when it writes one
(``durably._fleet.workers``), else its lease lapses at its expiry. Off Linux (no ``/proc``) the
start time and boot id are empty and the check falls back to "is the pid there".
"""

from __future__ import annotations

import os
import uuid
import weakref
from dataclasses import dataclass
from enum import StrEnum

from durably.storage._spi import Lease


class Liveness(StrEnum):
    """``ALIVE``: a process of this host that runs; ``DEAD``: a process of this host
    that is gone (or a previous incarnation of a reused pid); ``REMOTE``: another
    host (or an owner string this build cannot read): only its lease expiry tells."""

    ALIVE = "alive"
    DEAD = "dead"
    REMOTE = "remote"


_SEPARATOR = "@"  # worker_id/nonce @ host:pid:start:boot:pidns


@dataclass(frozen=True, slots=True)
class OwnerIdentity:
    """One runtime's lease owner identity.

    ``worker_id``: the name the embedder chose (host:pid by default);
    ``nonce``: random per ``Runtime``; ``host``; ``pid``; ``started``: the
    process start time in clock ticks since boot ("" when unknown); ``boot_id``:
    the first 12 hex digits of the kernel's boot id ("" when unknown);
    ``pid_ns``: the pid namespace's inode ("" when unknown).
    """

    worker_id: str
    nonce: str
    host: str
    pid: int
    started: str
    boot_id: str
    pid_ns: str

    def __str__(self) -> str:
        incarnation = f"{self.host}:{self.pid}:{self.started}:{self.boot_id}:{self.pid_ns}"
        return f"{self.worker_id}/{self.nonce}{_SEPARATOR}{incarnation}"

    @classmethod
    def parse(cls, owner: str) -> OwnerIdentity | None:
        """The identity in an owner string this module wrote, or None for any other string."""
        head, sep, incarnation = owner.rpartition(_SEPARATOR)
        parts = incarnation.split(":")
        if not sep or len(parts) != 5 or not parts[1].isdigit():
            return None
        worker_id, slash, nonce = head.rpartition("/")
        if not slash:
            return None
        host, pid, started, boot_id, pid_ns = parts
        return cls(worker_id, nonce, host, int(pid), started, boot_id, pid_ns)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip().replace("-", "")[:12]
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def process_start_time(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot ("" when this
    platform has no ``/proc``), or None when no such process exists (a zombie,
    killed and not yet reaped by its parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _start_time_without_proc(pid)
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    fields = stat.rpartition(")")[2].split()
    if fields and fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else ""


def _start_time_without_proc(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return ""
    return ""


def hostname() -> str:
    """This host's name, ``socket.gethostname()``.

    ``socket`` is imported on the first call: by the time a runtime runs, the
    event loop (asyncio) has imported it anyway, so ``import durably`` need not.
    """
    import socket

    return socket.gethostname()


#: Nonces of the ``Runtime`` objects alive in this process (see ``holder_liveness``).
_LIVE_NONCES: weakref.WeakValueDictionary[str, object] = weakref.WeakValueDictionary()


def new_identity(worker_id: str, keeper: object) -> OwnerIdentity:
    """A fresh identity for one runtime of this process, named ``worker_id``.

    ``keeper`` (the object that holds the leases) is registered for as long as
    it lives: a lease of this very process whose nonce belongs to no live
    keeper is a dead runtime's (one that exited without releasing).
    """
    identity = OwnerIdentity(
        worker_id,
        uuid.uuid4().hex[:12],
        hostname(),
        os.getpid(),
        process_start_time(os.getpid()) or "",
        _boot_id(),
        _pid_namespace(),
    )
    _LIVE_NONCES[identity.nonce] = keeper
    return identity


def holder_liveness(owner: str) -> Liveness:
    """Whether the lease holder ``owner`` (an owner string) is alive, dead or out of sight.

    Reads the identity ``OwnerIdentity`` wrote, or the older ``host:pid/nonce``
    form (a pid of this host that is gone is dead; one that exists is taken as
    alive, except this very process's pid, which no runtime of this process
    writes in the old form any more: it is a previous incarnation's). Anything
    else is ``REMOTE``. Never raises.
    """
    identity = OwnerIdentity.parse(owner)
    if identity is None:
        return _legacy_liveness(owner)
    if identity.host != hostname():
        return Liveness.REMOTE
    boot_id, pid_ns = _boot_id(), _pid_namespace()
    if identity.boot_id and boot_id and identity.boot_id != boot_id:
        return Liveness.DEAD  # this host rebooted since: every process of the old boot is gone
    if identity.pid_ns and pid_ns and identity.pid_ns != pid_ns:
        return Liveness.REMOTE  # another container on this kernel: its pids are not ours to look up
    started = process_start_time(identity.pid)
    if started is None:
        return Liveness.DEAD
    if identity.started and started and identity.started != started:
        return Liveness.DEAD  # the pid now belongs to a younger process
    if identity.pid == os.getpid() and identity.nonce not in _LIVE_NONCES:
        return Liveness.DEAD  # a runtime of this process that is gone without releasing
    return Liveness.ALIVE


def _legacy_liveness(owner: str) -> Liveness:
    host, _, pid = owner.rpartition("/")[0].rpartition(":")
    if host != hostname() or not pid.isdigit():
        return Liveness.REMOTE
    if int(pid) == os.getpid():
        return Liveness.DEAD
    return Liveness.DEAD if process_start_time(int(pid)) is None else Liveness.ALIVE


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who holds an agent's lease, for operators (``Runtime.lease_holder``).

    Attributes:
        owner: The owner string.
        worker_id: The holder's chosen name (the whole owner string when it is
            not one this build writes).
        host: The holder's hostname (None when unknown).
        pid: The holder's process id (None when unknown).
        expires_at: Unix seconds when the lease lapses unless renewed.
        token: The lease's fencing token.
        liveness: ``Liveness``: alive, dead (its agents are taken at once by
            ``resume_all``/``serve``; also a worker whose heartbeat stopped, as
            ``LeaseKeeper.holder_info`` reports it) or remote (its heartbeat, or
            else ``expires_at``, tells).
    """

    owner: str
    worker_id: str
    host: str | None
    pid: int | None
    expires_at: float
    token: int
    liveness: Liveness

    @classmethod
    def of(cls, lease: Lease) -> LeaseHolder:
        """Describe ``lease``'s holder, checking its liveness now.

        Args:
            lease: The lease as the store returned it.

        Returns:
            The holder, with its ``liveness`` as of this call.
        """
        identity = OwnerIdentity.parse(lease.owner)
        return cls(
            lease.owner,
            identity.worker_id if identity else lease.owner,
            identity.host if identity else None,
            identity.pid if identity else None,
            lease.expires_at,
            lease.token,
            holder_liveness(lease.owner),
        )
