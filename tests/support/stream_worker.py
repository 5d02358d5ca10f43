"""A worker process for the streaming crash test: runs one agent whose model streams
from a local server (``model_servers``) on a SQLite file; the test SIGKILLs it mid-stream.

``python stream_worker.py DB BASE_URL LEDGER PROVIDER``: PROVIDER is ``openai`` or
``anthropic``; the agent's tool appends one line to LEDGER per run of its effect.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from durably import AgentDefinition, RetryPolicy, Runtime, tool

LEASE_TTL = 1.0  # short, so the test's runtime takes the dead worker's agent over quickly


def definition(base_url: str, ledger: Path, provider: str) -> AgentDefinition:
    """The agent both the worker and the test's resuming runtime run."""

    @tool
    async def charge(amount: int) -> str:
        """Charge the customer.

        Args:
            amount: in cents.
        """
        with ledger.open("a") as out:
            out.write(f"{amount}\n")
        return f"charged {amount}"

    if provider == "openai":
        from durably.models.openai import OpenAIChatModel

        model = OpenAIChatModel("gpt-test", base_url=f"{base_url}/v1", api_key="sk-test")
    else:
        from durably.models.anthropic import AnthropicModel

        model = AnthropicModel("claude-test", base_url=base_url, api_key="sk-ant-test")
    return AgentDefinition(
        name="streamer", model=model, tools=[charge], retry=RetryPolicy(attempts=1, initial_s=0.01, jitter_s=0)
    )


async def main(db: str, base_url: str, ledger: str, provider: str) -> None:
    agent = definition(base_url, Path(ledger), provider)
    async with Runtime(f"sqlite:///{db}", agents=[agent], lease_ttl=LEASE_TTL) as rt:
        await rt.run("streamer", "s1", "Charge 5 cents")


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
