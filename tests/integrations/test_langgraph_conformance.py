"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance) on DurablySaver.

Every capability, base and extended (put, put_writes, get_tuple, list,
delete_thread, delete_for_runs, copy_thread, prune), on the SQLite, memory and
S3 stores (the S3 one is the local S3-compatible server of tests/support/s3_server.py).
Nothing is skipped; the suite's report is written to the terminal even under
pytest's output capture, so the CI log shows it.
"""

from __future__ import annotations

import io
import uuid
from contextlib import redirect_stdout

import pytest

from durably.integrations.langgraph import DurablySaver

conformance = pytest.importorskip("langgraph.checkpoint.conformance")
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402


async def _validate(name: str, url_for_suite, request) -> None:
    @conformance.checkpointer_test(name=name)
    async def factory():
        # One fresh store location per capability suite, as the suite asks.
        saver = DurablySaver.from_url(url_for_suite())
        try:
            yield saver
        finally:
            await saver.aclose()

    report = await conformance.validate(factory)
    text = io.StringIO()
    with redirect_stdout(text):
        report.print_report()
    plugins = request.config.pluginmanager
    terminal, capture = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if terminal is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past pytest's capture: the CI log shows the report
            terminal.write_line("")
            for line in text.getvalue().splitlines():
                terminal.write_line(line)
    failures = {cap: result.failures for cap, result in report.results.items() if result.passed is not True}
    assert not failures, failures
    assert {c.value for c in ALL_CAPABILITIES} == {cap for cap, r in report.results.items() if r.detected}
    assert report.conformance_level() == "FULL"


async def test_conformance_sqlite(tmp_path, request) -> None:
    await _validate("DurablySaver(sqlite://)", lambda: f"sqlite:///{tmp_path / uuid.uuid4().hex}.db", request)


async def test_conformance_memory(request) -> None:
    await _validate("DurablySaver(memory://)", lambda: f"memory://lg-conformance-{uuid.uuid4().hex}", request)


async def test_conformance_s3(s3_server, request) -> None:
    await _validate("DurablySaver(s3://)", lambda: s3_server.url(f"lg-{uuid.uuid4().hex}"), request)
