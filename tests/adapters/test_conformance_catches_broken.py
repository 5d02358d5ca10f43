"""The kit can fail: deliberately broken adapters, each caught by the checks that name its bug.

Each broken adapter is a ``MemoryStore`` with one bug. It is registered under its
own URL scheme, a generated test module subclasses ``StoreConformance`` for it,
and pytest runs that module in-process (pytester); we then assert which checks
failed. A healthy ``MemoryStore`` run the same way is the control: it passes all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import broken_adapters
import pytest

import durably.storage._registry as registry
from durably.adapters.memory import MemoryStore
from durably.storage._spi import AppendRequest, StoredRecord, StreamId

pytest_plugins = ["pytester"]


class LosesLastBatchOnReopen(MemoryStore):
    """Acknowledges appends, but the last batch before a close is gone after reopen (a missing fsync)."""

    _unsynced: dict[int, tuple[StreamId, int, int]] = {}

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        results = await super().append_batch(requests)
        for request, result in zip(requests, results, strict=False):
            if isinstance(result, int):
                self._unsynced[id(self._streams)] = (request.stream, request.expected_seq, result)
        return results

    async def _open(self) -> None:
        lost = self._unsynced.pop(id(self._streams), None)
        if lost is not None:
            stream, before, last = lost
            found = self._streams[stream]
            for seq in range(before + 1, last + 1):
                found.records.pop(seq, None)
            found.last_seq = before


class AcceptsStaleExpectedSeq(MemoryStore):
    """Treats any expected seq below the stream's last seq as if it were current (no conflict)."""

    async def append_batch(self, requests: Sequence[AppendRequest]) -> list[int | Exception]:
        results: list[int | Exception] = []
        for request in requests:
            current = await self.last_seq(request.stream)
            if request.expected_seq < current:
                request = AppendRequest(request.stream, current, request.records)
            results += await super().append_batch([request])
        return results


class ReadsOutOfOrder(MemoryStore):
    """Yields each page of records in reverse order."""

    async def read(self, stream: StreamId, after_seq: int = 0, *, page_size: int = 512) -> AsyncIterator[StoredRecord]:
        records = [record async for record in super().read(stream, after_seq, page_size=page_size)]
        for record in reversed(records):
            yield record


class CompactsPastTheSnapshot(MemoryStore):
    """Checks for a covering snapshot, then deletes one record too many."""

    async def delete_records(self, stream: StreamId, through_seq: int) -> None:
        await super().delete_records(stream, through_seq)
        self._streams[stream].records.pop(through_seq + 1, None)


KIT_MODULE = """
import hashlib
from durably.storage import open_store
from durably.storage.conformance import StoreConformance

class TestKit(StoreConformance):
    cannot_fail = "it keeps everything in this process's memory"

    def make_store(self, tmp_path):
        return open_store("{scheme}://" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16])
"""


#: How the generated module runs: without pytest-asyncio, or with it in either mode.
ASYNCIO_PLUGIN = {
    "none": ["-p", "no:asyncio"],
    "strict": ["-o", "asyncio_mode=strict", "-o", "asyncio_default_fixture_loop_scope=function"],
    "auto": ["-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"],
}


def run_kit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, store_class: type, asyncio_plugin: str = "none"
) -> tuple[set[str], int]:
    """Run the whole kit against ``store_class``; return (names of failed checks, passed count)."""
    scheme = f"kit-{store_class.__name__.lower()}"
    # register_store has no undo; restore the process-wide table after this test.
    monkeypatch.setitem(registry._registered, scheme, store_class)
    pytester.makepyfile(**{f"test_{scheme.replace('-', '_')}": KIT_MODULE.format(scheme=scheme)})
    result = pytester.inline_run("-p", "no:cacheprovider", "-p", "anyio", *ASYNCIO_PLUGIN[asyncio_plugin])
    passed, _skipped, failed = result.listoutcomes()
    return {report.nodeid.rsplit("::", 1)[-1] for report in failed}, len(passed)


@pytest.mark.parametrize("asyncio_plugin", sorted(ASYNCIO_PLUGIN))
def test_healthy_memory_store_passes_the_whole_kit(pytester, monkeypatch, asyncio_plugin) -> None:
    """The control, also showing the kit runs alike with and without pytest-asyncio (either mode)."""
    failed, passed = run_kit(pytester, monkeypatch, MemoryStore, asyncio_plugin)
    assert failed == set()
    assert passed > 30


