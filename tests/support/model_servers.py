"""Small local servers speaking the OpenAI Chat Completions and Anthropic Messages
wire formats, for driving the vendors' real clients over real HTTP (127.0.0.1 only).

Each request is answered by the next step of a script: a reply body, an HTTP error
with headers, or a dropped connection. Every request body is kept for the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

Step = Callable[[dict[str, Any]], Any]


def reply(body: dict[str, Any]) -> Step:
    """Answer 200 with ``body`` as JSON."""
    return lambda request: web.json_response(body)


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
        return answer

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
