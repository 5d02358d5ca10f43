"""Collecting pages: deleting the blobs of conversation pages that no kept snapshot names.

Pages are written once and named by digest (``durably._journal.page_writer``); once the
snapshots that name a page are deleted, the page is garbage. It is deleted only on
a store that declares ``CAP_BLOB_DELETE``; elsewhere it stays until the stream is
purged, which loses nothing.

Two rules keep every page a reader may still need:

* a page is deleted only after the snapshot that stops naming it is durable and
  the snapshots that named it are deleted (a crash in between leaves an unnamed
  page behind, never a named one gone);
* the snapshot writer deletes a dropped snapshot's pages one snapshot later
  (``PageCollector``): a restore that read the previous snapshot just before it was
  dropped still finds its pages.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from durably._journal.page_writer import SECTIONS, Pager
from durably._journal.records import RecordCodec
from durably.storage._errors import DurablyError
from durably.storage._spi import Store, StoredSnapshot, StreamId, supports_blob_delete

log = logging.getLogger("durably.snapshots")


def named(wire: dict[str, Any]) -> set[str]:
    """The digests of the pages a snapshot state (``AgentState.to_wire`` paged, or decoded) names."""
    found: set[str] = set()
    for _, pages in SECTIONS:
        refs = wire.get(pages)
        if isinstance(refs, list):
            found.update(r["digest"] for r in refs if isinstance(r, dict) and isinstance(r.get("digest"), str))
    return found


async def named_by_stored(store: Store, codec: RecordCodec, stream: StreamId, at_or_before: int | None) -> set[str]:
    """The digests of the pages named by every stored snapshot of ``stream`` at or before ``at_or_before`` (None: all).

    A snapshot that does not decode (damaged, a key not held) is skipped: its pages
    are then not known, so they are kept. Raises the store's errors.
    """
    found: set[str] = set()
    if at_or_before is not None and at_or_before < 1:
        return found
    snapshot = await store.get_snapshot(stream, at_or_before)
    while snapshot is not None:
        found |= await _named_by(codec, stream, snapshot)
        snapshot = await store.get_snapshot(stream, snapshot.seq - 1) if snapshot.seq > 1 else None
    return found


async def _named_by(codec: RecordCodec, stream: StreamId, snapshot: StoredSnapshot) -> set[str]:
    try:
        _seq, wire, _frame = await anyio.to_thread.run_sync(codec.decode_snapshot, snapshot, stream)
    except DurablyError as exc:
        log.info("pages of the snapshot of %s at seq %d kept: it does not decode (%s)", stream, snapshot.seq, exc)
        return set()
    return named(wire)


async def delete_pages(store: Store, stream: StreamId, digests: set[str]) -> bool:
    """Delete the pages ``digests`` of ``stream`` if the store can; True if it did (or there were none).

    Raises the store's errors from ``delete_blobs``.
    """
    if not digests:
        return True
    if not supports_blob_delete(store):
        return False
    await store.delete_blobs(stream, sorted(digests))
    return True


class PageCollector:
    """Deletes, for one snapshot writer, the pages its dropped snapshots named, one snapshot late.

    Keeps per stream the pages each of its kept snapshots names (``wrote``), the
    pages retired by the previous prune (deleted at the next one unless named
    again), and whether the snapshots of earlier processes have been read.
    Not thread-safe; one per ``SnapshotWriter``.
    """

    def __init__(self, store: Store, pager: Pager) -> None:
        self._store = store
        self._pager = pager
        self._named: dict[StreamId, dict[int, set[str]]] = {}
        self._retired: dict[StreamId, set[str]] = {}

    def forget(self, stream: StreamId) -> None:
        """Drop what is known of ``stream`` (before a purge deletes its blobs)."""
        self._named.pop(stream, None)
        self._retired.pop(stream, None)

    def wrote(self, stream: StreamId, seq: int, wire: dict[str, Any]) -> None:
        """Note the pages the snapshot of ``stream`` at ``seq`` (its paged ``wire``) names, once it is stored."""
        self._named.setdefault(stream, {})[seq] = named(wire)

    async def pruned(self, stream: StreamId, oldest_kept: int, dropped: set[str]) -> None:
        """After the snapshots of ``stream`` before ``oldest_kept`` are deleted: delete the pages
        retired last time that no kept snapshot names, and retire the pages of the ones dropped now.

        ``dropped``: what ``dropping`` answered before the delete. Raises the store's errors.
        """
        known = self._named.setdefault(stream, {})
        kept: set[str] = set()
        for seq in [s for s in known if s < oldest_kept]:
            del known[seq]
        for pages in known.values():
            kept |= pages
        stale = self._retired.pop(stream, set()) - kept
        self._retired[stream] = dropped - kept
        try:
            deleted = await delete_pages(self._store, stream, stale)
        except BaseException:
            self._retired[stream] |= stale  # tried again at the next prune
            raise
        if stale and deleted:
            self._pager.discard(stream, stale)

    async def dropping(self, codec: RecordCodec, stream: StreamId, oldest_kept: int) -> set[str]:
        """The pages named by the snapshots of ``stream`` before ``oldest_kept`` (about to be deleted).

        From memory for the snapshots this writer wrote; the first time for a stream,
        also from the store (snapshots of an earlier process). Raises the store's errors.
        """
        known = self._named.get(stream, {})
        found: set[str] = set()
        for seq, pages in known.items():
            if seq < oldest_kept:
                found |= pages
        if stream not in self._retired:
            earliest = min(known, default=oldest_kept)
            found |= await named_by_stored(self._store, codec, stream, min(earliest, oldest_kept) - 1)
        return found
