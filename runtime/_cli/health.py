"""``durably worker --health-port``: HTTP ``/livez`` and ``/readyz`` on 127.0.0.1, for a supervisor's probes.

``/livez`` answers 200 as long as the worker's event loop answers at all (a
wedged loop answers nothing, and the probe's timeout says so). ``/readyz``
answers 200 while the store is open, ``serve()`` runs and the worker's last
heartbeat reached the store within its timeout; 503 before, during a drain,
and while the store is out. Plain HTTP/1.0 over an anyio listener: a probe
needs no web framework, and the plain install has none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import SocketStream

log = logging.getLogger("durably.worker")

#: Bytes of a probe's request read before it is answered (the request line and a few headers).
MAX_REQUEST = 4096
#: Seconds a probe may take to send its request.
READ_TIMEOUT = 5.0


async def serve_health(port: int, ready: Callable[[], bool], *, task_status: anyio.abc.TaskStatus[int]) -> None:
    """Answer ``/livez`` and ``/readyz`` on ``127.0.0.1:port`` until cancelled.

    Args:
        port: The TCP port (0: any free one).
        ready: Called for each ``/readyz``: True answers 200, False 503.
        task_status: Started with the port actually bound (``TaskGroup.start``).

    Raises:
        OSError: The port cannot be bound (in use, not allowed).
    """
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener:
        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))

        async def handle(client: SocketStream) -> None:
            async with client:
                await _answer(client, ready)

        await listener.serve(handle)


async def _answer(client: SocketStream, ready: Callable[[], bool]) -> None:
    request = b""
    with anyio.move_on_after(READ_TIMEOUT):
        try:
            while b"\r\n" not in request and b"\n" not in request and len(request) < MAX_REQUEST:
                request += await client.receive(MAX_REQUEST)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
    parts = request.split(b"\n", 1)[0].split()
    method, path = (parts[0], parts[1].split(b"?")[0]) if len(parts) >= 2 else (b"", b"")
    if method not in (b"GET", b"HEAD"):
        status, body = "405 Method Not Allowed", "only GET and HEAD\n"
    elif path == b"/livez":
        status, body = "200 OK", "ok\n"
    elif path == b"/readyz":
        status, body = ("200 OK", "ready\n") if ready() else ("503 Service Unavailable", "not ready\n")
    else:
        status, body = "404 Not Found", "try /livez or /readyz\n"
    payload = body.encode() if method != b"HEAD" else b""
    head = f"HTTP/1.0 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    try:
        await client.send(head.encode() + payload)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        log.debug("a health probe hung up before its answer")
