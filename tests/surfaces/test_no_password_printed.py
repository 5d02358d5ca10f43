"""No command, log line, span or console page shows a store URL's password.

A real PostgreSQL role with a password of its own; every ``durably`` command is run on
a store URL that carries it (and on broken variants of that URL: a closed port, a
missing database, a mistyped option, a mistyped scheme), the console's pages are
rendered, and the unique part of the password is looked for in everything that came
out: stdout, stderr, every log record, every span (name, attributes, events, status).
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pg_server import PostgresTestServer
from privacy_support import ScriptModel

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._cli.main import main as cli_main
from durably.errors import InvalidStoreURLError, RuntimeNotStartedError
from durably.storage._registry import open_store
from durably.storage._url_redaction import SecretScrubber, redact_url, url_secrets

#: The part of the password that must never appear (the rest, "Zq7/", tests percent-encoding).
UNIQUE = uuid.uuid4().hex
PASSWORD = f"Zq7/{UNIQUE}"
ENCODED = f"Zq7%2F{UNIQUE}"


def _gated() -> AgentDefinition:
    @tool(name="wire", requires_approval=True)
    async def wire(amount: int) -> dict:
        return {"sent": amount}

    replies = [
        ModelResponse("", (ToolCall("w1", "wire", {"amount": 5}),), Usage(1, 1, 0.0)),
        ModelResponse("ok", (), Usage(1, 1, 0.0)),
    ]
    return AgentDefinition(name="wiring", model=ScriptModel(replies), tools=[wire])


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """Every span of this process, through the global tracer provider the commands use;
    the global provider is put back as it was afterwards (OpenTelemetry's own test
    utilities reset it the same way), so no later test runs with telemetry it did not ask for."""
    from opentelemetry.util._once import Once

    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


@pytest.fixture(scope="module")
def store_url(pg_server: PostgresTestServer) -> str:
    """A store URL whose user has the password: agents waiting, finished and cancelled in it."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    pg_server.psql(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    url = f"postgresql://{role}:{ENCODED}@127.0.0.1:{pg_server.port}/durably?schema=t_{uuid.uuid4().hex[:10]}"

    async def populate() -> None:
        async with Runtime(url, agents=[_gated()]) as rt:
            for agent_id in ("a1", "a2", "a3"):
                assert (await rt.run("wiring", agent_id, "task")).status == "waiting_approval"
            await rt.approve("a2", "w1", by="ops")
            for handle in await rt.resume_all():
                await handle.wait()

    anyio.run(populate)
    return url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _span_text(span: ReadableSpan) -> str:
    parts: list[Any] = [span.name, dict(span.attributes or {}), span.status.description]
    parts += [(event.name, dict(event.attributes or {})) for event in span.events]
    parts += [dict(link.attributes or {}) for link in span.links]
    return repr(parts)


def _leaks(text: str) -> bool:
    return UNIQUE in text


def test_redact_url_masks_every_secret_form() -> None:
    nested = "postgresql://l:inner-secret@h/db?sslpassword=ssl-secret"
    url = (
        f"postgresql://app:{ENCODED}@db:5432/agents?schema=x&password=opt-secret&"
        f"listen_dsn={nested.replace(':', '%3A').replace('/', '%2F').replace('@', '%40').replace('?', '%3F')}"
        f"&sslpassword=%73sl-two&application_name=keep-me"
    )
    shown = redact_url(url)
    for secret in (UNIQUE, "opt-secret", "inner-secret", "ssl-secret", "sl-two"):
        assert secret not in shown, (secret, shown)
    assert "app:***@db:5432/agents" in shown and "schema=x" in shown and "keep-me" in shown
    assert {PASSWORD, ENCODED, "opt-secret", "inner-secret", "ssl-secret", "%73sl-two", "ssl-two"} <= url_secrets(url)
    scrub = SecretScrubber([url])
    driver = f"could not connect to {url} as app with password {PASSWORD}; ssl-secret rejected"
    assert not any(s in scrub.text(driver) for s in (UNIQUE, "ssl-secret")) and redact_url(url) in scrub.text(driver)
    assert scrub.value({PASSWORD: [PASSWORD, ("x", ENCODED)], "n": 1}) == {"***": ["***", ["x", "***"]], "n": 1}
    assert (
        redact_url("s3://bucket/p?endpoint_url=http%3A%2F%2Fk%3As3-secret%40127.0.0.1%3A9000").count("s3-secret") == 0
    )
    assert redact_url("sqlite:///a.db") == "sqlite:///a.db" and redact_url("memory://") == "memory://"
    assert redact_url("postgresql://[bad/x") == "postgresql://<unreadable URL>"


