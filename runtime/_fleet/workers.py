"""Worker heartbeats in the store: who serves it, what each holds, and which of them fell silent.

A serving runtime (``Runtime.serve``, ``durably worker``) writes a small JSON
record about itself about once a second (``interval``: a third of
``heartbeat_timeout``, at most 1 s) to a stream of the reserved namespace
``durably.workers`` named by its lease owner's nonce: worker id, host, pid, the
namespace and definitions it serves, when it started, the agents it runs
(their count and up to ``LISTED_AGENTS`` ids) and its state (``serving``,
``draining``, ``stopped``). Only the plain ``Store`` methods are used (append,
snapshot, compaction, list, delete), so every store has heartbeats. Growth is
bounded: every ``COMPACT_EVERY`` beats the stream is folded into a snapshot of
its last beat and its records deleted, and streams of workers silent for more
than ``FORGET_AFTER`` seconds are deleted by the live workers.

A lease holder whose heartbeat is older than ``heartbeat_timeout`` seconds, or
who wrote ``stopped``, is dead: its leases are taken at once by any worker on
any host (``Heartbeats.silent``, consulted by ``LeaseKeeper``), instead of
after the lease's expiry. That is safe even when the "dead" worker is only
paused (SIGSTOP, a long GC, a frozen VM) and wakes up later: every append and
snapshot of its activations carries its lease's fencing token, which the
store refuses once the lease was taken over, so the paused worker's next write
fails and it stops; the timeout decides how soon agents move, the fencing
decides that no agent is run by two workers' writes. A holder that never wrote a
heartbeat (a ``Runtime`` that does not serve) is not judged here: its lease
lapses at its expiry, as before. Ages are measured on the reader's wall clock
against the writer's, like lease expiries: the hosts' clocks must agree to well
within the timeout (NTP does).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from durably._figures import check_figure
from durably._fleet.owner import OwnerIdentity
from durably._journal.write_formats import NEWEST, UNSTATED, WriteFormats
from durably.errors import InvalidArgumentError
from durably.storage._errors import ConflictError, StoreError
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

log = logging.getLogger("durably.workers")

#: The reserved namespace of the heartbeat streams (one stream per serving runtime).
WORKERS_NAMESPACE = "durably.workers"
#: The default ``heartbeat_timeout``: seconds of silence after which a worker is dead.
DEFAULT_TIMEOUT = 5.0
#: Agent ids listed in one heartbeat (the count is always exact).
LISTED_AGENTS = 100
#: Beats between two compactions of a heartbeat stream (snapshot of the last beat, records deleted).
COMPACT_EVERY = 20
#: Seconds after its last beat when a silent or stopped worker's stream is deleted.
FORGET_AFTER = 600.0
#: Beats between two sweeps for forgotten workers' streams.
SWEEP_EVERY = 60
#: Seconds a read heartbeat is reused by ``Heartbeats.silent`` (a scan asks about many leases of one holder).
READ_CACHE_SECONDS = 0.25

SERVING, DRAINING, STOPPED = "serving", "draining", "stopped"


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """One heartbeat: a worker as it described itself at ``beat_at``.

    Attributes:
        owner: Its lease owner string (``durably._fleet.owner.OwnerIdentity``).
        worker_id: The name it was given (``--worker-id``, ``Runtime(worker_id=)``).
        host: Its hostname.
        pid: Its process id.
        namespace: The namespace it serves.
        definitions: The agent definition names it registers, sorted.
        started_at: Unix seconds when it started heartbeating.
        beat_at: Unix seconds of this beat.
        agents: How many agents it runs now.
        agent_ids: Up to ``LISTED_AGENTS`` of their ids, sorted.
        state: ``serving``, ``draining`` (finishing its steps, taking nothing more) or
            ``stopped`` (left: whatever it held is free).
        reads: ``(frame format, snapshot version)``, the newest it reads; a beat that
            does not say is from a release that reads ``write_formats.UNSTATED``.
        writes: The same for what it writes (``Runtime(write_compat=)``).
    """

    owner: str
    worker_id: str
    host: str
    pid: int
    namespace: str
    definitions: tuple[str, ...]
    started_at: float
    beat_at: float
    agents: int
    agent_ids: tuple[str, ...]
    state: str
    reads: tuple[int, int] = UNSTATED
    writes: tuple[int, int] = UNSTATED

    def to_bytes(self) -> bytes:
        """The beat as the compact JSON stored in its stream."""
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> WorkerBeat | None:
        """The beat ``to_bytes`` wrote, or None for bytes that are not one (never raises)."""
        try:
            raw = json.loads(data)
            return cls(
                owner=str(raw["owner"]),
                worker_id=str(raw["worker_id"]),
                host=str(raw["host"]),
                pid=int(raw["pid"]),
                namespace=str(raw["namespace"]),
                definitions=tuple(map(str, raw["definitions"])),
                started_at=float(raw["started_at"]),
                beat_at=float(raw["beat_at"]),
                agents=int(raw["agents"]),
                agent_ids=tuple(map(str, raw["agent_ids"])),
                state=str(raw["state"]),
                reads=_levels(raw.get("reads", UNSTATED)),
                writes=_levels(raw.get("writes", UNSTATED)),
            )
        except (ValueError, TypeError, KeyError):
            return None

    def age(self, now: float | None = None) -> float:
        """Seconds since this beat (on this host's wall clock), never negative."""
        return max(0.0, (time.time() if now is None else now) - self.beat_at)

    def alive(self, timeout: float, now: float | None = None) -> bool:
        """Whether the worker counts as alive: it beat within ``timeout`` seconds and has not stopped."""
        return self.state != STOPPED and self.age(now) <= timeout


def _levels(value: Any) -> tuple[int, int]:
    frame, snapshot = value  # a ValueError or TypeError for anything but a pair
    return (int(frame), int(snapshot))


class Served(Protocol):
    """What a heartbeat tells of its runtime (``durably._fleet.activations.Activations`` has it)."""

    @property
    def namespace(self) -> str:
        """The namespace it serves."""

    @property
    def definitions(self) -> Mapping[str, object]:
        """Its registered definitions by name."""

    @property
    def live(self) -> Collection[str]:
        """The ids of the agents live in it."""

    @property
    def draining(self) -> bool:
        """Whether it drains (resumes nothing more)."""

    @property
    def task_group(self) -> TaskGroup:
        """The task group the heartbeat runs in."""


def stream_of(identity: OwnerIdentity) -> StreamId:
    """The heartbeat stream of the runtime whose lease owner identity is ``identity``."""
    return StreamId(WORKERS_NAMESPACE, identity.nonce)


async def read_beat(store: Store, stream: StreamId) -> WorkerBeat | None:
    """The latest beat in ``stream``, or None when it has none (never written, forgotten, unreadable).

    Raises ``StoreError`` subclasses as the store does (``StoreUnavailableError`` in an outage).
    """
    last = await store.last_seq(stream)
    if last == 0:
        return None
    records = store.read(stream, after_seq=last - 1, page_size=1)
    try:
        async for record in records:
            return WorkerBeat.from_bytes(record.data)
    finally:
        await records.aclose()
    snapshot = await store.get_snapshot(stream)  # the last record was compacted into it
    return None if snapshot is None else WorkerBeat.from_bytes(snapshot.data)


async def list_workers(store: Store, namespace: str | None = None) -> list[WorkerBeat]:
    """Every worker with a heartbeat stream (live, silent or stopped, until forgotten), sorted by worker id.

    Args:
        store: An open store.
        namespace: Only the workers serving this namespace; None: all.

    Returns:
        Their latest beats; unreadable streams are left out.

    Raises:
        StoreUnavailableError: The store cannot be reached.
    """
    beats = []
    async for stream in store.list_streams(WORKERS_NAMESPACE):
        beat = await read_beat(store, stream)
        if beat is not None and (namespace is None or beat.namespace == namespace):
            beats.append(beat)
    return sorted(beats, key=lambda b: (b.worker_id, b.started_at))


def check_timeout(owner: str, timeout: float) -> float:
    """``timeout`` as a float if it is a finite number of seconds > 0; else ``InvalidArgumentError``
    (a ``ValueError``) naming ``owner``."""
    check_figure(owner, "heartbeat_timeout", timeout, optional=False)
    if timeout == 0:
        raise InvalidArgumentError(f"{owner}: heartbeat_timeout must be > 0 seconds")
    return float(timeout)


@dataclass
class _Listing:
    """A listing of a namespace's heartbeats being read: ``beats`` once read (None if it failed)."""

    beats: list[WorkerBeat] | None = None
    done: anyio.Event = field(default_factory=anyio.Event)


class Heartbeats:
    """One runtime's heartbeat (written by ``run`` once ``start`` is called) and its view of the others'.

    Args:
        store: The runtime's store.
        identity: The runtime's lease owner identity (names its heartbeat stream).
        timeout: Seconds of silence after which a worker is dead (``heartbeat_timeout``).
        writes: The formats the runtime writes, told in its beats (``WorkerBeat.writes``).

    Raises:
        InvalidArgumentError: ``timeout`` is not a finite number > 0.
    """

    def __init__(
        self, store: Store, identity: OwnerIdentity, timeout: float = DEFAULT_TIMEOUT, *, writes: WriteFormats = NEWEST
    ) -> None:
        self.store = store
        self.writes = writes
        self.identity = identity
        self.timeout = check_timeout("Heartbeats", timeout)
        self.interval = min(1.0, self.timeout / 3)
        self.stream = stream_of(identity)
        self.started_at: float | None = None  # set by start(): this runtime heartbeats
        self.last_written: float | None = None  # monotonic time of the last beat the store took
        # Monotonic time since when this runtime's beats have reached the store without a gap
        # longer than the timeout (None: the last one failed). See ``silent``.
        self.writable_since: float | None = None
        self._seq = 0
        self._beats = 0
        self._cache: dict[str, tuple[float, WorkerBeat | None]] = {}
        self._listings: dict[str, _Listing] = {}  # the listings being read now, by namespace

    # -- what others see of this runtime -------------------------------------------------

    def start(self, activations: Served) -> None:
        """Begin heartbeating in the runtime's task group (a no-op when already begun).

        The heartbeat lasts as long as the runtime: its last beat, when the
        runtime is left, says ``stopped``.
        """
        if self.started_at is not None:
            return
        self.started_at = time.time()
        activations.task_group.start_soon(self.run, activations)

    def beat(self, activations: Served, state: str | None = None) -> WorkerBeat:
        """This runtime's beat now (``state``: None for serving or draining, as the runtime is)."""
        live = sorted(activations.live)
        return WorkerBeat(
            owner=str(self.identity),
            worker_id=self.identity.worker_id,
            host=self.identity.host,
            pid=self.identity.pid,
            namespace=activations.namespace,
            definitions=tuple(sorted(activations.definitions)),
            started_at=self.started_at or time.time(),
            beat_at=time.time(),
            agents=len(live),
            agent_ids=tuple(live[:LISTED_AGENTS]),
            state=state or (DRAINING if activations.draining else SERVING),
            reads=NEWEST.levels,
            writes=self.writes.levels,
        )

    async def run(self, activations: Served) -> None:
        """Beat every ``interval`` seconds until cancelled, then write a last ``stopped`` beat.

        A failed beat is logged and the next one tried: an outage must not stop
        the worker (other workers may meanwhile take its agents; its fenced
        writes then fail, and it stops those activations).
        """
        try:
            while True:
                await self.write(self.beat(activations))
                await anyio.sleep(self.interval)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(max(self.interval, 1.0)):
                await self.write(self.beat(activations, STOPPED))

    async def write(self, beat: WorkerBeat) -> bool:
        """Append ``beat`` to this runtime's stream (compacting and sweeping now and then); True if stored.

        Store errors are logged, never raised.
        """
        try:
            try:
                self._seq = await self.store.append(self.stream, self._seq, [beat.to_bytes()])
            except ConflictError:
                # Forgotten by a sweep while this runtime was silent, or written by an earlier
                # process of a reused nonce: go on after what is there.
                self._seq = await self.store.last_seq(self.stream)
                self._seq = await self.store.append(self.stream, self._seq, [beat.to_bytes()])
            now = time.monotonic()
            if self.writable_since is None or self.last_written is None or now - self.last_written > self.timeout:
                self.writable_since = now  # first beat, or the first after a gap: the store (or we) stalled
            self.last_written = now
            self._beats += 1
            if self._beats % COMPACT_EVERY == 0:
                await self._compact(beat)
            if self._beats % SWEEP_EVERY == 1:
                await self.sweep()
        except StoreError as exc:
            self.writable_since = None
            log.warning("heartbeat of %s not written (%s); retrying in %.1f s", beat.worker_id, exc, self.interval)
            return False
        return True

    async def _compact(self, beat: WorkerBeat) -> None:
        await self.store.put_snapshot(self.stream, self._seq, beat.to_bytes())
        await self.store.delete_records(self.stream, self._seq)
        await self.store.delete_snapshots(self.stream, self._seq)

    async def sweep(self, now: float | None = None) -> int:
        """Delete the heartbeat streams of workers silent for more than ``FORGET_AFTER`` seconds.

        Returns how many were deleted. Raises ``StoreError`` subclasses as the store does.
        """
        now = time.time() if now is None else now
        gone = 0
        async for stream in self.store.list_streams(WORKERS_NAMESPACE):
            if stream == self.stream:
                continue
            beat = await read_beat(self.store, stream)
            if beat is not None and beat.age(now) > FORGET_AFTER:
                await self.store.delete_stream(stream)
                gone += 1
        return gone

    def healthy(self) -> bool:
        """Whether this runtime's last beat reached the store within ``timeout`` seconds."""
        return self.last_written is not None and time.monotonic() - self.last_written <= self.timeout

    # -- what this runtime sees of others ------------------------------------------------

    async def silent(self, owner: str) -> bool:
        """Whether the lease holder ``owner`` is a worker whose heartbeat stopped (dead).

        True when its latest beat is older than ``timeout`` or says ``stopped``;
        False for a holder that is alive, that never heartbeat (its lease's expiry
        decides), an owner string this build does not write, or when the store
        cannot be read now (then nothing is taken early). False too while this
        runtime heartbeats but has not written its own beats through the last
        ``timeout`` seconds without a gap: a stall of the store (its write lock
        held, an outage) or of this process (paused) silences every worker at
        once, and the others are alive; once the store takes writes again they
        beat within a timeout. Never raises.
        """
        identity = OwnerIdentity.parse(owner)
        if identity is None or identity.nonce == self.identity.nonce:
            return False
        if self.started_at is not None and (
            self.writable_since is None or not self.healthy() or time.monotonic() - self.writable_since < self.timeout
        ):
            return False
        now = time.monotonic()
        cached = self._cache.get(identity.nonce)
        if cached is not None and now - cached[0] <= READ_CACHE_SECONDS:
            beat = cached[1]
        else:
            try:
                beat = await read_beat(self.store, stream_of(identity))
            except StoreError as exc:
                log.warning("heartbeat of lease holder %s not read (%s): not taken early", owner, exc)
                return False
            if len(self._cache) > 1024:
                self._cache.clear()
            self._cache[identity.nonce] = (now, beat)
        return beat is not None and beat.owner == owner and not beat.alive(self.timeout)

    async def live_workers(self, namespace: str, definition: str | None = None) -> list[WorkerBeat]:
        """The live, serving workers of ``namespace`` (registering ``definition`` when given).

        Raises ``StoreError`` subclasses as the store does.
        """
        beats = await self._listing(namespace)
        now = time.time()
        return [
            beat
            for beat in beats
            if beat.alive(self.timeout, now)
            and beat.state == SERVING
            and (definition is None or definition in beat.definitions)
        ]

    async def _listing(self, namespace: str) -> list[WorkerBeat]:
        """``list_workers(namespace)``, one read shared by every caller that asks while it is read.

        A burst of commands (an operator approving hundreds of agents) asks where each
        agent will run at once: they share one listing of the heartbeats, not one each.
        """
        shared = self._listings.get(namespace)
        if shared is not None:
            await shared.done.wait()
            if shared.beats is not None:
                return shared.beats
            # The reader failed or was cancelled: read for this caller (its error is its own).
        shared = self._listings[namespace] = _Listing()
        try:
            shared.beats = await list_workers(self.store, namespace)
            return shared.beats
        finally:
            if self._listings.get(namespace) is shared:
                del self._listings[namespace]
            shared.done.set()


def describe(beat: WorkerBeat, timeout: float, now: float | None = None) -> dict[str, Any]:
    """``beat`` as a JSON-ready dict for operators, with its ``age_s`` and ``status``.

    ``status``: ``live`` or ``draining`` while it beats, ``stopped`` after it left,
    ``dead`` when silent for more than ``timeout`` seconds. A stopped or dead
    worker holds nothing (any worker may take its leases at once), so its
    ``agents`` is 0 and its ``agent_ids`` empty, whatever its last beat said.
    """
    age = beat.age(now)
    if beat.state == STOPPED:
        status = STOPPED
    elif age > timeout:
        status = "dead"
    else:
        status = "live" if beat.state == SERVING else beat.state
    row = {**asdict(beat), "age_s": round(age, 3), "status": status}
    if status in (STOPPED, "dead"):
        row.update(agents=0, agent_ids=[])
    return row


def forgotten(row: Mapping[str, Any]) -> bool:
    """True when a ``describe`` row is of a stopped or dead worker silent for over ``FORGET_AFTER`` seconds.

    Operators are not shown such a worker, also when no live worker was left to delete its stream.
    """
    return row["status"] in (STOPPED, "dead") and row["age_s"] > FORGET_AFTER


def mark_superseded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (``describe`` rows), each with ``superseded`` set.

    A stopped or dead worker is superseded when a run started later under the
    same worker id is listed too (a reused ``--worker-id``, a restarted pod):
    its row is history, the later run is the one serving. Two live rows with one
    worker id are left as they are: neither replaced the other.
    """
    latest: dict[str, float] = {}
    for row in rows:
        latest[row["worker_id"]] = max(latest.get(row["worker_id"], row["started_at"]), row["started_at"])
    for row in rows:
        row["superseded"] = row["status"] in (STOPPED, "dead") and row["started_at"] < latest[row["worker_id"]]
    return rows
