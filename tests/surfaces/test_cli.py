"""The ``durably`` command on click: read commands and their JSON, fork, exit codes, confirmations,
the environment's store, and untrusted text neutralised on the operator's terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import anyio
import click
import pytest

from durably import AgentDefinition, ModelResponse, Runtime, ToolCall, Usage, tool
from durably._cli.demo.survey import survey_agent
from durably._cli.main import cli, main
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._loop.state import AgentState, apply
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

DEMO_AGENT = "stdlib-survey-7"


def durably(*argv: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    environment = {**os.environ, "COLUMNS": "250", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "durably._cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        **kw,
    )


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> dict:
    """A store where ``durably demo`` ran (crash, resume, approval), written through $DURABLY_STORE."""
    work = tmp_path_factory.mktemp("demo")
    env = {"DURABLY_STORE": f"sqlite:///{work / 'elsewhere.db'}"}
    proc = durably("demo", "--modules", "3", "--seed", "7", env=env, cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (work / "elsewhere.db").exists() and not (work / "durably.db").exists()  # $DURABLY_STORE honoured
    return {"env": {**env, "DURABLY_NAMESPACE": "demo"}, "url": env["DURABLY_STORE"], "work": work}


def test_history_json_is_one_document_json_tool_reads(demo_store) -> None:
    pipeline = (
        f"{sys.executable} -m durably._cli history {DEMO_AGENT} --namespace demo --json | {sys.executable} -m json.tool"
    )
    proc = subprocess.run(
        pipeline, shell=True, capture_output=True, text=True, timeout=120, env={**os.environ, **demo_store["env"]}
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    records = document["records"]
    assert document["agent_id"] == DEMO_AGENT and [r["seq"] for r in records] == list(range(1, len(records) + 1))
    kinds = [r["kind"] for r in records]
    # The crash and the resumes are in the timeline: worker 2 and worker 3 each appended "resumed".
    assert kinds[0] == "started" and kinds.count("resumed") >= 2 and kinds[-1] == "finished"
    assert all(isinstance(r["at"], float) and r["summary"] and "payload" not in r for r in records)
    filtered = json.loads(
        durably(
            "history",
            DEMO_AGENT,
            "--namespace",
            "demo",
            "--json",
            "--kind",
            "approval_decided",
            "--payload",
            env=demo_store["env"],
        ).stdout
    )["records"]
    assert [r["kind"] for r in filtered] == ["approval_decided"] and filtered[0]["payload"]["approved"] is True
    text = durably("history", DEMO_AGENT, "--namespace", "demo", "--after", "3", env=demo_store["env"])
    assert text.returncode == 0 and text.stdout.splitlines()[0].split()[0] == "4"


async def folded_at(url: str, agent_id: str, seq: int) -> AgentState:
    state, stream = AgentState(), StreamId("demo", agent_id)
    async with open_store(url) as store:
        async for record in JournalReader(store, RecordCodec(), stream).records(upto=seq):
            apply(state, record)
    return state


async def test_state_at_matches_the_fold_of_the_records(demo_store) -> None:
    for seq in (1, 7, 20):
        proc = await anyio.to_thread.run_sync(
            lambda: durably(
                "state", DEMO_AGENT, "--namespace", "demo", "--at", str(seq), "--json", env=demo_store["env"]
            )
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        document = json.loads(proc.stdout)
        expected = (await folded_at(demo_store["url"], DEMO_AGENT, seq)).to_wire()
        assert document["seq"] == seq and document["state"] == json.loads(json.dumps(expected))
    beyond = durably("state", DEMO_AGENT, "--namespace", "demo", "--at", "100000", env=demo_store["env"])
    assert beyond.returncode == 1 and "SeqOutOfRangeError" in beyond.stdout


async def test_a_fork_made_by_the_cli_is_finished_by_serve(demo_store, tmp_path) -> None:
    records = json.loads(durably("history", DEMO_AGENT, "--namespace", "demo", "--json", env=demo_store["env"]).stdout)[
        "records"
    ]
    decided = next(r["seq"] for r in records if r["kind"] == "approval_decided")
    proc = durably(
        "fork", DEMO_AGENT, "--at", str(decided), "--as", "survey-fork", "--namespace", "demo", env=demo_store["env"]
    )
    assert proc.returncode == 0 and "status running" in proc.stdout, proc.stdout
    again = durably(
        "fork", DEMO_AGENT, "--at", str(decided), "--as", "survey-fork", "--namespace", "demo", env=demo_store["env"]
    )
    assert again.returncode == 1 and "AgentExistsError" in again.stdout
    agent = survey_agent(tmp_path, latency=0)
    async with Runtime(demo_store["url"], agents=[agent], namespace="demo") as rt:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.serve, 0.05)
                state = await rt.wait("survey-fork", until="finished", timeout=50)
                tg.cancel_scope.cancel()
    assert state.status == "finished" and state.forked_from["agent_id"] == DEMO_AGENT
    shown = json.loads(durably("show", "survey-fork", "--namespace", "demo", "--json", env=demo_store["env"]).stdout)
    assert shown["forked_from"]["seq"] == decided and shown["status"] == "finished"


def test_show_of_a_sigkilled_agent_names_its_dead_holder(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    worker = [
        sys.executable,
        "-m",
        "durably._cli.demo.worker",
        "--store",
        url,
        "--namespace",
        "default",
        "--agent-id",
        "victim",
        "--workdir",
        str(tmp_path / "work"),
        "--modules",
        "colorsys,bisect",
        "--crash-at",
        "2:tool:before_effect",
    ]
    killed = subprocess.run(worker, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    shown = durably("show", "victim", "--store", url)
    assert shown.returncode == 0, shown.stdout
    assert "dead holder" in shown.stdout and "process gone" in shown.stdout and "running" in shown.stdout
    info = json.loads(durably("show", "victim", "--store", url, "--json").stdout)
    assert info["lease"]["dead"] is True and info["lease"]["expires_at"] > info["last_activity_at"]
    owner = info["lease"]["owner"]  # worker_id/nonce@host:pid:start:boot:pidns, ~90 characters
    assert owner in shown.stdout
    listing = durably("agents", "--store", url)
    assert "dead holder" in listing.stdout
    # The table names the holder by its worker id (host:pid by default), not the whole owner string.
    row = next(line for line in listing.stdout.splitlines() if "victim" in line)
    worker_id = owner.split("/")[0]
    assert owner not in listing.stdout and f"{worker_id}: process gone" in row, row
    assert max(len(line) for line in listing.stdout.splitlines()) < 200, listing.stdout
    listed = json.loads(durably("agents", "--store", url, "--json").stdout)
    assert listed["agents"][0]["lease"]["owner"] == owner


async def test_agents_filters_sorts_and_prints_json(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    parked = AgentDefinition(name="parked", model=_HostileModel(safe=True), tools=[_gated()])
    async with Runtime(url, agents=[parked]) as rt:
        for agent_id in ("first", "second", "third"):
            await rt.run(parked, agent_id, "task")
        await rt.cancel("second", "no longer needed")
    everything = json.loads(durably("agents", "--store", url, "--json").stdout)
    assert [a["agent_id"] for a in everything["agents"]] == ["second", "third", "first"]  # last active first
    assert everything["agents"][1]["open_approvals"][0]["tool"] == "gated"
    only = json.loads(
        durably("agents", "--store", url, "--json", "--status", "waiting_approval", "--limit", "1").stdout
    )
    assert [a["agent_id"] for a in only["agents"]] == ["third"]
    none = durably("agents", "--store", url, "--definition", "other")
    assert none.returncode == 0 and "no agents matching the filters" in none.stdout


def test_exit_codes_version_and_error_documents(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    nowhere = durably("agents", "--store", url)
    assert nowhere.returncode == 1  # no database there: refused, none created
    assert not (tmp_path / "a.db").exists()
    # A missing database is a store problem, not a missing agent, and its message is not quoted.
    assert nowhere.stdout.startswith(f"error: InvalidStoreURLError: no durably database at '{tmp_path / 'a.db'}'")
    refused = json.loads(durably("agents", "--store", url, "--json").stdout)["error"]
    assert refused["type"] == "InvalidStoreURLError" and refused["message"].startswith("no durably database at '")
    version = durably("--version")
    assert version.returncode == 0 and version.stdout.startswith("durably ")
    public = subprocess.run([sys.executable, "-m", "durably", "--version"], capture_output=True, text=True, timeout=120)
    assert public.returncode == 0 and public.stdout == version.stdout  # python -m durably is the same command
    usage = durably("history")
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
    assert durably("agents", "--limit", "0").returncode == 2
    anyio.run(_one_agent, url)
    missing = durably("show", "ghost", "--store", url, "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["type"] == "AgentNotFoundError"
    assert json.loads(missing.stdout)["error"]["message"] == "no agent 'ghost' in namespace 'default'"  # unquoted
    assert main(["show", "ghost", "--store", url]) == 1
    assert main(["history", "--nope"]) == 2


def test_every_option_of_every_command_has_help() -> None:
    def walk(command: click.Command, path: str):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    for path, command in walk(cli, "durably"):
        assert command.help, path
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{path} {param.opts}"


def test_purge_asks_on_a_terminal_and_takes_yes_and_dry_run(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_one_agent, url)
    dry = durably("purge", "only", "--store", url, "--dry-run")
    assert dry.returncode == 0 and "would purge only: waiting_approval" in dry.stdout
    assert durably("show", "only", "--store", url).returncode == 0
    # On a terminal: the question is asked; "n" keeps the agent.
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "durably._cli", "purge", "only", "--store", url],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.write(leader, b"n\n")
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 1 and "for good?" in out and "nothing purged" in out
    assert durably("show", "only", "--store", url).returncode == 0
    # sweep asks the same way, after listing what it would purge.
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "durably._cli", "sweep", "--default", "0s", "--store", url],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.write(leader, b"n\n")
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 1 and "only: expired" in out and "for good?" in out and "nothing purged" in out
    assert durably("show", "only", "--store", url).returncode == 0
    gone = durably("purge", "only", "--store", url, "--yes")
    assert gone.returncode == 0 and "purged" in gone.stdout
    assert durably("show", "only", "--store", url).returncode == 1


HOSTILE = "c1\x1b[2K\x1b]52;c;cm0gLXJmIH4=\x07\u202eevil\x9b31m"


class _HostileModel:
    """Asks for one gated call whose id, arguments and text carry terminal control sequences."""

    name = "hostile"

    def __init__(self, safe: bool = False) -> None:
        self.safe = safe

    async def respond(self, messages, tools) -> ModelResponse:
        call_id = "c1" if self.safe else HOSTILE
        if any(m["role"] == "tool" for m in messages):
            return ModelResponse("done", (), Usage(1, 1, 0.0))
        return ModelResponse(
            "text " + ("" if self.safe else HOSTILE),
            (ToolCall(call_id, "gated", {"path": "ok" if self.safe else HOSTILE}),),
            Usage(1, 1, 0.0),
        )


def _gated():
    @tool(name="gated", requires_approval=True)
    async def gated(path: str, *, ctx) -> str:
        return path

    return gated


async def _one_agent(url: str, agent_id: str = "only", safe: bool = True) -> None:
    definition = AgentDefinition(name="hostile", model=_HostileModel(safe=safe), tools=[_gated()])
    async with Runtime(url, agents=[definition]) as rt:
        await rt.run(definition, agent_id, "task")


def test_control_sequences_from_the_model_are_shown_neutralised(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(lambda: _one_agent(url, "victim", False))
    outputs = {
        "agents": durably("agents", "--store", url),
        "show": durably("show", "victim", "--store", url),
        "history": durably("history", "victim", "--store", url, "--payload"),
        "state": durably("state", "victim", "--store", url),
        "agents --json": durably("agents", "--store", url, "--json"),
        "history --json": durably("history", "victim", "--store", url, "--json", "--payload"),
    }
    for name, proc in outputs.items():
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in proc.stdout, (name, repr(raw))
    assert "\\x1b]52;c;" in outputs["agents"].stdout and "\\u202eevil" in outputs["show"].stdout
    assert HOSTILE in json.loads(outputs["agents --json"].stdout)["agents"][0]["open_approvals"][0]["approval_id"]
    # The approval can still be decided by its real id.
    decided = durably("approve", "victim", HOSTILE, "--store", url)
    assert decided.returncode == 0 and "\x1b" not in decided.stdout


def test_approve_happened_checks_its_options_and_refuses_a_call_that_never_started(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_one_agent, url)
    assert durably("approve", "only", "c1", "--store", url, "--happened").returncode == 2  # --result is needed
    assert durably("approve", "only", "c1", "--store", url, "--result", "1").returncode == 2
    bad = durably("approve", "only", "c1", "--store", url, "--happened", "--result", "{nope")
    assert bad.returncode == 1 and "not JSON" in bad.stdout
    # c1 waits for its approval: it never ran, so there is no outcome to report (approve or deny it).
    proc = durably("approve", "only", "c1", "--store", url, "--happened", "--result", '{"sent": true}')
    assert proc.returncode == 1 and "never started" in proc.stdout, proc.stdout
    assert json.loads(durably("show", "only", "--store", url, "--json").stdout)["status"] == "waiting_approval"


async def test_retry_runs_a_failed_agent_again_here_or_in_a_worker(tmp_path, monkeypatch) -> None:
    import cli_agents

    url, marker = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "broken"
    marker.write_text("x")
    monkeypatch.setenv("FLAKY_FAIL", str(marker))
    async with Runtime(url, agents=[cli_agents.flaky]) as rt:
        for agent_id in ("a1", "a2"):
            assert (await rt.run(cli_agents.flaky, agent_id, "task")).status == "failed"
    marker.unlink()
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "support"), "FLAKY_FAIL": str(marker)}
    run = lambda *argv: durably(*argv, "--store", url, env=env)  # noqa: E731
    if not hasattr(Runtime, "retry"):
        proc = await anyio.to_thread.run_sync(run, "retry", "a1")
        assert proc.returncode == 1 and "no Runtime.retry" in proc.stdout
        pytest.skip("Runtime.retry is not in this build yet")
    bad = await anyio.to_thread.run_sync(run, "retry", "a1", "--agents", "cli_agents:nope")
    assert bad.returncode == 2 and "--agents" in bad.stderr
    # Without the definition the agent is made runnable for a worker that has it ...
    elsewhere = await anyio.to_thread.run_sync(run, "retry", "a1")
    assert elsewhere.returncode == 0 and "status now running" in elsewhere.stdout, elsewhere.stdout
    async with Runtime(url, agents=[cli_agents.flaky]) as rt:
        assert (await (await rt.resume("a1")).wait()).status == "finished"
    # ... with it, the command runs the agent itself until it stops or parks.
    here = await anyio.to_thread.run_sync(run, "retry", "a2", "--agents", "cli_agents:flaky")
    assert here.returncode == 0 and "status now finished" in here.stdout, here.stdout + here.stderr
    again = await anyio.to_thread.run_sync(run, "retry", "a2", "--agents", "cli_agents:flaky")
    assert again.returncode == 1 and "InvalidCommandError" in again.stdout  # not failed: nothing to retry


def test_the_commands_that_act_on_an_agent_print_json(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_one_agent, url)
    run = lambda *argv: durably(*argv, "--store", url, "--json")  # noqa: E731
    approved = run("approve", "only", "c1", "--by", "ana")
    assert approved.returncode == 0, approved.stdout
    document = json.loads(approved.stdout)
    assert {k: document[k] for k in ("namespace", "agent_id", "command", "status")} == {
        "namespace": "default",
        "agent_id": "only",
        "command": "approve",
        "status": "running",
    }
    assert document["placement"]["where"] == "unassigned"
    # no worker is live: what happens next, in words that do not read as a failure
    reason = document["placement"]["reason"]
    assert "the next serve() or resume() with its definition runs it" in reason, reason
    assert "nobody" not in reason and "not registered" not in reason, reason
    assert document["seq"] > 0
    again = run("approve", "only", "c1", "--by", "ana")
    assert again.returncode == 1
    assert json.loads(again.stdout)["error"]["type"] == "ApprovalAlreadyDecidedError"
    sent = json.loads(run("send", "only", "one more thing").stdout)
    assert sent["command"] == "send" and sent["status"] == "running" and sent["seq"] == document["seq"] + 1
    extend = run("extend", "only", "--steps", "1")  # no step limit to raise: refused, as a document
    assert extend.returncode == 1 and "nothing to extend" in json.loads(extend.stdout)["error"]["message"]
    cancelled = json.loads(run("cancel", "only", "--reason", "done with it").stdout)
    assert cancelled["status"] == "cancelled" and cancelled["placement"]["where"] == "not_running"
    refused = run("send", "only", "too late")
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["type"] == "InvalidCommandError"
    forked = json.loads(run("fork", "only", "--at", "2", "--as", "branch").stdout)
    assert forked["command"] == "fork" and forked["agent_id"] == "branch" and forked["forked_from"] == "only"


def test_agents_piped_is_never_cut_short_and_a_terminal_keeps_ids_whole(tmp_path) -> None:
    import io

    from rich.console import Console

    from durably._cli.output import Output

    url = f"sqlite:///{tmp_path / 'a.db'}"
    long_id = "ticket-4711-of-a-customer-with-a-long-name"
    anyio.run(_one_agent, url, long_id)
    piped = durably("agents", "--store", url, env={"COLUMNS": "80"})  # `durably agents | grep waiting_approval`
    assert piped.returncode == 0, piped.stdout
    rows = [line for line in piped.stdout.splitlines() if long_id in line]
    assert len(rows) == 1 and "waiting_approval" in rows[0] and "…" not in piped.stdout
    # On a terminal the other columns wrap to its width; the kept ones (id, status) stay whole.
    out = Output()
    out.console = Console(file=io.StringIO(), width=90, force_terminal=True, color_system=None, highlight=False)
    out.table(
        ["agent", "status", "lease", "reason"],
        [[long_id, "waiting_approval", "nobody " * 4, "because " * 20]],
        keep=("agent", "status"),
    )
    shown = out.console.file.getvalue()
    first = next(line for line in shown.splitlines() if long_id in line)
    assert "waiting_approval" in first and all(len(line) <= 90 for line in shown.splitlines())


def test_approve_records_the_login_name_without_user_and_refuses_no_name(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_one_agent, url)
    nameless = durably("approve", "only", "c1", "--store", url, "--by", "  ")
    assert nameless.returncode == 2 and "--by" in nameless.stderr
    environment = {k: v for k, v in os.environ.items() if k != "USER"}
    environment["LOGNAME"] = "ana-from-logname"  # what getpass.getuser() reads after $USER
    proc = subprocess.run(
        [sys.executable, "-m", "durably._cli", "approve", "only", "c1", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    history = json.loads(durably("history", "only", "--store", url, "--json", "--payload").stdout)["records"]
    decided = next(r["payload"] for r in history if r["kind"] == "approval_decided")
    assert decided["by"].startswith("ana-from-logname (pid ")


async def _eight_calls(url: str) -> None:
    from durably import FunctionAgent, Run

    def double(i: int) -> int:
        return 2 * i

    async def body(run: Run, task: str) -> list[int]:
        return [await run.call(double, i, name="double") for i in range(8)]

    definition = FunctionAgent("doubler", body)
    async with Runtime(url, agents=[definition]) as rt:
        assert (await rt.run(definition, "fn-1", "go")).status == "finished"


def test_show_of_a_function_agent_counts_its_calls_not_model_steps(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_eight_calls, url)
    shown = durably("show", "fn-1", "--store", url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.split() == ["calls:", "8", "(8", "done)"] for line in lines), shown.stdout
    assert not any(line.startswith("steps:") for line in lines), shown.stdout


def test_agents_counts_a_function_agents_calls_as_show_does(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    anyio.run(_eight_calls, url)
    listed = durably("agents", "--store", url)
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if "fn-1" in line]
    assert "8 calls (8 done)" in row, listed.stdout
    [agent] = json.loads(durably("agents", "--store", url, "--json").stdout)["agents"]
    assert agent["steps"] == 0 and agent["calls"] == {"started": 8, "done": 8}, agent