def test_redact_url_keeps_a_url_without_secrets_as_written() -> None:
    for url in (
        "sqlite:////tmp/abs.db",
        "sqlite:////tmp/abs.db?timeout=5",
        "sqlite:///rel.db",
        "file:///tmp/t",
        "file:////srv/t#x",
        "s3://bucket/prefix?region=us-east-1",
        "postgresql://app@db:5432/agents?schema=x",
    ):
        assert redact_url(url) == url
    assert redact_url("sqlite:////tmp/abs.db?password=pw") == "sqlite:////tmp/abs.db?password=***"


def test_a_guarded_command_writes_no_password_to_its_log_handlers() -> None:
    url = f"postgresql://app:{ENCODED}@db/agents"
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    root = logging.getLogger()
    log = logging.getLogger("durably.test.guard")
    try:
        with SecretScrubber([url]).guarding_logs():
            root.addHandler(handler)  # configured by the command itself, after the guard was set
            log.warning("connecting to %s failed", url)
            try:
                raise ConnectionError(f"server said: bad password {PASSWORD}")
            except ConnectionError:
                log.exception("opening the store")
        log.warning("after the command: %s", "not scrubbed any more")
    finally:
        root.removeHandler(handler)
    text = written.getvalue()
    assert "connecting to postgresql://app:***@db/agents failed" in text and "bad password ***" in text
    assert UNIQUE not in text and "not scrubbed any more" in text
    assert logging.getLogRecordFactory() is logging.LogRecord  # put back as it was


def test_reprs_and_url_errors_never_show_the_password() -> None:
    url = f"postgresql://app:{ENCODED}@db/agents"
    runtime = Runtime(url)
    assert UNIQUE not in repr(runtime) and "app:***@db" in repr(runtime)
    with pytest.raises(RuntimeNotStartedError) as not_started:
        anyio.run(runtime.status, "a1")
    assert UNIQUE not in str(not_started.value)
    s3 = open_store(f"s3://bucket/p?endpoint_url=http%3A%2F%2Fkey%3A{UNIQUE}%40127.0.0.1%3A9000&path_style=1")
    assert UNIQUE not in repr(s3) and "key:***@127.0.0.1" in repr(s3)
    for wrong in (
        f"sqlite://app:{ENCODED}@host/a.db",
        f"file://app:{ENCODED}@host/dir",
        f"memory://app:{ENCODED}@name/x",
        f"postgress://app:{ENCODED}@db/agents",
        f"app:{ENCODED}@db/agents",
        f"s3://app:{ENCODED}@/p",
    ):
        with pytest.raises(InvalidStoreURLError) as caught:
            open_store(wrong)
        assert UNIQUE not in str(caught.value) and UNIQUE not in str(caught.value.url), wrong


