"""The survey agent: a scripted model and tools with real side effects.

Input is real data on every machine: the source of standard-library modules.
For each module the agent reads it (``read_module``: pure), writes a summary
file (``write_summary``: a file write that deduplicates by idempotency key, as
an idempotent API does, so its policy is ``retry``), and posts a notice to an
outbox (``notify``: an append-only "send", not idempotent, so its policy is
``reconcile``: on resume durably asks the outbox whether the key was sent).
Finally ``publish_report`` writes the report, behind a human approval.

Every real execution of a side-effecting tool appends one line to
``effects.jsonl``: that file, not durably's journal, is what the demo's
verification judges.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from durably import AgentDefinition, ModelResponse, Reconciled, Tool, ToolCall, ToolContext, Usage, tool

#: Pure-Python standard-library modules present in every CPython >= 3.11.
CANDIDATES = [
    "argparse",
    "ast",
    "base64",
    "bisect",
    "calendar",
    "colorsys",
    "configparser",
    "contextlib",
    "csv",
    "dataclasses",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "glob",
    "gzip",
    "heapq",
    "html",
    "inspect",
    "ipaddress",
    "json",
    "logging",
    "mimetypes",
    "numbers",
    "pathlib",
    "pprint",
    "queue",
    "random",
    "reprlib",
    "sched",
    "secrets",
    "shlex",
    "shutil",
    "smtplib",
    "statistics",
    "string",
    "tarfile",
    "tempfile",
    "textwrap",
    "tokenize",
    "typing",
    "uuid",
    "wave",
    "zipfile",
]

Crash = Callable[[str], None]  # called at named points; the demo worker may SIGKILL itself there


def _append_line(path: Path, line: dict[str, Any]) -> None:
    # O_APPEND + fsync: a line is either fully on disk or not there at all after a crash.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue  # a torn last line from a killed writer was never acknowledged
    return lines


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def describe_module(name: str) -> dict[str, Any]:
    """Facts about a stdlib module's source: lines, public functions and classes, first doc line."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise LookupError(f"{name} has no Python source")
    source = Path(spec.origin).read_text(encoding="utf-8")
    tree = ast.parse(source)
    functions = [
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
    ]
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
    doc = (ast.get_docstring(tree) or "").strip().splitlines()
    return {
        "module": name,
        "lines": source.count("\n") + 1,
        "functions": functions,
        "classes": classes,
        "doc": doc[0] if doc else "",
        "sha256": hashlib.sha256(source.encode()).hexdigest()[:16],
    }


