"""The OpenAI Agents SDK against a local Chat Completions server, for the bridge's tests.

``ChatServer(answer)`` listens on 127.0.0.1 and answers every POST to
``/v1/chat/completions`` with ``answer(messages, tools)`` (a Chat Completions
response body), keeping every request: so a test and its child processes drive
the SDK's own ``AsyncOpenAI`` client over real HTTP and count the requests
paid per logical call. ``sdk_model(url)`` is the SDK's
``OpenAIChatCompletionsModel`` pointed at it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

Answer = Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]]


def completion(content: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:
    """A Chat Completions body: ``calls`` as ``(call id, tool name, arguments)``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


class ChatServer:
    """``async with ChatServer(answer) as server``: ``server.url`` (``http://127.0.0.1:port/v1``),
    ``server.requests`` (the request bodies, in order)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.requests.append(body)
        try:
            return web.json_response(self.answer(body["messages"], body.get("tools") or []))
        except Exception as exc:  # a test's answer that breaks shows up as the client's error
            return web.json_response({"error": {"message": repr(exc), "type": "server_error"}}, status=400)

    async def __aenter__(self) -> ChatServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._runner.cleanup()


def sdk_model(url: str) -> Any:
    """The SDK's Chat Completions model over its own ``AsyncOpenAI`` client, at ``url``."""
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="test-key", max_retries=0)
    return OpenAIChatCompletionsModel(model="gpt-test", openai_client=client)


def said(messages: list[dict[str, Any]], role: str) -> list[str]:
    """The text contents of ``messages`` of ``role``, in order."""
    out = []
    for m in messages:
        if m.get("role") != role:
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append(content or "")
    return out


class ThreadedChatServer:
    """``with ThreadedChatServer(answer) as server``: a ``ChatServer`` on a loop of its own
    thread, for sync tests that fork child processes (no event loop runs in the
    forking thread, and the server's thread does not exist in the children)."""

    def __init__(self, answer: Answer) -> None:
        self.server = ChatServer(answer)

    def __enter__(self) -> ChatServer:
        import asyncio
        import threading

        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self.server.__aenter__())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self.server.__aexit__(None, None, None))

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(30)
        return self.server

    def __exit__(self, *exc_info: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
