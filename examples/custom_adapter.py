"""A storage adapter in one file: the SPI's contract on a dict, under its own URL scheme.

Bytes in, bytes out: an adapter stores frames by ``(stream, seq)`` and
snapshots by ``(stream, seq)``, appends batches atomically with an expected
seq, and never looks inside the bytes. This one keeps them in a dict, so it
declares ``CAP_SINGLE_PROCESS``; a real one keeps them in your database and
proves itself with the conformance kit (``durably.storage.conformance``, see
docs/writing-an-adapter.md). Registered as ``dict://``, it runs an agent like
any built-in store.

    python examples/custom_adapter.py
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from urllib.parse import urlsplit

import anyio

import durably
from durably.storage import (
    CAP_SINGLE_PROCESS,
    AppendRequest,
    ConflictError,
    InvalidRequestError,
    StoreClosedError,
    StoredRecord,
    StoredSnapshot,
    StreamId,
    UnsafeCompactionError,
    register_store,
)

_DATABASES: dict[str, dict[StreamId, dict]] = {}  # name -> the streams: what outlives one store object


class DictStore:
    """A ``Store`` on a dict. ``url``: ``dict://name`` (stores of one name share data)."""

    capabilities = frozenset({CAP_SINGLE_PROCESS})

    def __init__(self, url: str) -> None:
        self._streams = _DATABASES.setdefault(urlsplit(url).netloc, {})
        self._open = False

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def __aenter__(self) -> DictStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _stream(self, stream: StreamId, create: bool = False) -> dict | None:
        if not self._open:
            raise StoreClosedError("the store is closed")
        if create:
            return self._streams.setdefault(stream, {"last_seq": 0, "records": {}, "snapshots": {}})
        return self._streams.get(stream)

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        results: list[int | Exception] = []
        for request in requests:  # no await in between: each append is atomic on the event loop
            found = self._stream(request.stream)
            last = found["last_seq"] if found else 0
            if last != request.expected_seq:
                results.append(ConflictError(request.stream, request.expected_seq, last))
                continue
            found = self._stream(request.stream, create=True)
            for offset, data in enumerate(request.records, start=1):
                found["records"][last + offset] = bytes(data)
            found["last_seq"] = last + len(request.records)
            results.append(found["last_seq"])
        return results

    async def append(self, stream: StreamId, expected_seq: int, records: Sequence[bytes]) -> int:
        (result,) = await self.append_batch([AppendRequest(stream, expected_seq, records)])
        if isinstance(result, Exception):
            raise result
        return result

    async def last_seq(self, stream: StreamId) -> int:
        found = self._stream(stream)
        return found["last_seq"] if found else 0

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        found = self._stream(stream)
        for seq in sorted(s for s in (found["records"] if found else {}) if s > after_seq):
            yield StoredRecord(seq, found["records"][seq])

    async def put_snapshot(self, stream: StreamId, seq: int, data: bytes) -> None:
        found = self._stream(stream)
        if found is None or not 1 <= seq <= found["last_seq"]:
            raise InvalidRequestError(f"snapshot seq {seq} is outside 1..last seq of {stream}")
        found["snapshots"][seq] = bytes(data)

    async def get_snapshot(self, stream: StreamId, at_or_before: int | None = None) -> StoredSnapshot | None:
        found = self._stream(stream)
        seqs = [s for s in (found["snapshots"] if found else {}) if at_or_before is None or s <= at_or_before]
        return StoredSnapshot(max(seqs), found["snapshots"][max(seqs)]) if seqs else None

    async def delete_snapshots(self, stream: StreamId, before_seq: int) -> None:
        found = self._stream(stream)
        if found and found["snapshots"]:
            latest = max(found["snapshots"])
            for seq in [s for s in found["snapshots"] if s < before_seq and s != latest]:
                del found["snapshots"][seq]

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        found = self._stream(stream)
        if found is None:
            return
        if not any(s >= through_seq for s in found["snapshots"]):
            raise UnsafeCompactionError(f"no snapshot at or after seq {through_seq} of {stream}")
        for seq in [s for s in found["records"] if s <= through_seq]:
            del found["records"][seq]

    async def list_streams(self, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
        self._stream(StreamId(namespace, "-"))  # raises when closed
        for stream in sorted(s for s in self._streams if s.namespace == namespace and s.agent_id.startswith(prefix)):
            yield stream

    async def delete_stream(self, stream: StreamId) -> None:
        self._stream(stream)
        self._streams.pop(stream, None)


@durably.tool
async def word_count(text: str) -> int:
    """Count the words of a text.

    Args:
        text: the text.
    """
    return len(text.split())


class CountingModel:
    name = "scripted-counter"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        if messages[-1]["role"] == "tool":
            return durably.ModelResponse(f"{messages[-1]['content']} words")
        return durably.ModelResponse("", (durably.ToolCall("c1", "word_count", {"text": "bytes in, bytes out"}),))


async def main() -> int:
    register_store("dict", DictStore)
    agent = durably.AgentDefinition(name="counter", model=CountingModel(), tools=[word_count])
    async with durably.Runtime("dict://demo", agents=[agent]) as rt:
        state = await rt.run("counter", "count-1", "How many words?")
    # Another store object on the same name reads the same journal back.
    async with durably.Runtime("dict://demo") as rt:
        history = [entry.kind async for entry in rt.history("count-1")]
    print(f"{state.status}: {state.result}; journal: {', '.join(history)}")
    return 0 if state.result == "4 words" and history[0] == "started" and history[-1] == "finished" else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
