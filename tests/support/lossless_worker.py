"""A worker for the lossless-results test: tools returning every supported type,
SIGKILLed after their results are durable, then resumed in a new process.

    lossless_worker.py DB crash    run until the model's second turn, then SIGKILL
    lossless_worker.py DB resume   resume, finish, print what each result became
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import os
import signal
import sys
import uuid
from decimal import Decimal

import anyio
import pydantic

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, tool


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Parcel:
    sku: str
    sent: dt.date
    sizes: tuple[int, int]


class Receipt(pydantic.BaseModel):
    id: uuid.UUID
    total: Decimal
    at: dt.datetime


VALUES = {
    "aware": dt.datetime(2025, 6, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "naive": dt.datetime(2025, 6, 1, 12, 30),
    "date": dt.date(2025, 6, 1),
    "time": dt.time(7, 45, 1, 5),
    "delta": dt.timedelta(hours=36, microseconds=1),
    "decimal": Decimal("19.99"),
    "uuid": uuid.UUID(int=42),
    "enum": Color.RED,
    "int_enum": Level.HIGH,
    "tuple": (1, "two", 3.0),
    "bytes": b"\x00\x01",
    "set": {1, 2, 3},
    "frozenset": frozenset({"a", "b"}),
    "dataclass": Parcel("A-1", dt.date(2025, 1, 2), (30, 20)),
    "model": Receipt(id=uuid.UUID(int=7), total=Decimal("5.10"), at=dt.datetime(2025, 1, 1, tzinfo=dt.UTC)),
}
ANNOTATIONS = {
    "aware": dt.datetime,
    "naive": dt.datetime,
    "date": dt.date,
    "time": dt.time,
    "delta": dt.timedelta,
    "decimal": Decimal,
    "uuid": uuid.UUID,
    "enum": Color,
    "int_enum": Level,
    "tuple": tuple[int, str, float],
    "bytes": bytes,
    "set": set[int],
    "frozenset": frozenset[str],
    "dataclass": Parcel,
    "model": Receipt,
}


def make_tool(name: str):
    async def fn():
        return VALUES[name]

    fn.__name__ = f"get_{name}"
    fn.__annotations__ = {"return": ANNOTATIONS[name]}
    return tool(fn)


TOOLS = [make_tool(name) for name in VALUES]


class Model:
    name = "lossless-model"

    def __init__(self, crash: bool) -> None:
        self.crash = crash

    async def respond(self, messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return ModelResponse("", tuple(ToolCall(f"c-{t.name}", t.name, {}) for t in TOOLS))
        if self.crash:
            os.kill(os.getpid(), signal.SIGKILL)  # every result is durable by now
        return ModelResponse("done")


async def main(db: str, mode: str) -> None:
    definition = AgentDefinition(name="lossless", model=Model(mode == "crash"), tools=TOOLS)
    async with Runtime(f"sqlite:///{db}", agents=[definition]) as rt:
        if mode == "crash":
            await rt.run("lossless", "l1", "collect")
            return
        state = await (await rt.resume("l1")).wait()
        report = {"status": state.status}
        for entry in state.ledger.values():
            name = entry["tool"].removeprefix("get_")
            rebuilt = definition.tool(entry["tool"]).load_result(entry["result"])
            report[name] = {
                "equal": rebuilt == VALUES[name],
                "type": type(rebuilt).__name__,
                "same_type": type(rebuilt) is type(VALUES[name]),
                "stored": type(entry["result"]).__name__,
            }
        print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