class SurveyTools:
    """The survey's tools, writing under ``workdir``; ``crash`` is consulted at tool boundaries."""

    def __init__(self, workdir: Path, crash: Crash = lambda point: None) -> None:
        self.workdir = workdir
        self.crash = crash
        self.effects = workdir / "effects.jsonl"
        self.outbox = workdir / "outbox.jsonl"
        (workdir / "summaries").mkdir(parents=True, exist_ok=True)

    def _effect(self, tool_name: str, ctx: ToolContext, detail: str) -> None:
        _append_line(
            self.effects, {"tool": tool_name, "key": ctx.idempotency_key, "detail": detail, "pid": os.getpid()}
        )

    def definitions(self) -> list[Tool]:
        """The four ``Tool`` objects bound to this workdir."""

        @tool(on_unknown_outcome="retry")
        async def read_module(name: str, *, ctx: ToolContext) -> dict[str, Any]:
            """Read a standard-library module's source and return facts about it."""
            return await anyio.to_thread.run_sync(describe_module, name)

        @tool(on_unknown_outcome="retry")
        async def write_summary(module: str, text: str, *, ctx: ToolContext) -> str:
            """Write summaries/<module>.md. Deduplicates by idempotency key."""

            def run() -> str:
                path = self.workdir / "summaries" / f"{module}.md"
                if any(e["key"] == ctx.idempotency_key for e in _read_lines(self.effects)):
                    return str(path.relative_to(self.workdir))  # already done: an idempotent API answers the same
                self.crash("tool:before_effect")
                _write_atomic(path, text)
                self._effect("write_summary", ctx, module)
                self.crash("tool:after_effect")
                return str(path.relative_to(self.workdir))

            return await anyio.to_thread.run_sync(run)

        async def notified(ctx: ToolContext) -> Reconciled | None:
            sent = [
                m for m in await anyio.to_thread.run_sync(_read_lines, self.outbox) if m["key"] == ctx.idempotency_key
            ]
            return Reconciled(f"sent #{sent[0]['n']}") if sent else None

        @tool(on_unknown_outcome="reconcile", reconcile=notified)
        async def notify(channel: str, message: str, *, ctx: ToolContext) -> str:
            """Post a message to the team outbox (a send: not idempotent)."""

            def run() -> str:
                self.crash("tool:before_effect")
                n = len(_read_lines(self.outbox)) + 1
                _append_line(self.outbox, {"n": n, "channel": channel, "message": message, "key": ctx.idempotency_key})
                self._effect("notify", ctx, channel)
                self.crash("tool:after_effect")
                return f"sent #{n}"

            return await anyio.to_thread.run_sync(run)

        async def published(ctx: ToolContext) -> Reconciled | None:
            done = [
                e for e in await anyio.to_thread.run_sync(_read_lines, self.effects) if e["key"] == ctx.idempotency_key
            ]
            return Reconciled("report.md") if done else None

        @tool(requires_approval=True, on_unknown_outcome="reconcile", reconcile=published)
        async def publish_report(title: str, body: str, *, ctx: ToolContext) -> str:
            """Publish the final report (report.md). Needs a human's approval."""

            def run() -> str:
                _write_atomic(self.workdir / "report.md", f"# {title}\n\n{body}")
                self._effect("publish_report", ctx, title)
                return "report.md"

            return await anyio.to_thread.run_sync(run)

        return [read_module, write_summary, notify, publish_report]


class ScriptedSurveyModel:
    """A deterministic policy standing in for an LLM: it reads the conversation
    and answers with the next tool call, as a model would.

    Each call appends one line to ``model_calls.jsonl`` (the model's own record
    of what it was paid for), and ``crash`` is consulted before answering.
    """

    name = "scripted-survey"

    def __init__(self, workdir: Path, crash: Crash = lambda point: None, latency: float = 0.005) -> None:
        self.log = workdir / "model_calls.jsonl"
        self.crash = crash
        self.latency = latency

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        self.crash("model:before_call")
        await anyio.sleep(self.latency)  # a real model takes a while; gives a crash room to land
        turn = sum(1 for m in messages if m["role"] == "assistant")
        prompt_digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:16]
        await anyio.to_thread.run_sync(
            _append_line, self.log, {"turn": turn, "prompt": prompt_digest, "pid": os.getpid()}
        )
        response = self._decide(messages)
        tokens_in = sum(len(str(m.get("content") or "")) for m in messages) // 4
        tokens_out = (len(response.text) + sum(len(json.dumps(c.arguments)) for c in response.tool_calls)) // 4
        usage = Usage(tokens_in, tokens_out, round(tokens_in * 3e-6 + tokens_out * 15e-6, 6))
        return ModelResponse(response.text, response.tool_calls, usage, response.plan, self.name)

    def _decide(self, messages: list[dict[str, Any]]) -> ModelResponse:
        task = next(m["content"] for m in messages if m["role"] == "user")
        modules = task_modules(task)
        facts = [m["content"] for m in messages if m["role"] == "tool" and isinstance(m["content"], dict)]
        calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        done = len(calls)
        turn = done + 1
        if done == 0:
            plan = [f"read, summarise and announce {m}" for m in modules] + ["publish the report"]
            return ModelResponse(
                "Starting the survey.", (ToolCall(f"t{turn}", "read_module", {"name": modules[0]}),), plan=plan
            )
        per_module = 3
        if done < per_module * len(modules):
            index, phase = divmod(done, per_module)
            module, info = modules[index], facts[index] if index < len(facts) else None
            if phase == 0:
                return ModelResponse("", (ToolCall(f"t{turn}", "read_module", {"name": module}),))
            assert info is not None, "phases 1 and 2 follow the read_module result of that module"
            if phase == 1:
                return ModelResponse(
                    f"Summarising {module}.",
                    (ToolCall(f"t{turn}", "write_summary", {"module": module, "text": summarise(info)}),),
                )
            note = (
                f"{module}: {info['lines']} lines, {len(info['functions'])} functions, {len(info['classes'])} classes"
            )
            return ModelResponse("", (ToolCall(f"t{turn}", "notify", {"channel": "#stdlib-survey", "message": note}),))
        if done == per_module * len(modules):
            body = report(facts)
            return ModelResponse(
                "Publishing.",
                (ToolCall(f"t{turn}", "publish_report", {"title": "Standard library survey", "body": body}),),
            )
        last = messages[-1]["content"]
        total = sum(f["lines"] for f in facts)
        return ModelResponse(f"Survey of {len(facts)} modules ({total} lines) done; publish_report said: {last}")


