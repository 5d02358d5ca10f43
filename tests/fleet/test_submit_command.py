"""``durably submit``: a shell hands a new agent to a live ``durably worker``, which runs it to the end.

On a SQLite file: the command prints where the agent will run (``queued``,
naming the live worker), the worker runs it to ``finished``, and the
command's refusals have the exit statuses of its siblings: 1 for an agent
that exists or a definition ``--agents`` does not define, 2 for a bad
``MODULE:ATTR`` or a time without a UTC offset.
"""

from __future__ import annotations

import json
import subprocess

import anyio
from fleet_processes import durably_submit as submit_command
from fleet_processes import spawn_worker, stop, submit, wait_for, workers_json

from durably import Runtime

TIMEOUT = 2.0  # --heartbeat-timeout of the worker


def durably_submit(url: str, tmp_path, *argv: str) -> subprocess.CompletedProcess[str]:
    return submit_command(url, tmp_path, *argv, environ={"WORKER_STEPS": "2"})


def status(url: str, agent_id: str) -> str:
    async def go() -> str:
        async with Runtime(url) as rt:
            return (await rt.status(agent_id)).status

    return anyio.run(go)


def test_submit_hands_an_agent_to_a_live_worker_and_refuses_like_its_siblings(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    submit(url, tmp_path, ["warm-up"], steps=1)  # the database exists before the worker
    worker = spawn_worker(url, tmp_path, "w1", "--heartbeat-timeout", str(TIMEOUT), steps=2)
    try:
        wait_for(
            lambda: [r for r in workers_json(url, TIMEOUT)["workers"] if r["status"] == "live"],
            30,
            "the worker heartbeats",
        )
        said = durably_submit(url, tmp_path, "slow-file", "ticket-1", "count", "--json")
        assert said.returncode == 0, said.stdout + said.stderr
        document = json.loads(said.stdout)
        assert (document["agent_id"], document["command"], document["status"]) == ("ticket-1", "submit", "running")
        assert document["placement"]["where"] == "queued" and "w1" in document["placement"]["reason"]
        wait_for(lambda: status(url, "ticket-1"), 30, "the worker runs it to the end", done=lambda s: s == "finished")

        plain = durably_submit(url, tmp_path, "slow-file", "ticket-2", "count")
        assert plain.returncode == 0 and plain.stdout.startswith("ticket-2: submitted at seq 1; status now running;")
        assert "queued: a live worker will run it" in plain.stdout

        exists = durably_submit(url, tmp_path, "slow-file", "ticket-1", "again", "--json")
        assert exists.returncode == 1 and json.loads(exists.stdout)["error"]["type"] == "AgentExistsError"
        unknown = durably_submit(url, tmp_path, "no-such-definition", "ticket-3")
        assert unknown.returncode == 1
        assert unknown.stdout.startswith("error: DefinitionNotRegisteredError: agent definition 'no-such-definition'")
        wait_for(lambda: status(url, "ticket-2"), 30, "the second one runs too", done=lambda s: s == "finished")
    finally:
        stop(worker)
    bad_module = durably_submit(url, tmp_path, "--agents", "no_such_module:agents", "slow-file", "ticket-3")
    assert bad_module.returncode == 2 and "no_such_module" in bad_module.stderr
    naive = durably_submit(url, tmp_path, "slow-file", "ticket-3", "--not-before", "2030-01-06T09:00")
    assert naive.returncode == 2 and "no UTC offset" in naive.stderr
    sleeping = durably_submit(url, tmp_path, "slow-file", "ticket-3", "--not-before", "2030-01-06T09:00Z", "--json")
    assert sleeping.returncode == 0 and json.loads(sleeping.stdout)["status"] == "sleeping"
