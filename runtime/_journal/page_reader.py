"""Reading conversation pages: the pages a restored snapshot names, checked, and decoded when needed.

Pages are written by ``durably._journal.page_writer``. A page that is missing or
damaged (its bytes not its digest's, or no page frame this build reads) makes the
snapshot that names it unreadable, like a damaged snapshot: restore falls back to
an older snapshot or to the journal. Restore reads and checks the pages but does
not decode them (``page_refs``, ``Older``): the restored state decodes them when
it first needs more than its newest part, and a page that fails then raises
``CorruptRecordError`` there.
"""

from __future__ import annotations

import re
import struct
from collections import OrderedDict
from typing import Any

import anyio

from durably._journal.page_writer import BASES, PREFIX, SECTIONS
from durably._journal.records import RecordCodec
from durably.schemas._records import CURRENT_VERSIONS, SCHEMA_NAMES, SNAPSHOT_SCHEMA_ID
from durably.storage._codec import MAGIC
from durably.storage._errors import BlobNotFoundError, CorruptRecordError, UnknownSchemaVersionError
from durably.storage._spi import Store, StreamId, supports_blobs

#: The first snapshot version with pages (snapshot-v6.cddl).
FIRST_PAGED = 6

_DIGEST = re.compile(r"[0-9a-f]{64}")

#: Most bytes of earlier pages' payloads a page may continue (its base's, joined). A writer
#: joins at most ``PREFIX`` (``Pager`` keeps no larger payload and stops adding bases there);
#: twice that leaves room for a build that raises it somewhat, and refuses, before joining
#: them, the gigabytes that ``BASES`` payloads each at the frame limit could add up to.
#: A writer's ``PREFIX`` above this is a format change: readers of this build refuse its pages.
MAX_PREFIX = 2 * PREFIX


def paged(wire: dict[str, Any]) -> bool:
    """Whether a decoded snapshot state names pages (of its conversation or its ledger)."""
    return any(pages in wire for _, pages in SECTIONS)


class Chain:
    """The pages one restored snapshot names, in order (conversation, then ledger), with
    their stored bytes (each checked against its digest): what decoding any of them needs,
    since a page may continue earlier ones (its reference's ``base``)."""

    __slots__ = ("refs", "blobs", "codec", "stream", "seq")

    def __init__(
        self, refs: list[dict[str, Any]], blobs: dict[str, bytes], codec: RecordCodec, stream: StreamId, seq: int
    ) -> None:
        self.refs, self.blobs, self.codec, self.stream, self.seq = refs, blobs, codec, stream, seq

    def payloads(self, wanted: list[dict[str, Any]]) -> dict[str, bytes]:
        """The CBOR payload of each page of ``wanted`` and of every page it continues, by digest.

        Raises ``CorruptRecordError`` (naming the stream and the snapshot's seq): a page that
        does not open (damaged, moved, or continuing other bytes than its base's, or more
        than ``MAX_PREFIX`` of them);
        ``UnknownSchemaVersionError``: a page from a newer durably."""
        needed = {ref["digest"] for ref in wanted}
        for ref in reversed(self.refs):  # a base is always named earlier (page_refs checks)
            if ref["digest"] in needed:
                needed.update(ref.get("base", ()))
        found: dict[str, bytes] = {}
        for ref in self.refs:
            digest = ref["digest"]
            if digest in needed and digest not in found:
                bases = [found[b] for b in ref.get("base", ())]
                size = sum(map(len, bases))
                if size > MAX_PREFIX:  # refused before the join allocates it
                    raise CorruptRecordError(
                        f"page {digest} continues a prefix of {size} bytes, over {MAX_PREFIX}",
                        stream=self.stream,
                        seq=self.seq,
                    )
                prefix = b"".join(bases)
                found[digest] = self.codec.open_page(self.blobs[digest], ref["s"], self.stream, prefix)
        return found


