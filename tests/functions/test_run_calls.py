"""Journaled calls inside a function agent's run: replay, keys, approvals, failures, bad input.

Everything runs on a real SQLite file; a "restart" is a new ``Runtime`` on the
same file, so the body replays from the journal as it would after a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import durably
from durably import FunctionAgent, Run, Runtime, ToolContext, current_run, journaled
from durably.errors import (
    ArgumentTypeError,
    CallFailedError,
    InvalidArgumentError,
    NonDeterminismError,
    NotInRunError,
)
from durably.schemas._records import Kind

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'j.db'}"


class Ledger:
    """What the outside world saw: every effect, in order."""

    def __init__(self) -> None:
        self.effects: list[tuple[str, Any]] = []

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.effects if n == name)


async def test_replay_returns_stored_results_without_running_again(tmp_path: Path) -> None:
    ledger = Ledger()

    async def charge(amount: int, ctx: ToolContext) -> str:
        ledger.effects.append(("charge", (amount, ctx.idempotency_key, ctx.attempt)))
        return f"ch-{amount}"

    def note(text: str) -> int:  # a sync function runs in a worker thread
        ledger.effects.append(("note", text))
        return len(text)

    async def body(run: Run, task: str) -> dict[str, Any]:
        assert current_run() is run
        charged = await run.call(charge, int(task), name="charge")
        length = await run.call(note, "hello")
        decision = await run.approval("refund?", data={"charge": charged})
        return {"charge": charged, "length": length, "approved": decision["approved"], "by": decision["by"]}

    definition = FunctionAgent("refunds", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "r-1", "5")
        assert state.status == "waiting_approval"
        assert [a["reason"] for a in state.open_approvals()] == ["refund?"]
    assert ledger.count("charge") == 1 and ledger.count("note") == 1
    key = ledger.effects[0][1][1]

    async with Runtime(url(tmp_path), agents=[definition]) as rt:  # another process decides it
        await rt.approve("r-1", "approval-1", approved=True, by="ann")
        state = await rt.wait("r-1", timeout=30)
    assert state.status == "finished", state.reason
    assert state.result == {"charge": "ch-5", "length": 5, "approved": True, "by": "ann"}
    assert ledger.count("charge") == 1 and ledger.count("note") == 1  # replayed, not run again
    assert state.ledger[key]["result"] == "ch-5"
    assert state.usage["steps"] == 0  # tool calls are no model steps


async def test_call_ids_key_concurrent_calls_whatever_order_they_start_in(tmp_path: Path) -> None:
    ledger = Ledger()
    orders = [["a", "b", "c"], ["c", "b", "a"]]

    async def fetch(item: str) -> str:
        ledger.effects.append(("fetch", item))
        return item.upper()

    async def body(run: Run, task: str) -> list[str]:
        order = orders.pop(0)
        results: dict[str, str] = {}

        async def one(item: str) -> None:
            assert current_run() is run  # tasks the body starts inherit the run
            results[item] = await run.call(fetch, item, name="fetch", call_id=f"fetch-{item}")

        async with anyio.create_task_group() as tg:
            for item in order:
                tg.start_soon(one, item)
        await run.approval("go on?")
        return [results[i] for i in sorted(results)]

    definition = FunctionAgent("fan-out", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "f-1", "")
        assert state.status == "waiting_approval"
        await rt.approve("f-1", "approval-1", approved=True)
        state = await rt.wait("f-1", timeout=30)
    assert state.status == "finished", state.reason
    assert state.result == ["A", "B", "C"]
    assert sorted(i for _, i in ledger.effects) == ["a", "b", "c"]  # replayed in another order: nothing re-ran


async def test_a_stored_failure_is_raised_again_as_call_failed(tmp_path: Path) -> None:
    runs = []

    async def flaky() -> None:
        runs.append(1)
        raise KeyError("no such card")

    seen: list[tuple[str, str]] = []

    async def body(run: Run, task: str) -> str:
        try:
            await run.call(flaky)
        except CallFailedError as exc:
            seen.append((exc.error_type, exc.error_message))
        await run.approval("continue?")
        return "done"

    definition = FunctionAgent("failing", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        await rt.run(definition, "x-1", "")
        await rt.approve("x-1", "approval-1", approved=True)
        state = await rt.wait("x-1", timeout=30)
    assert state.status == "finished", state.reason
    assert runs == [1]
    assert seen == [("KeyError", "'no such card'"), ("KeyError", "'no such card'")]


async def test_an_uncaught_call_failure_fails_the_run(tmp_path: Path) -> None:
    async def boom() -> None:
        raise RuntimeError("card declined")

    async def body(run: Run, task: str) -> None:
        await run.call(boom)

    definition = FunctionAgent("boom", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "b-1", "")
    assert state.status == "failed"
    assert "RuntimeError: card declined" in state.reason


async def test_a_changed_body_fails_with_non_determinism_and_keeps_the_data(tmp_path: Path) -> None:
    names = ["charge", "refund"]
    errors: list[NonDeterminismError] = []

    async def act() -> str:
        return "ok"

    async def body(run: Run, task: str) -> None:
        await run.call(act, name=names.pop(0))
        await run.approval("ok?")

    async def replayed(run: Run, task: str) -> None:
        try:
            await run.call(act, name=names.pop(0))
        except NonDeterminismError as exc:
            errors.append(exc)
            raise

    definition = FunctionAgent("nd", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        await rt.run(definition, "n-1", "")
        before = (await rt.status("n-1")).ledger
    changed = FunctionAgent("nd", replayed, on_definition_change="continue")
    async with Runtime(url(tmp_path), agents=[changed]) as rt:
        await rt.approve("n-1", "approval-1", approved=True)
        state = await rt.wait("n-1", timeout=30)
    assert state.status == "failed"
    assert "'charge'" in state.reason and "'refund'" in state.reason
    assert errors and errors[0].expected == "charge" and errors[0].got == "refund"
    assert state.ledger == before


async def test_what_the_non_determinism_error_says_to_do_works(tmp_path: Path) -> None:
    async def act() -> str:
        return "ok"

    def body_calling(name: str) -> Any:
        async def body(run: Run, task: str) -> str:
            await run.call(act, name=name)
            await run.approval("ok?")
            return name

        return body

    old = FunctionAgent("nd", body_calling("charge"))
    async with Runtime(url(tmp_path), agents=[old]) as rt:
        await rt.run(old, "n-1", "")
    changed = FunctionAgent("nd", body_calling("refund"), on_definition_change="continue")
    async with Runtime(url(tmp_path), agents=[changed]) as rt:
        await rt.approve("n-1", "approval-1", approved=True)
        failed = await rt.wait("n-1", timeout=30)
        assert failed.status == "failed"
        assert "durably retry" in failed.reason and "durably fork" in failed.reason
        # the fork, cut before the first call, runs the changed body from there
        await rt.fork("n-1", 1, "n-2")
        await rt.resume("n-2")
        await rt.wait("n-2", "waiting_approval", timeout=30)
        await rt.approve("n-2", "approval-1", approved=True)
        assert (await rt.wait("n-2", timeout=30)).result == "refund"
    restored = FunctionAgent("nd", body_calling("charge"), on_definition_change="continue")
    async with Runtime(url(tmp_path), agents=[restored]) as rt:
        await rt.retry("n-1")
        assert (await rt.wait("n-1", timeout=30)).result == "charge"


async def test_journaled_goes_through_the_run_and_runs_plainly_outside(tmp_path: Path) -> None:
    ledger = Ledger()

    @journaled(on_unknown_outcome="retry")
    async def send(to: str) -> str:
        ledger.effects.append(("send", to))
        return f"sent:{to}"

    assert await send("outside") == "sent:outside"  # no run: it simply runs
    with pytest.raises(NotInRunError):
        current_run()

    async def body(run: Run, task: str) -> str:
        first = await send("a")
        await run.approval("again?")
        return first

    definition = FunctionAgent("mail", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        await rt.run(definition, "m-1", "")
        await rt.approve("m-1", "approval-1", approved=True)
        state = await rt.wait("m-1", timeout=30)
    assert state.result == "sent:a"
    assert ledger.count("send") == 2  # once outside, once in the run (replay did not send again)
    assert [e["tool"] for e in state.ledger.values()] == [send.__wrapped__.__qualname__]


async def test_bad_input_is_refused_with_typed_errors(tmp_path: Path) -> None:
    problems: list[type[Exception]] = []

    async def ok() -> int:
        return 1

    async def body(run: Run, task: str) -> None:
        for attempt in (
            lambda: run.call(42),  # not callable
            lambda: run.call(ok, on_unknown_outcome="maybe"),
            lambda: run.call(ok, on_unknown_outcome="reconcile"),  # no hook
            lambda: run.call(ok, call_id=""),
            lambda: run.approval(7),  # type: ignore[arg-type]
        ):
            try:
                await attempt()
            except (ArgumentTypeError, InvalidArgumentError) as exc:
                problems.append(type(exc))
        await run.call(ok, call_id="same")
        try:
            await run.call(ok, call_id="same")
        except InvalidArgumentError:
            problems.append(InvalidArgumentError)
        return object()  # the run's result cannot be stored

    with pytest.raises(ArgumentTypeError):
        FunctionAgent("sync-body", lambda run, task: None)  # type: ignore[arg-type,return-value]
    definition = FunctionAgent("bad", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "bad-1", "")
    assert problems == [
        ArgumentTypeError,
        InvalidArgumentError,
        InvalidArgumentError,
        InvalidArgumentError,
        ArgumentTypeError,
        InvalidArgumentError,
    ]
    assert state.status == "failed" and "result cannot be stored" in state.reason
    assert "pass dump_result=/load_result= to FunctionAgent" in state.reason


async def test_an_unencodable_call_result_fails_the_agent_and_the_call_never_reruns(tmp_path: Path) -> None:
    runs: list[int] = []

    class Receipt:
        pass

    async def make() -> dict[str, Any]:
        runs.append(1)
        return {"receipt": Receipt()}

    async def body(run: Run, task: str) -> Any:
        return await run.call(make, name="make")

    definition = FunctionAgent("unencodable", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "u-1", "")
        assert state.status == "failed"
        assert "receipt" in state.reason  # the field path
        await rt.retry("u-1")
        state = await rt.wait("u-1", timeout=30)
    assert runs == [1]
    assert state.status == "failed"


async def test_dump_and_load_carry_values_cbor_cannot_hold(tmp_path: Path) -> None:
    from pydantic import BaseModel

    class Charge(BaseModel):
        id: str
        amount: int

    got: list[Any] = []

    async def charge() -> Charge:
        return Charge(id="c1", amount=5)

    async def body(run: Run, task: str) -> int:
        value = await run.call(charge, dump=lambda c: c.model_dump(), load=Charge.model_validate)
        got.append(value)
        await run.approval("ok?")
        return value.amount

    definition = FunctionAgent("models", body, dump_result=lambda n: {"n": n}, load_result=lambda d: d["n"])
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        await rt.run(definition, "d-1", "")
        await rt.approve("d-1", "approval-1", approved=True)
        state = await rt.wait("d-1", timeout=30)
    assert state.result == {"n": 5} and definition.result_of(state) == 5
    assert got == [Charge(id="c1", amount=5), Charge(id="c1", amount=5)]

    async def raw(run: Run, task: str) -> Any:
        return await run.call(charge)

    unloaded = FunctionAgent("raw-model", raw)
    async with Runtime(url(tmp_path), agents=[unloaded]) as rt:
        state = await rt.run(unloaded, "d-2", "")
    assert state.status == "failed"
    assert "cannot be stored" in state.reason and "Charge" in state.reason


async def test_the_public_names_are_exported() -> None:
    for name in ("FunctionAgent", "Run", "current_run", "journaled", "CallFailedError", "NonDeterminismError"):
        assert hasattr(durably, name)
    assert Kind.TOOL_INTENT  # calls reuse the tool records


async def test_a_failing_dump_fails_the_agent_and_the_call_never_reruns(tmp_path: Path) -> None:
    runs: list[int] = []

    async def make() -> str:
        runs.append(1)
        return "made"

    def dump(value: str) -> str:
        raise ValueError("cannot dump this")

    async def body(run: Run, task: str) -> Any:
        return await run.call(make, name="make", dump=dump)

    definition = FunctionAgent("bad-dump", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "bd-1", "")
        assert state.status == "failed"
        assert "ValueError: cannot dump this" in state.reason
        await rt.retry("bd-1")
        state = await rt.wait("bd-1", timeout=30)
    assert runs == [1]
    (entry,) = state.ledger.values()
    assert entry["done"] and "will not run again" in entry["error"]


async def test_a_cancel_stops_the_body_at_its_next_call(tmp_path: Path) -> None:
    ran: list[str] = []
    started, go_on = anyio.Event(), anyio.Event()

    async def step(name: str) -> str:
        ran.append(name)
        if name == "first":
            started.set()
            await go_on.wait()
        return name

    async def body(run: Run, task: str) -> list[str]:
        return [await run.call(step, "first"), await run.call(step, "second")]

    definition = FunctionAgent("cancelled", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        handle = await rt.start(definition, "k-1", "")
        await started.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.cancel, "k-1", "changed my mind")
            inbox = handle._actor._inbox  # the cancel is queued while the first call runs
            while inbox.statistics().current_buffer_used == 0:
                await anyio.sleep(0.01)
            go_on.set()
        state = await handle.wait()
    assert state.status == "cancelled"
    assert ran == ["first"]
    (entry,) = state.ledger.values()
    assert entry["done"] and entry["result"] == "first"  # the call in flight finished and was journaled


async def test_a_park_lets_running_calls_journal_their_results_first(tmp_path: Path) -> None:
    ran: list[str] = []
    go_on = anyio.Event()

    async def slow() -> str:
        ran.append("slow")
        await go_on.wait()
        return "slow done"

    async def body(run: Run, task: str) -> list[Any]:
        out: dict[str, Any] = {}

        async def call() -> None:
            out["slow"] = await run.call(slow, call_id="slow")

        async def ask() -> None:
            out["ok"] = (await run.approval("ok?", approval_id="ok"))["approved"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            tg.start_soon(ask)
        return [out["slow"], out["ok"]]

    definition = FunctionAgent("park-in-flight", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        handle = await rt.start(definition, "p-1", "")
        while not (await rt.status("p-1")).open_approvals():
            await anyio.sleep(0.01)
        go_on.set()  # the approval is journaled while slow() still runs
        state = await handle.wait()
        assert state.status == "waiting_approval"
        (entry,) = state.ledger.values()
        assert entry["done"] and entry["result"] == "slow done"
        await rt.approve("p-1", "ok", approved=True)
        state = await rt.wait("p-1", timeout=30)
    assert state.status == "finished" and state.result == ["slow done", True]
    assert ran == ["slow"]


async def test_two_concurrent_calls_with_one_call_id_fail_the_run_with_the_typed_error(tmp_path: Path) -> None:
    async def ok() -> int:
        await anyio.sleep(0.05)
        return 1

    async def body(run: Run, task: str) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run.call(ok, call_id="x"))
            tg.start_soon(lambda: run.call(ok, call_id="x"))

    definition = FunctionAgent("twins", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        state = await rt.run(definition, "twins-1", "")
    assert state.status == "failed"
    assert "InvalidArgumentError: " in state.reason and "call_id 'x' is already used" in state.reason, state.reason


async def test_the_step_log_says_a_function_agent_waits_for_its_own_approval(tmp_path: Path, caplog) -> None:
    import logging

    async def body(run: Run, task: str) -> bool:
        return (await run.approval("start the slow job?"))["approved"]

    caplog.set_level(logging.INFO, logger="durably.steps")
    definition = FunctionAgent("asks", body)
    async with Runtime(url(tmp_path), agents=[definition]) as rt:
        assert (await rt.run(definition, "a-1", "")).status == "waiting_approval"
    parked = [r.getMessage() for r in caplog.records if r.name == "durably.steps" and "parked" in r.getMessage()]
    assert parked == ["agent default/a-1 seq 2: parked until a human decides approval approval-1"], parked
