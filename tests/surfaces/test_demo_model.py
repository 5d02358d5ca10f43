"""The demo with a model behind the real OpenAI client (``--model openai:MODEL``): the
workers talk Chat Completions over HTTP to a local server on 127.0.0.1, which answers
as the survey's policy would, so the run is a real client's run end to end."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rich.console import Console

from durably._cli.demo.run import run_demo
from durably._cli.demo.survey import ScriptedSurveyModel


class SurveyChatHandler(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions``: the conversation, read back from the wire format,
    answered by the demo's scripted survey policy as a Chat Completions response."""

    policy = ScriptedSurveyModel(Path("."))

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        messages = []
        for m in body["messages"]:
            if m["role"] == "tool":
                messages.append(
                    {"role": "tool", "tool_call_id": m["tool_call_id"], "content": _json_or_text(m["content"])}
                )
            elif m["role"] == "assistant":
                calls = [
                    {"id": c["id"], "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                    for c in m.get("tool_calls") or ()
                ]
                messages.append({"role": "assistant", "content": m.get("content") or "", "tool_calls": calls})
            else:
                messages.append({"role": m["role"], "content": m["content"]})
        answer = self.policy._decide(messages)
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in answer.tool_calls
        ]
        message = {"role": "assistant", "content": answer.text or None, **({"tool_calls": calls} if calls else {})}
        reply = {
            "id": "chatcmpl-demo",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _serve_chat_completions(monkeypatch) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SurveyChatHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-demo")
    return server


def test_demo_runs_with_a_model_behind_the_real_openai_client(tmp_path, monkeypatch) -> None:
    server = _serve_chat_completions(monkeypatch)
    try:
        out = io.StringIO()
        status = run_demo(
            f"sqlite:///{tmp_path / 'demo.db'}",
            tmp_path / "out",
            11,
            3,
            Console(file=out, width=200),
            model="openai:gpt-demo",
        )
    finally:
        server.shutdown()
    printed = out.getvalue()
    assert status == 0, printed
    assert "model openai:gpt-demo: no reference run" in printed and "all 6 checks passed" in printed
    assert len(list((tmp_path / "out" / "run" / "summaries").glob("*.md"))) == 3


def test_durably_demo_takes_the_model_option(tmp_path, monkeypatch, capsys) -> None:
    from durably._cli.main import main

    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal width it is told
    server = _serve_chat_completions(monkeypatch)
    try:
        status = main(
            [
                "demo",
                "--store",
                f"sqlite:///{tmp_path / 'demo.db'}",
                "--out",
                str(tmp_path / "out"),
                "--seed",
                "11",
                "--modules",
                "3",
                "--model",
                "openai:gpt-demo",
            ]
        )
    finally:
        server.shutdown()
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "model openai:gpt-demo: no reference run" in printed and "all 6 checks passed" in printed
