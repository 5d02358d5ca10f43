"""Small local servers speaking the OpenAI Chat Completions and Anthropic Messages
wire formats, for driving the vendors' real clients over real HTTP (127.0.0.1 only).

Each request is answered by the next step of a script: a reply body, an HTTP error
with headers, or a dropped connection. Every request body is kept for the test.
A reply to a request asking to stream (``"stream": true``) is sent as the vendor's
server-sent events, cut from the same body (text in word pieces, tool-call arguments
in halves), so one script serves both paths.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Any

import anyio
from aiohttp import web

Step = Callable[[dict[str, Any]], Any]


class Sse:
    """A streamed answer: ``events`` as ``(event name or None, data)``; with
    ``hang_after`` set, the stream stops after that many events and never ends
    (a provider mid-reply when its caller dies); with ``cut_after``, the
    connection is cut after that many (a reset mid-reply)."""

    def __init__(
        self, events: list[tuple[str | None, Any]], hang_after: int | None = None, cut_after: int | None = None
    ) -> None:
        self.events, self.hang_after, self.cut_after = events, hang_after, cut_after


def reply(body: dict[str, Any]) -> Step:
    """Answer 200 with ``body`` as JSON, or as its vendor's event stream when the request asks to stream."""
    return lambda request: Sse(sse_events(body)) if request.get("stream") else web.json_response(body)


def stream_then_hang(body: dict[str, Any], events: int) -> Step:
    """Stream the first ``events`` events of ``body``'s stream, then hold the connection open, silent."""
    return lambda request: Sse(sse_events(body), hang_after=events)


def stream_then_cut(body: dict[str, Any], events: int) -> Step:
    """Stream the first ``events`` events of ``body``'s stream, then cut the connection."""
    return lambda request: Sse(sse_events(body), cut_after=events)


def _pieces(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


def sse_events(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The server-sent events a vendor streams for the whole reply ``body``."""
    return _anthropic_events(body) if body.get("type") == "message" else _openai_events(body)


def _openai_events(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    (choice,) = body["choices"]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> tuple[None, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
        base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
        return None, {**base, "choices": choices, "usage": usage}

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(message.get("content") or "")]
    events += [chunk({"refusal": piece}) for piece in _pieces(message.get("refusal") or "")]
    for i, call in enumerate(message.get("tool_calls") or ()):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        head = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
        events.append(
            chunk({"tool_calls": [{**head, "function": {**head["function"], "arguments": arguments[:half]}}]})
        )
        events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments[half:]}}]}))
    events.append(chunk({}, choice["finish_reason"]))
    events.append(chunk(None, usage=body.get("usage")))  # type: ignore[arg-type]
    events.append((None, "[DONE]"))
    return events


def _anthropic_events(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    usage = body["usage"]
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
    }
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(body["content"]):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            whole = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in (whole[: len(whole) // 2], whole[len(whole) // 2 :])
            ]
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": opening}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def fail(status: int, headers: dict[str, str] | None = None, error: str = "api_error") -> Step:
    """Answer ``status`` with an error body in both vendors' shape."""
    body = {"type": "error", "error": {"type": error, "message": f"scripted {status}", "code": None, "param": None}}
    return lambda request: web.json_response(body, status=status, headers=headers or {})


def drop() -> Step:
    """Close the connection without answering (a crashed proxy, a reset)."""
    return lambda request: "drop"


class ScriptedServer:
    """``async with ScriptedServer(path, steps) as server``: ``server.url`` is its
    base URL; ``server.requests`` the JSON bodies and headers received, in order."""

    def __init__(self, path: str, steps: list[Step]) -> None:
        self.path, self.steps = path, list(steps)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.streamed = 0  # server-sent events written, over all requests
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(json.loads(await request.read()))
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        if not self.steps:
            return web.json_response({"error": {"message": "script exhausted"}}, status=400)
        answer = self.steps.pop(0)(self.requests[-1])
        if answer == "drop":
            request.transport.abort()
            raise ConnectionResetError("dropped by the script")
        if isinstance(answer, Sse):
            return await self._stream(request, answer)
        return answer

    async def _stream(self, request: web.Request, answer: Sse) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for n, (event, data) in enumerate(answer.events):
            if n == answer.cut_after:
                request.transport.abort()
                raise ConnectionResetError("cut by the script")
            if n == answer.hang_after:
                while request.transport is not None and not request.transport.is_closing():
                    await anyio.sleep(0.05)  # silent, until the caller goes away
                return response
            text = data if isinstance(data, str) else json.dumps(data)
            await response.write(((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode())
            self.streamed += 1
            await anyio.sleep(0)  # each event its own write: the client reads them one by one
        with contextlib.suppress(ConnectionError):  # the client may hang up first (a refused reply)
            await response.write_eof()
        return response

    async def __aenter__(self) -> ScriptedServer:
        app = web.Application()
        app.router.add_post(self.path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._runner.cleanup()


def openai_completion(
    *,
    content: str | None = None,
    calls: list[tuple[str, str, str]] = (),
    finish: str = "stop",
    usage: dict[str, Any] | None = None,
    model: str = "gpt-test",
) -> dict[str, Any]:
    """A Chat Completions response: ``calls`` as ``(id, name, arguments JSON text)``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


def anthropic_message(
    *, text: str = "", calls: list[tuple[str, str, Any]] = (), stop: str = "end_turn", model: str = "claude-test"
) -> dict[str, Any]:
    """A Messages API response: ``calls`` as ``(id, name, input)``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": x} for i, n, x in calls]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 7},
    }
