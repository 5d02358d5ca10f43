"""An editor hands research to two researcher agents, then waits to publish: across a SIGKILL.

Three step features together:

* child agents ("agents as tools"): the editor's model calls its ``researcher``
  tool twice in one turn; each call starts a child agent (``post-1/r1``,
  ``post-1/r2``) in its own stream, and the editor parks until both have ended;
* a tool retry: the researchers' ``look_up`` meets a flaky upstream (a
  ``ConnectionError`` on its first attempt) and its ``ToolRetry`` policy runs it
  again after a journaled backoff, under the same idempotency key;
* a durable timer: the editor's ``schedule`` tool returns ``durably.Sleep``, so
  the editor sleeps (no process holds it) until the publication time, and a
  serving runtime wakes it then.

The first process is killed (SIGKILL) while the researchers work; a second
process picks everything up where the journals end. Each researcher's finding
reaches the editor exactly once, each topic was looked up once, and the post is
published once, after its timer.

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
    flaky = durably.ToolRetry(attempts=3, backoff=0.2, retry_on=(ConnectionError,))

    @durably.tool(on_unknown_outcome="retry", retry=flaky)
    async def look_up(topic: str, *, ctx: durably.ToolContext) -> str:
        """Look a topic up (slowly: the first process is killed meanwhile).

        Args:
            topic: what to look up.
        """
        if not (directory / "restarted").exists():
            await anyio.sleep(60)  # the first process dies in here
        reset = directory / f"reset-{ctx.idempotency_key}"
        if not reset.exists():  # the upstream resets the first connection of each lookup
            reset.touch()
            raise ConnectionError("upstream reset")  # journaled; the retry policy runs it again, same key
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
    """Asks the researchers about every topic at once, schedules, then publishes (scripted)."""

    name = "scripted-editor"

    async def respond(self, messages, tools) -> durably.ModelResponse:
        said = [m["content"] for m in messages if m["role"] == "tool"]
        found = [text for text in said if "found " in text]
        if "published" in said:
            return durably.ModelResponse("post: " + "; ".join(found))
        if "scheduled" in said:  # the timer fired: publication time
            return durably.ModelResponse("", (durably.ToolCall("p1", "publish", {"post": "; ".join(found)}),))
        if found:
            return durably.ModelResponse("", (durably.ToolCall("s1", "schedule", {"seconds": 1.0}),))
        calls = tuple(durably.ToolCall(f"r{i}", "researcher", {"task": t}) for i, t in enumerate(TOPICS, 1))
        return durably.ModelResponse("", calls)


def editor_tools(directory: Path) -> list[durably.Tool]:
    @durably.tool
    async def schedule(seconds: float) -> durably.Sleep:
        """Wait until the publication time (a durable timer: no process waits with it).

        Args:
            seconds: how long from now.
        """
        return durably.Sleep(seconds, result="scheduled")

    @durably.tool(on_unknown_outcome="retry")
    async def publish(post: str, *, ctx: durably.ToolContext) -> str:
        """Publish the post.

        Args:
            post: the text.
        """
        with (directory / "published.jsonl").open("a") as f:
            f.write(json.dumps({"post": post, "key": ctx.idempotency_key}) + "\n")
        return "published"

    return [schedule, publish]


def agents(directory: Path) -> list[durably.AgentDefinition]:
    child = researcher(directory)
    tools = [durably.agent_tool(child), *editor_tools(directory)]
    editor = durably.AgentDefinition(name="editor", model=EditorModel(), tools=tools)
    return [editor, child]


async def run_editor(directory: Path) -> None:
    editor, child = agents(directory)
    async with durably.Runtime(f"sqlite:///{directory / 'agents.db'}", agents=[editor, child]) as rt:
        state = await rt.run(editor, "post-1", "Write about durable agents")
        if state.status == "sleeping":  # the timer: a serving runtime wakes it when due
            print(f"editor sleeping: {state.reason}")
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.serve)
                state = await rt.wait("post-1", timeout=60)
                tg.cancel_scope.cancel()
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
    published = (directory / "published.jsonl").read_text().splitlines()
    print(f"published: {len(published)}")
    print(f"retries after ConnectionError: {len(list(directory.glob('reset-*')))}")


if __name__ == "__main__":
    main()
