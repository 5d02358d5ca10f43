"""The CDDL in durably/schemas against the bytes the runtime writes, and the upcaster chain.

Every frame a real run stores (records of every kind the runtime writes, and its
snapshots) must validate against frame.cddl and the record/snapshot file of its
version, so the docs and the bytes cannot drift apart. Hand-built records cover
the kinds no runtime path writes yet. Upcasters are exercised with temporary
registrations on a registry emptied for the test, as a build at version 1 (the
real steps, 1 -> 2 for forks, are checked by test_golden and test_inspection).
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import cbor2
import pycddl
import pytest
from schema_wire import cddl_name, cddl_text, header_fields, schema, validate_frame, validate_member_row
from timer_agents import nap_agent

from durably import (
    AgentDefinition,
    Budget,
    ModelResponse,
    RetryPolicy,
    Runtime,
    SnapshotPolicy,
    ToolCall,
    ToolRetry,
    Usage,
    agent_tool,
    tool,
)
from durably._cli.demo.survey import survey_agent, survey_task
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.errors import MissingUpcasterError
from durably.schemas import _records as schemas
from durably.schemas import _upcasters as upcasters
from durably.schemas._records import RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID, Kind, Record
from durably.schemas._upcasters import NoUpcastPathError, missing_upcasters, upcast, upcaster
from durably.storage._codec import Codec
from durably.storage._errors import CorruptRecordError, UnknownSchemaVersionError
from durably.storage._registry import open_store
from durably.storage._spi import StoredRecord, StoredSnapshot, StreamId

STREAM = StreamId("ns", "agent-7")
KEY = "0123456789abcdef0123456789abcdef"
DEFINITION = {"name": "demo", "version": "1", "digest": "00112233aabbccdd"}
BUDGET = {"steps": 10, "tokens": None, "cost_usd": 2.5}

#: One realistic data map per record kind, shaped as the runtime writes it.
EXAMPLES: dict[Kind, dict[str, Any]] = {
    Kind.STARTED: {
        "namespace": "ns",
        "agent_id": "agent-7",
        "run_id": uuid.uuid4().hex,
        "task": "survey",
        "definition": DEFINITION,
        "instructions": "Be brief.",
        "budget": BUDGET,
        "worker": "host:42",
    },
    Kind.RESUMED: {"worker": "host:43", "pid": 43},
    Kind.MESSAGE_RECEIVED: {"role": "user", "content": "also look at json"},
    Kind.MODEL_RESPONDED: {
        "text": "Reading.",
        "tool_calls": [{"id": "t1", "name": "read", "arguments": {"name": "json"}}],
        "usage": {"input_tokens": 120, "output_tokens": 7, "cost_usd": 0.000465},
        "plan": ["read json", "publish"],
        "model": "scripted",
    },
    Kind.TOOL_INTENT: {"key": KEY, "call_id": "t1", "tool": "read", "attempt": 1},
    Kind.TOOL_RESULT: {
        "key": KEY,
        "call_id": "t1",
        "tool": "read",
        "result": {"lines": 360, "nested": [1, None, b"\x00"]},
        "error": None,
        "reconciled": True,
    },
    Kind.PLAN_UPDATED: {"plan": ["read json", "summarise", "publish"]},
    Kind.ARTIFACT_STORED: {"name": "report.md", "digest": "ab" * 32, "size": 2048},
    Kind.APPROVAL_REQUESTED: {
        "approval_id": "t2",
        "call_id": "t2",
        "tool": "publish",
        "arguments": {"title": "x"},
        "key": KEY,
        "reason": "tool requires approval",
    },
    Kind.APPROVAL_DECIDED: {"approval_id": "t2", "approved": False, "by": "ops", "note": "not yet"},
    Kind.BUDGET_EXCEEDED: {"limit": "cost_usd", "allowed": 2.5, "spent": 2.51},
    Kind.BUDGET_EXTENDED: {"budget": {"steps": 20, "tokens": None, "cost_usd": 5.0}},
    Kind.HISTORY_COMPACTED: {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "summary of 40 turns"}]
    },
    Kind.FINISHED: {"result": "done"},
    Kind.FAILED: {"reason": "model error: TimeoutError"},
    Kind.CANCELLED: {"reason": "operator"},
    Kind.DEFINITION_CHANGED: {
        "previous": DEFINITION,
        "definition": {**DEFINITION, "version": "2", "digest": "ffeeddccbbaa9988"},
        "policy": "migrate",
        "state": {"plan": ["publish"]},
    },
    Kind.FORKED: {
        "namespace": "ns",
        "agent_id": "agent-6",
        "run_id": uuid.uuid4().hex,
        "seq": 12,
        "keys": {KEY: KEY[::-1]},
    },
    Kind.MODEL_FAILED: {
        "attempt": 2,
        "error": "durably.errors.MalformedToolCallError",
        "transient": True,
        "retry_in": 1.25,
        "usage": {"input_tokens": 150, "output_tokens": 50, "cost_usd": 0.002},
    },
    Kind.RETRIED: {"worker": "host:43", "reason": "model error: TimeoutError: the provider did not answer"},
    Kind.TOOL_FAILED: {
        "key": KEY,
        "call_id": "t1",
        "tool": "read",
        "attempt": 1,
        "error_type": "ConnectionError",
        "error": "ConnectionError: upstream reset",
        "timed_out": False,
        "retry_in": 1.5,
        "retry_at": 1_700_000_001.75,
    },
    Kind.TOOL_HEARTBEAT: {"key": KEY, "call_id": "t1", "tool": "read", "attempt": 2, "details": {"rows": 120}},
    Kind.TIMER_SET: {"wake_at": 1_700_000_600.5, "call_id": "t3"},
    Kind.TIMER_FIRED: {"wake_at": 1_700_000_600.5},
    Kind.CHILD_STARTED: {"key": KEY, "call_id": "t2", "tool": "research", "agent_id": "agent-7/t2", "definition": "r"},
    Kind.CHILD_ENDED: {
        "key": KEY,
        "call_id": "t2",
        "tool": "research",
        "agent_id": "agent-7/t2",
        "status": "failed",
        "result": None,
        "error": "child agent agent-7/t2 failed: model error",
    },
}


def test_every_kind_has_an_example_and_a_cddl_rule() -> None:
    assert set(EXAMPLES) == set(Kind)
    text = cddl_text(cddl_name(RECORD_SCHEMA_ID, schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID]))
    for kind in Kind:
        assert f'k: "{kind.value}"' in text, kind


def test_every_version_of_every_schema_has_its_cddl_file_and_upcasters() -> None:
    for schema_id, current in schemas.CURRENT_VERSIONS.items():
        for version in range(1, current + 1):
            pycddl.Schema(cddl_text(cddl_name(schema_id, version)))  # parses
    pycddl.Schema(cddl_text("frame.cddl"))
    assert missing_upcasters() == []


@pytest.mark.parametrize("kind", list(Kind))
def test_hand_built_records_of_every_kind_validate(kind: Kind) -> None:
    frame = RecordCodec().encode_record(Record(3, kind.value, EXAMPLES[kind], 1_700_000_000.25))
    header = validate_frame(frame)
    assert (header["schema-id"], header["schema-version"]) == (
        RECORD_SCHEMA_ID,
        schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID],
    )


def _record_bytes(kind: Kind, data: dict[str, Any], **envelope: Any) -> bytes:
    return cbor2.dumps({**Record(1, kind.value, data, 1.5).to_wire(), **envelope})


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(
            _record_bytes(Kind.TOOL_INTENT, {**EXAMPLES[Kind.TOOL_INTENT], "extra": 1}), id="unknown data field"
        ),
        pytest.param(
            _record_bytes(Kind.TOOL_INTENT, {"key": KEY, "call_id": "t1", "tool": "read"}), id="missing field"
        ),
        pytest.param(_record_bytes(Kind.TOOL_INTENT, {**EXAMPLES[Kind.TOOL_INTENT], "attempt": "1"}), id="wrong type"),
        pytest.param(_record_bytes(Kind.TOOL_INTENT, {**EXAMPLES[Kind.TOOL_INTENT], "attempt": 0}), id="attempt 0"),
        pytest.param(_record_bytes(Kind.FAILED, EXAMPLES[Kind.FINISHED]), id="data of another kind"),
        pytest.param(_record_bytes(Kind.FAILED, EXAMPLES[Kind.FAILED], x=1), id="unknown envelope field"),
        pytest.param(_record_bytes(Kind.FAILED, EXAMPLES[Kind.FAILED], s=0), id="seq 0"),
        pytest.param(cbor2.dumps({"s": 1, "k": "retried", "t": 1.5, "d": {"reason": ""}}), id="unknown kind"),
    ],
)
def test_the_record_schema_is_strict(wire: bytes) -> None:
    for name in ("record-v1.cddl", "record-v2.cddl"):
        with pytest.raises(pycddl.ValidationError):
            schema(name).validate_cbor(wire)


def test_forked_is_a_version_2_kind() -> None:
    wire = _record_bytes(Kind.FORKED, EXAMPLES[Kind.FORKED])
    schema("record-v2.cddl").validate_cbor(wire)
    with pytest.raises(pycddl.ValidationError):
        schema("record-v1.cddl").validate_cbor(wire)


def test_the_snapshot_and_frame_schemas_are_strict() -> None:
    good = Codec().encode(SNAPSHOT_SCHEMA_ID, 1, {"s": 1})
    for change in (
        {"format": 3},
        {"format": 4},
        {"format": 0},
        {"flags": 4},
        {"schema-id": 3},
        {"schema-version": 0},
        {"raw-size": 2**32},
        {"dictionary-id": 1},
    ):
        with pytest.raises(pycddl.ValidationError):
            schema("frame.cddl").validate_cbor(cbor2.dumps({**header_fields(good), **change}))
    # Format 3 (a record compressed with a shipped dictionary): its id is required, flags are exactly "zstd".
    record = RecordCodec().encode_record(
        Record(1, Kind.FAILED, {"reason": "the tool call failed: timeout"}, 1.0), StreamId("n", "a")
    )
    fields = header_fields(record)
    assert fields["format"] == 3 and validate_frame(record)["dictionary-id"] == fields["dictionary-id"]
    without_id = {k: v for k, v in fields.items() if k != "dictionary-id"}
    for bad in (without_id, {**fields, "flags": 3}, {**fields, "flags": 0}, {**fields, "dictionary-id": 2**32}):
        with pytest.raises(pycddl.ValidationError):
            schema("frame.cddl").validate_cbor(cbor2.dumps(bad))
    with pytest.raises(pycddl.ValidationError):  # needs_migration is reported, never stored
        schema("snapshot-v1.cddl").validate_cbor(cbor2.dumps({"s": 1, "state": {"status": "needs_migration"}}))


# -- bytes written by the real runtime -----------------------------------------------------------


class _StepModel:
    """Calls ``tool_name`` ``steps`` times, then finishes; or raises when ``broken``."""

    name = "step-model"

    def __init__(self, steps: int, tool_name: str = "effect", broken: bool = False) -> None:
        self.steps, self.tool_name, self.broken = steps, tool_name, broken

    async def respond(self, messages, tools) -> ModelResponse:
        if self.broken:
            raise TimeoutError("the provider did not answer")
        done = sum(1 for m in messages if m["role"] == "tool")
        usage = Usage(10, 5, 0.001)
        if done < self.steps:
            return ModelResponse(
                f"step {done + 1}",
                (ToolCall(f"c{done + 1}", self.tool_name, {"n": done + 1}),),
                usage,
                plan=[f"step {done + 1}"],
            )
        return ModelResponse("done", (), usage)


def _agent(name: str, *, steps: int = 1, approval: bool = False, broken: bool = False, **kw) -> AgentDefinition:
    kw.setdefault("retry", RetryPolicy(attempts=2, initial_s=0.01, jitter_s=0.0))

    @tool(name="effect", requires_approval=approval, on_unknown_outcome="retry")
    async def effect(n: int, *, ctx) -> dict:
        return {"n": n, "key": ctx.idempotency_key}

    return AgentDefinition(name=name, model=_StepModel(steps, broken=broken), tools=[effect], **kw)


def _retrying_agent() -> AgentDefinition:
    """Its tool beats, fails once (a tool_failed record), then returns."""

    @tool(name="effect", retry=ToolRetry(attempts=2, backoff=0.01, jitter=0.0), heartbeat_every=0.0)
    async def effect(n: int, *, ctx) -> int:
        await ctx.heartbeat({"n": n, "attempt": ctx.attempt, "at": dt.date(2025, 1, 2)})
        if ctx.attempt == 1:
            raise ConnectionError("upstream reset")
        return n

    return AgentDefinition(name="retrying", model=_StepModel(1), tools=[effect])


def _migrate_plan(state: dict, previous: dict) -> dict:
    return {**state, "plan": [f"migrated from {previous['version']}"] + state["plan"]}


class _Answer:
    name = "answer"

    def __init__(self, text: str) -> None:
        self.text = text

    async def respond(self, messages, tools):
        return ModelResponse(self.text)


class _AskHelper:
    name = "ask-helper"

    async def respond(self, messages, tools):
        if messages[-1]["role"] == "tool":
            return ModelResponse(f"helper said {messages[-1]['content']}")
        return ModelResponse("", (ToolCall("h1", "helper", {"task": "find it"}),))


async def _run_every_runtime_path(store, workdir: Path) -> None:
    survey = survey_agent(workdir, latency=0)
    budgeted, parked, broken = (
        _agent("budgeted", steps=2),
        _agent("parked", approval=True),
        _agent("broken", broken=True),
    )
    v1 = _agent("evolving", approval=True, instructions="v1")
    v2 = _agent(
        "evolving", approval=True, instructions="v2", version="2", on_definition_change="migrate", migrate=_migrate_plan
    )
    policy = SnapshotPolicy(every_records=3, tail_ratio=0)
    reported = _agent("reported", approval=True)
    retrying = _retrying_agent()
    agents = [survey, budgeted, parked, broken, v1, reported, retrying]
    async with Runtime(store, agents=agents, snapshot_policy=policy) as rt:
        assert (await rt.run(retrying, "retrying", "retry")).status == "finished"
        state = await rt.run(survey, "survey", survey_task(["colorsys", "bisect"]))
        await rt.send("survey", "Please keep the report short.")
        await rt.approve("survey", state.open_approvals()[0]["approval_id"], by="ops", note="ok")
        state = await rt.run("budgeted", "budgeted", "count", budget=Budget(steps=1))
        assert state.status == "suspended"
        await rt.extend_budget("budgeted", steps=5)
        await rt.run("parked", "parked", "wait")
        await rt.cancel("parked", "not needed")
        assert (await rt.run("broken", "broken", "fail")).status == "failed"
        assert (await (await rt.retry("broken")).wait()).status == "failed"  # retried, and still broken
        state = await rt.run("reported", "reported", "report")
        when = dt.datetime(2025, 1, 2, 3, 4, tzinfo=dt.UTC)
        await rt.approve(
            "reported",
            state.open_approvals()[0]["approval_id"],
            by="ops",
            result={"when": when, "pair": (1, Decimal("2.5")), "tags": {"a"}},
        )
        state = await rt.run(v1, "evolving", "evolve")
        napper = nap_agent(workdir / "naps.jsonl", 0.0)
        assert (await rt.run(napper, "napper", "nap")).status == "sleeping"
        assert (await (await rt.resume("napper")).wait()).status == "finished"  # due at once: fired
    async with Runtime(store, agents=[v2], snapshot_policy=policy) as rt:
        await rt.approve("evolving", state.open_approvals()[0]["approval_id"])
        handle = await rt.resume("evolving")
        if handle is not None:
            await handle.wait()
    async with Runtime(store, agents=[survey, budgeted], snapshot_policy=policy) as rt:
        for agent_id in ("survey", "budgeted"):
            handle = await rt.resume(agent_id)
            if handle is not None:
                await handle.wait()
            assert (await rt.status(agent_id)).status == "finished"
        assert (await rt.status("evolving")).status == "finished"
        # A fork from the survey's third record runs the survey again up to its approval.
        await rt.fork("survey", 3, "survey-fork")
        state = await (await rt.resume("survey-fork")).wait()
        assert state.status == "waiting_approval" and state.forked_from["agent_id"] == "survey"
        # A parent whose call runs a child agent: child_started, child_ended, a started with a parent.
        child = AgentDefinition(name="helper", model=_Answer("found it"))
        parent = AgentDefinition(name="boss", model=_AskHelper(), tools=[agent_tool(child)])
        rt.register(child)
        state = await rt.run(parent, "boss", "delegate")
        assert state.status == "finished" and state.children


async def test_every_frame_the_runtime_writes_validates_against_the_cddl(tmp_path: Path) -> None:
    kinds, snapshots, compressed = set(), 0, 0
    async with open_store(f"memory://{uuid.uuid4().hex}") as store:
        await _run_every_runtime_path(store, tmp_path)
        async for stream in store.list_streams("default"):
            reader = JournalReader(store, RecordCodec(), stream)
            async for stored in store.read(stream):
                if stored.data[2] == 5:
                    validate_member_row(stored.data)
                else:
                    header = validate_frame(stored.data)
                    assert header["schema-version"] == schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID]
                kinds.add((await reader.decode(stored)).kind)
            snapshot = await store.get_snapshot(stream)
            while snapshot is not None:
                header = validate_frame(snapshot.data)
                assert (header["schema-id"], header["schema-version"]) == (
                    SNAPSHOT_SCHEMA_ID,
                    schemas.CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID],
                )
                snapshots += 1
                compressed += header["flags"] & 1
                snapshot = await store.get_snapshot(stream, snapshot.seq - 1) if snapshot.seq > 1 else None
    # Everything the runtime itself writes today; the rest is covered by EXAMPLES above.
    written = set(Kind) - {Kind.PLAN_UPDATED, Kind.ARTIFACT_STORED, Kind.HISTORY_COMPACTED}
    assert kinds == {k.value for k in written}
    assert snapshots >= 5 and compressed >= 1


# -- upcasters -----------------------------------------------------------------------------------


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch):
    """Temporary registrations on an empty registry, as a build at version 1 of both
    schemas: UPCASTERS and CURRENT_VERSIONS are restored afterwards."""
    saved = dict(schemas.UPCASTERS)
    schemas.UPCASTERS.clear()
    for schema_id in schemas.CURRENT_VERSIONS:
        monkeypatch.setitem(schemas.CURRENT_VERSIONS, schema_id, 1)
    yield schemas.UPCASTERS
    schemas.UPCASTERS.clear()
    schemas.UPCASTERS.update(saved)


# A future record version 2 renames data "error" of tool_result to "failure";
# version 3 adds an "at" field to every record's data. Each is a small pure function.
def record_v1_to_v2(value: dict) -> dict:
    if value["k"] != "tool_result":
        return value
    data = {k: v for k, v in value["d"].items() if k != "error"}
    return {**value, "d": {**data, "failure": value["d"].get("error")}}


def record_v2_to_v3(value: dict) -> dict:
    return {**value, "d": {**value["d"], "at": value["t"]}}


def test_record_v1_to_v2_renames_error_and_leaves_other_kinds_alone() -> None:
    v1 = Record(4, "tool_result", EXAMPLES[Kind.TOOL_RESULT] | {"error": "boom"}, 2.0).to_wire()
    before = copy.deepcopy(v1)
    v2 = record_v1_to_v2(v1)
    assert v1 == before  # pure
    assert v2["d"]["failure"] == "boom" and "error" not in v2["d"]
    other = Record(5, "failed", {"reason": "x"}, 2.0).to_wire()
    assert record_v1_to_v2(other) == other


def test_record_v2_to_v3_copies_the_time_into_the_data() -> None:
    v2 = {"s": 1, "k": "failed", "t": 7.5, "d": {"reason": "x"}}
    before = copy.deepcopy(v2)
    assert record_v2_to_v3(v2)["d"] == {"reason": "x", "at": 7.5}
    assert v2 == before


def test_the_decorator_registers_one_step_and_refuses_a_second(registry) -> None:
    upcaster(RECORD_SCHEMA_ID, 1)(record_v1_to_v2)
    assert registry[(RECORD_SCHEMA_ID, 1)] is record_v1_to_v2
    with pytest.raises(ValueError, match="already has an upcaster"):
        upcaster(RECORD_SCHEMA_ID, 1)(record_v2_to_v3)
    with pytest.raises(ValueError):
        upcaster(RECORD_SCHEMA_ID, 0)
    with pytest.raises(ValueError):
        upcaster(99, 1)


def test_upcast_chains_v1_to_v3_and_names_the_missing_step(registry) -> None:
    schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID] = 3
    upcaster(RECORD_SCHEMA_ID, 1)(record_v1_to_v2)
    assert missing_upcasters() == [(RECORD_SCHEMA_ID, 2)]
    v1 = Record(
        1, "tool_result", {"key": KEY, "call_id": "c", "tool": "t", "result": None, "error": "e"}, 3.0
    ).to_wire()
    with pytest.raises(NoUpcastPathError) as caught:
        upcast(RECORD_SCHEMA_ID, 1, v1)
    assert caught.value.missing == 2
    upcaster(RECORD_SCHEMA_ID, 2)(record_v2_to_v3)
    assert missing_upcasters() == []
    assert upcast(RECORD_SCHEMA_ID, 1, v1)["d"] == {
        "key": KEY,
        "call_id": "c",
        "tool": "t",
        "result": None,
        "failure": "e",
        "at": 3.0,
    }
    assert upcast(RECORD_SCHEMA_ID, 3, v1) is v1
    with pytest.raises(ValueError):
        upcast(RECORD_SCHEMA_ID, 4, v1)


def test_the_codec_lifts_each_stored_version_and_writes_only_the_current_one(registry) -> None:
    codec = RecordCodec()
    base = {"key": KEY, "call_id": "c", "tool": "t", "result": None}
    shapes = {1: {**base, "error": "e"}, 2: {**base, "failure": "e"}, 3: {**base, "failure": "e", "at": 3.0}}
    stored = {}
    for version, step in ((1, None), (2, record_v1_to_v2), (3, record_v2_to_v3)):
        schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID] = version
        if step is not None:
            upcaster(RECORD_SCHEMA_ID, version - 1)(step)
        frame = codec.encode_record(Record(1, "tool_result", shapes[version], 3.0))
        assert header_fields(frame)["schema-version"] == version  # the build's current version, always
        stored[version] = frame
    for version, frame in stored.items():
        assert codec.decode_record(StoredRecord(1, frame), STREAM).data == shapes[3], version


def test_unknown_missing_and_failing_versions_are_typed_errors(registry) -> None:
    codec = RecordCodec()
    wire = Record(9, "failed", {"reason": "x"}, 1.0).to_wire()
    future = Codec().encode(RECORD_SCHEMA_ID, 2, wire)
    with pytest.raises(UnknownSchemaVersionError) as caught:
        codec.decode_record(StoredRecord(9, future), STREAM)
    error = caught.value
    assert (error.stream, error.seq, error.version, error.supported) == (STREAM, 9, 2, 1)
    assert "ns/agent-7" in str(error) and "seq 9" in str(error) and "version 2" in str(error)

    schemas.CURRENT_VERSIONS[RECORD_SCHEMA_ID] = 2
    old = Codec().encode(RECORD_SCHEMA_ID, 1, wire)
    with pytest.raises(MissingUpcasterError, match="no upcaster from version 1") as caught:
        codec.decode_record(StoredRecord(9, old), STREAM)
    assert (caught.value.stream, caught.value.seq, caught.value.missing) == (STREAM, 9, 1)

    def broken(value: dict) -> dict:
        return {**value, "d": value["d"]["missing"]}

    upcaster(RECORD_SCHEMA_ID, 1)(broken)
    with pytest.raises(CorruptRecordError, match="could not be upcast") as caught:
        codec.decode_record(StoredRecord(9, old), STREAM)
    assert caught.value.seq == 9


def test_snapshots_are_upcast_the_same_way(registry) -> None:
    codec = RecordCodec()
    v1 = codec.encode_snapshot(4, {"plan": ["a", "b"]})
    schemas.CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID] = 2

    @upcaster(SNAPSHOT_SCHEMA_ID, 1)
    def plan_steps(value: dict) -> dict:
        state = value["state"]
        return {**value, "state": {**state, "plan": [{"step": p, "done": False} for p in state["plan"]]}}

    seq, state, frame = codec.decode_snapshot(StoredSnapshot(4, v1), STREAM)
    assert (seq, frame.schema_version) == (4, 1)
    assert state["plan"] == [{"step": "a", "done": False}, {"step": "b", "done": False}]
    assert header_fields(codec.encode_snapshot(4, state))["schema-version"] == 2


def test_upcasters_module_is_the_registry_the_storage_reads() -> None:
    assert upcasters.UPCASTERS is schemas.UPCASTERS
