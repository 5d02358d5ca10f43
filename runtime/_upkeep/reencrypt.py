"""Re-encryption after a key rotation: leave no frame under a retired key.

Rotating a key (``KeyProvider.current_key_id`` names a new one) only changes
what new frames use; old frames stay readable under the key id they name. To
retire the old key, ``reencrypt_stream`` rewrites a stream so that every frame
left in it is sealed with the current key.

The SPI has no way to overwrite a journal record in place (records are
append-only, and on S3 a batch object is created once with a conditional
PUT), and adding one to every adapter would weaken the append-only contract
for the sake of an operator task. So the rewrite uses what the SPI has:

1. restore the state (old frames decrypt under their own key ids);
2. append one ``resumed`` record (worker ``durably reencrypt``) under the new
   key, whose envelope time is the *last activity's* time, so retention clocks
   (``durably sweep``) do not restart at a rotation;
3. put a snapshot at that seq under the new key;
4. compact: delete every record before it and every older snapshot.

A LangGraph thread (``durably._reading.threads``) is rewritten the same way
with its own frames: a thread record as the marker, a snapshot of its fold.

The price, stated plainly: the journal's history before the rewrite is gone
(only the state, which is what restore needs, survives). A worker running the
agent is never fenced off by it: each stream is rewritten under its lease
(``durably._upkeep.exclusive``), so a stream a live worker holds (inside a
tool call, say, holding a result to journal) is left alone, tried again until
``wait`` seconds have passed, and reported ``held`` (with its holder) if it
is still held then; run the command again once that agent has parked or
finished. The rewrite's writes carry the lease's fencing token. A stream whose records are all already under the current key
but whose latest snapshot is not just gets that snapshot rewritten at the same
seq (``put_snapshot`` overwrites) and the older ones deleted.

What is reported is true of the files' bytes: afterwards
``scrub_files`` asks the adapter to drop what it still keeps of the deleted
frames (SQLite: checkpoint and truncate the WAL, whose old frames still hold
them; freed pages are zeroed by ``secure_delete``). When another connection's
open transaction prevents that, every report says so (``files_scrubbed``
False, with the reason) rather than claiming success. What other stores keep
of deleted objects (S3 object versions, backups, freed disk blocks) is outside
what this command reaches, and the reports say that too (``None``).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import anyio

from durably._journal.journal_reader import JournalReader
from durably._journal.page_collection import delete_pages, named_by_stored
from durably._journal.page_reader import page_in
from durably._journal.page_writer import encode_paged
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._loop.state import apply
from durably._reading import threads
from durably.errors import AgentLeasedError, InvalidArgumentError
from durably.schemas._records import Kind, Record
from durably.storage._crypto import key_id_of
from durably.storage._errors import ConflictError, FencedError
from durably.storage._group_frames import is_member
from durably.storage._spi import CAP_BLOB_DELETE, Lease, Store, StreamId

if TYPE_CHECKING:
    from durably._telemetry import Telemetry

log = logging.getLogger("durably.reencrypt")

_RETRIES = 8  # expected-seq retries against a writer without a lease (an operator's command)
_HELD_PAUSE = 0.2  # seconds between two looks at the streams live workers held

#: ``ReencryptReport.action`` values.
CURRENT, SNAPSHOT_REWRITTEN, COMPACTED, HELD = "current", "snapshot-rewritten", "compacted", "held"

#: What holds a stream for a rewrite: an async context manager yielding its lease (None: no leases).
Holder = Callable[[StreamId], AbstractAsyncContextManager[Lease | None]]


@dataclass(frozen=True, slots=True)
class ReencryptReport:
    """What ``reencrypt_stream`` found and did for ``stream``.

    Attributes:
        stream: The stream re-encrypted.
        before: Frames per key id (None: plaintext) before, records and
            snapshots together.
        after: Frames per key id (None: plaintext) after, records and
            snapshots together.
        action: ``current`` (nothing to do), ``snapshot-rewritten``,
            ``compacted``, or ``held``: a live worker held the stream the whole
            time (nothing rewritten; ``held_by`` says who).
        seq: The snapshot seq written (0 when none).
        files_scrubbed: True when the store's files no longer hold the bytes of
            the frames rewritten or deleted (old WAL frames, freed pages), False
            when something prevented it (``residue`` says what), None when the
            adapter cannot tell (S3 object versions, a filesystem's freed
            blocks: see the module docstring).
        residue: What prevented the scrub (e.g. another connection's open
            transaction); "" otherwise.
        held_by: For ``held``, the lease owner that held the stream ("" when
            unknown or not held).
    """

    stream: StreamId
    before: dict[str | None, int]
    after: dict[str | None, int]
    action: str
    seq: int = 0
    files_scrubbed: bool | None = None
    residue: str = ""
    held_by: str = ""


async def key_census(store: Store, stream: StreamId) -> tuple[Counter[str | None], Counter[str | None]]:
    """``(records, snapshots)``: how many frames of each kind name each key id (None: plaintext).

    Reads every remaining record and snapshot header; decrypts nothing.
    """
    records: Counter[str | None] = Counter()
    async for stored in store.read(stream):
        if not is_member(stored.data):  # a group's member rows hold no ciphertext: their group frame does
            records[key_id_of(stored.data)] += 1
    snapshots: Counter[str | None] = Counter()
    snapshot = await store.get_snapshot(stream)
    while snapshot is not None:
        snapshots[key_id_of(snapshot.data)] += 1
        snapshot = await store.get_snapshot(stream, snapshot.seq - 1)
    return records, snapshots


async def reencrypt_stream(
    store: Store, codec: RecordCodec, stream: StreamId, *, telemetry: Telemetry, fence: int | None = None
) -> ReencryptReport:
    """Rewrite ``stream`` so every frame in it is sealed with the current key (see the module docstring).

    ``codec`` must encrypt (its cipher holds the old keys and the current one;
    with ``allow_plaintext`` it also moves a plaintext stream to encryption).
    ``fence``: the token of the stream's lease the caller holds (None: none),
    carried by the rewrite's append and snapshot.
    Raises ``ValueError`` for a codec without a cipher, ``DecryptionError`` /
    ``UnknownKeyError`` when a frame does not decrypt (nothing is changed then),
    ``FencedError`` when ``fence`` is no longer the stream's lease, and
    ``ConflictError`` when a writer without a lease keeps winning.
    """
    cipher = codec.codec.cipher
    if cipher is None:
        raise InvalidArgumentError("reencrypt needs a codec with a cipher (a key provider)")
    target = cipher.current_key_id()
    records, snapshots = await key_census(store, stream)
    before = dict(records + snapshots)
    if set(before) <= {target}:
        return ReencryptReport(stream, before, before, CURRENT)
    if await threads.is_thread(store, stream):
        return await _reencrypt_thread(
            store, codec, stream, before, rewrite_records=not set(records) <= {target}, fence=fence
        )
    if set(records) <= {target}:
        latest = await store.get_snapshot(stream)
        assert latest is not None  # some snapshot is under an old key
        seq, wire, _frame = codec.decode_snapshot(latest, stream)
        # Its pages are read under their keys and written anew under the current one.
        retired = await named_by_stored(store, codec, stream, None)
        wire = await page_in(store, codec, stream, seq, wire)
        await store.put_snapshot(stream, seq, await encode_paged(store, codec, stream, seq, wire), fence=fence)
        await store.delete_snapshots(stream, seq)
        await _delete_retired_pages(store, codec, stream, retired)
        after_records, after_snapshots = await key_census(store, stream)
        return ReencryptReport(stream, before, dict(after_records + after_snapshots), SNAPSHOT_REWRITTEN, seq)
    for _ in range(_RETRIES):
        restored = await restore(store, codec, stream, telemetry)
        if restored is None:
            return ReencryptReport(stream, before, before, CURRENT)
        state = restored.state
        last_seq = state.last_seq
        last = await JournalReader(store, codec, stream).first_after(last_seq - 1)
        last_at = last.at if last is not None else None
        marker = Record(
            last_seq + 1,
            Kind.RESUMED,
            {"worker": f"durably reencrypt (key {target})", "pid": os.getpid()},
            last_at if last_at is not None else time.time(),
        )
        try:
            await store.append(stream, last_seq, [codec.encode_record(marker, stream)], fence=fence)
        except FencedError:
            raise  # the lease passed on: whoever holds it now runs the agent
        except ConflictError:
            continue  # a command was appended meanwhile: restore again
        apply(state, marker)
        retired = await named_by_stored(store, codec, stream, None)
        await store.put_snapshot(
            stream, marker.seq, await encode_paged(store, codec, stream, marker.seq, state.to_wire()), fence=fence
        )
        await store.delete_records(stream, last_seq)
        await store.delete_snapshots(stream, marker.seq)
        await _delete_retired_pages(store, codec, stream, retired)
        after_records, after_snapshots = await key_census(store, stream)
        return ReencryptReport(stream, before, dict(after_records + after_snapshots), COMPACTED, marker.seq)
    raise ConflictError(stream, last_seq, None)


async def _delete_retired_pages(store: Store, codec: RecordCodec, stream: StreamId, retired: set[str]) -> None:
    """Delete the pages ``retired`` (named by the snapshots before the rewrite) that the
    snapshots left now do not name: the ones sealed under a retired key.

    Called once the re-sealed pages, the snapshot naming them and the deletion of the
    old snapshots are durable, so a crash before it leaves old pages unnamed, never a
    named page missing. A store without ``CAP_BLOB_DELETE`` keeps them (logged)."""
    stale = retired - await named_by_stored(store, codec, stream, None)
    if not await delete_pages(store, stream, stale):
        log.warning(
            "%d pages of %s sealed under retired keys stay in the store: it cannot delete blobs (no %r)",
            len(stale),
            stream,
            CAP_BLOB_DELETE,
        )


async def _reencrypt_thread(
    store: Store,
    codec: RecordCodec,
    stream: StreamId,
    before: dict[str | None, int],
    *,
    rewrite_records: bool,
    fence: int | None,
) -> ReencryptReport:
    """``reencrypt_stream`` for a LangGraph thread (``threads``): the same steps with the
    thread's own frames. The marker record is a thread record carrying the last
    activity's time; the snapshot holds the whole fold, so the saver reads it as its own."""
    frames = codec.codec
    for _ in range(_RETRIES):
        state, _created = await threads.load_thread(store, frames, stream)
        last_seq = state.seq
        if last_seq == 0:
            return ReencryptReport(stream, before, before, CURRENT)
        if rewrite_records:
            value = threads.marker(state.at or time.time())
            try:
                await store.append(
                    stream, last_seq, [threads.encode_record(frames, value, stream, last_seq + 1)], fence=fence
                )
            except FencedError:
                raise
            except ConflictError:
                continue  # the saver appended meanwhile: read again
            state.apply(value, last_seq + 1)
        await store.put_snapshot(stream, state.seq, threads.encode_snapshot(frames, state, stream), fence=fence)
        if rewrite_records:
            await store.delete_records(stream, last_seq)
        await store.delete_snapshots(stream, state.seq)
        after_records, after_snapshots = await key_census(store, stream)
        action = COMPACTED if rewrite_records else SNAPSHOT_REWRITTEN
        return ReencryptReport(stream, before, dict(after_records + after_snapshots), action, state.seq)
    raise ConflictError(stream, 0, None)


