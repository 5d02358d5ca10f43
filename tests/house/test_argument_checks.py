"""A wrong argument to a command or constructor is refused before anything is journaled.

A str where a bool is expected is truthy: ``approve(..., approved="no")`` used to
record an approval and run the gated tool. A bool parameter takes only a bool
(``ArgumentTypeError``). ``send`` takes a str content and a role a sent message
may have (``user``, ``system``); ``cancel`` a str reason or None.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from support_agents import gated_agent

from durably import AESGCMCipher, Runtime, SnapshotPolicy, tool
from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.storage import open_store
from durably.storage._crypto import StaticKeyProvider


async def journal(rt: Runtime, agent_id: str) -> list[tuple[int, str]]:
    return [(entry.seq, entry.kind) async for entry in rt.history(agent_id)]


@asynccontextmanager
async def parked():
    """A runtime whose ``g1`` (the gated agent) waits for approval ``c1``; ``ran``: the tool's calls.
    (A context manager, not an async fixture: the runtime's task group must be left in the test's task.)"""
    ran: list = []
    definition = gated_agent(ran)
    async with Runtime("memory://", agents=[definition]) as rt:
        assert (await rt.run(definition, "g1", "task")).status == "waiting_approval"
        yield rt, ran


@pytest.mark.parametrize("approved", ["no", "False", 0, 1, None])
async def test_approve_takes_only_a_bool_and_journals_nothing_else(approved):
    async with parked() as (rt, ran):
        before, messages = await journal(rt, "g1"), (await rt.status("g1")).messages
        with pytest.raises(ArgumentTypeError, match="approved must be True or False"):
            await rt.approve("g1", "c1", approved=approved)
        assert await journal(rt, "g1") == before
        state = await rt.status("g1")
        assert state.status == "waiting_approval" and state.messages == messages and ran == []
        result = await rt.approve("g1", "c1", approved=False)  # the real answer still applies: the call never runs
        if result.placement.handle is not None:
            await result.placement.handle.wait()
        assert (await rt.status("g1")).status == "finished" and ran == []


@pytest.mark.parametrize("content", [None, 3, b"bytes", ["x"]])
async def test_send_refuses_content_that_is_not_a_str(content):
    async with parked() as (rt, ran):
        before = await journal(rt, "g1")
        with pytest.raises(ArgumentTypeError, match="content must be a str"):
            await rt.send("g1", content)
        assert await journal(rt, "g1") == before and ran == []


@pytest.mark.parametrize("role", ["bogus", "tool", "assistant", "", None])
async def test_send_refuses_a_role_a_sent_message_cannot_have(role):
    async with parked() as (rt, ran):
        before, messages = await journal(rt, "g1"), (await rt.status("g1")).messages
        with pytest.raises(InvalidArgumentError, match="role must be one of user, system"):
            await rt.send("g1", "x", role=role)
        assert await journal(rt, "g1") == before
        state = await rt.status("g1")
        assert state.messages == messages and state.inbox == [] and ran == []


async def test_send_takes_the_user_and_system_roles():
    async with parked() as (rt, _):
        for role in ("user", "system"):
            await rt.send("g1", f"from {role}", role=role)
        assert [m["role"] for m in (await rt.status("g1")).inbox] == ["user", "system"]


@pytest.mark.parametrize("reason", [3, b"why", ["why"], True])
async def test_cancel_refuses_a_reason_that_is_not_a_str(reason):
    async with parked() as (rt, ran):
        before = await journal(rt, "g1")
        with pytest.raises(ArgumentTypeError, match="reason must be a str or None"):
            await rt.cancel("g1", reason=reason)
        assert await journal(rt, "g1") == before and (await rt.status("g1")).status == "waiting_approval"


async def test_cancel_without_a_reason():
    async with parked() as (rt, _):
        assert (await rt.cancel("g1", reason=None)).status == "cancelled"
        assert (await rt.status("g1")).reason == ""


async def test_resume_force_takes_only_a_bool():
    """The agent is runnable and not live here: a resume would journal ``resumed``."""
    ran: list = []
    definition = gated_agent(ran)
    async with open_store("memory://") as store:
        async with Runtime(store, agents=[definition]) as rt:
            assert (await rt.run(definition, "g1", "task")).status == "waiting_approval"
        async with Runtime(store) as bare:  # no definition here: the approval leaves it runnable
            await bare.approve("g1", "c1", approved=False)
        async with Runtime(store, agents=[definition]) as rt:
            before = await journal(rt, "g1")
            assert (await rt.status("g1")).status == "running"
            with pytest.raises(ArgumentTypeError, match="force must be True or False"):
                await rt.resume("g1", force="x")
            assert await journal(rt, "g1") == before and ran == []


async def effect() -> int:
    return 1


CONSTRUCTORS = {
    "allow_plaintext": lambda v: AESGCMCipher(StaticKeyProvider({"k1": b"\x01" * 32}), allow_plaintext=v),
    "compact": lambda v: SnapshotPolicy(compact=v),
    "requires_approval": lambda v: tool(name="effect", requires_approval=v)(effect),
}


@pytest.mark.parametrize("value", ["yes", "no", 1, None])
@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_constructors_take_only_a_bool(name, value):
    with pytest.raises(ArgumentTypeError, match=f"{name} must be True or False"):
        CONSTRUCTORS[name](value)


def test_the_bools_themselves_are_taken():
    keys = StaticKeyProvider({"k1": b"\x01" * 32})
    assert AESGCMCipher(keys).required and not AESGCMCipher(keys, allow_plaintext=True).required
    assert SnapshotPolicy(compact=True).keep == 2

    assert tool(name="effect", requires_approval=True)(effect).requires_approval is True


@pytest.mark.parametrize(
    ("statuses", "error"), [("finished", ArgumentTypeError), (3, ArgumentTypeError), (["bogus"], InvalidArgumentError)]
)
async def test_a_status_filter_is_a_collection_of_known_statuses(statuses, error):
    async with Runtime("memory://", agents=[gated_agent([])]) as rt:
        await rt.run("gated", "g1", "task")
        for listing in (rt.agents, rt.describe_all):
            with pytest.raises(error, match="status"):
                await listing(statuses=statuses)
        assert [s.agent_id for s in await rt.agents(statuses=["waiting_approval"])] == ["g1"]


def test_register_takes_only_a_definition():
    with pytest.raises(ArgumentTypeError, match="AgentDefinition"):
        Runtime("memory://").register(3)


@pytest.mark.parametrize("expected_seq", [True, 1.5, float("nan"), 2**63, -1, "0", None])
async def test_an_append_needs_an_int_expected_seq_a_store_can_hold(expected_seq):
    from durably.storage import AppendRequest, InvalidRequestError, StreamId

    async with open_store("memory://") as store:  # the check is the SPI's check_append, which every adapter calls
        with pytest.raises(InvalidRequestError, match="expected_seq"):
            await store.append_batch([AppendRequest(StreamId("ns", "a"), expected_seq, [b"x"])])
        with pytest.raises(InvalidRequestError, match="StreamId"):
            await store.append_batch([AppendRequest("ns/a", 0, [b"x"])])  # type: ignore[arg-type]
        assert await store.last_seq(StreamId("ns", "a")) == 0


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: __import__("durably").Redact(None), ArgumentTypeError),
        (lambda: __import__("durably").Redact(1), ArgumentTypeError),
        (lambda: __import__("durably").Redact("result", tool=""), InvalidArgumentError),
        (lambda: __import__("durably").Redact("result", reason=3), ArgumentTypeError),
        (lambda: __import__("durably").ephemeral(None), ArgumentTypeError),  # None would cover every tool
        (lambda: __import__("durably").ephemeral(""), InvalidArgumentError),
    ],
)
def test_a_redaction_rule_is_checked_when_built(make, error):
    with pytest.raises(error):
        make()


@pytest.mark.parametrize(
    "options",
    [
        {"poll_interval": float("nan")},
        {"poll_interval": -1},
        {"poll_interval": 0},
        {"drain_timeout": float("nan")},
        {"max_agents": True},
        {"max_agents": 0},
        {"max_agents": 1.5},
    ],
)
async def test_serve_checks_its_options_before_it_resumes_anything(options):
    async with Runtime("memory://", agents=[gated_agent([])]) as rt:
        with pytest.raises(InvalidArgumentError):
            await rt.serve(**options)


@pytest.mark.parametrize(
    "call",
    [
        lambda rt: rt.run("gated", "g1", None),
        lambda rt: rt.run("gated", "g1", 1),
        lambda rt: rt.run("gated", "g1", "task", budget=3),
    ],
)
async def test_run_checks_its_task_and_budget_before_anything_is_journaled(call):
    async with Runtime("memory://", agents=[gated_agent([])]) as rt:
        with pytest.raises(ArgumentTypeError):
            await call(rt)
        assert await rt.agents() == []


async def test_history_refuses_a_bare_str_of_kinds():
    async with Runtime("memory://", agents=[gated_agent([])]) as rt:
        await rt.run("gated", "g1", "task")
        with pytest.raises(ArgumentTypeError, match="kinds"):
            rt.history("g1", kinds="tool_result")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"rules": [1]}, ArgumentTypeError),
        ({"rules": "arguments.password"}, ArgumentTypeError),  # a str would be read as its letters
        ({"secret_names": "password"}, ArgumentTypeError),
        ({"secret_names": {""}}, ArgumentTypeError),
        ({"token_patterns": None}, ArgumentTypeError),
        ({"mask_echoes": "no"}, ArgumentTypeError),
        ({"min_echo_length": 0}, InvalidArgumentError),
        ({"min_echo_length": 2.5}, InvalidArgumentError),
    ],
)
def test_a_redaction_policy_is_checked_when_built(kwargs, error):
    """A malformed policy is refused when built, not accepted to fail the first record an agent writes."""
    from durably import RedactionPolicy

    with pytest.raises(error, match="RedactionPolicy"):
        RedactionPolicy(**kwargs)


def test_a_redaction_policy_takes_lists_and_keeps_tuples():
    from durably import Redact, RedactionPolicy

    policy = RedactionPolicy(rules=[Redact("arguments.token")], secret_names={"pin"})
    assert policy.rules == (Redact("arguments.token"),) and policy.secret_names == frozenset({"pin"})
    hash(policy)  # still usable as a frozen value


@pytest.mark.parametrize("keys", [[1], "k", None, [("k", b"\0" * 32)]])
def test_a_static_key_provider_needs_a_mapping(keys):
    from durably.errors import KeyConfigError

    with pytest.raises(KeyConfigError, match="mapping"):
        StaticKeyProvider(keys)


@pytest.mark.parametrize(
    ("scheme", "factory", "error"),
    [
        ("", object, InvalidArgumentError),
        ("1abc", object, InvalidArgumentError),
        ("my scheme", object, InvalidArgumentError),
        (None, object, ArgumentTypeError),
        ("ok", 1, ArgumentTypeError),
    ],
)
def test_register_store_checks_the_scheme_and_factory(scheme, factory, error):
    from durably.storage import known_schemes, register_store

    before = known_schemes()
    with pytest.raises(error, match="register_store"):
        register_store(scheme, factory)
    assert known_schemes() == before


@pytest.mark.parametrize("until", [3, 1.5, [3], {"finished": 1, 2: 3}])
async def test_wait_refuses_an_until_that_is_not_statuses(until):
    from durably.errors import InvalidCommandError

    async with Runtime("memory://", agents=[gated_agent([])]) as rt:
        await rt.run("gated", "g1", "task")
        with pytest.raises(InvalidCommandError, match="until"):
            await rt.wait("g1", until, timeout=1)


def test_dir_of_durably_lists_the_public_names_only():
    import durably

    names = set(dir(durably))
    assert set(durably.__all__) <= names
    assert not names & {"Any", "TYPE_CHECKING", "importlib", "annotations"}
