"""Tool retry policies, timeouts and heartbeats, tried by breaking them.

A failed attempt is journaled (``tool_failed``) before its pause, every attempt
has the call's one idempotency key, and the attempts made count across a
SIGKILL: a worker killed while it waits to retry is resumed by the next one,
which runs only the attempts the policy has left. A timeout or a silent tool is
cancelled and counts as a failed attempt. Heartbeats are journaled at most once
per ``heartbeat_every``, the newest details when an attempt fails, and read back
(``ctx.last_heartbeat``) by the next attempt, in this process or after a SIGKILL.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from privacy_support import ScriptModel
from support_agents import read_lines

from durably import (
    AgentDefinition,
    ArgumentTypeError,
    InvalidArgumentError,
    ModelResponse,
    Runtime,
    Tool,
    ToolCall,
    ToolContext,
    ToolRetry,
    ToolTimeoutError,
    Usage,
    open_store,
    tool,
)
from durably._console.timeline import ContentPolicy, timeline
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._reading.history import summarize
from durably.schemas._records import Kind, Record
from durably.storage._spi import StreamId

WORKER = Path(__file__).resolve().parents[1] / "support" / "tool_retry_worker.py"
FAST = {"backoff": 0.01, "jitter": 0.0}


def one_call(tool_: Tool, **definition: Any) -> AgentDefinition:
    """An agent whose model calls ``tool_`` once (no arguments), then answers "done"."""
    model = ScriptModel([ModelResponse("", (ToolCall("c1", tool_.name, {}),), Usage(1, 1, 0.0))])
    return AgentDefinition(name="one-call", model=model, tools=[tool_], **definition)


async def run_records(definition: AgentDefinition) -> tuple[Any, list[tuple[str, dict[str, Any]]]]:
    """Run agent ``a1`` to its end: its state and its records as ``(kind, data)``."""
    async with Runtime("memory://", agents=[definition]) as rt:
        state = await rt.run(definition, "a1", "go")
        records = [(e.kind, e.payload) async for e in rt.history("a1", payload=True)]
    return state, records


def of(records: list[tuple[str, dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [d for k, d in records if k == kind]


def tool_content(state: Any) -> Any:
    return next(m["content"] for m in state.messages if m["role"] == "tool")


async def test_a_failing_tool_is_retried_with_backoff_and_each_failure_is_journaled_before_the_pause() -> None:
    seen: list[tuple[int, str]] = []

    @tool(retry=ToolRetry(attempts=3, **FAST))
    async def fetch(*, ctx: ToolContext) -> str:
        seen.append((ctx.attempt, ctx.idempotency_key))
        if ctx.attempt < 3:
            raise ConnectionError(f"upstream reset #{ctx.attempt}")
        return "page"

    state, records = await run_records(one_call(fetch))
    assert state.status == "finished" and tool_content(state) == "page"
    assert [a for a, _ in seen] == [1, 2, 3]
    assert len({k for _, k in seen}) == 1  # one idempotency key for every attempt
    call = [k for k, _ in records if k in (Kind.TOOL_INTENT, Kind.TOOL_FAILED, Kind.TOOL_RESULT)]
    assert call == ["tool_intent", "tool_failed", "tool_intent", "tool_failed", "tool_intent", "tool_result"]
    failed = of(records, Kind.TOOL_FAILED)
    assert [f["attempt"] for f in failed] == [1, 2]
    assert [f["error_type"] for f in failed] == ["ConnectionError"] * 2
    assert failed[0]["error"] == "ConnectionError: upstream reset #1" and failed[0]["timed_out"] is False
    assert [f["retry_in"] for f in failed] == [0.01, 0.02]  # doubling, no jitter
    assert all(f["retry_at"] > 1e9 for f in failed)
    assert {d["key"] for d in of(records, Kind.TOOL_INTENT)} == {seen[0][1]}
    assert [d["attempt"] for d in of(records, Kind.TOOL_INTENT)] == [1, 2, 3]
    line = summarize(Record(5, Kind.TOOL_FAILED, failed[0], 0.0))  # durably history: one line per attempt
    assert line == "fetch call c1 attempt 1 failed: ConnectionError: upstream reset #1; retry in 0.01s"


async def test_the_console_timeline_lists_each_attempt() -> None:
    @tool(retry=ToolRetry(attempts=2, **FAST), heartbeat_every=0.0)
    async def fetch(*, ctx: ToolContext) -> str:
        await ctx.heartbeat({"page": ctx.attempt})
        if ctx.attempt == 1:
            raise ConnectionError("reset")
        return "page"

    definition = one_call(fetch)
    async with Runtime("memory://", agents=[definition]) as rt:
        await rt.run(definition, "a1", "go")
        rows = await timeline(rt.history("a1", payload=True), ContentPolicy(show=True), "one-call")
    titles = [r.title for r in rows if r.kind in (Kind.TOOL_FAILED, Kind.TOOL_HEARTBEAT)]
    assert titles == [
        "fetch c1 heartbeat (attempt 1)",
        "fetch c1 attempt 1 failed (ConnectionError), retry in 0.01s",
        "fetch c1 heartbeat (attempt 2)",
    ]
    failed = next(r for r in rows if r.kind == Kind.TOOL_FAILED)
    assert failed.detail == "ConnectionError: reset"


async def test_the_last_failure_goes_to_the_model_and_no_attempt_is_made_beyond_the_policy() -> None:
    attempts: list[int] = []

    @tool(retry=ToolRetry(attempts=2, **FAST))
    async def fetch(*, ctx: ToolContext) -> str:
        attempts.append(ctx.attempt)
        raise ConnectionError("still down")

    state, records = await run_records(one_call(fetch))
    assert attempts == [1, 2]
    assert tool_content(state) == "ConnectionError: still down"
    assert [f["attempt"] for f in of(records, Kind.TOOL_FAILED)] == [1]  # the last one is the tool_result


async def test_an_exception_outside_retry_on_is_not_retried() -> None:
    attempts: list[int] = []

    @tool(retry=ToolRetry(attempts=5, retry_on=(ConnectionError,), **FAST))
    async def charge(*, ctx: ToolContext) -> str:
        attempts.append(ctx.attempt)
        raise ValueError("card declined")

    state, records = await run_records(one_call(charge))
    assert attempts == [1]
    assert tool_content(state) == "ValueError: card declined"
    assert of(records, Kind.TOOL_FAILED) == []


async def test_the_definition_default_applies_unless_a_tool_sets_its_own() -> None:
    counts = {"inherits": 0, "opts_out": 0}

    @tool
    async def inherits() -> str:
        counts["inherits"] += 1
        raise ConnectionError("down")

    @tool(retry=ToolRetry.none())
    async def opts_out() -> str:
        counts["opts_out"] += 1
        raise ConnectionError("down")

    calls = (ToolCall("c1", "inherits", {}), ToolCall("c2", "opts_out", {}))
    model = ScriptModel([ModelResponse("", calls, Usage(1, 1, 0.0))])
    definition = AgentDefinition(
        name="defaults", model=model, tools=[inherits, opts_out], tool_retry=ToolRetry(attempts=4, **FAST)
    )
    state, _ = await run_records(definition)
    assert state.status == "finished"
    assert counts == {"inherits": 4, "opts_out": 1}


async def test_a_timed_out_attempt_is_cancelled_journaled_and_retried() -> None:
    finished: list[int] = []

    @tool(retry=ToolRetry(attempts=2, **FAST), timeout=0.2)
    async def slow(*, ctx: ToolContext) -> str:
        if ctx.attempt == 1:
            await anyio.sleep(3600)  # hangs: the timeout must cancel it
            finished.append(1)
        return "answered"

    state, records = await run_records(one_call(slow))
    assert tool_content(state) == "answered" and finished == []
    (failed,) = of(records, Kind.TOOL_FAILED)
    assert failed["timed_out"] is True and failed["error_type"] == "ToolTimeoutError"
    assert "timed out after 0.2s" in failed["error"]


async def test_a_timeout_without_retry_reaches_the_model_and_retry_timeouts_false_stops_retries() -> None:
    attempts: list[int] = []

    @tool(retry=ToolRetry(attempts=3, retry_timeouts=False, retry_on=(ConnectionError,), **FAST), timeout=0.1)
    async def hangs(*, ctx: ToolContext) -> str:
        attempts.append(ctx.attempt)
        await anyio.sleep(3600)
        return "never"

    state, records = await run_records(one_call(hangs))
    assert attempts == [1]
    assert tool_content(state).startswith("ToolTimeoutError: tool 'hangs' attempt 1 timed out after 0.1s")
    assert of(records, Kind.TOOL_FAILED) == []


async def test_a_silent_tool_is_cancelled_and_the_retry_reads_its_last_heartbeat() -> None:
    seen: list[Any] = []

    @tool(retry=ToolRetry(attempts=2, **FAST), heartbeat_timeout=0.3, heartbeat_every=0.0)
    async def crawl(*, ctx: ToolContext) -> dict:
        seen.append(ctx.last_heartbeat)
        if ctx.attempt == 1:
            await ctx.heartbeat({"page": 7})
            await anyio.sleep(3600)  # goes silent: the heartbeat timeout must cancel it
        return {"from": ctx.last_heartbeat}

    state, records = await run_records(one_call(crawl))
    assert seen == [None, {"page": 7}]
    assert tool_content(state) == {"from": {"page": 7}}
    (failed,) = of(records, Kind.TOOL_FAILED)
    assert failed["timed_out"] is True and "sent no heartbeat for 0.3s" in failed["error"]


async def test_heartbeats_are_rate_limited_and_the_newest_is_journaled_when_the_attempt_fails() -> None:
    @tool(retry=ToolRetry(attempts=2, **FAST), heartbeat_every=3600.0)
    async def count(*, ctx: ToolContext) -> Any:
        if ctx.attempt == 1:
            for i in range(1, 51):
                await ctx.heartbeat({"i": i})
            raise ConnectionError("reset")
        for i in range(51, 61):
            await ctx.heartbeat({"i": i})  # within the hour of the last record: kept, not journaled
        return ctx.last_heartbeat

    state, records = await run_records(one_call(count))
    beats = of(records, Kind.TOOL_HEARTBEAT)
    assert [(b["attempt"], b["details"]) for b in beats] == [(1, {"i": 1}), (1, {"i": 50})]
    assert tool_content(state) == {"i": 50}  # what the earlier attempt reached, not this one
    kinds = [k for k, _ in records]
    assert kinds.index(Kind.TOOL_HEARTBEAT, kinds.index(Kind.TOOL_HEARTBEAT) + 1) < kinds.index(Kind.TOOL_FAILED)


async def test_calls_of_one_turn_retry_side_by_side_each_under_its_own_key() -> None:
    attempts: dict[str, list[int]] = {"a": [], "b": []}

    @tool(retry=ToolRetry(attempts=3, **FAST), heartbeat_every=0.0)
    async def fetch(name: str, *, ctx: ToolContext) -> str:
        attempts[name].append(ctx.attempt)
        await ctx.heartbeat({"name": name, "attempt": ctx.attempt})
        if ctx.attempt < (3 if name == "a" else 2):
            raise ConnectionError(name)
        return name

    calls = (ToolCall("c1", "fetch", {"name": "a"}), ToolCall("c2", "fetch", {"name": "b"}))
    model = ScriptModel([ModelResponse("", calls, Usage(1, 1, 0.0))])
    state, records = await run_records(AgentDefinition(name="two", model=model, tools=[fetch]))
    assert attempts == {"a": [1, 2, 3], "b": [1, 2]}
    assert [m["content"] for m in state.messages if m["role"] == "tool"] == ["a", "b"]
    by_call = {c: [d["attempt"] for d in of(records, Kind.TOOL_FAILED) if d["call_id"] == c] for c in ("c1", "c2")}
    assert by_call == {"c1": [1, 2], "c2": [1]}
    assert len(of(records, Kind.TOOL_HEARTBEAT)) == 5


async def test_a_cancel_during_a_backoff_stops_the_retry() -> None:
    attempts: list[int] = []

    @tool(retry=ToolRetry(attempts=3, backoff=3600.0, jitter=0.0))
    async def fetch(*, ctx: ToolContext) -> str:
        attempts.append(ctx.attempt)
        raise ConnectionError("down")

    definition = one_call(fetch)
    async with Runtime("memory://", agents=[definition]) as rt:
        handle = await rt.start(definition, "a1", "go")
        with anyio.fail_after(30):
            while not [e async for e in rt.history("a1", kinds=[Kind.TOOL_FAILED])]:
                await anyio.sleep(0.02)
        await rt.cancel("a1", "enough")
        with anyio.fail_after(30):
            state = await handle.wait()
    assert state.status == "cancelled" and attempts == [1]


async def test_a_message_during_a_backoff_is_taken_and_the_retry_goes_on() -> None:
    attempts: list[int] = []

    @tool(retry=ToolRetry(attempts=2, backoff=1.0, jitter=0.0))
    async def fetch(*, ctx: ToolContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return "page"

    definition = one_call(fetch)
    async with Runtime("memory://", agents=[definition]) as rt:
        handle = await rt.start(definition, "a1", "go")
        with anyio.fail_after(30):
            while not [e async for e in rt.history("a1", kinds=[Kind.TOOL_FAILED])]:
                await anyio.sleep(0.02)
        await rt.send("a1", "also check the footer")
        with anyio.fail_after(30):
            state = await handle.wait()
        kinds = [e.kind async for e in rt.history("a1")]
    assert state.status == "finished" and attempts == [1, 2]
    assert kinds.index(Kind.MESSAGE_RECEIVED) < kinds.index(Kind.TOOL_INTENT, kinds.index(Kind.TOOL_FAILED))
    contents = [m["content"] for m in state.messages if m["role"] in ("tool", "user")]
    assert contents[-2:] == ["page", "also check the footer"]  # the message joins after the call's result


async def test_a_sync_tool_heartbeats_from_its_thread() -> None:
    @tool(heartbeat_every=0.0, retry=ToolRetry(attempts=2, **FAST))
    def convert(*, ctx: ToolContext) -> Any:
        if ctx.attempt == 1:
            anyio.from_thread.run(ctx.heartbeat, {"rows": 10})
            raise ConnectionError("reset")
        return ctx.last_heartbeat

    state, records = await run_records(one_call(convert))
    assert tool_content(state) == {"rows": 10}
    assert [d["details"] for d in of(records, Kind.TOOL_HEARTBEAT)] == [{"rows": 10}]


async def test_an_unencodable_heartbeat_is_a_typed_error_for_the_tool_and_writes_nothing() -> None:
    @tool(heartbeat_every=0.0)
    async def odd(*, ctx: ToolContext) -> str:
        try:
            await ctx.heartbeat({"handle": object()})
        except TypeError as exc:
            return type(exc).__name__
        return "written"

    state, records = await run_records(one_call(odd))
    assert tool_content(state) == "UnencodableValueError"
    assert of(records, Kind.TOOL_HEARTBEAT) == []


async def test_heartbeat_outside_a_run_does_nothing() -> None:
    ctx = ToolContext(idempotency_key="k", agent_id="a", call_id="c", attempt=1)
    await ctx.heartbeat({"i": 1})
    assert ctx.last_heartbeat is None


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: ToolRetry(attempts=0), InvalidArgumentError),
        (lambda: ToolRetry(attempts=2.5), InvalidArgumentError),
        (lambda: ToolRetry(attempts=True), InvalidArgumentError),
        (lambda: ToolRetry(backoff=-1), InvalidArgumentError),
        (lambda: ToolRetry(max_delay=float("nan")), InvalidArgumentError),
        (lambda: ToolRetry(jitter=float("inf")), InvalidArgumentError),
        (lambda: ToolRetry(retry_on=("ConnectionError",)), ArgumentTypeError),
        (lambda: ToolRetry(retry_on=(int,)), ArgumentTypeError),
        (lambda: ToolRetry(retry_timeouts="no"), ArgumentTypeError),
        (lambda: tool(timeout=0)(_noop), InvalidArgumentError),
        (lambda: tool(timeout=-2)(_noop), InvalidArgumentError),
        (lambda: tool(timeout="5")(_noop), InvalidArgumentError),
        (lambda: tool(heartbeat_timeout=float("nan"))(_noop), InvalidArgumentError),
        (lambda: tool(heartbeat_every=-1)(_noop), InvalidArgumentError),
        (lambda: tool(retry=3)(_noop), ArgumentTypeError),
        (lambda: AgentDefinition(name="x", model=ScriptModel([]), tool_retry={"attempts": 3}), ArgumentTypeError),
    ],
)
def test_bad_policy_input_gets_typed_errors(make: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        make()


async def _noop() -> None:
    return None


def test_retry_on_takes_one_class_too() -> None:
    assert ToolRetry(retry_on=ConnectionError).retry_on == (ConnectionError,)
    assert ToolRetry().retries(ToolTimeoutError("t", seconds=1.0))
    assert not ToolRetry(retry_timeouts=False, retry_on=(OSError,)).retries(ToolTimeoutError("t", seconds=1.0))


# -- real processes, SIGKILL ---------------------------------------------------------------------


def _worker(tmp_path: Path, mode: str, **extra: str) -> list[str]:
    cmd = [sys.executable, str(WORKER), "--db", str(tmp_path / "a.db"), "--effects", str(tmp_path / "effects.jsonl")]
    return [*cmd, "--mode", mode, *[x for k, v in extra.items() for x in (f"--{k}", v)]]


async def _kinds(db: Path) -> list[tuple[str, dict[str, Any]]]:
    stream, codec = StreamId("default", "a1"), RecordCodec()
    async with open_store(f"sqlite:///{db}") as store:
        return [(r.kind, r.data) for r in [record async for record in JournalReader(store, codec, stream).records()]]


def _cli(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "durably._cli", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _kill_when(proc: subprocess.Popen[str], ready: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert proc.poll() is None, f"the worker ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within a minute"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_sigkill_during_a_backoff_resumes_the_retry_without_exceeding_the_attempts(tmp_path: Path) -> None:
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"

    def in_backoff() -> bool:
        return db.exists() and any(k == Kind.TOOL_FAILED for k, _ in anyio.run(_kinds, db))

    proc = subprocess.Popen(_worker(tmp_path, "backoff", backoff="1.5"), stdout=subprocess.PIPE, text=True)
    _kill_when(proc, in_backoff, "tool_failed record")
    assert [e["attempt"] for e in read_lines(effects)] == [1]  # killed in the pause, before attempt 2
    shown = _cli("show", "a1", "--store", f"sqlite:///{db}")
    assert "attempt 1 failed (ConnectionError: upstream reset on attempt 1), retry at" in shown
    history = _cli("history", "a1", "--store", f"sqlite:///{db}", "--kind", "tool_failed")
    assert "work call c1 attempt 1 failed: ConnectionError: upstream reset on attempt 1; retry in 1.50s" in history

    done = subprocess.run(_worker(tmp_path, "backoff", backoff="1.5"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads(done.stdout.strip().splitlines()[-1])
    lines = read_lines(effects)
    assert [e["attempt"] for e in lines] == [1, 2, 3]  # the policy's 3 attempts in all, across the kill
    assert len({e["key"] for e in lines}) == 1
    assert final["status"] == "finished" and final["approvals"] == []  # a known failure asks nobody
    assert final["tools"] == ["ConnectionError: upstream reset on attempt 3"]
    records = anyio.run(_kinds, db)
    assert [d["attempt"] for k, d in records if k == Kind.TOOL_INTENT] == [1, 2, 3]
    assert [d["attempt"] for k, d in records if k == Kind.TOOL_FAILED] == [1, 2]
    assert [k for k, _ in records].count(Kind.RESUMED) == 1


def test_heartbeats_are_rate_limited_and_read_back_after_a_sigkill(tmp_path: Path) -> None:
    db, effects = tmp_path / "a.db", tmp_path / "effects.jsonl"

    def waiting() -> bool:
        return any(e.get("waiting") for e in read_lines(effects))

    proc = subprocess.Popen(_worker(tmp_path, "heartbeat"), stdout=subprocess.PIPE, text=True)
    _kill_when(proc, waiting, "attempt 2 waiting")
    beats = [(d["attempt"], d["details"]) for k, d in anyio.run(_kinds, db) if k == Kind.TOOL_HEARTBEAT]
    # 40 beats, 2 records: attempt 1's first, and its newest with its failure; attempt 2's
    # 20 beats all came within the hour of the last record.
    assert beats == [(1, {"i": 1}), (1, {"i": 20})]

    done = subprocess.run(_worker(tmp_path, "heartbeat"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert final["status"] == "finished"
    assert final["tools"] == [{"resumed_from": {"i": 20}}]
    attempts = [(e["attempt"], e["last_heartbeat"]) for e in read_lines(effects) if not e.get("waiting")]
    assert attempts == [(1, None), (2, {"i": 20}), (3, {"i": 20})]


@pytest.mark.parametrize(("mode", "runs"), [("hang", [1, 2, 3]), ("hang-bare", [1, 2, 3, 4])])
def test_an_attempt_a_sigkill_cuts_short_counts_toward_the_policys_attempts(
    tmp_path: Path, mode: str, runs: list[int]
) -> None:
    effects = tmp_path / "effects.jsonl"
    for attempt in (1, 2, 3):  # each attempt is killed while it runs: its outcome is unknown

        def running(attempt: int = attempt) -> bool:
            return sum(1 for e in read_lines(effects) if e["waiting"]) == attempt

        _kill_when(subprocess.Popen(_worker(tmp_path, mode), stdout=subprocess.PIPE, text=True), running, "attempt")
    done = subprocess.run(_worker(tmp_path, mode), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert [e["attempt"] for e in read_lines(effects)] == runs
    assert final["status"] == "finished"
    if mode == "hang":  # the policy's 3 attempts were spent: the model is told, nothing runs again
        assert final["tools"] == ["attempt 3 of 3 was cut short by a crash; not run again"]
    else:  # no ToolRetry: an unknown outcome is run again, as on_unknown_outcome says
        assert final["tools"] == ["ran attempt 4"]
