"""Another OS process on the same store: the kit's cross-process checks drive it line by line.

Run as ``python -m durably.storage.conformance._peer MODULE QUALNAME URL``: it
imports the adapter class ``QUALNAME`` from ``MODULE``, builds ``cls(URL)``,
opens it and prints ``{"ready": true}``. Then each line on stdin is one JSON
request (``op`` and its arguments, bytes as hex) and each answer one JSON line:
``{"ok": value}``, ``{"conflict": actual_seq}``, ``{"fenced": actual_seq}`` (an append
whose ``fence`` is no longer the stream's lease) or ``{"error": type, "message": ...}``.
``Peer`` is the parent's side. The same idea as Jepsen's clients: a real
process, talking to the store only through its public API.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from durably.errors import InvalidArgumentError
from durably.storage._errors import ConflictError, FencedError
from durably.storage._spi import Lease, Store, StreamId, supports_leases
from durably.storage._torture.spawn import child_environment, load_class, read_all

#: Seconds a peer may take to start and open the store, and to answer one request.
PEER_TIMEOUT = 60.0


def _lease(lease: Lease | None) -> list[object] | None:
    return None if lease is None else [lease.owner, lease.token, lease.expires_at]


async def _serve(store: Store, request: dict[str, Any]) -> Any:
    op = request["op"]
    namespace = request.get("namespace", "conformance")
    if op == "list":
        return [found.agent_id async for found in store.list_streams(namespace)]
    stream = StreamId(namespace, request["agent"])
    if op == "append":
        records = [bytes.fromhex(data) for data in request["records"]]
        return await store.append(stream, request["expected"], records, fence=request.get("fence"))
    if op == "last_seq":
        return await store.last_seq(stream)
    if op == "read":
        return [[record.seq, record.data.hex()] async for record in store.read(stream, request.get("after", 0))]
    if op == "snapshot":
        found = await store.get_snapshot(stream)
        return None if found is None else [found.seq, found.data.hex()]
    if op in ("acquire_lease", "get_lease") and not supports_leases(store):
        raise InvalidArgumentError(f"peer op {op!r} on {type(store).__name__}, which does not declare leases")
    if op == "acquire_lease" and supports_leases(store):
        return _lease(await store.acquire_lease(stream, request["owner"], request["ttl"]))
    if op == "get_lease" and supports_leases(store):
        return _lease(await store.get_lease(stream))
    raise InvalidArgumentError(f"unknown peer op {op!r}")


async def _main(module: str, qualname: str, url: str) -> None:
    store = load_class(module, qualname)(url)
    async with store:
        print(json.dumps({"ready": True}), flush=True)
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                return
            try:
                answer = {"ok": await _serve(store, json.loads(line))}
            except FencedError as fenced:
                answer = {"fenced": fenced.actual_seq}
            except ConflictError as conflict:
                answer = {"conflict": conflict.actual_seq}
            except Exception as exc:
                answer = {"error": type(exc).__name__, "message": str(exc)}
            print(json.dumps(answer), flush=True)


class Peer:
    """The parent's handle on one peer process: ``await peer.call(op, **arguments)``."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        assert process.stdout is not None and process.stdin is not None, "peer_process opens both pipes"
        self._stdin = process.stdin
        self._lines = BufferedByteReceiveStream(process.stdout)

    async def _answer(self) -> dict[str, Any]:
        with anyio.fail_after(PEER_TIMEOUT):
            try:
                line = await self._lines.receive_until(b"\n", 1 << 30)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                errors = b""
                with anyio.move_on_after(5):
                    errors = await read_all(self.process.stderr)
                raise AssertionError(f"the peer process died: {errors.decode(errors='replace')[-2000:]}") from None
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def call(self, op: str, **arguments: Any) -> dict[str, Any]:
        """Send one request; return the peer's answer (``ok``, ``conflict`` or ``error``)."""
        await self._stdin.send((json.dumps({"op": op, **arguments}) + "\n").encode())
        return await self._answer()


@asynccontextmanager
async def peer_process(store_class: type, url: str) -> AsyncIterator[Peer]:
    """Start a peer process on ``store_class(url)``, wait until it has opened the store, stop it after."""
    command = [sys.executable, "-m", __name__, store_class.__module__, store_class.__qualname__, url]
    process = await anyio.open_process(command, env=child_environment())
    peer = Peer(process)
    try:
        ready = await peer._answer()
        assert ready == {"ready": True}, f"the peer process could not open {url!r}: {ready}"
        yield peer
    finally:
        with anyio.CancelScope(shield=True):
            await peer._stdin.aclose()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


if __name__ == "__main__":
    module, qualname, url = sys.argv[1:4]
    anyio.run(_main, module, qualname, url)
