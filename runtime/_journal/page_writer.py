"""Writing conversation pages: the older part of a snapshot's conversation, stored as blobs.

A long conversation dominates a snapshot: re-encoding it in every snapshot makes
each one cost the whole run, and the snapshot policy (which weighs the snapshot)
then takes them rarely, so a restore replays a long tail. Paged, a snapshot holds
the state, the newest ``KEEP`` or more messages, and references to pages of
``PAGE`` messages each; a page is a frame (encrypted with the snapshot's codec)
stored with ``put_blob``, content-addressed, written once and never rewritten,
purged with its stream (snapshot-v6.cddl), and deleted once no kept snapshot
names it (``durably._journal.page_collection``).

A page is compressed as the continuation of pages named before it in the same
snapshot (its reference's ``base``): an agent reads the same files again, and a
ledger entry repeats the result its tool message holds, which a page compressed
alone could not refer to. Decoding a page needs its base decompressed first, so
the reader (``durably._journal.page_reader.Chain``) opens the pages in order.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio

from durably._journal.records import RecordCodec
from durably.storage._spi import BlobStore, Store, StreamId, supports_blobs

#: Messages per page.
PAGE = 256

#: Newest messages always kept in the snapshot itself: the current turn (which the
#: fold may still reorder) and what a history window keeps never need a page read.
KEEP = 64

#: Most pages a page continues (its reference's ``base``): a reader refuses more.
BASES = 8

#: Bytes of earlier pages' payloads one page is compressed as the continuation of, at most.
PREFIX = 8 * 1024 * 1024

#: Bytes of page payloads a ``Pager`` keeps (over all its streams) to compress later pages
#: as their continuation; the least recently written are dropped first.
PAYLOADS = 32 * 1024 * 1024

#: The zstd level of page frames: written once each, in a worker thread, and read rarely
#: (the bench's pages: 6 costs twice the CPU of 3 for 14% fewer bytes; 9 twice again for 7%).
LEVEL = 6

#: Streams whose written pages a ``Pager`` remembers (the least recently paged are
#: forgotten: their next snapshot writes its pages again, the same bytes unless encrypted).
REMEMBERED = 64


def _same(known: tuple[list[Any] | None, list[Any]], keys: list[Any] | None, values: list[Any]) -> bool:
    # Folded messages and ledger entries are never changed in place (the fold builds
    # new ones, and AgentState.to_wire relies on it too), so the same objects (under
    # the same ledger keys) mean the same page. Compared in C: a snapshot of a long
    # run compares every page it does not write.
    return known[0] == keys and len(known[1]) == len(values) and all(map(operator.is_, known[1], values))


#: What is paged: the conversation (``messages`` -> ``pages``, its messages) and the
#: ledger (``ledger`` -> ``ledger_pages``, its ``[key, entry]`` pairs), oldest first.
SECTIONS = (("messages", "pages"), ("ledger", "ledger_pages"))


class Pager:
    """Pages a snapshot's older messages and ledger entries out to blobs of ``store``, each page once.

    Remembers, per stream and run, the pages it wrote (their items and reference),
    so a snapshot only encodes and writes the pages that are new. Not thread-safe;
    one per ``SnapshotWriter``.
    """

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._written: dict[
            tuple[StreamId, str, str, int], list[tuple[tuple[list[Any] | None, list[Any]], dict[str, Any]]]
        ] = {}
        # (stream, digest) -> the page's CBOR payload, the most recently written last (PAYLOADS).
        self._payloads: OrderedDict[tuple[StreamId, str], bytes] = OrderedDict()
        self._payload_bytes = 0

    def forget(self, stream: StreamId) -> None:
        """Drop what is remembered for ``stream`` (before a purge deletes its blobs)."""
        for key in [k for k in self._written if k[0] == stream]:
            del self._written[key]
        for held in [k for k in self._payloads if k[0] == stream]:
            self._payload_bytes -= len(self._payloads.pop(held))

    def _keep(self, stream: StreamId, digest: str, payload: bytes) -> None:
        """Remember ``payload`` as the page ``digest``'s, within ``PAYLOADS`` bytes in all."""
        if len(payload) > PREFIX or (stream, digest) in self._payloads:
            return
        self._payloads[(stream, digest)] = payload
        self._payload_bytes += len(payload)
        while self._payload_bytes > PAYLOADS:
            self._payload_bytes -= len(self._payloads.popitem(last=False)[1])

    def _base(
        self,
        stream: StreamId,
        field: str,
        named: list[tuple[str, dict[str, Any], list[Any] | None]],
        values: list[Any],
    ) -> list[tuple[str, bytes]]:
        """The pages (digest, payload) a new page of ``field`` holding ``values`` continues:
        pages of this snapshot named before it (``named``: section, reference, items when
        known) whose payloads are still held, at most ``BASES // 2`` of them and ``PREFIX``
        bytes. A conversation page continues the pages before it (an agent reads the same
        files again); a ledger page the conversation pages holding its calls' tool messages
        (an entry repeats its call's result, which the conversation holds too), else the
        ledger pages before it."""
        candidates: list[tuple[str, dict[str, Any]]] = []
        if field == "ledger":
            calls = {entry.get("call_id") for entry in values if type(entry) is dict}
            calls.discard(None)
            for section, ref, items in named:
                if section == "messages" and items is not None and (stream, ref["digest"]) in self._payloads:
                    if any(type(m) is dict and m.get("tool_call_id") in calls for m in items):
                        candidates.append((section, ref))
        if not candidates:
            candidates = [(section, ref) for section, ref, _ in named if section == field]
        base: list[tuple[str, bytes]] = []
        size = 0
        for _section, ref in candidates[-(BASES // 2) :]:
            payload = self._payloads.get((stream, ref["digest"]))
            if payload is None or size + len(payload) > PREFIX:
                continue
            self._payloads.move_to_end((stream, ref["digest"]))
            base.append((ref["digest"], payload))
            size += len(payload)
        return base

    def discard(self, stream: StreamId, digests: set[str]) -> None:
        """Forget the pages of ``stream`` named by ``digests`` (deleted) and those after them in
        their section, so no later snapshot names a deleted page without writing it again."""
        for digest in digests:
            if (payload := self._payloads.pop((stream, digest), None)) is not None:
                self._payload_bytes -= len(payload)
        for key, known in self._written.items():
            if key[0] == stream:
                for index, (_chunk, ref) in enumerate(known):
                    if ref["digest"] in digests:
                        del known[index:]
                        break

    async def page_out(
        self,
        codec: RecordCodec,
        stream: StreamId,
        seq: int,
        wire: dict[str, Any],
        check: Callable[[], None] = lambda: None,
    ) -> dict[str, Any]:
        """``wire`` (``AgentState.snapshot_wire``) with its older messages and ledger entries
        replaced by page references (``pages``, ``ledger_pages``, after those ``wire`` names).

        Writes the pages not written before (encoded in a worker thread, bound to
        ``seq``), calling ``check`` just before each write: blobs carry no fencing
        token, so a writer whose lease is gone must stop before its next page, not
        only at its fenced snapshot. A section shorter than ``PAGE + KEEP`` items
        stays inline. Raises ``UnencodableValueError`` (an item that does not
        encode), what ``check`` raises, and the store's errors from ``put_blob``.
        """
        paged = dict(wire)
        # Every page this snapshot names so far, in order (conversation, then ledger): a new
        # page may continue any of them (snapshot-v6.cddl, page-ref "base").
        named: list[tuple[str, dict[str, Any], list[Any] | None]] = []
        for field, pages in SECTIONS:
            value = wire[field]
            keys, values = (None, value) if field == "messages" else (list(value), list(value.values()))
            full = max(0, (len(values) - KEEP) // PAGE)
            # A state restored lazily names its older pages already (AgentState.snapshot_wire):
            # they are kept as they are, and only its own part is paged after them.
            prior = list(wire.get(pages, ()))
            named.extend((field, ref, None) for ref in prior)
            if full == 0:
                continue
            section = (stream, str(wire.get("run_id", "")), field, len(prior))
            paged[pages] = prior + await self._write(codec, stream, seq, section, keys, values, full, check, named)
            if keys is None:
                paged[field] = values[full * PAGE :]
            else:
                paged[field] = dict(zip(keys[full * PAGE :], values[full * PAGE :], strict=True))
        return paged

    async def _write(
        self,
        codec: RecordCodec,
        stream: StreamId,
        seq: int,
        section: tuple[StreamId, str, str, int],
        keys: list[Any] | None,
        values: list[Any],
        full: int,
        check: Callable[[], None],
        named: list[tuple[str, dict[str, Any], list[Any] | None]],
    ) -> list[dict[str, Any]]:
        """The references of the first ``full`` pages of ``values`` (under ``keys``, for
        the ledger), writing those not remembered as written (each after ``check``), each
        appended to ``named`` (the pages a later one may continue)."""
        known = self._written.pop(section, [])
        self._written[section] = known  # the most recently paged last
        while len(self._written) > REMEMBERED:
            del self._written[next(iter(self._written))]
        field = section[2]
        refs = []
        before = {ref["digest"] for _, ref, _ in named}
        for index in range(full):
            cut = slice(index * PAGE, (index + 1) * PAGE)
            chunk = (None if keys is None else keys[cut], values[cut])
            if (
                index < len(known)
                and _same(known[index][0], chunk[0], chunk[1])
                and before.issuperset(known[index][1].get("base", ()))
            ):
                ref = known[index][1]
            else:
                # (a page whose base this snapshot no longer names is written again, continuing others)
                items = chunk[1] if keys is None else [[k, v] for k, v in zip(chunk[0] or (), chunk[1], strict=True)]
                base = self._base(stream, field, named, chunk[1])
                payload, data = await anyio.to_thread.run_sync(_encode, codec, seq, items, stream, base)
                check()
                ref = {"digest": await self._store.put_blob(stream, data), "s": seq, "count": len(items)}
                if base:
                    ref["base"] = [digest for digest, _ in base]
                self._keep(stream, ref["digest"], payload)
                del known[index:]
                known.append((chunk, ref))
            refs.append(ref)
            named.append((field, ref, chunk[1]))
            before.add(ref["digest"])
        return refs


def _encode(
    codec: RecordCodec, seq: int, items: list[Any], stream: StreamId, base: list[tuple[str, bytes]]
) -> tuple[bytes, bytes]:
    """The payload and the frame of the page of ``items`` at ``seq``, compressed as the
    continuation of the payloads in ``base`` (in a worker thread: it is the CPU of paging)."""
    payload = codec.page_payload(seq, items)
    return payload, codec.page_frame(seq, payload, stream, b"".join(p for _, p in base), LEVEL)


async def encode_paged(store: Store, codec: RecordCodec, stream: StreamId, seq: int, wire: dict[str, Any]) -> bytes:
    """Snapshot frame bytes of ``wire`` (a whole conversation inline) at ``seq``, its older
    messages written as new pages by ``codec`` on a store with blobs (e.g. under a new key),
    unless the codec's ``formats`` write unpaged snapshots.

    Raises what ``Pager.page_out`` and ``RecordCodec.encode_snapshot`` raise."""
    if supports_blobs(store) and codec.formats.paged:
        wire = await Pager(store).page_out(codec, stream, seq, wire)
    return codec.encode_snapshot(seq, wire, stream)
