"""The filesystem adapter: ``file:///path/to/dir``. The worked example of writing an adapter.

Every durable step is "write a temp file, fsync it, link or rename it into place,
fsync the directory" (the classic recipe for atomic files on POSIX), and every
decision between racing writers is made by the filesystem itself through an
exclusive create, so two processes on the same directory are as safe as two
tasks in one. It imports only public names of ``durably.storage``.

Layout under the root directory::

    streams/<sha256(namespace)>/<sha256(agent_id)>/
        id                      the StreamId as JSON (names are hashed: see _stream_dir)
        records/<first seq>     one file per appended batch: its records, in order
        snapshots/<seq>         one file per snapshot
        compacted/<seq>         marker: records with seq <= the highest marker are deleted
        blobs/<sha256>          content-addressed blobs (CAP_BLOBS)
    tmp/                        temp files, linked or renamed into place when complete

Seq names are zero-padded to 20 digits so they also sort as text.

How an append claims its seqs: a batch of N records after ``expected_seq`` is the
file ``records/<expected_seq + 1>``. The writer first checks that the stream's
last batch ends at ``expected_seq``, then creates that file with ``os.link``,
which fails if the name exists. Batch files are never rewritten, so whoever
creates ``<expected_seq + 1>`` has won seqs ``expected_seq + 1 .. + N``: any
other writer either loses that same exclusive create or sees a last seq that is
not its expected one. The seqs after a batch's first are claimed by the fact
that nobody can append after them without naming the batch's end as expected.

How ``last_seq`` survives compaction: compaction never deletes the newest batch
file, whose name and record count give the last seq; it writes a ``compacted``
marker first, and reads skip records at or below the highest marker.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import uuid
from bisect import bisect_right
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Sequence
from pathlib import Path
from typing import TypeVar, TypeVarTuple
from urllib.request import url2pathname

from anyio.to_thread import run_sync

from durably.storage._base import StoreBase
from durably.storage._errors import (
    BlobNotFoundError,
    ConflictError,
    CorruptRecordError,
    InvalidRequestError,
    InvalidStoreURLError,
    StoreUnavailableError,
    TruncatedRecordError,
    UnsafeCompactionError,
)
from durably.storage._spi import (
    AppendRequest,
    BlobDeleteStore,
    IndexStore,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    check_append,
    check_blob,
    check_blob_digests,
)
from durably.storage._urls import CREATE, check_parent, flag, parse_store_url

from ._filesystem_index import FileSystemStatusIndex

_BATCH_HEADER = struct.Struct(">4sI")  # magic, record count
_RECORD_LENGTH = struct.Struct(">Q")
_MAGIC = b"DRB1"
_DIGEST = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")
Args = TypeVarTuple("Args")

__all__ = ["FileSystemStore"]


async def _io(function: Callable[[*Args], T], *args: *Args) -> T:
    """``function(*args)`` in a worker thread; an ``OSError`` (disk full, I/O error, the
    directory gone) becomes ``StoreUnavailableError``, the SPI's outage, cause attached."""
    try:
        return await run_sync(function, *args)
    except OSError as exc:
        raise StoreUnavailableError(f"filesystem store: {exc}") from exc


def _name(seq: int) -> str:
    return f"{seq:020d}"


def _seqs(directory: Path) -> list[int]:
    """The seq-named files of ``directory``, sorted; [] if it does not exist."""
    try:
        return sorted(int(name) for name in os.listdir(directory) if name.isdigit())
    except FileNotFoundError:
        return []


def _fsync_dir(directory: Path) -> None:
    # A new name in a directory is durable only once the directory itself is synced
    # (POSIX). Windows cannot open a directory and needs no such step.
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _batch_count(path: Path) -> int:
    with open(path, "rb") as file:
        header = file.read(_BATCH_HEADER.size)
    if len(header) < _BATCH_HEADER.size:
        raise TruncatedRecordError(f"{path} is cut short: {len(header)} of its {_BATCH_HEADER.size} header bytes")
    magic, count = _BATCH_HEADER.unpack(header)
    if magic != _MAGIC:
        raise CorruptRecordError(f"{path} is not a batch file")
    return int(count)


