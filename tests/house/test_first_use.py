"""What a new user meets first, from a clean clone: errors that say what to do, names that are public,
objects that print usefully. Each test is one finding of the first-use review."""

from __future__ import annotations

import subprocess
import sys

import pytest

import durably
from durably import ToolContext


@pytest.mark.parametrize(
    "module, extra", [("durably.models.openai", "openai"), ("durably.models.anthropic", "anthropic")]
)
def test_a_model_adapter_without_its_vendor_client_names_the_extra(module, extra):
    code = (
        f"import sys\nsys.modules[{extra!r}] = None  # the vendor client is not installed\n"
        "import durably\n"
        f"try:\n    import {module}\n"
        "except durably.ExtraNotInstalledError as exc:\n"
        "    assert isinstance(exc, ImportError) and exc.extra == " + repr(extra) + ", exc\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"pip install -e '.[{extra}]'" in proc.stdout and module in proc.stdout


async def _not_started_calls(rt):
    """Every public ``Runtime`` method that needs the store, called on ``rt``."""
    yield "run", lambda: rt.run("a", "x", "task")
    yield "start", lambda: rt.start("a", "x", "task")
    yield "resume", lambda: rt.resume("x")
    yield "resume_all", lambda: rt.resume_all()
    yield "retry", lambda: rt.retry("x")
    yield "status", lambda: rt.status("x")
    yield "agents", lambda: rt.agents()
    yield "approve", lambda: rt.approve("x", "c1")
    yield "send", lambda: rt.send("x", "hi")
    yield "cancel", lambda: rt.cancel("x")
    yield "extend_budget", lambda: rt.extend_budget("x", steps=1)
    yield "purge", lambda: rt.purge("x")
    yield "lease_holder", lambda: rt.lease_holder("x")
    yield "describe", lambda: rt.describe("x")
    yield "describe_all", lambda: rt.describe_all()
    yield "state_at", lambda: rt.state_at("x", 1)
    yield "fork", lambda: rt.fork("x", 1, "y")
    yield "wait", lambda: rt.wait("x")
    yield "drain", lambda: rt.drain()
    yield "serve", lambda: rt.serve()
    yield "reencrypt", lambda: rt.reencrypt()
    yield "sweep", lambda: rt.sweep(durably.RetentionPolicy())


async def test_a_runtime_used_without_async_with_says_to_enter_it():
    from durably import AgentDefinition, ModelResponse

    class Done:
        name = "done"

        async def respond(self, messages, tools):
            return ModelResponse("done")

    rt = durably.Runtime("memory://first-use", agents=[AgentDefinition(name="a", model=Done())])
    assert "not started" in repr(rt) and "memory://first-use" in repr(rt)
    async for name, call in _not_started_calls(rt):
        with pytest.raises(durably.RuntimeNotStartedError, match=r"async with Runtime\(") as caught:
            await call()
        assert isinstance(caught.value, durably.DurablyError), name
    for _name, call in (
        ("history", lambda: rt.history("x")),
        ("watch", lambda: rt.watch("x")),
        ("watch_namespace", lambda: rt.watch_namespace()),
    ):
        with pytest.raises(durably.RuntimeNotStartedError):
            call()
    with pytest.raises(AttributeError):
        rt.no_such_attribute  # noqa: B018 - other names still raise AttributeError
    async with rt:
        assert "started" in repr(rt) and "not started" not in repr(rt)
        assert (await rt.run("a", "x", "task")).status == "finished"


@pytest.mark.parametrize("store", [123, None, b"sqlite:///a.db", object()])
def test_a_runtime_refuses_what_is_not_a_store(store):
    with pytest.raises(durably.InvalidStoreError, match="store URL") as caught:
        durably.Runtime(store)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, durably.DurablyError)


def test_key_error_based_errors_print_their_message_unquoted():
    for error in (
        durably.AgentNotFoundError("no agent 'nope' in namespace 'default'"),
        durably.BlobNotFoundError("no blob abc for default/x"),
    ):
        assert isinstance(error, KeyError)
        assert str(error) == error.args[0] and not str(error).startswith(('"', "'"))
    assert str(durably.AgentNotFoundError()) == ""


async def test_a_decided_approval_answers_already_decided_once_the_agent_finished_too():
    from durably import AgentDefinition, ModelResponse, ToolCall, tool

    @tool(requires_approval=True)
    async def publish(title: str) -> str:
        return f"published {title}"

    class Publisher:
        name = "publisher"

        async def respond(self, messages, tools):
            if messages[-1]["role"] == "tool":
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "publish", {"title": "report"}),))

    definition = AgentDefinition(name="publisher", model=Publisher(), tools=[publish])
    async with durably.Runtime("memory://", agents=[definition]) as rt:
        assert (await rt.run(definition, "b2", "publish it")).status == "waiting_approval"
        decided = await rt.approve("b2", "c1", by="ana")
        await decided.placement.handle.wait()
        assert (await rt.status("b2")).status == "finished"
        with pytest.raises(durably.ApprovalAlreadyDecidedError) as caught:
            await rt.approve("b2", "c1", by="bob")
        assert caught.value.decision["by"] == "ana" and caught.value.approval_id == "c1"
        with pytest.raises(durably.InvalidCommandError, match="finished"):  # an unknown approval: the agent's state
            await rt.approve("b2", "c9", by="bob")


