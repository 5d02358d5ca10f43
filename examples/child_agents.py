"""An editor hands research to two researcher agents ("agents as tools"), across a SIGKILL.

The editor's model calls its ``researcher`` tool twice in one turn: each call
starts a child agent (``post-1/r1``, ``post-1/r2``) in its own stream, and the
editor parks until both have ended. The first process is killed (SIGKILL) while
the researchers work; a second process picks everything up where the journals
end. Each researcher's finding reaches the editor exactly once, and each
researcher looked its topic up once.

    python examples/child_agents.py [DIRECTORY]
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

TOPICS = ["write-ahead logs", "fencing tokens"]


def lookups_file(directory: Path) -> Path:
    return directory / "lookups.jsonl"


def researcher(directory: Path) -> durably.AgentDefinition:
    @durably.tool(on_unknown_outcome="retry")
    async def look_up(topic: str, *, ctx: durably.ToolContext) -> str:
        """Look a topic up (slowly: the first process is killed meanwhile).

        Args:
            topic: what to look up.
        """
        if not (directory / "restarted").exists():
            await anyio.sleep(60)  # the first process dies in here
        with lookups_file(directory).open("a") as f:
            f.write(json.dumps({"topic": topic, "key": ctx.idempotency_key}) + "\n")
        return f"{topic}: see the notes"

    class ResearchModel:
        """Looks its task up, then answers with what it found (scripted; swap in a real model adapter)."""

        name = "scripted-research"

        async def respond(self, messages, tools) -> durably.ModelResponse:
            task = next(m["content"] for m in messages if m["role"] == "user")
            if messages[-1]["role"] == "tool":
                return durably.ModelResponse(f"found {messages[-1]['content']}")
            return durably.ModelResponse("", (durably.ToolCall("l1", "look_up", {"topic": task}),))

    return durably.AgentDefinition(name="researcher", model=ResearchModel(), tools=[look_up])


class EditorModel:
    """Asks the researchers about every topic at once, then writes (scripted)."""

    name = "scripted-editor"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        found = [m["content"] for m in messages if m["role"] == "tool"]
        if found:
            return durably.ModelResponse("post: " + "; ".join(found))
        calls = tuple(durably.ToolCall(f"r{i}", "researcher", {"task": t}) for i, t in enumerate(TOPICS, 1))
        return durably.ModelResponse("", calls)


def agents(directory: Path) -> list[durably.AgentDefinition]:
    child = researcher(directory)
    editor = durably.AgentDefinition(name="editor", model=EditorModel(), tools=[durably.agent_tool(child)])
    return [editor, child]


async def run_editor(directory: Path) -> None:
    editor, child = agents(directory)
    async with durably.Runtime(f"sqlite:///{directory / 'agents.db'}", agents=[editor, child]) as rt:
        state = await rt.run(editor, "post-1", "Write about durable agents")
        print(f"editor {state.status}: {state.result}")
        for child_id in sorted(c["agent_id"] for c in state.children.values()):
            print(f"child {child_id}: {(await rt.status(child_id)).status}")


def main() -> None:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    directory.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2:  # the worker process
        anyio.run(run_editor, directory)
        return
    first = subprocess.Popen([sys.executable, __file__, str(directory), "worker"])

    async def wait_for_children() -> None:
        async with durably.Runtime(f"sqlite:///{directory / 'agents.db'}") as rt:
            with anyio.fail_after(60):
                while True:
                    states = [s for s in await rt.agents() if s.agent_id.startswith("post-1/")]
                    if len(states) == 2 and all(s.ledger for s in states):
                        return  # both researchers are inside their tool
                    await anyio.sleep(0.1)

    anyio.run(wait_for_children)
    os.kill(first.pid, signal.SIGKILL)
    print(f"first process: signal {-first.wait()}")
    (directory / "restarted").touch()
    subprocess.run([sys.executable, __file__, str(directory), "worker"], check=True)
    lines = lookups_file(directory).read_text().splitlines()
    print(f"lookups: {len(lines)} for {len(TOPICS)} topics")


if __name__ == "__main__":
    main()