class Older:
    """The undecoded older part of one paged section of a restored state: its page
    references and the snapshot's ``Chain`` (every page's stored bytes, checked against
    its digest, and what decoding them needs).

    ``items`` decodes the pages the first time the state needs the whole section
    (``AgentState`` materialises it then); a restore reads but never decodes them.
    """

    __slots__ = ("field", "refs", "count", "_chain")

    def __init__(self, field: str, refs: list[dict[str, Any]], chain: Chain) -> None:
        self.field, self.refs, self._chain = field, refs, chain
        self.count: int = sum(ref["count"] for ref in refs)

    def items(self) -> list[Any]:
        """The pages' items in order: messages, or ``[key, entry]`` pairs of the ledger.

        Raises ``CorruptRecordError`` (naming the stream and the snapshot's seq): a page
        that does not decode or is not the one referenced; ``UnknownSchemaVersionError``:
        a page from a newer durably."""
        chain = self._chain
        found = chain.payloads(self.refs)
        items: list[Any] = []
        for ref in self.refs:
            items.extend(_decoded(chain, ref, found[ref["digest"]], self.field))
        return items

    def whole(self, inline: Any, patches: dict[str, dict[str, Any]]) -> Any:
        """The whole section: these pages' items followed by ``inline`` (the snapshot's own
        part, as the state holds it now). A conversation is ``inline`` itself, the pages'
        messages put in front; a ledger is a new dict, the pages' entries first. ``patches``
        (ledger key -> changes): entries of ``inline`` folded in without knowing whether the
        pages hold the key; where they do, the entry is the pages' one with the changes over it.

        Raises what ``items`` raises, and ``CorruptRecordError`` for a ledger whose pages
        repeat a key (among themselves or with the snapshot's own entries)."""
        items = self.items()
        if self.field == "messages":
            inline[:0] = items  # in place: whoever holds the newest messages now holds them all
            return inline
        ledger = {k: v for k, v in items}
        both = ledger.keys() & inline.keys()
        if len(ledger) != len(items) or both - patches.keys():
            raise CorruptRecordError(
                "snapshot ledger pages repeat a key", stream=self._chain.stream, seq=self._chain.seq
            )
        for key in both:
            inline[key] = {**ledger[key], **patches[key]}
        ledger.update(inline)  # a key the pages hold keeps its place in the ledger's order
        return ledger


async def page_refs(
    store: Store, codec: RecordCodec, stream: StreamId, seq: int, wire: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Older]]:
    """``wire`` (a decoded snapshot state at ``seq``) without ``pages`` and ``ledger_pages``,
    and the ``Older`` part of each section that has pages, their bytes read and checked but
    not decoded. A state without pages is returned as it is, with no ``Older`` part.

    Raises ``CorruptRecordError`` (at ``seq``): a page missing, damaged (its bytes are not its
    digest's), or not a page frame, malformed references, or pages on a store without blobs;
    ``UnknownSchemaVersionError``: a page from a newer durably; the store's own errors.
    """
    if not paged(wire):
        return wire, {}
    rest, wanted = _sections(wire, stream, seq)
    chain = await _chain(store, codec, stream, seq, wanted)
    return rest, {field: Older(field, refs, chain) for field, refs in wanted}


async def _chain(
    store: Store, codec: RecordCodec, stream: StreamId, seq: int, wanted: list[tuple[str, list[Any]]]
) -> Chain:
    """The ``Chain`` of the pages of ``wanted`` (``_sections``): each read, checked against its
    digest, and its frame header checked. Raises as ``page_refs``."""
    found = await _read_all(store, stream, seq, [ref["digest"] for _, refs in wanted for ref in refs])
    for data in found.values():
        _check_header(data, stream, seq)
    return Chain([ref for _, refs in wanted for ref in refs], found, codec, stream, seq)


def _sections(wire: dict[str, Any], stream: StreamId, seq: int) -> tuple[dict[str, Any], list[tuple[str, list[Any]]]]:
    """``wire`` (a paged snapshot state at ``seq``) without ``pages`` and ``ledger_pages``, and
    each paged section's field with its references, checked. Raises ``CorruptRecordError``:
    malformed references or sections, or a page continuing a page not named before it."""
    rest = dict(wire)
    wanted: list[tuple[str, list[dict[str, Any]]]] = []
    earlier: set[str] = set()
    for field, pages in SECTIONS:
        refs = rest.pop(pages, None)
        if refs is None:
            continue
        if not isinstance(refs, list) or not all(_is_ref(r) for r in refs):
            raise CorruptRecordError(f"snapshot {pages} references are malformed", stream=stream, seq=seq)
        if not isinstance(rest.get(field), list if field == "messages" else dict):
            raise CorruptRecordError(f"snapshot {field} is malformed", stream=stream, seq=seq)
        for ref in refs:
            # A page continues pages named before it, so decoding follows the order and never loops.
            if not earlier.issuperset(ref.get("base", ())):
                raise CorruptRecordError(
                    f"a page of {pages} continues a page not named before it", stream=stream, seq=seq
                )
            earlier.add(ref["digest"])
        wanted.append((field, refs))
    return rest, wanted


