"""Forged checkpoint values: a store writer (a co-tenant holding the database
credential, a bucket writer) stores msgpack that names a callable. A reader with
a default ``DurablySaver`` runs nothing and imports nothing: it refuses the value
with a ``CheckpointValueError`` naming the channel. The graph's own types, once
allowed, still round-trip."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph_agent import State
from pydantic import BaseModel

from durably.errors import InvalidArgumentError
from durably.integrations.langgraph import CheckpointValueError, DurablySaver

FORGE = "forge-me"


def config() -> dict[str, Any]:
    return {"configurable": {"thread_id": "t1"}}


class Holder(State):
    thing: object


class Forger(JsonPlusSerializer):
    """Writes ``payload`` (raw msgpack) wherever the graph stores ``FORGE``: the
    bytes a co-tenant would put in the row."""

    def __init__(self, payload: bytes) -> None:
        super().__init__()
        self.payload = payload

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj == FORGE:
            return ("msgpack", self.payload)
        return super().dumps_typed(obj)


def ext(code: int, *fields: Any) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(list(fields))))


async def store_forged(url: str, payload: bytes) -> None:
    builder = StateGraph(Holder)
    builder.add_node("make", lambda s: {"thing": FORGE})
    builder.add_edge(START, "make")
    async with DurablySaver.from_url(url, serde=Forger(payload)) as saver:
        await builder.compile(checkpointer=saver).ainvoke({"messages": []}, config())


@pytest.fixture
def side_effect_module(tmp_path, monkeypatch):
    """``(name, marker)``: a module on sys.path, its name new to this process, that
    leaves the marker file when it is imported."""
    name = f"durably_lg_side_effect_{uuid.uuid4().hex}"
    marker = tmp_path / "IMPORTED"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Thing:\n    def __init__(self, *a, **k):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


@pytest.mark.parametrize("reader", ["default", "langgraph-strict"])
@pytest.mark.parametrize("code", [0, 1, 2, 4, 5, 3])
async def test_a_forged_value_naming_a_callable_runs_nothing(tmp_path, side_effect_module, reader, code) -> None:
    module, imported = side_effect_module
    pwned = tmp_path / "PWNED"
    if code == 3:  # (module, class, argument, method)
        payloads = [ext(3, "os", "system", f"touch {pwned}", "__call__")]
    else:
        argument: Any = {"x": 1} if code in (2, 4, 5) else f"touch {pwned}"
        payloads = [ext(code, "os", "system", argument), ext(code, module, "Thing", argument)]
    for i, payload in enumerate(payloads):
        url = f"sqlite:///{tmp_path / f'forged{i}.db'}"
        await store_forged(url, payload)
        options = {} if reader == "default" else {"serde": JsonPlusSerializer(allowed_msgpack_modules=None)}
        async with DurablySaver.from_url(url, **options) as saver:
            with pytest.raises(CheckpointValueError) as caught:
                await saver.aget_tuple(config())
        assert caught.value.channel == "thing"
        assert not pwned.exists() and not imported.exists()
        assert module not in sys.modules


class Ticket(BaseModel):
    number: int
    title: str


class TicketState(State):
    ticket: Ticket


def ticket_graph() -> StateGraph:
    builder = StateGraph(TicketState)
    builder.add_node("open", lambda s: {"ticket": Ticket(number=4711, title="refund")})
    builder.add_edge(START, "open")
    return builder


async def test_the_graphs_own_types_round_trip_once_allowed(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'own.db'}"
    async with DurablySaver.from_url(url, allowed_types=[Ticket]) as saver:
        await ticket_graph().compile(checkpointer=saver).ainvoke({"messages": []}, config())
    async with DurablySaver.from_url(url, allowed_types=[Ticket]) as saver:
        state = (await saver.aget_tuple(config())).checkpoint["channel_values"]
    assert state["ticket"] == Ticket(number=4711, title="refund") and type(state["ticket"]) is Ticket
    # What LangGraph does when it compiles a graph under LANGGRAPH_STRICT_MSGPACK=true.
    async with DurablySaver.from_url(url) as saver:
        allowed = saver.with_allowlist({(Ticket.__module__, Ticket.__name__)})
        assert allowed is not saver
        state = (await allowed.aget_tuple(config())).checkpoint["channel_values"]
        assert type(state["ticket"]) is Ticket
        # A type the reader was not told about is refused by name, not half-built.
        with pytest.raises(CheckpointValueError, match="Ticket is not in the msgpack allowlist"):
            await saver.aget_tuple(config())


def test_allowed_types_is_for_the_default_serializer() -> None:
    with pytest.raises(InvalidArgumentError, match="allowed_types"):
        DurablySaver("memory://x", serde=JsonPlusSerializer(), allowed_types=[Ticket])


async def test_an_import_from_a_forged_sqlite_database_runs_nothing(tmp_path) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from durably.integrations.langgraph import ImportSourceError, import_sqlite_threads

    source, pwned = tmp_path / "langgraph.db", tmp_path / "PWNED"
    builder = StateGraph(Holder)
    builder.add_node("make", lambda s: {"thing": FORGE})
    builder.add_edge(START, "make")
    async with aiosqlite.connect(source) as conn:
        sqlite_saver = AsyncSqliteSaver(conn, serde=Forger(ext(0, "os", "system", f"touch {pwned}")))
        await sqlite_saver.setup()
        await builder.compile(checkpointer=sqlite_saver).ainvoke({"messages": []}, config())
    async with DurablySaver.from_url(f"sqlite:///{tmp_path / 'durably.db'}") as saver:
        with pytest.raises(ImportSourceError, match="os.system is not in the msgpack allowlist"):
            await import_sqlite_threads(source, saver)
    assert not pwned.exists()


@pytest.mark.parametrize("forged", ["undefined", "shared-references"])
async def test_a_forged_checkpoint_skeleton_is_refused_by_a_frames_rules(tmp_path, monkeypatch, forged) -> None:
    import types

    import cbor2

    from durably.integrations.langgraph import _saver

    def dumps(skeleton: Any) -> bytes:
        if forged == "undefined":
            return cbor2.dumps({**skeleton, "channel_versions": cbor2.undefined})
        node: list = [1]
        for _ in range(40):
            node = [node, node]
        return cbor2.dumps({**skeleton, "versions_seen": node}, value_sharing=True)

    url = f"sqlite:///{tmp_path / 'skeleton.db'}"
    builder = StateGraph(Holder)
    builder.add_node("make", lambda s: {"thing": 1})
    builder.add_edge(START, "make")
    with monkeypatch.context() as patched:
        patched.setattr(_saver, "cbor2", types.SimpleNamespace(dumps=dumps))
        async with DurablySaver.from_url(url) as saver:
            await builder.compile(checkpointer=saver).ainvoke({"messages": []}, config())
    async with DurablySaver.from_url(url) as saver:
        with pytest.raises(CheckpointValueError, match="checkpoint does not decode"):
            await saver.aget_tuple(config())
