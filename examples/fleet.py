"""A fleet: ``durably worker`` runs these agents, another process hands it work with ``Runtime.submit``.

From the repository root, with the venv active (the store is ``$DURABLY_STORE``,
default ``sqlite:///durably.db``, as for every ``durably`` command)::

    durably worker --agents examples.fleet:agents &   # runs what the store hands it; SIGTERM drains
    python examples/fleet.py submit 3                 # hands it ticket-1..3 (Runtime.submit)
    durably workers                                   # who serves the store, what each holds

``python examples/fleet.py [DIRECTORY]`` does all of that in a fresh store (in DIRECTORY,
which must exist; exit 2 otherwise; default: a new temporary one) and
exits 0 once the worker has answered every ticket, drained on SIGTERM and
exited 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

import durably

HERE = Path(__file__).resolve().parent


class TicketModel:
    """A scripted model; ``durably.models.openai.OpenAIChatModel("gpt-4.1-mini")`` is a real one."""

    name = "scripted-tickets"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        if messages[-1]["role"] == "tool":
            return durably.ModelResponse(f"Answered: {messages[-1]['content']}")
        return durably.ModelResponse("", (durably.ToolCall("c1", "reply", {"text": "We are on it."}),))


@durably.tool(on_unknown_outcome="retry")
async def reply(text: str, *, ctx: durably.ToolContext) -> str:
    """Reply to the customer (here: the reply is the result, in the journal: ``durably history``).

    Args:
        text: the reply.
    """
    return f"replied to {ctx.agent_id}: {text} (worker pid {os.getpid()})"


#: What ``durably worker --agents examples.fleet:agents`` runs.
agents = [durably.AgentDefinition(name="tickets", model=TicketModel(), tools=[reply])]


async def submit(store: str, count: int) -> None:
    """Hand ``ticket-1`` .. ``ticket-{count}`` to the workers and say where each will run."""
    async with durably.Runtime(store) as rt:
        for n in range(1, count + 1):
            try:
                result = await rt.submit(agents[0], f"ticket-{n}", f"Ticket {n}: my order is late.")
            except durably.AgentExistsError:
                print(f"ticket-{n}: already submitted")
                continue
            print(f"ticket-{n}: {result.status}, {result.placement.where}: {result.placement.reason}")


async def answered(store: str, count: int) -> int:
    async with durably.Runtime(store) as rt:
        states = [await rt.status(f"ticket-{n}") for n in range(1, count + 1)]
    return sum(s.status == "finished" for s in states)


def wait_for_worker(env: dict[str, str], timeout: float = 60.0) -> None:
    """Poll ``durably workers --json`` until a worker serves the store (a loaded machine may take seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = subprocess.run(
            [sys.executable, "-m", "durably", "workers", "--json"], env=env, capture_output=True, text=True
        )
        if listing.returncode == 0 and json.loads(listing.stdout)["workers"]:
            return
        time.sleep(0.2)
    raise SystemExit("no worker started within 60 s")


def tour(folder: Path) -> int:
    """A worker process, three tickets, ``durably workers``, then SIGTERM: 0 when all went as said."""
    store = f"sqlite:///{folder / 'durably.db'}"
    env = {**os.environ, "DURABLY_STORE": store, "PYTHONPATH": str(HERE.parent)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "durably", "worker", "--agents", "examples.fleet:agents", "--worker-id", "tour"],
        cwd=folder,
        env=env,
    )
    try:
        wait_for_worker(env)  # its first heartbeat: submit then names it
        anyio.run(submit, store, 3)
        deadline = time.monotonic() + 60
        while anyio.run(answered, store, 3) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run([sys.executable, "-m", "durably", "workers"], env=env, check=True)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    done = anyio.run(answered, store, 3)
    print(f"tickets answered: {done}; worker exited {code}")
    return 0 if done == 3 and code == 0 else 1


def main() -> int:
    if sys.argv[1:2] == ["submit"]:
        anyio.run(submit, os.environ.get("DURABLY_STORE", "sqlite:///durably.db"), int(sys.argv[2]))
        return 0
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durably-fleet-"))
    if not folder.is_dir():  # the store and the worker's working directory go there
        print(f"fleet.py: {str(folder)!r} is not a directory: give an existing one (or none)", file=sys.stderr)
        return 2
    return tour(folder)


if __name__ == "__main__":
    sys.exit(main())
