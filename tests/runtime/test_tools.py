"""Tools a real model can drive: schemas from type hints,
validated and coerced arguments, sync tools, ``ctx`` only when declared, definitions
checked when built, and ``AgentExistsError`` for a reused id."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import threading
import uuid
from decimal import Decimal
from typing import Any, Literal

import pydantic
import pytest
from privacy_support import ScriptModel
from typing_extensions import TypedDict

from durably import (
    AgentDefinition,
    AgentExistsError,
    Budget,
    ModelResponse,
    Runtime,
    Tool,
    ToolArgumentsError,
    ToolCall,
    Usage,
    tool,
)
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(TypedDict):
    street: str
    zip: int


@dataclasses.dataclass
class Line:
    sku: str
    qty: int = 1


class Customer(pydantic.BaseModel):
    name: str
    vip: bool = False


received: list[dict[str, Any]] = []


@tool
def place_order(
    customer: Customer,
    lines: list[Line],
    color: Color,
    mode: Literal["fast", "cheap"],
    ship_to: Address,
    tags: dict[str, str],
    size: tuple[int, int],
    note: str | None = None,
    weight: float = 1.0,
    gift: bool = False,
    count: int = 1,
    label: str = "",
) -> str:
    """Place an order.

    Args:
        customer: who buys.
        lines: what they buy.
        color: the wrapping colour.
        mode: how to ship.
        ship_to: where to ship.
        tags: free-form labels.
        size: box width and height, in cm.
        note: a note for the courier.
        weight: kilograms.
        gift: wrap it as a gift.
        count: how many parcels.
        label: printed on the box.
    """
    received.append(
        {
            "customer": customer,
            "lines": lines,
            "color": color,
            "size": size,
            "count": count,
            "thread": threading.current_thread(),
        }
    )
    return "ordered"


#: The schema the model is shown for place_order (a snapshot: a change here is a change
#: of what every model sees, so it must be deliberate).
PLACE_ORDER_SPEC = {
    "name": "place_order",
    "description": "Place an order.",
    "parameters": {
        "$defs": {
            "Address": {
                "additionalProperties": False,
                "properties": {
                    "street": {"title": "Street", "type": "string"},
                    "zip": {"title": "Zip", "type": "integer"},
                },
                "required": ["street", "zip"],
                "title": "Address",
                "type": "object",
            },
            "Color": {"enum": ["red", "blue"], "title": "Color", "type": "string"},
            "Customer": {
                "properties": {
                    "name": {"title": "Name", "type": "string"},
                    "vip": {"default": False, "title": "Vip", "type": "boolean"},
                },
                "required": ["name"],
                "title": "Customer",
                "type": "object",
            },
            "Line": {
                "additionalProperties": False,
                "properties": {
                    "qty": {"default": 1, "title": "Qty", "type": "integer"},
                    "sku": {"title": "Sku", "type": "string"},
                },
                "required": ["sku"],
                "title": "Line",
                "type": "object",
            },
        },
        "additionalProperties": False,
        "properties": {
            "color": {"$ref": "#/$defs/Color", "description": "the wrapping colour."},
            "count": {"default": 1, "description": "how many parcels.", "title": "Count", "type": "integer"},
            "customer": {"$ref": "#/$defs/Customer", "description": "who buys."},
            "gift": {"default": False, "description": "wrap it as a gift.", "title": "Gift", "type": "boolean"},
            "label": {"default": "", "description": "printed on the box.", "title": "Label", "type": "string"},
            "lines": {
                "description": "what they buy.",
                "items": {"$ref": "#/$defs/Line"},
                "title": "Lines",
                "type": "array",
            },
            "mode": {"description": "how to ship.", "enum": ["fast", "cheap"], "title": "Mode", "type": "string"},
            "note": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "description": "a note for the courier.",
                "title": "Note",
            },
            "ship_to": {"$ref": "#/$defs/Address", "description": "where to ship."},
            "size": {
                "description": "box width and height, in cm.",
                "maxItems": 2,
                "minItems": 2,
                "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                "title": "Size",
                "type": "array",
            },
            "tags": {
                "additionalProperties": {"type": "string"},
                "description": "free-form labels.",
                "title": "Tags",
                "type": "object",
            },
            "weight": {"default": 1.0, "description": "kilograms.", "title": "Weight", "type": "number"},
        },
        "required": ["customer", "lines", "color", "mode", "ship_to", "tags", "size"],
        "type": "object",
    },
}

GOOD = {
    "customer": {"name": "Ana"},
    "lines": [{"sku": "A-1", "qty": "2"}],
    "color": "red",
    "mode": "fast",
    "ship_to": {"street": "Main 1", "zip": 1000},
    "tags": {},
    "size": [30, "20"],
    "count": "3",
}


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert place_order.spec() == PLACE_ORDER_SPEC


def test_arguments_are_coerced_to_the_annotated_types() -> None:
    values = place_order.validate(GOOD)
    assert values["customer"] == Customer(name="Ana") and values["lines"] == [Line("A-1", 2)]
    assert values["color"] is Color.RED and values["size"] == (30, 20) and values["count"] == 3


@pytest.mark.parametrize(
    ("arguments", "path", "problem"),
    [
        ({**GOOD, "count": "three"}, "count", "valid integer"),
        ({**GOOD, "lines": [{"qty": 1}]}, "lines[0].sku", "Field required"),
        ({**GOOD, "mode": "slow"}, "mode", "'fast' or 'cheap'"),
        ({**GOOD, "surprise": 1}, "surprise", "Extra inputs are not permitted"),
        ({k: v for k, v in GOOD.items() if k != "color"}, "color", "Field required"),
    ],
)
def test_invalid_arguments_name_the_field_and_the_problem(arguments, path, problem) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        place_order.validate(arguments)
    assert any(p == path and problem in message for p, message in caught.value.problems), caught.value.problems
    assert f"{path}: " in str(caught.value) and "place_order" in str(caught.value)


def order_agent(script: list[ModelResponse], budget: Budget | None = None) -> AgentDefinition:
    return AgentDefinition(name="orders", model=ScriptModel(script), tools=[place_order], budget=budget or Budget())


async def test_an_invalid_call_runs_nothing_and_the_model_reads_why(tmp_path) -> None:
    received.clear()
    bad = {**GOOD, "count": "three"}
    script = [
        ModelResponse("", (ToolCall("c1", "place_order", bad),), Usage(1, 1)),
        ModelResponse("", (ToolCall("c2", "place_order", GOOD),), Usage(1, 1)),
    ]
    url = f"sqlite:///{tmp_path}/a.db"
    async with Runtime(url, agents=[order_agent(script)]) as rt:
        state = await rt.run("orders", "o1", "order something")
        kinds = [(r.kind, r.data) async for r in _records(rt, "o1")]
    assert state.status == "finished" and state.usage["steps"] == 3  # the invalid call counted as a step
    assert len(received) == 1 and received[0]["count"] == 3  # only the corrected call ran
    intents = [d["call_id"] for k, d in kinds if k == Kind.TOOL_INTENT]
    assert intents == ["c2"]  # the invalid call was never journaled as an intent
    first = next(m for m in state.messages if m.get("tool_call_id") == "c1")
    assert "count: Input should be a valid integer" in first["content"]
    # A sync tool runs in a worker thread, never on the event loop's.
    assert received[0]["thread"] is not threading.main_thread()


async def test_an_invalid_call_counts_against_the_budget(tmp_path) -> None:
    bad = ModelResponse("", (ToolCall("c", "place_order", {}),), Usage(1, 1))
    async with Runtime("memory://", agents=[order_agent([bad] * 5, Budget(steps=2))]) as rt:
        state = await rt.run("orders", "o1", "order something")
    assert state.status == "suspended" and state.usage["steps"] == 2


async def _records(rt: Runtime, agent_id: str):
    async for record in JournalReader(rt.store, RecordCodec(), rt.stream(agent_id)).records():
        yield record


async def test_bare_decorator_sync_and_no_ctx_tools_run(tmp_path) -> None:
    calls = []

    @tool
    async def plain(x: int) -> int:  # no ctx declared: none is passed
        calls.append(("plain", x))
        return x + 1

    @tool()
    def blocking(x: int, *, ctx) -> str:
        calls.append(("blocking", ctx.call_id))
        return "ok"

    script = [ModelResponse("", (ToolCall("a", "plain", {"x": 1}), ToolCall("b", "blocking", {"x": 2})))]
    definition = AgentDefinition(name="mixed", model=ScriptModel(script), tools=[plain, blocking])
    async with Runtime("memory://", agents=[definition]) as rt:
        state = await rt.run("mixed", "m1", "task")
    assert state.status == "finished" and sorted(calls) == [("blocking", "b"), ("plain", 1)]
    assert [m["content"] for m in state.messages if m["role"] == "tool"] == [2, "ok"]


def test_the_schema_is_part_of_the_definition_digest() -> None:
    async def send(to: str, *, ctx) -> str:
        return to

    async def send_changed(to: str, cc: str = "", *, ctx) -> str:
        return to

    one = AgentDefinition(name="d", model=ScriptModel([]), tools=[tool("send")(send)])
    two = AgentDefinition(name="d", model=ScriptModel([]), tools=[tool("send")(send_changed)])
    assert one.digest() != two.digest()
    assert one.digest() == AgentDefinition(name="d", model=ScriptModel([]), tools=[tool("send")(send)]).digest()


def test_definitions_and_tools_are_checked_when_built() -> None:
    async def fn(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="model must be a Model"):
        AgentDefinition(name="d", model=None)
    with pytest.raises(TypeError, match=r"tools\[0\] is a function, not a Tool \(decorate it with @tool\)"):
        AgentDefinition(name="d", model=ScriptModel([]), tools=[fn])
    with pytest.raises(ValueError, match="duplicate tool names \\['fn'\\]"):
        AgentDefinition(name="d", model=ScriptModel([]), tools=[tool(fn), tool(fn)])
    with pytest.raises(ValueError, match="reconcile policy needs a reconcile hook"):
        tool(on_unknown_outcome="reconcile")(fn)
    with pytest.raises(TypeError, match="cannot be passed by keyword"):
        tool(name="positional")(lambda x, /: x)
    with pytest.raises(TypeError, match="fn must be a function"):
        Tool(name="t", fn=42)
    with pytest.raises(ValueError, match="max_parallel_tools"):
        AgentDefinition(name="d", model=ScriptModel([]), max_parallel_tools=0)


def test_tool_checks_its_name_as_tool_does() -> None:
    """``tool(...)`` refuses the names ``Tool`` refuses, instead of falling back to the function's name."""
    from durably.errors import ArgumentTypeError, InvalidArgumentError

    async def lookup(order_id: str) -> str:
        return order_id

    for bad in (42, b"lookup", ["lookup"]):
        with pytest.raises(ArgumentTypeError, match="name must be a str"):
            tool(bad)(lookup)  # type: ignore[call-overload]
        with pytest.raises(ArgumentTypeError, match="name must be a str"):
            tool(name=bad)(lookup)  # type: ignore[arg-type]
        with pytest.raises(ArgumentTypeError, match="name must be a str"):
            Tool(bad, lookup)  # type: ignore[arg-type]
    for bad in ("", "look up", "orders.lookup", "<lambda>", "x" * 65, "naïve"):
        with pytest.raises(InvalidArgumentError, match="letters, digits"):
            tool(bad)(lookup)
        with pytest.raises(InvalidArgumentError, match="letters, digits"):
            Tool(bad, lookup)
    with pytest.raises(InvalidArgumentError, match=r"pass name="):
        tool(lambda order_id: order_id)
    with pytest.raises(InvalidArgumentError, match=r"pass name="):
        tool()(lambda order_id: order_id)
    with pytest.raises(InvalidArgumentError, match=r"pass name="):
        tool(requires_approval=True)(lambda order_id: order_id)
    with pytest.raises(InvalidArgumentError, match=r"a partial has no __name__: pass name="):
        tool(functools.partial(lookup, order_id="o1"))

    assert tool(lookup).name == "lookup"
    assert tool()(lookup).name == "lookup"
    assert tool(name="find-order_2")(lookup).name == "find-order_2"
    assert tool("find")(lookup).name == "find"
    assert tool(name="find")(lambda order_id: order_id).name == "find"
    assert Tool("x" * 64, lookup).name == "x" * 64