def _read_batch(path: Path) -> list[bytes]:
    data = path.read_bytes()
    try:
        magic, count = _BATCH_HEADER.unpack_from(data)
        offset, records = _BATCH_HEADER.size, []
        for _ in range(count):
            (length,) = _RECORD_LENGTH.unpack_from(data, offset)
            offset += _RECORD_LENGTH.size
            records.append(data[offset : offset + length])
            offset += length
    except struct.error:  # a header or a length prefix runs past the end: a torn or cut file
        raise TruncatedRecordError(f"{path} is cut short ({len(data)} bytes)") from None
    if magic != _MAGIC or offset != len(data):
        raise CorruptRecordError(f"{path} is damaged")
    return records


class FileSystemStore(
    FileSystemStatusIndex, StoreBase, BlobDeleteStore, IndexStore
):  # the index: adapters/_filesystem_index.py
    """A ``Store`` in a local directory: ``file:///abs/path``.

    Safe for many tasks and many processes on one directory (a local filesystem
    with hard links and atomic rename: ext4, xfs, apfs, ntfs). Not for network
    filesystems whose ``link`` or ``rename`` are not atomic. Purging a stream
    while another writer appends to it leaves either outcome; don't race them.
    Every method does its blocking file work in a worker thread, raises
    ``StoreClosedError`` outside the open window, and turns an ``OSError``
    (disk full, an I/O error, the directory gone) into ``StoreUnavailableError``
    with the cause attached. Implements blobs and the status index
    (``_filesystem_index``), not leases.

    Args:
        url: ``file:///abs/path`` (RFC 8089; host empty or ``localhost``);
            ``?create=1`` lets ``open()`` create missing parent directories.

    Attributes:
        root: The store's directory.
        create: Whether ``open()`` creates missing parent directories (``?create=1``).

    Raises:
        InvalidStoreURLError: A ``ValueError``: the URL names a remote host, no
            path or the filesystem root, or has an unknown option. ``open()`` raises it too when the
            directory's parent does not exist and the URL lacks ``?create=1``.
    """

    _io = staticmethod(_io)  # for the index mixin

    def __init__(self, url: str) -> None:
        super().__init__()
        parsed = parse_store_url(url, ("file",), {CREATE: flag})
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise InvalidStoreURLError(f"expected file:///path/to/dir, got {parsed.url!r}", url=parsed.url)
        self.root = Path(url2pathname(parsed.path))
        if self.root == Path(self.root.anchor):  # file:/// would spread streams/ and index/ over "/"
            raise InvalidStoreURLError(
                f"{parsed.url!r} names the filesystem root; give a directory of its own", url=parsed.url
            )
        self.create = parsed.options.get(CREATE, False)

    def _location(self) -> str:
        return str(self.root)

    # -- lifecycle -----------------------------------------------------------

    async def _open(self) -> None:
        def create() -> None:
            check_parent(self.root, create=self.create, url=str(self.root))  # a mistyped folder is refused
            (self.root / "streams").mkdir(parents=True, exist_ok=True)
            (self.root / "tmp").mkdir(exist_ok=True)
            self._hint_old_streams()

        await _io(create)

    # -- the one durable write -----------------------------------------------

    def _write(self, final: Path, data: Sequence[bytes], *, replace: bool) -> bool:
        """Make ``final`` hold ``data`` (joined), atomically and durably.

        ``replace=False`` is an exclusive create: returns False, writing nothing,
        when ``final`` exists. ``os.link`` gives that atomically, and unlike
        ``O_CREAT|O_EXCL`` on ``final`` itself never shows a half-written file.
        """
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                for chunk in data:
                    file.write(chunk)
                file.flush()
                os.fsync(file.fileno())  # the bytes are on disk before the name is
            if replace:
                os.replace(tmp, final)
            else:
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(final.parent)
        return True

    # -- streams -------------------------------------------------------------

    def _stream_dir(self, stream: StreamId) -> Path:
        # Ids may hold '/', '..', any Unicode and up to 200 characters, which no
        # filesystem accepts as a name as-is (and some fold case); hashing gives a
        # safe fixed-length name and the ``id`` file keeps the real one for listing.
        ns = hashlib.sha256(stream.namespace.encode()).hexdigest()
        agent = hashlib.sha256(stream.agent_id.encode()).hexdigest()
        return self.root / "streams" / ns / agent

    def _ensure_stream(self, stream: StreamId) -> Path:
        directory = self._stream_dir(stream)
        if not (directory / "id").exists():
            for sub in ("records", "snapshots", "compacted", "blobs"):
                (directory / sub).mkdir(parents=True, exist_ok=True)
            identity = json.dumps([stream.namespace, stream.agent_id]).encode()
            self._write(directory / "id", [identity], replace=True)
            _fsync_dir(directory.parent)
            _fsync_dir(directory.parent.parent)
        return directory

    def _last_seq(self, directory: Path) -> int:
        firsts = _seqs(directory / "records")
        if not firsts:
            return 0
        try:
            return firsts[-1] + _batch_count(directory / "records" / _name(firsts[-1])) - 1
        except FileNotFoundError:  # the whole stream was purged meanwhile
            return 0

    def _compacted_through(self, directory: Path) -> int:
        return max(_seqs(directory / "compacted"), default=0)

    # -- appends -------------------------------------------------------------

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        """Append several streams' batches: the SPI's group commit, one request after another.

        Each request is atomic and durable on its own: its batch file is
        fsynced, then created by an exclusive ``os.link`` (the linearization
        point between racing writers), then its directory fsynced. A request
        carrying an index entry writes it around its records as
        ``_filesystem_index`` describes.

        Args:
            requests: One ``AppendRequest`` per stream batch; a repeated
                stream's later request sees the earlier one's records.

        Returns:
            One entry per request, in order: the stream's new last seq, or a
                ``ConflictError`` (returned, not raised) when its expected seq was
                stale or another writer won the same seqs.

        Raises:
            InvalidRequestError: A malformed request (``check_append``: also an
                ``index`` that is not an ``IndexEntry``), before any I/O.
            StoreUnavailableError: A filesystem error; re-read to see what was written.
        """
        self._check_open()
        for request in requests:
            check_append(request)  # reject malformed requests before any I/O
        return await _io(lambda: [self._append_one(request) for request in requests])

    def _append_one(self, request: AppendRequest) -> int | Exception:
        directory = self._stream_dir(request.stream)
        actual = self._last_seq(directory)
        if actual != request.expected_seq:
            return ConflictError(request.stream, request.expected_seq, actual)
        if actual == 0:
            directory = self._ensure_stream(request.stream)
        self._index_before(request)
        header = _BATCH_HEADER.pack(_MAGIC, len(request.records))
        chunks = [header]
        for data in request.records:
            chunks += [_RECORD_LENGTH.pack(len(data)), data]
        try:
            # The linearization point: exactly one writer creates records/<expected+1>.
            won = self._write(directory / "records" / _name(actual + 1), chunks, replace=False)
        except FileNotFoundError:  # the stream was purged between our check and our write
            won = False
        if not won:
            return ConflictError(request.stream, request.expected_seq, self._last_seq(directory))
        self._index_after(request, actual + len(request.records))
        return actual + len(request.records)

    async def last_seq(self, stream: StreamId) -> int:
        """The highest seq ever appended to ``stream``; it never decreases, also after compaction.

        Read from the newest batch file's name and record count, which compaction never deletes.

        Args:
            stream: The stream to look at.

        Returns:
            The last seq, or 0 for an unknown stream.

        Raises:
            CorruptRecordError: The newest batch file is not a batch file.
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        return await _io(self._last_seq, self._stream_dir(stream))

    # -- reads ---------------------------------------------------------------

    async def read(
        self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512
    ) -> AsyncGenerator[StoredRecord, None]:
        """Yield the stored records of ``stream`` with seq > ``after_seq``, in seq order.

        Each page is one hop to a worker thread, starting at the batch file
        that holds the first wanted seq. Records at or below the highest
        compaction marker are skipped, whatever files remain.

        Args:
            stream: The stream to read.
            after_seq: Yield only records after this seq (0: from the start).
            page_size: Records per page (at least 1).

        Yields:
            Each ``StoredRecord``; nothing for an unknown stream.

        Raises:
            CorruptRecordError: A batch file is damaged.
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self._stream_dir(stream)
        page_size = max(1, page_size)
        while True:
            page = await _io(self._read_page, directory, after_seq, page_size)
            for record in page:
                yield record
            if len(page) < page_size:
                return
            after_seq = page[-1].seq

    def _read_page(self, directory: Path, after_seq: int, page_size: int) -> list[StoredRecord]:
        floor = max(after_seq, self._compacted_through(directory))
        firsts = _seqs(directory / "records")
        page: list[StoredRecord] = []
        # Start at the batch holding floor + 1: the last one whose first seq is <= it.
        for first in firsts[max(0, bisect_right(firsts, floor + 1) - 1) :]:
            try:
                batch = _read_batch(directory / "records" / _name(first))
            except FileNotFoundError:
                continue  # compacted while we listed: its records are gone by design
            for seq, data in enumerate(batch, start=first):
                if seq > floor:
                    page.append(StoredRecord(seq, data))
                    if len(page) == page_size:
                        return page
        return page

    # -- snapshots -----------------------------------------------------------

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes, *, fence: int | None = None) -> None:
        """Store a snapshot covering records 1..``seq``, replacing one at the same seq (atomic rename).

        Args:
            stream: The stream the snapshot belongs to.
            seq: The last record folded into it, 1..``last_seq(stream)``.
            data: The encoded snapshot frame.
            fence: Accepted for the SPI and ignored: this store has no leases (one worker).

        Raises:
            InvalidRequestError: ``seq`` is < 1 or > the stream's last seq.
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self._stream_dir(stream)

        def put() -> None:
            last = self._last_seq(directory)
            if not 1 <= seq <= last:
                raise InvalidRequestError(f"snapshot seq {seq} is outside 1..{last} of {stream}")
            self._write(directory / "snapshots" / _name(seq), [data], replace=True)

        await _io(put)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        """The snapshot of ``stream`` with the highest seq <= ``at_or_before``.

        Found from the ``snapshots`` directory's file names, without reading
        records; one pruned meanwhile is skipped for the next lower one.

        Args:
            stream: The stream to look at.
            at_or_before: The highest seq wanted (None: the latest snapshot).

        Returns:
            The snapshot, or None when there is none.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self._stream_dir(stream) / "snapshots"

        def get() -> StoredSnapshot | None:
            seqs = [s for s in _seqs(directory) if at_or_before is None or s <= at_or_before]
            for seq in reversed(seqs):
                with contextlib.suppress(FileNotFoundError):  # pruned meanwhile: try the next
                    return StoredSnapshot(seq, (directory / _name(seq)).read_bytes())
            return None

        return await _io(get)

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        """Delete the snapshots of ``stream`` with seq < ``before_seq``, always keeping the latest.

        Args:
            stream: The stream to prune (unknown: no-op).
            before_seq: Snapshots below this seq go.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self._stream_dir(stream) / "snapshots"

        def delete() -> None:
            for seq in _seqs(directory)[:-1]:
                if seq < before_seq:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(directory / _name(seq))
            if directory.exists():
                _fsync_dir(directory)

        await _io(delete)

    # -- compaction ----------------------------------------------------------

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        """Compaction: delete the records of ``stream`` with seq <= ``through_seq``.

        A ``compacted`` marker is written first, so reads skip those records at
        once; then the batch files wholly below it are deleted, never the
        newest one (``last_seq`` comes from it and is unchanged). An unknown
        stream has nothing to delete: no-op.

        Args:
            stream: The stream to compact.
            through_seq: The last seq to delete.

        Raises:
            UnsafeCompactionError: No snapshot exists at a seq >= ``through_seq``.
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self._stream_dir(stream)

        def compact() -> None:
            if not directory.exists():
                return  # an unknown stream has nothing to compact
            if not any(seq >= through_seq for seq in _seqs(directory / "snapshots")):
                raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
            if through_seq < 1:
                return
            # The marker first: from now on reads skip these records, whatever files remain.
            self._write(directory / "compacted" / _name(through_seq), [], replace=True)
            markers = _seqs(directory / "compacted")
            for seq in markers[:-1]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / "compacted" / _name(seq))
            # Then whole batch files below the highest marker, never the newest one:
            # its name and count are where last_seq comes from.
            firsts = _seqs(directory / "records")
            for first, next_first in zip(firsts, firsts[1:], strict=False):
                if next_first - 1 <= markers[-1]:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(directory / "records" / _name(first))
            _fsync_dir(directory / "records")

        await _io(compact)

    # -- listing and purge ---------------------------------------------------

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        """Yield the streams of ``namespace`` whose agent id starts with ``prefix``, sorted by agent id.

        Reads the ``id`` file of each stream directory of the namespace (names
        are hashed); a stream being created or purged right now is skipped. A
        stream that holds only blobs is listed too.

        Args:
            namespace: The one namespace to list; other namespaces are never yielded.
            prefix: The agent id prefix ("": every stream).

        Yields:
            Each matching ``StreamId``.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self.root / "streams" / hashlib.sha256(namespace.encode()).hexdigest()

        def scan() -> list[StreamId]:
            found = []
            try:
                entries = os.listdir(directory)
            except FileNotFoundError:
                # No stream in this namespace yet, unless the store's own directory is gone:
                # then stat raises, and the caller gets an outage rather than "no streams".
                os.stat(self.root / "streams")
                entries = []
            for entry in entries:
                try:
                    ns, agent = json.loads((directory / entry / "id").read_bytes())
                except FileNotFoundError:
                    continue  # being created or purged right now
                if ns == namespace and agent.startswith(prefix):
                    found.append(StreamId(ns, agent))
            return sorted(found)

        for stream in await _io(scan):
            yield stream

    async def delete_stream(self, stream: StreamId) -> None:
        """Purge ``stream``: its records, snapshots, blobs, index entry and hints, and last seq.

        One rename into ``tmp/`` makes the whole stream vanish at once; the
        files are then deleted. Afterwards the stream is unknown (last seq 0).
        An unknown stream is not an error. (This store has no leases to end.)

        Args:
            stream: The stream to purge.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        directory = self._stream_dir(stream)

        def purge() -> None:
            # One rename makes the whole stream vanish at once; then clean up at leisure.
            trash = self.root / "tmp" / f"purge-{uuid.uuid4().hex}"
            try:
                os.rename(directory, trash)
            except FileNotFoundError:
                return
            _fsync_dir(directory.parent)
            shutil.rmtree(trash, ignore_errors=True)
            self._drop_hints(stream)

        await _io(purge)

    # -- blobs (CAP_BLOBS) ---------------------------------------------------

    async def put_blob(self, stream: StreamId, data: bytes) -> str:
        """Store ``data`` as a blob of ``stream`` (``CAP_BLOBS``); it is purged with the stream.

        Written once under its digest: a blob that exists already holds the same bytes.

        Args:
            stream: The stream the blob belongs to (created if new, without records).
            data: The blob's bytes.

        Returns:
            The SHA-256 hex digest of ``data``, its key for ``get_blob``.

        Raises:
            StoreUnavailableError: A filesystem error.
            InvalidRequestError: When ``data`` is not ``bytes`` (``check_blob``).
        """
        self._check_open()
        check_blob(stream, data)
        digest = hashlib.sha256(data).hexdigest()

        def put() -> None:
            directory = self._ensure_stream(stream)
            self._write(directory / "blobs" / digest, [data], replace=False)  # exists: same bytes

        await _io(put)
        return digest

    async def get_blob(self, stream: StreamId, digest: str) -> bytes:
        """The bytes of a blob of ``stream`` (``CAP_BLOBS``).

        Args:
            stream: The stream the blob belongs to.
            digest: The SHA-256 hex digest ``put_blob`` returned.

        Returns:
            The blob's bytes.

        Raises:
            BlobNotFoundError: The stream has no blob with that digest, or
                ``digest`` is not 64 lowercase hex characters (checked before it
                can become a path).
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        if not _DIGEST.fullmatch(digest):  # never let a caller's string become a path
            raise BlobNotFoundError(f"no blob {digest!r} in {stream}")
        path = self._stream_dir(stream) / "blobs" / digest

        def get() -> bytes | None:
            try:
                return path.read_bytes()
            except FileNotFoundError:
                return None

        found = await _io(get)
        if found is None:
            raise BlobNotFoundError(f"no blob {digest} in {stream}")
        return found

    async def delete_blobs(self, stream: StreamId, digests: Collection[str]) -> None:
        """Delete the named blobs of ``stream`` (``CAP_BLOB_DELETE``); a missing one is skipped.

        One unlink per blob, in a worker thread; only well-formed digests become paths.

        Args:
            stream: The stream whose blobs to delete.
            digests: The digests ``put_blob`` returned.

        Raises:
            InvalidRequestError: Malformed arguments (``check_blob_digests``).
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        names = check_blob_digests(stream, digests)
        directory = self._stream_dir(stream) / "blobs"

        def delete() -> None:
            for digest in names:
                (directory / digest).unlink(missing_ok=True)

        if names:
            await _io(delete)