async def page_in(store: Store, codec: RecordCodec, stream: StreamId, seq: int, wire: dict[str, Any]) -> dict[str, Any]:
    """``wire`` (a decoded snapshot state at ``seq``) with its whole conversation and ledger inline.

    Reads and decodes every page it names, checks each against its reference
    (digest, seq, count), and returns the state without ``pages`` and
    ``ledger_pages``: its ``messages`` the pages' messages in order followed by its
    own, its ``ledger`` the pages' entries followed by its own. A state without
    pages is returned as it is.

    Raises ``CorruptRecordError`` (at ``seq``): a page missing, damaged, or not the
    one referenced, malformed references or items, or pages on a store without
    blobs; ``UnknownSchemaVersionError``: a page from a newer durably.
    """
    rest, older = await page_refs(store, codec, stream, seq, wire)
    for field, part in older.items():
        rest[field] = part.whole(list(rest[field]) if field == "messages" else rest[field], {})
    return rest


#: Streams whose opened pages a ``PageCheck`` remembers (the least recently checked are
#: forgotten: their next check decodes every page again, once).
CHECKED = 64


class PageCheck:
    """Checks that every page a snapshot names opens, before compaction deletes the records behind it.

    Restore reads a snapshot's pages and checks their digests but decodes them only when
    the state first needs them, so a page that matches its digest yet does not open (a
    writer's bug, a base list tampered with) shows only once the journal behind the
    snapshot may be gone. The check reads every page the snapshot names, checks its
    digest, frame header and base order, opens it after the pages it continues, and
    decodes it to the items its reference counts.

    Remembers, per stream, the pages (references) the last check found to open: a later
    check reads and decodes only the pages it has not seen, and the older ones a new page
    continues. An older page is not read again: the records it could have saved were
    deleted by the compaction that checked it, so a page lost since then fails restore
    whatever this check says, and reading every page at every compaction would cost a
    long conversation's whole history each time. Not thread-safe; one per ``SnapshotWriter``.
    """

    def __init__(self) -> None:
        self._opened: OrderedDict[StreamId, set[tuple[Any, ...]]] = OrderedDict()

    def forget(self, stream: StreamId) -> None:
        """Drop what is remembered of ``stream``'s pages (before a purge deletes them)."""
        self._opened.pop(stream, None)

    async def check(self, store: Store, codec: RecordCodec, stream: StreamId, seq: int, wire: dict[str, Any]) -> None:
        """Return only if every page ``wire`` (a decoded snapshot state at ``seq``) names opens.

        Raises ``CorruptRecordError`` (at ``seq``): a page missing, damaged, not the one
        referenced, not opening after its base or not decoding, malformed references, or
        pages on a store without blobs; ``UnknownSchemaVersionError``: a page from a newer
        durably; the store's own errors. A check that raises forgets the stream's pages: the
        next one decodes them all again."""
        if not paged(wire):
            return
        _rest, wanted = _sections(wire, stream, seq)
        named = [(field, ref) for field, refs in wanted for ref in refs]
        opened = self._opened.pop(stream, set())
        new = [(field, ref) for field, ref in named if _key(field, ref) not in opened]
        if new:
            needed = {ref["digest"] for _, ref in new}
            for _, ref in reversed(named):  # a base is always named earlier (_sections checks)
                if ref["digest"] in needed:
                    needed.update(ref.get("base", ()))
            reading = [(field, [ref for ref in refs if ref["digest"] in needed]) for field, refs in wanted]
            chain = await _chain(store, codec, stream, seq, reading)
            # zstd and CBOR are the check's CPU: in a worker thread, like a snapshot's encoding.
            await anyio.to_thread.run_sync(_open_all, chain, new)
        # What this snapshot names, and no more: a page a later snapshot no longer names is forgotten.
        self._opened[stream] = {_key(field, ref) for field, ref in named}
        while len(self._opened) > CHECKED:
            del self._opened[next(iter(self._opened))]


