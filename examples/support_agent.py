"""A support agent whose side effect runs once, across a crash.

The agent refunds an order through a payment service (here: a JSON file that
remembers idempotency keys, as Stripe's ``Idempotency-Key`` does). The first
process is killed (SIGKILL) right after the payment service took the refund and
before durably journaled the result, the worst moment. The refund tool declares
``on_unknown_outcome="reconcile"``: the resumed run asks the payment service
whether the call's key already happened, finds the refund, and journals it
instead of refunding twice.

    python examples/support_agent.py [DIRECTORY]

Exits 0 when the customer was refunded exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

import durably

AGENT_ID = "ticket-4711"


class PaymentService:
    """Stands in for a payment API: refunds are kept by idempotency key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def refunds(self) -> dict[str, str]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def refund(self, key: str, order: str) -> str:
        done = self.refunds()
        done.setdefault(key, f"refund of order {order}")  # a repeated key is not refunded again
        self.path.write_text(json.dumps(done))
        return done[key]


def support_agent(workdir: Path, *, crash: bool) -> durably.AgentDefinition:
    payments = PaymentService(workdir / "payments.json")

    async def already_refunded(ctx: durably.ToolContext) -> durably.Reconciled | None:
        """Asked on resume when the process died while ``refund`` ran."""
        done = payments.refunds()
        return durably.Reconciled(done[ctx.idempotency_key]) if ctx.idempotency_key in done else None

    @durably.tool(on_unknown_outcome="reconcile", reconcile=already_refunded)
    async def refund(order: str, *, ctx: durably.ToolContext) -> str:
        """Refund an order (a side effect: it must not happen twice).

        Args:
            order: the order number.
        """
        receipt = payments.refund(ctx.idempotency_key, order)
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the payment happened; its result is not journaled yet
        return receipt

    return durably.AgentDefinition(
        name="support", model=SupportModel(), tools=[refund], instructions="You answer support tickets."
    )


class SupportModel:
    """A scripted model; ``durably.models.openai.OpenAIChatModel("gpt-4.1-mini")`` is a real one."""

    name = "scripted-support"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        if messages[-1]["role"] == "tool":
            return durably.ModelResponse(f"Done: {messages[-1]['content']}. Sorry for the trouble!")
        return durably.ModelResponse("", (durably.ToolCall("c1", "refund", {"order": "4711"}),))


async def first_run(workdir: Path) -> None:
    """The process that crashes inside the tool."""
    async with durably.Runtime(f"sqlite:///{workdir / 'agents.db'}", agents=[support_agent(workdir, crash=True)]) as rt:
        await rt.run("support", AGENT_ID, "Order 4711 arrived broken, please refund it.")


async def resumed_run(workdir: Path) -> durably.AgentState:
    async with durably.Runtime(
        f"sqlite:///{workdir / 'agents.db'}", agents=[support_agent(workdir, crash=False)]
    ) as rt:
        return await (await rt.resume(AGENT_ID)).wait()


def main() -> int:
    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durably-support-"))
    if os.environ.get("SUPPORT_EXAMPLE_CRASH"):
        anyio.run(first_run, workdir)
        return 0  # not reached: the tool kills this process
    crashed = subprocess.run([sys.executable, __file__, str(workdir)], env={**os.environ, "SUPPORT_EXAMPLE_CRASH": "1"})
    print(f"first process ended by signal {-crashed.returncode}")
    state = anyio.run(resumed_run, workdir)
    refunds = PaymentService(workdir / "payments.json").refunds()
    print(f"agent {state.status}: {state.result}")
    print(f"refunds made: {len(refunds)}")
    return 0 if crashed.returncode == -signal.SIGKILL and state.status == "finished" and len(refunds) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