def summarise(info: dict[str, Any]) -> str:
    """The summary text of one module (what the model 'writes')."""
    api = ", ".join((info["classes"] + info["functions"])[:8]) or "(no public names)"
    return (
        f"# {info['module']}\n\n{info['doc'] or 'No module docstring.'}\n\n"
        f"{info['lines']} lines; {len(info['functions'])} public functions; {len(info['classes'])} public classes.\n"
        f"Public names: {api}\n"
    )


def report(facts: list[dict[str, Any]]) -> str:
    """The final report's body: a table of every module surveyed."""
    rows = ["| module | lines | functions | classes | source sha256 |", "|---|---:|---:|---:|---|"]
    rows += [
        f"| {f['module']} | {f['lines']} | {len(f['functions'])} | {len(f['classes'])} | {f['sha256']} |" for f in facts
    ]
    total = sum(f["lines"] for f in facts)
    return "\n".join(rows) + f"\n\n{len(facts)} modules, {total} lines in all.\n"


def task_modules(task: str) -> list[str]:
    """The module names ``survey_task`` put in ``task``, in order: each in backticks, a dotted
    Python name (``base64``, ``xml.dom``); the inverse of ``survey_task``."""
    return re.findall(r"`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`", task)


def survey_task(modules: list[str]) -> str:
    """The task text given to the agent."""
    names = ", ".join(f"`{m}`" for m in modules)
    return (
        f"Survey these Python standard-library modules: {names}. For each, read its source, write a summary "
        f"file and announce it on #stdlib-survey; then publish a report of all of them."
    )


class LoggedModel:
    """A real model (``durably.models``) with the demo's bookkeeping around it:
    ``crash`` is consulted before each call, and each answered call appends one
    line to ``model_calls.jsonl`` (turn and pid), as the scripted model does."""

    def __init__(self, model: Any, workdir: Path, crash: Crash) -> None:
        self.model, self.name = model, model.name
        self.log, self.crash = workdir / "model_calls.jsonl", crash

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        self.crash("model:before_call")
        turn = sum(1 for m in messages if m["role"] == "assistant")
        response: ModelResponse = await self.model.respond(messages, tools)
        await anyio.to_thread.run_sync(_append_line, self.log, {"turn": turn, "pid": os.getpid()})
        return response


def survey_agent(
    workdir: Path, crash: Crash = lambda point: None, latency: float = 0.005, model: str | None = None
) -> AgentDefinition:
    """The survey ``AgentDefinition`` writing its effects under ``workdir``.

    ``model``: a ``provider:model`` spec (``openai:gpt-4.1-mini``, key from
    ``$OPENAI_API_KEY``; see ``durably.models.from_spec``) to survey with a real
    LLM instead of the scripted policy."""
    tools = SurveyTools(workdir, crash)
    if model is not None:
        from durably.models import from_spec  # the vendor client is an optional extra

        chosen: Any = LoggedModel(from_spec(model), workdir, crash)
    else:
        chosen = ScriptedSurveyModel(workdir, crash, latency)
    return AgentDefinition(
        name="stdlib-survey",
        version="1",
        model=chosen,
        tools=tools.definitions(),
        instructions="You are a careful research assistant. Use the tools; be brief.",
    )
