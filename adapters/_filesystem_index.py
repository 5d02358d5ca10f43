"""The filesystem adapter's status index (``CAP_STATUS_INDEX``), without transactions.

Files (names hashed as the streams' are)::

    streams/<ns>/<agent>/entry          the stream's IndexEntry as JSON (absent: none)
    index/<ns>/<status>/<agent>         hint: the stream may have this status (holds its id)
    index/<ns>/none/<agent>             hint: the stream may have no (valid) entry

A file system cannot write the records and the entry in one atomic step, so
the entry may lag, and the hints are what keeps that safe. The rule: a
stream always has a hint under the status its journal holds, or under
``none``. An append that carries entry E writes E's hint *before* its
records (and E itself too when E says ``running``), then after them the hint
again, E, removes the stream's other hints, and reads the last seq back: if
someone appended meanwhile, their status may be one whose hint was just
removed, so a ``none`` hint goes back. ``list_index`` reads the hint
directories it is asked about (plus ``none``) and checks each against the
entry: an entry that disagrees with its hints is yielded as None ("read the
journal"). So a crash or a race can only leave a stream listed where it is
not (a restore, which repairs it through ``put_index``), never missing where
it is. A directory written before the index gets a ``none`` hint for every
stream at its first open by this version.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from durably.storage._spi import AppendRequest, IndexedStream, IndexEntry, StreamId

RUNNING = "running"  # the one status a scan resumes: its entry is also written before the records
_NONE = "none"  # hints of streams that may have no valid entry (not a hex digest: no clash)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_T = TypeVar("_T")


def _key(status: str | None) -> str:
    return _NONE if status is None else _digest(status)[:32]


class FileSystemStatusIndex:
    """Mixin giving ``FileSystemStore`` the ``IndexStore`` methods and the append hooks.

    Relies on the host's ``root``, ``_check_open()``, ``_stream_dir(stream)``,
    ``_write(path, chunks, replace=...)``, ``_last_seq(directory)`` and its
    ``_io`` (blocking work in a worker thread, ``OSError`` as ``StoreUnavailableError``).
    """

    root: Path

    if TYPE_CHECKING:  # the host's (FileSystemStore), declared for the type checker

        def _check_open(self) -> None: ...

        def _stream_dir(self, stream: StreamId) -> Path: ...

        def _write(self, final: Path, data: Sequence[bytes], *, replace: bool) -> bool: ...

        def _last_seq(self, directory: Path) -> int: ...

        @staticmethod
        async def _io(function: Callable[[], _T]) -> _T: ...

    # -- layout --------------------------------------------------------------

    def _hint(self, stream: StreamId, status: str | None) -> Path:
        return self.root / "index" / _digest(stream.namespace) / _key(status) / _digest(stream.agent_id)

    def _put_hint(self, stream: StreamId, status: str | None) -> None:
        path = self._hint(stream, status)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write(path, [json.dumps([stream.namespace, stream.agent_id]).encode()], replace=True)

    def _read_entry(self, stream: StreamId) -> IndexEntry | None:
        try:
            fields = json.loads((self._stream_dir(stream) / "entry").read_bytes())
        except FileNotFoundError:
            return None
        return IndexEntry(**{**fields, "open_approvals": tuple(fields["open_approvals"])})

    def _write_entry(self, stream: StreamId, entry: IndexEntry | None) -> None:
        path = self._stream_dir(stream) / "entry"
        if entry is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        self._write(path, [json.dumps(asdict(entry)).encode()], replace=True)

    def _settle(self, stream: StreamId, entry: IndexEntry | None, end_seq: int) -> bool:
        """After the records up to ``end_seq``: the hint, the entry, the other hints gone,
        then the last seq read back (moved: a ``none`` hint again, and False)."""
        keep = _key(entry.status if entry is not None else None)
        self._put_hint(stream, entry.status if entry is not None else None)
        self._write_entry(stream, entry)
        base = self.root / "index" / _digest(stream.namespace)
        name = _digest(stream.agent_id)
        for status_dir in os.listdir(base):
            if status_dir != keep:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(base / status_dir / name)
        if self._last_seq(self._stream_dir(stream)) != end_seq:
            self._put_hint(stream, None)
            return False
        return True

    # -- hooks of the host's append and purge --------------------------------

    def _index_before(self, request: AppendRequest) -> None:
        """Before the records of ``request`` (its stream directory exists)."""
        entry = request.index
        if entry is None:
            if request.expected_seq == 0:
                self._put_hint(request.stream, None)  # a new stream without an entry
            return
        self._put_hint(request.stream, entry.status)
        if entry.status == RUNNING:
            self._write_entry(request.stream, entry)  # a crash after the records leaves it runnable

    def _index_after(self, request: AppendRequest, end_seq: int) -> None:
        """After the records of ``request`` were appended through ``end_seq``."""
        if request.index is not None:
            self._settle(request.stream, request.index, end_seq)

    def _drop_hints(self, stream: StreamId) -> None:
        base = self.root / "index" / _digest(stream.namespace)
        name = _digest(stream.agent_id)
        for status_dir in os.listdir(base) if base.exists() else []:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base / status_dir / name)

    def _hint_old_streams(self) -> None:
        """At open: a directory from before the index gets a ``none`` hint for every stream."""
        if (self.root / "index").exists():
            return
        streams = self.root / "streams"
        for ns in os.listdir(streams):
            for agent in os.listdir(streams / ns):
                try:
                    namespace, agent_id = json.loads((streams / ns / agent / "id").read_bytes())
                except FileNotFoundError:
                    continue
                self._put_hint(StreamId(namespace, agent_id), None)
        (self.root / "index").mkdir(exist_ok=True)

    # -- IndexStore ----------------------------------------------------------

    async def list_index(
        self, namespace: str, statuses: Collection[str] | None = None, *, page_size: int = 512
    ) -> AsyncIterator[IndexedStream]:
        """Yield the streams of ``namespace`` whose index entry's status is in ``statuses``.

        As ``IndexStore.list_index``. Here it reads the hint directories asked
        for plus ``none`` (not the namespace's streams), and checks each hinted
        stream against its entry file: an entry that disagrees with the
        stream's hints is yielded as None ("read the journal"). Purged streams
        and streams with only blobs are skipped. The scan is one hop to a
        worker thread; its rows are yielded after it.

        Args:
            namespace: The one namespace to list.
            statuses: The statuses wanted (None: every status).
            page_size: Accepted for the SPI and ignored.

        Yields:
            An ``IndexedStream`` per matching stream, in no particular order.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()
        base = self.root / "index" / _digest(namespace)

        def scan() -> list[IndexedStream]:
            wanted = None if statuses is None else {_key(s) for s in statuses} | {_NONE}
            hints: dict[str, set[str]] = {}
            for status_dir in os.listdir(base) if base.exists() else []:
                if wanted is None or status_dir in wanted:
                    for name in os.listdir(base / status_dir):
                        hints.setdefault(name, set()).add(status_dir)
            found = []
            for name, keys in hints.items():
                try:
                    ns, agent_id = json.loads((base / next(iter(keys)) / name).read_bytes())
                except FileNotFoundError:
                    continue  # settled elsewhere meanwhile; its other hint is listed or it is not in the set
                stream = StreamId(ns, agent_id)
                if self._last_seq(self._stream_dir(stream)) == 0:
                    continue  # purged, or only blobs
                entry = self._read_entry(stream)
                agrees = entry is not None and keys == {_key(entry.status)}
                found.append(IndexedStream(stream, entry if agrees else None))
            return found

        for row in await self._io(scan):
            yield row

    async def get_index(self, stream: StreamId) -> IndexEntry | None:
        """The status index entry of ``stream`` (``IndexStore.get_index``).

        Args:
            stream: The stream to look at.

        Returns:
            Its entry; None for an unknown stream, one without an entry, and
                also one whose entry its hints disagree with (as ``list_index`` sees
                it), so the restore that follows repairs it.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()

        def get() -> IndexEntry | None:
            entry = self._read_entry(stream)
            base = self.root / "index" / _digest(stream.namespace)
            name = _digest(stream.agent_id)
            keys = {d for d in (os.listdir(base) if base.exists() else []) if (base / d / name).exists()}
            return entry if entry is not None and keys == {_key(entry.status)} else None

        found: IndexEntry | None = await self._io(get)
        return found

    async def put_index(self, stream: StreamId, entry: IndexEntry | None, at_seq: int) -> bool:
        """Set or remove the entry of ``stream`` if its last seq is still ``at_seq`` (``IndexStore.put_index``).

        Without transactions the compare-and-set is a read-back: the hint and
        the entry are written, the stream's other hints removed, then the last
        seq is read again; if a record was appended meanwhile, a ``none`` hint
        goes back (so the stream is read from its journal) and False is returned.

        Args:
            stream: The stream whose entry to set.
            entry: The new entry (None: remove it).
            at_seq: The last seq the entry was computed from.

        Returns:
            True if written and still current; False when ``at_seq`` < 1, the
                last seq is not ``at_seq``, or it moved during the write.

        Raises:
            StoreUnavailableError: A filesystem error.
        """
        self._check_open()

        def put() -> bool:
            if at_seq < 1 or self._last_seq(self._stream_dir(stream)) != at_seq:
                return False
            return self._settle(stream, entry, at_seq)

        written: bool = await self._io(put)
        return written