async def test_run_with_an_existing_id_and_another_task_or_definition_is_refused() -> None:
    first = AgentDefinition(name="support", model=ScriptModel([]))
    other = AgentDefinition(name="billing", model=ScriptModel([]))
    async with Runtime("memory://", agents=[first, other]) as rt:
        state = await rt.run("support", "ticket-4711", "answer ticket 4711")
        assert state.status == "finished"
        with pytest.raises(AgentExistsError, match="under definition 'support', not 'billing'"):
            await rt.run("billing", "ticket-4711", "answer ticket 4711")
        with pytest.raises(AgentExistsError, match="with another task"):
            await rt.run("support", "ticket-4711", "another task")
        again = await rt.run("support", "ticket-4711", "answer ticket 4711")  # same: silent
    assert again.result == state.result


@tool
def book(
    when: dt.datetime,
    day: dt.date,
    at: dt.time,
    length: dt.timedelta,
    price: Decimal,
    ref: uuid.UUID,
    blob: bytes,
    seats: set[int],
    tags: frozenset[str],
) -> str:
    """Book a slot."""
    return "booked"


def test_value_type_parameters_have_their_json_schema_formats_and_arrive_as_their_types() -> None:
    assert book.spec()["parameters"]["properties"] == {
        "when": {"format": "date-time", "title": "When", "type": "string"},
        "day": {"format": "date", "title": "Day", "type": "string"},
        "at": {"format": "time", "title": "At", "type": "string"},
        "length": {"format": "duration", "title": "Length", "type": "string"},
        "price": {"anyOf": [{"type": "number"}, {"type": "string"}], "title": "Price"},
        "ref": {"format": "uuid", "title": "Ref", "type": "string"},
        "blob": {"format": "binary", "title": "Blob", "type": "string"},
        "seats": {"items": {"type": "integer"}, "title": "Seats", "type": "array", "uniqueItems": True},
        "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array", "uniqueItems": True},
    }
    values = book.validate(
        {
            "when": "2025-01-01T10:00:00+02:00",
            "day": "2025-01-02",
            "at": "10:30:00",
            "length": "PT1H",
            "price": "19.99",
            "ref": "12345678-1234-5678-1234-567812345678",
            "blob": "hi",
            "seats": [1, 2, 2],
            "tags": ["a"],
        }
    )
    assert values["when"] == dt.datetime(2025, 1, 1, 8, tzinfo=dt.UTC)
    assert values["length"] == dt.timedelta(hours=1) and values["price"] == Decimal("19.99")
    assert values["seats"] == {1, 2} and values["tags"] == frozenset({"a"}) and isinstance(values["ref"], uuid.UUID)