def _key(field: str, ref: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a page open the same again: its bytes (digest), place and count, and its base.

    A base page that opens at all holds the same payload whatever it continues (a page
    continuing a prefix carries zstd's content checksum), so its own base is not part of this."""
    return (field, ref["digest"], ref["s"], ref["count"], tuple(ref.get("base", ())))


def _open_all(chain: Chain, new: list[tuple[str, dict[str, Any]]]) -> None:
    """Open the pages of ``new`` (field, reference) and those they continue, each once, and
    decode each of ``new``. Raises as ``Older.items``."""
    found = chain.payloads([ref for _, ref in new])
    for field, ref in new:
        _decoded(chain, ref, found[ref["digest"]], field)


_PAGE_HEADER = struct.Struct(">2sBBBH")  # magic, format, flags, schema id, schema version (frame.cddl)


def _check_header(data: bytes, stream: StreamId, seq: int) -> None:
    """Refuse, at restore, a page whose frame header no decode would accept: not a frame, not a
    snapshot-schema page, or a version newer than this build (so the restore falls back as before)."""
    if len(data) < _PAGE_HEADER.size:
        raise CorruptRecordError("a page is shorter than a frame header", stream=stream, seq=seq)
    magic, _format, _flags, schema_id, version = _PAGE_HEADER.unpack_from(data)
    if magic != MAGIC or schema_id != SNAPSHOT_SCHEMA_ID or version < FIRST_PAGED:
        raise CorruptRecordError("the page frame is not a conversation page", stream=stream, seq=seq)
    if version > CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID]:
        name = SCHEMA_NAMES[SNAPSHOT_SCHEMA_ID]
        raise UnknownSchemaVersionError(name, version, CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID], stream=stream, seq=seq)


#: Page reads in flight at once: on a remote store a restore waits for about
#: pages / READS round trips instead of one per page.
READS = 8


async def _read_all(store: Store, stream: StreamId, seq: int, digests: list[str]) -> dict[str, bytes]:
    """The stored bytes of each page in ``digests``, read ``READS`` at a time.

    Raises ``CorruptRecordError`` for a page that is missing or whose bytes are not
    its digest's, and the store's own errors (the first, unwrapped)."""
    if digests and not supports_blobs(store):
        raise CorruptRecordError("snapshot names pages, the store keeps no blobs", stream=stream, seq=seq)
    import hashlib  # here: importing the runtime stays free of it until a page is read

    found: dict[str, bytes] = {}
    failures: list[Exception] = []
    limit = anyio.CapacityLimiter(READS)

    async def read(digest: str) -> None:
        assert supports_blobs(store)
        async with limit:
            if failures:
                return
            try:
                data = await store.get_blob(stream, digest)
            except BlobNotFoundError as exc:
                error = CorruptRecordError(f"page {digest} is missing", stream=stream, seq=seq)
                error.__cause__ = exc
                failures.append(error)
                return
            except Exception as exc:
                failures.append(exc)
                return
        if hashlib.sha256(data).hexdigest() != digest:
            failures.append(CorruptRecordError(f"page {digest} is damaged", stream=stream, seq=seq))
            return
        found[digest] = data

    async with anyio.create_task_group() as tg:
        for digest in dict.fromkeys(digests):
            tg.start_soon(read, digest)
    if failures:
        raise failures[0]
    return found


def _decoded(chain: Chain, ref: dict[str, Any], payload: bytes, field: str) -> list[Any]:
    """The items of the page ``ref`` names (its CBOR ``payload``), checked; errors as ``page_in``."""
    digest, stream, seq = ref["digest"], chain.stream, chain.seq
    items = chain.codec.page_items(payload, ref["s"], stream)
    if field == "messages":
        fits = all(type(m) is dict for m in items)
    else:
        fits = all(type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is dict for p in items)
    if len(items) != ref["count"] or not fits:
        raise CorruptRecordError(f"{field} page {digest} is not the one named", stream=stream, seq=seq)
    return items


def _is_ref(ref: Any) -> bool:
    return (
        isinstance(ref, dict)
        and isinstance(ref.get("digest"), str)
        and _DIGEST.fullmatch(ref["digest"]) is not None
        and type(ref.get("s")) is int
        and type(ref.get("count")) is int
        and ref["count"] > 0
        and (
            "base" not in ref
            or (
                type(ref["base"]) is list
                and 0 < len(ref["base"]) <= BASES
                and all(type(b) is str and _DIGEST.fullmatch(b) is not None for b in ref["base"])
            )
        )
    )