async def test_a_leased_agent_is_refused_naming_the_lease_expiry_in_iso_8601():
    error = durably.AgentLeasedError("a1", "worker-7@host:42", 1796139058.4)
    assert "lease until 2026-12-01T" in str(error) and str(error).endswith("Z)") and "1796139058" not in str(error)
    assert error.expires_at == 1796139058.4 and error.owner == "worker-7@host:42"
    assert str(durably.AgentLeasedError("a1", None, None)) == "agent 'a1' is run by another runtime"
    assert "AgentLeasedError" in durably.Runtime.run.__doc__


async def test_run_on_an_agent_another_runtime_runs_raises_agent_leased(tmp_path):
    from durably import AgentDefinition, ModelResponse

    class Slow:
        name = "slow"

        async def respond(self, messages, tools):
            import anyio

            await anyio.sleep(30)
            return ModelResponse("done")

    definition = AgentDefinition(name="slow", model=Slow())
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with durably.Runtime(url, agents=[definition], worker_id="first") as first:
        await first.start(definition, "a1", "task")
        async with durably.Runtime(url, agents=[definition], worker_id="second") as second:
            with pytest.raises(durably.AgentLeasedError) as caught:
                await second.run(definition, "a1", "task", on_running="raise")  # the default attaches
    assert isinstance(caught.value.expires_at, float) and "T" in str(caught.value).split("lease until ")[1]


def test_what_a_user_names_is_public():
    from durably._operate.placement import Placement, Where
    from durably._upkeep.retention import DAY

    assert durably.Where is Where and durably.Placement is Placement and durably.DAY == DAY == 86_400
    assert durably.Where.HERE == "here"


def test_public_docstrings_point_at_public_names():
    """The docstrings a user reads (``help(durably.Runtime)``) name ``durably.X``, never an internal module."""
    import inspect
    import re

    internal = re.compile(r"durably\.(runtime|storage\.crypto|storage\.codec)\b")
    names = ["Runtime", "AgentHandle", "CommandResult", "Placement", "Where", "AgentDescription", "RetentionPolicy"]
    for name in names:
        cls = getattr(durably, name)
        docs = [inspect.getdoc(cls) or ""] + [
            inspect.getdoc(m) or "" for n, m in inspect.getmembers(cls) if not n.startswith("_") and callable(m)
        ]
        found = [m.group(0) for doc in docs for m in internal.finditer(doc)]
        assert found == [], f"durably.{name}'s docstrings name internal modules: {found}"


def test_a_mistyped_policy_names_the_tool_and_the_valid_values():
    from durably import tool

    with pytest.raises(
        ValueError,
        match=r"tool 'charge': on_unknown_outcome='retyr' is not a policy; "
        r"use one of 'retry', 'reconcile', 'ask', 'fail'",
    ):

        @tool(on_unknown_outcome="retyr")
        async def charge(amount: int) -> str:
            return "charged"

    with pytest.raises(ValueError, match=r"tool 'refund': .*'retyr'"):
        durably.Tool(name="refund", fn=lambda amount: amount, on_unknown_outcome="retyr")


async def test_a_tool_is_callable_as_its_function_for_unit_tests():
    from durably import tool

    @tool(on_unknown_outcome="retry")
    async def send_email(to: str, body: str, *, ctx: ToolContext) -> str:
        """Send an email."""
        return f"sent to {to} with key {ctx.idempotency_key}"

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    ctx = ToolContext(idempotency_key="k1", agent_id="a", call_id="c1", attempt=1)
    assert await send_email(to="ana@example.com", body="hi", ctx=ctx) == "sent to ana@example.com with key k1"
    assert add(2, 3) == 5 and isinstance(add, durably.Tool)


async def test_handles_and_stores_print_what_they_are(tmp_path):
    from durably import AgentDefinition, ModelResponse
    from durably.storage import open_store

    sqlite = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert repr(sqlite) == f"SQLiteStore({str(tmp_path / 'a.db')!r}, closed)"
    assert repr(open_store("memory://named")) == "MemoryStore('memory://named', closed)"
    assert repr(open_store(f"file://{tmp_path}/files")) == f"FileSystemStore({str(tmp_path / 'files')!r}, closed)"
    assert repr(open_store("s3://bucket/agents/")).startswith("S3Store('s3://bucket/agents'")
    assert (
        repr(open_store("postgresql://ana:secret@db/agents"))
        == "PostgresStore('postgresql://ana:***@db/agents', closed)"
    )

    class Done:
        name = "done"

        async def respond(self, messages, tools):
            return ModelResponse("done")

    definition = AgentDefinition(name="d", model=Done())
    async with durably.Runtime("memory://", agents=[definition]) as rt:
        assert repr(rt.store) == "MemoryStore('memory://', open)"
        handle = await rt.start(definition, "a1", "task")
        assert repr(handle).startswith("<AgentHandle default/a1 ")
        await handle.wait()
        assert (
            repr(handle) == f"<AgentHandle default/a1 ended, status finished at seq {(await rt.status('a1')).last_seq}>"
        )