async def reencrypt(
    store: Store, codec: RecordCodec, namespace: str, *, telemetry: Telemetry, held: Holder, wait: float = 0.0
) -> list[ReencryptReport]:
    """``reencrypt_stream`` for every stream of ``namespace``, each under ``held(stream)`` (its lease),
    then ``scrub_files``: every report carries whether the old bytes are gone from the files.

    A stream a live worker holds (``held`` raises ``AgentLeasedError``, or the lease passes on
    mid-rewrite: ``FencedError``) is tried again every ``_HELD_PAUSE`` seconds until ``wait``
    seconds have passed, then reported ``held``. Reports are in ``list_streams`` order.
    """
    listed = [stream async for stream in store.list_streams(namespace)]
    reports: dict[StreamId, ReencryptReport] = {}
    pending, holders = listed, dict[StreamId, str]()
    deadline = anyio.current_time() + wait
    while True:
        holders = {}
        for stream in pending:
            try:
                async with held(stream) as lease:
                    fence = None if lease is None else lease.token
                    reports[stream] = await reencrypt_stream(store, codec, stream, telemetry=telemetry, fence=fence)
            except AgentLeasedError as exc:
                holders[stream] = exc.owner or ""
            except FencedError:
                holders[stream] = ""
        pending = list(holders)
        left = deadline - anyio.current_time()
        if not pending or left <= 0:
            break
        await anyio.sleep(min(_HELD_PAUSE, left))
    for stream, owner in holders.items():
        records, snapshots = await key_census(store, stream)
        census = dict(records + snapshots)
        reports[stream] = ReencryptReport(stream, census, census, HELD, held_by=owner)
    scrubbed, residue = await scrub_files(store)
    return [replace(reports[stream], files_scrubbed=scrubbed, residue=residue) for stream in listed]


async def scrub_files(store: Store) -> tuple[bool | None, str]:
    """Make the store's files hold no byte of deleted or rewritten frames, if the adapter can.

    Out: ``(True, "")`` when done; ``(False, why)`` when something prevented it
    (retry once that is gone); ``(None, why)`` when the adapter has no such
    operation (``erase_freed``, e.g. the SQLite adapter's WAL checkpoint and
    truncation over pages ``secure_delete`` zeroed).
    """
    erase = getattr(store, "erase_freed", None)
    if erase is None:
        return None, (
            f"{type(store).__name__} cannot tell what it keeps of deleted frames "
            "(object versions, backups, freed disk blocks)"
        )
    residue = await erase()
    return (True, "") if residue is None else (False, residue)
