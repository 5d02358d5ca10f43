"""Retention: how long an agent's data is kept, by status, and the sweep that applies it.

A ``RetentionPolicy`` gives a time-to-live per agent status (``finished``
agents kept 30 days, ``failed`` 90, running ones forever...). The TTL runs from
the agent's last activity: the timestamp of its last record. ``sweep`` visits
every stream of one namespace (one policy per namespace: call it once per
tenant with that tenant's policy) and purges those past their TTL through
``Store.delete_stream``, which deletes records, snapshots and blobs.

A stream whose records were all compacted away behind a snapshot has no
record left to date it; the sweep keeps it and reports it ``undated`` rather
than guess (``durably reencrypt`` never leaves a stream in that shape: it keeps
one record carrying the last activity's time). A LangGraph thread (``threads``)
is dated by its last record or its snapshot, and has the status ``threads`` gives it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._reading import threads
from durably._reading.watch import STATUSES
from durably.errors import AgentLeasedError, ArgumentTypeError, InvalidArgumentError, PurgeIncompleteError
from durably.integrations._langgraph_threads import RECORD_SCHEMA, decode_frame
from durably.storage._errors import CodecError
from durably.storage._spi import Store, StreamId

if TYPE_CHECKING:
    from durably._telemetry import Telemetry

#: One day in seconds, for ``RetentionPolicy`` TTLs (``30 * DAY``); public as ``durably.DAY``.
DAY = 86_400.0

#: What ``sweep`` did with one stream (``held``: expired, but a live worker runs it: not purged).
PURGED, EXPIRED, KEPT, UNDATED, UNREADABLE, HELD = "purged", "expired", "kept", "undated", "unreadable", "held"


@dataclass(frozen=True)
class RetentionPolicy:
    """Time-to-live in seconds by agent status, counted from the last record.

    Example: ``RetentionPolicy({"finished": 30 * DAY, "failed": 90 * DAY})``.

    Attributes:
        ttl: Status (``finished``, ``failed``, ``cancelled``, ``suspended``,
            ``waiting_approval``, ``running``) -> seconds (None: keep forever).
            Copied at construction.
        default: Seconds for a status not in ``ttl`` (None: keep forever).

    Raises:
        InvalidArgumentError: A TTL that is negative, NaN or infinite, or a
            status that is not one of the above (a ``ValueError``).
        ArgumentTypeError: ``ttl`` not a mapping of status names, or a TTL
            that is not a number (a bool is not; a ``TypeError``).
    """

    ttl: Mapping[str, float | None] = field(default_factory=dict)
    default: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.ttl, Mapping):
            raise ArgumentTypeError(f"RetentionPolicy: ttl must be a mapping of status -> seconds, got {self.ttl!r}")
        for status, seconds in self.ttl.items():
            if not isinstance(status, str):
                raise ArgumentTypeError(f"RetentionPolicy: ttl keys must be status names, got {status!r}")
            if status not in STATUSES:
                raise InvalidArgumentError(
                    f"RetentionPolicy: unknown status {status!r} (statuses: {', '.join(sorted(STATUSES))})"
                )
            check_seconds(f"retention TTL for {status}", seconds)
        check_seconds("retention default TTL", self.default)
        object.__setattr__(self, "ttl", dict(self.ttl))  # checked once: a later change to the caller's dict is not seen

    def ttl_for(self, status: str) -> float | None:
        """How long an agent with ``status`` is kept.

        Args:
            status: The agent's status, e.g. ``finished``.

        Returns:
            Seconds after its last record, or None: forever.
        """
        return self.ttl.get(status, self.default)

    def shortest(self) -> float | None:
        """The smallest TTL of any status.

        Returns:
            Seconds, or None when nothing ever expires.
        """
        values = [v for v in (*self.ttl.values(), self.default) if v is not None]
        return min(values) if values else None


@dataclass(frozen=True, slots=True)
class SweepItem:
    """One stream seen by ``sweep``.

    Attributes:
        stream: The stream.
        status: The agent's status (None if not read).
        last_at: Unix seconds of its last record (None when undated).
        age: Seconds since ``last_at`` (None when undated).
        outcome: ``purged``, ``expired`` (would be purged: dry run), ``kept``,
            ``undated``, ``unreadable`` (the journal did not decode; kept) or
            ``held`` (expired, but a live worker runs it; kept).
        error: Why it is ``unreadable`` or ``held`` ("" otherwise).
    """

    stream: StreamId
    status: str | None
    last_at: float | None
    age: float | None
    outcome: str
    error: str = ""


#: The latest ``now`` a sweep accepts (9999-12-31T23:59:59Z, in unix seconds).
LATEST_NOW = 253_402_300_799


def check_seconds(name: str, value: object, *, negative: bool = False) -> None:
    """Refuse ``value`` unless it is None or a finite number (not a bool), >= 0 unless ``negative``.

    A NaN compares false with everything: a NaN age or TTL would expire (or keep) every agent.
    Raises ``ArgumentTypeError`` for a non-number, ``InvalidArgumentError`` for NaN, inf or a refused negative.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 and not negative:
        bound = "" if negative else " >= 0"
        raise InvalidArgumentError(f"{name} must be a finite number of seconds{bound}, got {value!r}")


async def last_activity(store: Store, codec: RecordCodec, stream: StreamId) -> float | None:
    """Unix seconds of the stream's last record, or None (no record left).

    Raises ``CodecError`` when that record does not decode (e.g. a key is missing).
    """
    last = await store.last_seq(stream)
    if last < 1:
        return None
    async for stored in store.read(stream, last - 1, page_size=1):
        if threads.is_thread_frame(stored.data):  # a LangGraph thread's record
            return float(decode_frame(codec.codec, stored.data, stream, stored.seq, RECORD_SCHEMA)["t"])
        return (await JournalReader(store, codec, stream).decode(stored)).at
    if await threads.is_thread(store, stream):  # a thread compacted into its snapshot, which is dated
        return (await threads.read_summary(store, codec.codec, stream)).last_activity_at
    return None