def test_no_command_prints_or_logs_the_password(
    store_url: str,
    exporter: InMemorySpanExporter,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    netloc = store_url.split("@")[0]
    langgraph_source = tmp_path / "langgraph.sqlite"  # a LangGraph checkpoint database, no threads yet
    with sqlite3.connect(langgraph_source) as conn:
        SqliteSaver(conn).setup()
    broken = {
        "closed port": store_url.replace(store_url.split("@")[1].split("/")[0], f"127.0.0.1:{_free_port()}")
        + "&connect_timeout=1&deadline=2",
        "missing database": store_url.replace("/durably?", "/no_such_db?") + "&deadline=2",
        "mistyped option": store_url + "&schemma=x",
        "mistyped scheme": store_url.replace("postgresql://", "postgress://", 1),
        "no scheme": store_url.replace("postgresql://", "", 1),
    }
    runs: list[tuple[str, ...]] = [
        ("agents",),
        ("agents", "--json"),
        ("agents", "--namespace", "empty"),
        ("agents", "--namespace", "empty", "--json"),
        ("agents", "--status", "finished"),
        ("show", "a1"),
        ("show", "a1", "--json"),
        ("show", "ghost", "--json"),
        ("history", "a2", "--payload"),
        ("history", "a2", "--json", "--payload"),
        ("state", "a2"),
        ("state", "a2", "--json"),
        ("approve", "a1", "w1", "--by", "ops"),
        ("approve", "a1", "w1", "--by", "ops", "--json"),
        ("extend", "a3", "--steps", "1"),
        ("send", "a3", "hello"),
        ("fork", "a2", "--at", "2", "--as", "f1"),
        ("fork", "a2", "--at", "2", "--as", "f1", "--json"),
        ("retry", "a2"),
        ("cancel", "a3"),
        ("purge", "f1", "--dry-run"),
        ("purge", "f1"),
        ("purge", "f1", "--yes"),
        ("sweep", "--default", "0s", "--dry-run"),
        ("migrate", "--dry-run"),
        ("verify",),
        ("verify", "--json"),
        ("verify", "--rebuild-index"),
        ("verify", "--rebuild-index", "--json"),
        ("reencrypt",),
    ]
    outputs: dict[str, str] = {}
    for argv in runs:
        status = cli_main([*argv, "--store", store_url])
        captured = capsys.readouterr()
        outputs[" ".join(argv)] = f"[{status}] {captured.out}{captured.err}"
    for name, url in broken.items():
        for argv in (("agents",), ("agents", "--json"), ("verify", "--json"), ("show", "a1")):
            status = cli_main([*argv, "--store", url])
            captured = capsys.readouterr()
            assert status != 0, (name, argv, captured.out)
            outputs[f"{name}: {' '.join(argv)}"] = f"[{status}] {captured.out}{captured.err}"
    status = cli_main(["import-langgraph", str(langgraph_source), "--to", store_url])
    captured = capsys.readouterr()
    outputs["import-langgraph"] = f"[{status}] {captured.out}{captured.err}"
    status = cli_main(["import-langgraph", str(langgraph_source), "--to", store_url, "--json"])
    captured = capsys.readouterr()
    outputs["import-langgraph --json"] = f"[{status}] {captured.out}{captured.err}"

    # The outputs are real: each command did its work and named its store, redacted.
    assert "agents in namespace 'default' of postgresql://" in outputs["agents"]
    assert f"{netloc.split(':')[0]}:{netloc.split(':')[1]}:***@" in outputs["agents"]
    assert json.loads(outputs["agents --json"].split("] ", 1)[1])["store"] == redact_url(store_url)
    assert "no agents in namespace 'empty' of postgresql://" in outputs["agents --namespace empty"]
    assert outputs["verify --json"].startswith("[0]") and outputs["approve a1 w1 --by ops"].startswith("[0]")
    assert "threads imported into postgresql://" in outputs["import-langgraph"]
    for name, text in outputs.items():
        assert not _leaks(text), f"{name} printed the password: {text}"
    for record in caplog.records:
        assert not _leaks(record.getMessage()), record.getMessage()
        assert not _leaks(repr(record.exc_info)), record.getMessage()
        if record.exc_info:
            assert not _leaks(logging.Formatter().formatException(record.exc_info))
    spans = exporter.get_finished_spans()
    assert spans, "the commands' spans are watched"
    for span in spans:
        assert not _leaks(_span_text(span)), _span_text(span)


def test_the_console_pages_and_its_start_line_never_show_the_password(store_url: str) -> None:
    from starlette.testclient import TestClient

    from durably._console import create_app

    with TestClient(create_app(store_url, allowed_hosts=["console"]), base_url="http://console") as client:
        pages = {
            path: client.get(path)
            for path in (
                "/",
                "/?status=finished",
                "/agent?id=a1",
                "/agent?id=a2",
                "/state?agent=a2&seq=2",
                "/agent?id=ghost",
            )
        }
    assert pages["/"].status_code == 200 and "postgresql://" in pages["/"].text
    assert pages["/agent?id=ghost"].status_code == 404
    for path, response in pages.items():
        assert not _leaks(response.text) and not _leaks(repr(response.headers)), path
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "durably._cli", "ui", "--store", store_url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
    finally:
        server.terminate()
        rest, errors = server.communicate(timeout=60)
    assert f"durably console on http://127.0.0.1:{port}/" in first and "postgresql://" in first, first + errors
    assert not _leaks(first + rest + errors)


def test_torture_never_prints_the_password(store_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "durably._cli", "torture", "--store", store_url, "--kills", "1", "--agents", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torture of postgresql://" in proc.stdout and ":***@" in proc.stdout
    assert not _leaks(proc.stdout + proc.stderr)
