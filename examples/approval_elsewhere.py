"""An approval given from another process; the waiting worker runs the agent on.

A worker starts a deploy agent whose ``deploy`` tool needs a human's approval:
the agent parks (its state is its journal: no memory held) and the worker
serves the store. An operator's process, which knows nothing of the agent's
definition, finds the open approval and approves it; the worker's ``serve()``
sees the agent runnable, resumes it, and the deploy runs once.

    python examples/approval_elsewhere.py [DIRECTORY]

The operator's side is what ``durably approve AGENT APPROVAL_ID`` does.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

import durably

AGENT_ID = "release-1.4"


def store_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'agents.db'}"


def deploy_agent(workdir: Path) -> durably.AgentDefinition:
    @durably.tool(requires_approval=True)
    async def deploy(version: str) -> str:
        """Deploy a version to production (a human approves each call).

        Args:
            version: the version to deploy.
        """
        with open(workdir / "deploys.log", "a") as log:
            log.write(f"{version}\n")
        return f"{version} is live"

    return durably.AgentDefinition(name="deployer", model=DeployModel(), tools=[deploy])


class DeployModel:
    """Scripted: asks to deploy, then reports."""

    name = "scripted-deployer"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        if messages[-1]["role"] == "tool":
            return durably.ModelResponse(messages[-1]["content"])
        return durably.ModelResponse("", (durably.ToolCall("deploy-1", "deploy", {"version": "1.4.0"}),))


async def operator(workdir: Path) -> None:
    """Another process: approve the agent's open approval, by whoever holds the pager."""
    async with durably.Runtime(store_url(workdir)) as rt:
        state = await rt.status(AGENT_ID)
        (request,) = state.open_approvals()
        print(f"operator: approving {request['tool']}({request['arguments']})")
        await rt.approve(AGENT_ID, request["approval_id"], by="oncall", note="release window open")


async def worker(workdir: Path) -> int:
    async with durably.Runtime(store_url(workdir), agents=[deploy_agent(workdir)]) as rt:
        state = await rt.run("deployer", AGENT_ID, "Deploy 1.4.0 to production.")
        print(f"worker: agent {state.status}")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.serve(poll_interval=0.1, drain_signals=()))
            # The operator runs in its own process, as a person at a terminal would.
            await anyio.run_process([sys.executable, __file__, "--approve", str(workdir)], stdout=None, stderr=None)
            state = await rt.wait(AGENT_ID, until=["finished", "failed"], timeout=60)
            tg.cancel_scope.cancel()
    deploys = (workdir / "deploys.log").read_text().split()
    print(f"worker: agent {state.status}: {state.result}; deploys: {deploys}")
    return 0 if state.status == "finished" and deploys == ["1.4.0"] else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--approve"]:
        anyio.run(operator, Path(sys.argv[2]))
        sys.exit(0)
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durably-approval-"))
    sys.exit(anyio.run(worker, directory))
