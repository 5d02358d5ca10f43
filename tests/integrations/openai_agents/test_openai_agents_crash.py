"""SIGKILL at every boundary of a durable OpenAI Agents run, on SQLite and PostgreSQL.

The run (tests/support/openai_agents_worker.py) asks the model (turn 1), which
calls ``charge``; asks again (turn 2), which calls ``notify`` (needs approval);
asks again (turn 3) and answers. Each trial kills a fresh run's process once at
one boundary: during a model request (the server kills the client before it
answers: the answer was never stored), inside a tool before its effect, inside it
after its effect (before its result is stored), and while parked at the approval
(the process is gone; the approval is decided from another process). Then
processes resume it until it finishes, a human answering the ``ask`` approvals
the way the policy documents (``result=`` for an effect that happened).

Checked in every trial: each effect in the ledger exactly once, the right
answer, and per model turn one request, plus one only for the turn whose
request was cut off: no stored answer is paid for twice.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from openai_agents_support import ThreadedChatServer, completion
from openai_agents_worker import run_once

import durably

BOUNDARIES = [
    "model:1",
    "charge:before",
    "charge:after",
    "model:2",
    "notify:before",
    "notify:after",
    "model:3",
]


class Script:
    """The model's side: answers by turn (tool results seen so far), kills the child at ``kill``."""

    def __init__(self) -> None:
        self.kill, self.pid, self.fired = "", 0, False
        self.turns: Counter[int] = Counter()

    def __call__(self, messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        turn = len(results) + 1
        self.turns[turn] += 1
        if self.kill == f"model:{turn}" and not self.fired:
            self.fired = True
            os.kill(self.pid, signal.SIGKILL)  # the client dies before any answer
            raise RuntimeError("client killed")
        if turn == 1:
            return completion(None, [("call_charge", "charge", {"amount": 5})])
        if turn == 2:
            return completion(None, [("call_notify", "notify", {"message": "billed"})])
        return completion("all done: " + " / ".join(results))


def _activation(store_url: str, url: str, agent_id: str, policy: str, tmp: Path, script: Script, kill: str):
    out = tmp / f"{agent_id}.json"
    out.unlink(missing_ok=True)
    child = multiprocessing.get_context("fork").Process(
        target=run_once, args=(store_url, url, agent_id, policy, str(out), str(tmp / f"{agent_id}.ledger"), kill)
    )
    script.kill, script.fired = kill, False
    child.start()
    script.pid = child.pid
    child.join(120)
    if child.is_alive():
        child.kill()
        pytest.fail(f"activation of {agent_id} with kill {kill!r} hung")
    return child.exitcode, json.loads(out.read_text()) if out.exists() else None


async def _decide(store_url: str, agent_id: str, approvals: dict, ledger: Path) -> None:
    """A human, from another process's runtime (which does not run the agent itself)."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    async with durably.Runtime(store_url) as rt:
        for approval_id, request in approvals.items():
            if approval_id.startswith("approve:"):  # the SDK's needs_approval
                await rt.approve(agent_id, approval_id, approved=True)
                continue
            if request["tool"] == "charge":  # the operator sees what would run again
                assert request["arguments"] == {"amount": 5}, request
            happened = [line for line in lines if line.split(" ", 2)[1] == request["key"]]
            if happened:  # the effect is there: report it, never run it again
                tool, _, detail = happened[0].split(" ", 2)
                await rt.approve(agent_id, approval_id, result=f"{tool} done: {detail}")
            else:
                await rt.approve(agent_id, approval_id, approved=True)


def _trial(store_url: str, url: str, policy: str, kill: str, tmp: Path, script: Script) -> None:
    agent_id = f"{policy}-{kill.replace(':', '-')}"
    script.turns.clear()
    killed, stood = False, None
    for _ in range(8):  # the kill stays armed until it fires (the notify ones: after the approval)
        exitcode, stood = _activation(store_url, url, agent_id, policy, tmp, script, "" if killed else kill)
        if exitcode == -signal.SIGKILL and not killed:
            killed = True
            continue
        assert exitcode == 0, f"{agent_id}: an activation ended with {exitcode}"
        if stood["status"] == "finished":
            break
        if stood["status"] == "waiting_approval":
            asyncio.run(_decide(store_url, agent_id, stood["approvals"], tmp / f"{agent_id}.ledger"))
    assert killed, f"{agent_id}: the kill at {kill} never happened"
    assert stood is not None and stood["status"] == "finished", (agent_id, stood)
    assert stood["output"] == "all done: charge done: 5 / notify done: billed"
    effects = Counter(line.split(" ")[0] for line in (tmp / f"{agent_id}.ledger").read_text().splitlines())
    assert effects == {"charge": 1, "notify": 1}, (agent_id, effects)
    cut = int(kill.split(":")[1]) if kill.startswith("model:") else 0
    assert script.turns == {t: 1 + (t == cut) for t in (1, 2, 3)}, (agent_id, script.turns)


@pytest.mark.parametrize("policy", ["reconcile", "ask"])
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_sigkill_at_every_boundary(kind, policy, tmp_path, request):
    store_url = f"sqlite:///{tmp_path / 'runs.db'}" if kind == "sqlite" else request.getfixturevalue("pg_server").url()
    script = Script()
    with ThreadedChatServer(script) as server:
        for kill in BOUNDARIES:
            _trial(store_url, server.url, policy, kill, tmp_path, script)
