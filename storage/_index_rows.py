"""The status index as SQL rows, shared by the SQL adapters (SQLite, PostgreSQL).

Both keep an entry in five columns of the stream's row (status, definition,
index_seq, updated_at, approvals as a JSON list; a sleeping agent's as the
JSON map ``{"approvals": [...], "wake_at": t}``, which a reader that predates
timers takes for no entry, so it looks at the stream: the safe way to err)
and list a namespace by
keyset paging (``agent_id > after ORDER BY agent_id LIMIT n``): one range scan
per status asked for, plus one for rows without an entry (``status IS NULL``),
which a caller asking for statuses must see too (an unindexed stream may be
in any state). Only the SQL text differs between adapters; the row shape, the
validation and the paging loop live here once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Any, Literal

from durably.errors import InvalidArgumentError

from ._errors import InvalidRequestError
from ._spi import IndexedStream, IndexEntry, StreamId

#: Which rows one scan returns: every row, the rows without an entry, or the rows of one status.
Scan = tuple[Literal["all", "null", "status"], str | None]
#: ``fetch(scan, after, limit)``: up to ``limit`` rows of the scan with ``agent_id > after``,
#: ordered by agent_id, each ``(agent_id, status, definition, index_seq, updated_at, approvals)``.
FetchPage = Callable[[Scan, str, int], Awaitable[Sequence[Sequence[Any]]]]

#: The columns a listing selects, in the order ``entry_from_row`` takes them after ``agent_id``.
FIELDS = "agent_id, status, definition, index_seq, updated_at, approvals"


def named_stream(namespace: str, agent_id: object) -> StreamId | None:
    """The ``StreamId`` of a listed row; None for an agent id no ``StreamId`` can hold (bytes,
    a NUL, over 200 characters: never written by durably, so a foreign row), which a listing
    skips: no API can name that stream, and raising stopped every scan of the namespace."""
    try:
        return StreamId(namespace, agent_id)  # type: ignore[arg-type]  # checked by StreamId itself
    except InvalidArgumentError:
        return None


def entry_columns(entry: IndexEntry | None) -> tuple[object, ...]:
    """The five column values of ``entry`` (all NULL for None).

    Raises ``InvalidRequestError`` when ``entry`` is not an ``IndexEntry`` (checked
    before any I/O, so a malformed append writes nothing)."""
    if entry is None:
        return (None, None, None, None, None)
    if not isinstance(entry, IndexEntry):
        raise InvalidRequestError(f"an index entry must be an IndexEntry, got {type(entry).__name__}")
    approvals: object = list(entry.open_approvals)
    if entry.wake_at is not None:
        approvals = {"approvals": approvals, "wake_at": entry.wake_at}
    return (entry.status, entry.definition, entry.seq, entry.updated_at, json.dumps(approvals))


def entry_from_row(
    status: str | None, definition: str, seq: int, updated_at: float, approvals: str
) -> IndexEntry | None:
    """The entry stored in a row's five columns; None when the row has none (NULL status).

    Also None for columns that hold no entry (damaged: a status that is not text, approvals
    that are not a JSON list): the stream is then looked at as one without an entry (the
    journal is the truth, and its restore writes the entry anew), where raising json's
    error stopped every scan of the namespace (``resume_all``, ``serve``, ``agents``)."""
    if status is None:
        return None
    try:
        found = json.loads(approvals)
    except (TypeError, ValueError):  # JSONDecodeError is a ValueError
        return None
    wake_at: Any = None
    if isinstance(found, dict):  # a sleeping agent's entry: its approvals and its wake time
        sleeping: dict[str, Any] = found
        found, wake_at = sleeping.get("approvals"), sleeping.get("wake_at")
        if type(wake_at) not in (int, float):
            return None
    if type(status) is not str or type(found) is not list:
        return None
    return IndexEntry(
        status=status,
        definition=definition,
        seq=seq,
        updated_at=updated_at,
        open_approvals=tuple(found),
        wake_at=None if wake_at is None else float(wake_at),
    )


async def list_rows(
    namespace: str, statuses: Collection[str] | None, page_size: int, fetch: FetchPage
) -> AsyncIterator[IndexedStream]:
    """``IndexStore.list_index`` over ``fetch``: the streams of ``namespace`` whose entry has
    one of ``statuses`` (every stream when None), and those without an entry, page by page.

    Raises ``InvalidRequestError`` for ``page_size < 1``; whatever ``fetch`` raises."""
    if page_size < 1:
        raise InvalidRequestError(f"page_size must be >= 1, got {page_size}")
    scans: list[Scan] = [("all", None)]
    if statuses is not None:
        scans = [("null", None)]
        scans += [("status", s) for s in sorted(set(statuses))]
    for scan in scans:
        after = ""
        while True:
            rows = await fetch(scan, after, page_size)
            for agent_id, status, definition, seq, updated_at, approvals in rows:
                if (stream := named_stream(namespace, agent_id)) is not None:
                    yield IndexedStream(stream, entry_from_row(status, definition, seq, updated_at, approvals))
            if len(rows) < page_size:
                break
            after = rows[-1][0]