async def _status(store: Store, codec: RecordCodec, stream: StreamId, telemetry: Telemetry) -> str | None:
    """The stream's status: its agent's, or a LangGraph thread's (``threads``); None: no records.
    Raises ``CodecError`` when neither reads."""
    try:
        restored = await restore(store, codec, stream, telemetry)
    except CodecError:
        if await threads.is_thread(store, stream):
            return (await threads.read_summary(store, codec.codec, stream)).status
        raise
    return restored.state.status if restored is not None else None


async def sweep(
    store: Store,
    codec: RecordCodec,
    namespace: str,
    policy: RetentionPolicy,
    *,
    telemetry: Telemetry,
    now: float | None = None,
    dry_run: bool = False,
    purge: Callable[[StreamId], Awaitable[None]] | None = None,
) -> list[SweepItem]:
    """Purge the streams of ``namespace`` whose TTL (by status) has passed.

    In: ``codec`` (decrypts, if the store is encrypted), ``now`` (unix seconds;
    default the clock), ``dry_run`` (report ``expired`` without deleting),
    ``purge`` (how to delete one stream; default ``store.delete_stream``; the
    runtime passes one that first stops its live actor). Out: one ``SweepItem``
    per stream, in ``list_streams`` order. A stream that cannot be read or dated
    is kept. Raises ``ArgumentTypeError`` / ``InvalidArgumentError`` for a bad
    ``policy``, ``now`` (not a finite number, or past year 9999: milliseconds) or ``dry_run`` (not a bool), before
    anything is read or purged, and ``StoreUnavailableError`` from the store.
    """
    if not isinstance(policy, RetentionPolicy):
        raise ArgumentTypeError(f"sweep: retention must be a RetentionPolicy, got {policy!r}")
    if not isinstance(dry_run, bool):
        raise ArgumentTypeError(f"sweep: dry_run must be a bool, got {dry_run!r}")
    check_seconds("sweep: now (unix seconds)", now, negative=True)
    if now is not None and now > LATEST_NOW:
        # A millisecond timestamp (time.time() * 1000) reads as year 50,000: every TTL would have passed.
        raise InvalidArgumentError(
            f"sweep: now must be unix seconds before year 10000, got {now!r} (a millisecond timestamp?)"
        )
    now = time.time() if now is None else now
    purge = purge or (lambda stream: purge_stream(store, stream))
    shortest = policy.shortest()
    items: list[SweepItem] = []
    async for stream in store.list_streams(namespace):
        try:
            last_at = await last_activity(store, codec, stream)
        except CodecError as exc:
            items.append(SweepItem(stream, None, None, None, UNREADABLE, f"{type(exc).__name__}: {exc}"))
            continue
        if last_at is None:
            items.append(SweepItem(stream, None, None, None, UNDATED))
            continue
        age = now - last_at
        if shortest is None or age < shortest:
            items.append(SweepItem(stream, None, last_at, age, KEPT))  # nothing can have expired: skip the restore
            continue
        try:
            status = await _status(store, codec, stream, telemetry)
        except CodecError as exc:
            items.append(SweepItem(stream, None, last_at, age, UNREADABLE, f"{type(exc).__name__}: {exc}"))
            continue
        ttl = policy.ttl_for(status) if status is not None else None
        if ttl is None or age < ttl:
            items.append(SweepItem(stream, status, last_at, age, KEPT))
            continue
        if not dry_run:
            try:
                await purge(stream)
            except AgentLeasedError as exc:
                items.append(SweepItem(stream, status, last_at, age, HELD, str(exc)))
                continue
        items.append(SweepItem(stream, status, last_at, age, EXPIRED if dry_run else PURGED))
    return items


async def purge_stream(store: Store, stream: StreamId) -> None:
    """Purge ``stream`` (records, snapshots, blobs, last seq) and check, through the
    SPI, that nothing of it is left: last seq 0, no record, no snapshot, not listed.

    Raises ``PurgeIncompleteError`` when something is, and ``StoreUnavailableError``.
    An unknown stream is fine (nothing to delete). Whether freed bytes are also
    overwritten on disk is the adapter's part (the SQLite adapter does it).
    """
    await store.delete_stream(stream)
    left = []
    if await store.last_seq(stream) != 0:
        left.append("last seq")
    async for _ in store.read(stream, 0, page_size=1):
        left.append("records")
        break
    if await store.get_snapshot(stream) is not None:
        left.append("snapshots")
    async for listed in store.list_streams(stream.namespace, stream.agent_id):
        if listed == stream:
            left.append("stream listing")
        break
    if left:
        raise PurgeIncompleteError(f"purge of {stream} left: {', '.join(left)}")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number with an optional unit ``s``, ``m``, ``h``, ``d``
    or ``w`` (``30d``, ``12h``, ``90``). Raises ``InvalidArgumentError`` (a ``ValueError``)
    for anything else, a negative duration, NaN or infinity."""
    units = {"s": 1.0, "m": 60.0, "h": 3_600.0, "d": DAY, "w": 7 * DAY}
    text = text.strip().lower()
    scale = units.get(text[-1:], None)
    number = text[:-1] if scale is not None else text
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise InvalidArgumentError(f"{text!r} is not a duration (e.g. 30d, 12h, 45m, 90s)") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"duration {text!r} is not a finite number of seconds >= 0")
    return value