@pytest.mark.parametrize(
    ("store_class", "must_fail"),
    [
        (LosesLastBatchOnReopen, {"test_reopen_keeps_everything_acknowledged"}),
        (
            AcceptsStaleExpectedSeq,
            {
                "test_stale_expected_seq_conflicts_and_writes_nothing",
                "test_racing_appends_exactly_one_wins_each_seq",
                "test_append_batch_repeated_stream_sees_earlier_request",
            },
        ),
        (ReadsOutOfOrder, {"test_read_after_seq", "test_read_pages_smaller_than_the_stream"}),
        (CompactsPastTheSnapshot, {"test_compaction_deletes_through_seq_only"}),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
def test_the_kit_catches_a_broken_adapter(pytester, monkeypatch, store_class, must_fail) -> None:
    failed, _passed = run_kit(pytester, monkeypatch, store_class)
    assert must_fail <= failed, f"{store_class.__name__}: the kit should have failed {must_fail - failed}"


# -- errors reach callers typed, checked with no hook: the kit makes the faults itself --------------

BARE_KIT = """
import hashlib
from durably.storage.conformance import StoreConformance
import broken_adapters

class TestKit(StoreConformance):
    cannot_fail = {cannot_fail!r}

    def store_url(self, tmp_path):
        return {url}

    def make_store(self, tmp_path):
        return broken_adapters.{name}(self.store_url(tmp_path))
"""
FAULT_CHECKS = "can_make_the_store_fail or outage or cut_connections or full_disk or killed_server"


def run_bare_kit(pytester: pytest.Pytester, store_class: type, url: str, cannot_fail: str | None = None) -> dict:
    """Run the kit's fault checks against ``store_class`` with no hook; return each check's (outcome, message)."""
    pytester.makepyfile(test_bare_kit=BARE_KIT.format(url=url, name=store_class.__name__, cannot_fail=cannot_fail))
    result = pytester.inline_run("-p", "no:cacheprovider", "-p", "anyio", "-p", "no:asyncio", "-k", FAULT_CHECKS)
    return {
        report.nodeid.rsplit("::", 1)[-1]: (report.outcome, report.longreprtext)
        for report in result.getreports("pytest_runtest_logreport")
        if report.when == "call" or report.outcome != "passed"
    }


def test_the_kit_fills_the_disk_under_a_store_that_leaks_its_driver_errors(pytester) -> None:
    """No outage hook: the kit makes writes fail by itself, and the raw ``OSError`` is caught."""
    leaking = run_bare_kit(pytester, broken_adapters.LeaksDriverErrors, FILE_URL)
    outcome, message = leaking["test_full_disk_raises_typed_errors"]
    assert outcome == "failed", leaking
    assert "on a full disk: an unreachable backend raises StoreUnavailableError" in message, message[-1500:]
    assert "OSError" in message, message[-1500:]
    healthy = run_bare_kit(pytester, broken_adapters.FileSystemStore, FILE_URL)
    assert healthy["test_full_disk_raises_typed_errors"][0] == "passed", healthy
    assert healthy["test_the_kit_can_make_the_store_fail"][0] == "passed", healthy


def test_a_store_the_kit_cannot_make_fail_fails_unless_it_declares_why(pytester) -> None:
    """A store with no socket, no file and no hook passed before, whatever its errors: now it must say why."""
    silent = run_bare_kit(pytester, broken_adapters.RaisesRawErrors, MEMORY_URL)
    outcome, message = silent["test_the_kit_can_make_the_store_fail"]
    assert outcome == "failed", silent
    assert "the kit found no way to make RaisesRawErrors fail" in message and "cannot_fail" in message, message[-1500:]
    reason = "it keeps everything in this process's memory"
    declared = run_bare_kit(pytester, broken_adapters.RaisesRawErrors, MEMORY_URL, cannot_fail=reason)
    assert {outcome for outcome, _ in declared.values()} == {"skipped"}, declared
    outcome, message = declared["test_the_kit_can_make_the_store_fail"]
    assert f"TestKit.cannot_fail: {reason}" in message, message


# -- one broken promise per adapter, each caught by the check that names it ------------------------

HOOKED_KIT = """
import hashlib
from contextlib import asynccontextmanager
from durably.storage.conformance import StoreConformance
import broken_adapters

class TestKit(StoreConformance):
    def store_url(self, tmp_path):
        return {url}

    def make_store(self, tmp_path):
        return broken_adapters.{name}(self.store_url(tmp_path))

    async def stored_bytes(self, tmp_path):
        if not issubclass(broken_adapters.{name}, broken_adapters.KeepsPurgedBytes):
            return None
        return bytes(broken_adapters.journal_files.get(self.store_url(tmp_path), b""))

    @asynccontextmanager
    async def outage(self, tmp_path):
        broken_adapters.down.add(self.store_url(tmp_path))
        try:
            yield
        finally:
            broken_adapters.down.discard(self.store_url(tmp_path))
"""
MEMORY_URL = '"memory://" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]'
FILE_URL = '(tmp_path / "store").as_uri()'


def run_hooked_kit(pytester: pytest.Pytester, store_class: type, url: str, checks: str) -> dict[str, str]:
    """Run the kit's checks matching ``checks`` (a -k expression) against ``store_class``.

    Out: each check's outcome ("passed", "failed", "skipped") and, for a failure,
    its message: the promise it names.
    """
    pytester.makepyfile(test_hooked_kit=HOOKED_KIT.format(url=url, name=store_class.__name__))
    result = pytester.inline_run("-p", "no:cacheprovider", "-p", "anyio", "-p", "no:asyncio", "-k", checks)
    outcomes: dict[str, str] = {}
    for report in result.getreports("pytest_runtest_logreport"):
        name = report.nodeid.rsplit("::", 1)[-1]
        if report.when == "call" or report.outcome != "passed":
            outcomes[name] = report.outcome if report.passed or report.skipped else f"failed: {report.longreprtext}"
    return outcomes


BROKEN_PROMISES = [
    # (adapter, its URL, the checks to run, the check that must fail, words its message must hold)
    (
        broken_adapters.ClaimsMultiProcess,
        MEMORY_URL,
        "second_process",
        "test_a_second_process_sees_one_store",
        "a second OS process reads what the first acknowledged",
    ),
    (
        broken_adapters.WritesBehind,
        FILE_URL,
        "sigkill",
        "test_acknowledged_records_survive_sigkill",
        "nothing is acknowledged from a cache",
    ),
    (
        broken_adapters.KeepsPurgedBytes,
        MEMORY_URL,
        "purge_leaves",
        "test_purge_leaves_no_readable_bytes",
        "a purge leaves nothing readable behind",
    ),
    (
        broken_adapters.RestartsTokensAfterPurge,
        MEMORY_URL,
        "never_decrease",
        "test_lease_tokens_never_decrease_across_purge",
        "fencing tokens never decrease for a stream id, purge included",
    ),
    (
        broken_adapters.IgnoresTheFence,
        MEMORY_URL,
        "fenced_even or purge_and_restart or fails_alone",
        "test_stale_token_is_fenced_even_when_the_seq_matches",
        "an append with a stale fencing token was accepted; it must raise FencedError",
    ),
    (
        broken_adapters.LoadsWholeStream,
        MEMORY_URL,
        "paged_read_memory",
        "test_paged_read_memory_is_bounded",
        "read pages through the stream with bounded memory",
    ),
    (
        broken_adapters.RaisesRawErrors,
        MEMORY_URL,
        "outage",
        "test_outage_raises_typed_errors_and_loses_nothing",
        "an unreachable backend raises StoreUnavailableError, never its own exceptions",
    ),
    (
        broken_adapters.ScansTheStream,
        MEMORY_URL,
        "long_streams",
        "test_long_streams_are_as_fast_at_the_tail",
        "lookups and tail reads must not scan the stream",
    ),
]


@pytest.mark.parametrize(
    ("store_class", "url", "checks", "must_fail", "promise"),
    BROKEN_PROMISES,
    ids=[case[0].__name__ for case in BROKEN_PROMISES],
)
def test_the_kit_names_each_broken_promise(pytester, store_class, url, checks, must_fail, promise) -> None:
    outcomes = run_hooked_kit(pytester, store_class, url, checks)
    assert outcomes.get(must_fail, "").startswith("failed"), (
        f"{store_class.__name__}: {must_fail} did not fail: {outcomes}"
    )
    assert promise in outcomes[must_fail], f"the failure names the promise {promise!r}: {outcomes[must_fail][-1500:]}"


def test_the_new_checks_pass_on_stores_that_keep_their_promises(pytester) -> None:
    """The controls: a healthy store passes each new check that can run on it, none skipped silently."""
    healthy = run_hooked_kit(
        pytester,
        broken_adapters.GoesDown,
        MEMORY_URL,
        "outage or never_decrease or paged or long_streams or (fence and not processes)",
    )
    assert {name: outcome for name, outcome in healthy.items() if outcome != "passed"} == {}
    assert {
        "test_outage_raises_typed_errors_and_loses_nothing",
        "test_lease_tokens_never_decrease_across_purge",
        "test_stale_token_is_fenced_even_when_the_seq_matches",
        "test_purge_and_restart_fence_the_old_incarnation",
        "test_a_fenced_request_fails_alone_in_a_group_commit",
        "test_malformed_fences_are_refused_before_any_io",
        "test_paged_read_memory_is_bounded",
        "test_long_streams_are_as_fast_at_the_tail",
    } <= set(healthy)
    single = run_hooked_kit(pytester, MemoryStore, MEMORY_URL, "process or sigkill")
    assert set(single.values()) == {"skipped"}, f"a store declaring single-process skips the process checks: {single}"


def test_advisory_leases_fail_every_fencing_check_and_stores_without_leases_skip_them(pytester) -> None:
    """A store whose leases are only advisory fails each check that relies on the store refusing a
    stale token; a store without leases is single-worker: every fencing check is a declared skip."""
    advisory = run_hooked_kit(pytester, broken_adapters.IgnoresTheFence, MEMORY_URL, "fence")
    must_fail = {
        "test_stale_token_is_fenced_even_when_the_seq_matches",
        "test_a_fenced_request_fails_alone_in_a_group_commit",
        "test_purge_and_restart_fence_the_old_incarnation",
    }
    assert {name for name, outcome in advisory.items() if outcome.startswith("failed")} == must_fail, advisory
    assert advisory["test_fenced_append_with_the_current_token_is_accepted"] == "passed"
    assert advisory["test_malformed_fences_are_refused_before_any_io"] == "passed"
    single_worker = run_hooked_kit(pytester, broken_adapters.FileSystemStore, FILE_URL, "fence")
    assert single_worker and set(single_worker.values()) == {"skipped"}, single_worker
