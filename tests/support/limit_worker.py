"""A worker holding a concurrency slot: its one agent's model call never returns.

``python limit_worker.py STORE_URL ENTERED_FILE``: a runtime (worker id
``limit-worker``, lease ttl 2 s) under ``Limit("model:hang-model", concurrency=1)``
starts agent ``hung``, whose model creates ENTERED_FILE once inside the call and
then waits for ever; the test SIGKILLs the process there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from durably import AgentDefinition, Limit, Runtime


class HangModel:
    name = "hang-model"

    def __init__(self, entered: Path) -> None:
        self.entered = entered

    async def respond(self, messages, tools):
        self.entered.touch()
        await anyio.sleep_forever()


async def main(url: str, entered: Path) -> None:
    definition = AgentDefinition(name="hanging", model=HangModel(entered))
    limit = Limit(key="model:hang-model", concurrency=1)
    async with Runtime(url, agents=[definition], worker_id="limit-worker", lease_ttl=2.0, limits=[limit]) as rt:
        handle = await rt.start(definition, "hung", "task")
        await handle.wait()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], Path(sys.argv[2]))
