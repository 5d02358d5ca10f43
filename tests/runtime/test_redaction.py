"""Redaction before persistence: secrets passed to tools, token-shaped strings and
ephemeral results never reach the stored bytes (SQLite file with its WAL,
filesystem store, S3 objects, memory), while the live activation still runs
the tool with the real value; after a restart the missing value fails clearly."""

from __future__ import annotations

import uuid

import anyio
import pytest
from privacy_support import (
    BACKENDS,
    GH_TOKEN,
    OPENAI_KEY,
    PASSWORD,
    PRIVATE_DOC,
    SECRETS,
    ScriptModel,
    decoded_text,
    files_bytes,
    spi_frames,
)
from privacy_support import backend as store_backend

from durably import AgentDefinition, ModelResponse, Runtime, SnapshotPolicy, ToolCall, Usage, tool
from durably._journal.journal_reader import JournalReader
from durably._journal.records import RecordCodec
from durably._journal.redaction_policy import (
    MARKER,
    Redact,
    RedactionPolicy,
    ephemeral,
    is_marker,
    marker,
    marker_paths,
)
from durably._journal.redactor import Redactor
from durably.errors import RedactedArgumentError
from durably.schemas._records import Kind
from durably.storage import StreamId, open_store
from durably.storage import _dictionaries as dictionaries


@pytest.fixture(autouse=True)
def greppable_frames(monkeypatch):
    """These tests prove by grepping stored bytes for plaintext that a secret is (or is no longer)
    there, so their controls need small records stored as before the shipped zstd dictionary:
    uncompressed. Compression hides nothing from an attacker (anyone can decompress), only from
    the grep; with the dictionary on, these greps would pass without meaning anything."""
    monkeypatch.setattr(dictionaries, "DEFAULT", None)


EVERY_SNAPSHOT = SnapshotPolicy(every_records=1, tail_ratio=0.0)  # snapshots hold the state too: check them


# -- the policy, unit by unit ----------------------------------------------------------


def test_secret_names_match_the_last_words_of_a_field_name_only() -> None:
    policy = RedactionPolicy()
    for name in (
        "password",
        "db_password",
        "apiKey",
        "X-Api-Key",
        "Authorization",
        "github_token",
        "client_secret",
        "accessToken",
        "private_key",
    ):
        assert policy.is_secret_name(name), name
    for name in ("input_tokens", "tokens", "max_tokens", "oauth_provider", "keyboard", "public_key", "user", "n"):
        assert not policy.is_secret_name(name), name


def test_tool_arguments_are_replaced_by_markers_and_the_input_is_never_mutated() -> None:
    redactor = Redactor(RedactionPolicy())
    arguments = {
        "user": "bob",
        "password": PASSWORD,
        "headers": {"Authorization": "Bearer abc"},
        "notes": ["plain", f"the key is {GH_TOKEN}"],
        "limit": 3,
    }
    data = {
        "text": "t",
        "tool_calls": [{"id": "c1", "name": "http", "arguments": arguments}],
        "usage": {"input_tokens": 5, "output_tokens": 6, "cost_usd": 0.0},
        "plan": None,
        "model": "m",
    }
    before = repr(data)
    stored = redactor.redact(Kind.MODEL_RESPONDED, data, "agent")
    assert repr(data) == before
    stored_args = stored["tool_calls"][0]["arguments"]
    assert stored_args["user"] == "bob" and stored_args["limit"] == 3 and stored_args["notes"][0] == "plain"
    assert stored_args["password"] == marker("secret-name")
    assert stored_args["headers"]["Authorization"] == marker("secret-name")
    assert stored_args["notes"][1] == marker("pattern:github-token")
    assert stored["usage"] == data["usage"]  # "input_tokens" is not a secret name
    assert marker_paths(stored_args) == ["headers.Authorization", "notes.1", "password"]
    # The live activation gets the originals back; a later one cannot.
    call = {"id": "c1", "name": "http", "arguments": stored_args}
    assert redactor.arguments_for(call) is arguments
    with pytest.raises(RedactedArgumentError) as caught:
        Redactor(RedactionPolicy()).arguments_for(call)
    assert caught.value.paths == ["headers.Authorization", "notes.1", "password"]
    assert "are not available after a restart" in str(caught.value)


def test_tokens_in_free_text_are_masked_in_place_in_every_record_kind() -> None:
    redactor = Redactor(RedactionPolicy())
    text = f"use {OPENAI_KEY} then {GH_TOKEN}, Authorization: Bearer abcdefghijklmnop0123 and AKIAABCDEFGHIJKLMNOP"
    for kind, data in (
        (Kind.MESSAGE_RECEIVED, {"role": "user", "content": text}),
        (Kind.FAILED, {"reason": text}),
        (Kind.FINISHED, {"result": {"summary": [text]}}),
    ):
        stored = repr(redactor.redact(kind, data, None))
        for token in (OPENAI_KEY, GH_TOKEN, "abcdefghijklmnop0123", "AKIAABCDEFGHIJKLMNOP"):
            assert token not in stored
        for name in ("openai-key", "github-token", "bearer-token", "aws-access-key-id"):
            assert f"[REDACTED:{name}]" in stored
        assert "use " in stored  # the text around a token stays


def test_rules_select_agent_tool_and_path_with_wildcards() -> None:
    policy = RedactionPolicy(
        rules=(
            Redact("arguments.card.number", tool="charge", agent="billing", reason="pci"),
            Redact("arguments.rows.*.email", tool="import"),
            ephemeral("read_mail"),
            Redact("result.ssn", tool="lookup"),
        )
    )

    def call(agent, tool_name, arguments):
        data = {"text": "", "tool_calls": [{"id": "c", "name": tool_name, "arguments": arguments}]}
        return Redactor(policy).redact(Kind.MODEL_RESPONDED, data, agent)["tool_calls"][0]["arguments"]

    card = {"card": {"number": "4111111111111111", "exp": "12/30"}}
    assert call("billing", "charge", card)["card"] == {"number": marker("pci"), "exp": "12/30"}
    assert call("support", "charge", card) == card  # another agent definition: the rule does not apply
    assert call("billing", "refund", card) == card  # another tool
    rows = {"rows": [{"email": "a@x.org", "n": 1}, {"email": "b@x.org", "n": 2}]}
    assert call(None, "import", rows) == {
        "rows": [{"email": marker("policy"), "n": 1}, {"email": marker("policy"), "n": 2}]
    }

    redactor = Redactor(policy)
    result = redactor.redact(
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "m", "tool": "read_mail", "result": {"mails": [PRIVATE_DOC]}, "error": None},
        "a",
    )
    assert result["result"] == marker("ephemeral")
    looked = redactor.redact(
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "l", "tool": "lookup", "result": {"name": "Ann", "ssn": "078-05-1120"}, "error": None},
        "a",
    )
    assert looked["result"] == {"name": "Ann", "ssn": marker("policy")}
    with pytest.raises(ValueError):
        Redact("args.password")


def test_values_redacted_by_name_are_masked_where_they_are_echoed_later() -> None:
    redactor = Redactor(RedactionPolicy())
    data = {"text": "", "tool_calls": [{"id": "c", "name": "login", "arguments": {"password": PASSWORD}}]}
    redactor.redact(Kind.MODEL_RESPONDED, data, None)
    echoed = redactor.redact(
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "c", "tool": "login", "result": f"logged in with {PASSWORD}", "error": None},
        None,
    )
    assert echoed["result"] == "logged in with [REDACTED]"
    failed = redactor.redact(Kind.FAILED, {"reason": f"ValueError: bad password {PASSWORD}"}, None)
    assert PASSWORD not in repr(failed)


def test_a_disabled_policy_stores_everything_as_given() -> None:
    data = {"text": OPENAI_KEY, "tool_calls": [{"id": "c", "name": "t", "arguments": {"password": PASSWORD}}]}
    assert Redactor(RedactionPolicy.disabled()).redact(Kind.MODEL_RESPONDED, data, None) is data
    assert Redactor(None).redact(Kind.MODEL_RESPONDED, data, None) is data


def test_markers_survive_a_second_pass_unchanged() -> None:
    redactor = Redactor(RedactionPolicy())
    data = {
        "approval_id": "a",
        "call_id": "c",
        "tool": "t",
        "key": "k",
        "reason": "r",
        "arguments": {"password": marker("secret-name"), "token": marker("pattern:jwt")},
    }
    assert redactor.redact(Kind.APPROVAL_REQUESTED, data, None) == data
    assert is_marker(data["arguments"]["token"]) and MARKER == "$redacted"


# -- end to end: what the stores hold ----------------------------------------------------


def secretive_agent(received: list) -> tuple[AgentDefinition, ScriptModel]:
    """Fetches a private document (ephemeral), logs in with a password (second call of
    a response: its arguments come back from the activation's memory), deploys with
    a token-shaped note, then finishes echoing the password."""

    @tool(name="fetch_inbox")
    async def fetch_inbox(*, ctx) -> dict:
        return {"messages": [PRIVATE_DOC]}

    @tool()
    async def login(user: str, password: str, *, ctx) -> str:
        received.append(("login", password))
        return f"welcome {user}; {password} accepted"

    @tool()
    async def deploy(repo: str, note: str, *, ctx) -> str:
        received.append(("deploy", note))
        return "deployed"

    model = ScriptModel(
        [
            ModelResponse(
                "reading mail, then logging in",
                (ToolCall("c1", "fetch_inbox", {}), ToolCall("c2", "login", {"user": "bob", "password": PASSWORD})),
                Usage(1, 1, 0.0),
            ),
            ModelResponse(
                f"deploying with {GH_TOKEN}",
                (ToolCall("c3", "deploy", {"repo": "r", "note": f"use {GH_TOKEN}"}),),
                Usage(1, 1, 0.0),
            ),
            ModelResponse(f"done; the password was {PASSWORD}", (), Usage(1, 1, 0.0)),
        ]
    )
    return AgentDefinition(name="secretive", model=model, tools=[fetch_inbox, login, deploy]), model


POLICY = RedactionPolicy(rules=(ephemeral("fetch_inbox"),))


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """``(store URL, raw_bytes())``: the URL to run on and a function returning every byte it holds."""
    chosen = store_backend(request, tmp_path, "redact")
    return chosen.url, chosen.raw_bytes


async def run_secretive(url: str, policy: RedactionPolicy) -> tuple[list, ScriptModel, object, bytes | None, str]:
    received: list = []
    definition, model = secretive_agent(received)
    async with Runtime(url, agents=[definition], redaction=policy, snapshot_policy=EVERY_SNAPSHOT) as rt:
        state = await rt.run("secretive", "a1", f"deploy the service; the OpenAI key is {OPENAI_KEY}")
        await rt._activations.services.snapshots.flush()
        frames = await spi_frames(rt.store, "default")
    return received, model, state, frames


async def test_a_planted_secret_never_reaches_the_stored_bytes(backend) -> None:
    url, raw_bytes = backend
    received, model, state, frames = await run_secretive(url, POLICY)

    # The live activation ran the tools with the real values...
    assert received == [("login", PASSWORD), ("deploy", f"use {GH_TOKEN}")]
    # ...and the live model saw them: the ephemeral result, its own arguments, the task's key.
    second_turn = repr(model.seen[1])
    for secret in (PRIVATE_DOC, PASSWORD, OPENAI_KEY):
        assert secret in second_turn
    assert state.status == "finished" and state.result == "done; the password was [REDACTED]"

    # Nothing of them is stored: not in any frame (decoded), not in the raw bytes.
    assert any(kind == "snapshot" for _, kind, _, _ in frames)
    text = decoded_text(frames)
    stored = b"".join(data for *_, data in frames) + (raw_bytes() if raw_bytes else b"")
    for secret in SECRETS:
        assert secret not in text
        assert secret.encode() not in stored
    # What was taken out is recorded as such, so a resume knows it is missing.
    assert "'$redacted': 'ephemeral'" in text and "'$redacted': 'secret-name'" in text
    assert "'$redacted': 'pattern:github-token'" in text and "[REDACTED:openai-key]" in text


async def test_the_grep_finds_the_secrets_when_redaction_is_off(backend) -> None:
    """The control: the same run and the same searches, without redaction, find every secret,
    so the test above would notice a leak."""
    url, raw_bytes = backend
    _received, _model, _state, frames = await run_secretive(url, RedactionPolicy.disabled())
    text = decoded_text(frames)
    stored = b"".join(data for *_, data in frames) + (raw_bytes() if raw_bytes else b"")
    for secret in SECRETS:
        assert secret in text
    assert PASSWORD.encode() in stored  # small records are stored uncompressed
    if raw_bytes is not None:
        assert PASSWORD.encode() in raw_bytes()  # the file / object grep itself sees it


async def test_the_sqlite_wal_holds_no_secret_while_the_runtime_is_open(tmp_path) -> None:
    received: list = []
    definition, _model = secretive_agent(received)
    url = f"sqlite:///{tmp_path}/db/agents.db?create=1"
    async with Runtime(url, agents=[definition], redaction=POLICY, snapshot_policy=EVERY_SNAPSHOT) as rt:
        await rt.run("secretive", "a1", f"key {OPENAI_KEY}")
        await rt._activations.services.snapshots.flush()
        assert (tmp_path / "db" / "agents.db-wal").exists()
        raw = files_bytes(tmp_path / "db")
    for secret in SECRETS:
        assert secret.encode() not in raw


# -- after a restart ----------------------------------------------------------------------


def restart_agent(received: list, block: anyio.Event | None, started: anyio.Event | None) -> AgentDefinition:
    @tool(on_unknown_outcome="retry")
    async def slow(*, ctx) -> str:
        if block is not None:
            started.set()
            await block.wait()  # the first process never gets past this
        return "slow done"

    # sequential: it waits for "slow" instead of running beside it (calls of one turn
    # run concurrently), so it has not started when the first process "dies".
    @tool(sequential=True)
    async def login(user: str, password: str, *, ctx) -> str:
        received.append(password)
        return "in"

    model = ScriptModel(
        [
            ModelResponse(
                "go", (ToolCall("c1", "slow", {}), ToolCall("c2", "login", {"user": "bob", "password": PASSWORD}))
            )
        ]
    )
    return AgentDefinition(name="restart", model=model, tools=[slow, login])


async def test_a_tool_whose_argument_was_redacted_fails_clearly_after_a_restart(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    received: list = []
    started, never = anyio.Event(), anyio.Event()
    async with Runtime(url, agents=[restart_agent(received, never, started)]) as rt:
        await rt.start("restart", "a1", "t")
        await started.wait()  # the response and the first intent are durable; the process "dies" here
    async with Runtime(url, agents=[restart_agent(received, None, None)]) as rt:
        (handle,) = await rt.resume_all()
        state = await handle.wait()
    assert received == []  # the tool never got a mask instead of the password
    entry = next(e for e in state.ledger.values() if e["call_id"] == "c2")
    assert entry["done"] and entry["result"] is None
    assert entry["error"] == (
        "argument 'password' of tool 'login' was redacted and is not available after a restart; the call was not run"
    )
    assert state.status == "finished"  # the model saw the error and answered


async def test_an_approval_wait_is_a_restart_for_redacted_arguments() -> None:
    """A parked agent holds no memory, so the originals are gone when it resumes."""
    received: list = []

    @tool(requires_approval=True)
    async def transfer(amount: int, api_key: str, *, ctx) -> str:
        received.append(api_key)
        return "sent"

    model = ScriptModel(
        [ModelResponse("pay", (ToolCall("c1", "transfer", {"amount": 5, "api_key": "live-key-123456"}),))]
    )
    definition = AgentDefinition(name="payer", model=model, tools=[transfer])
    async with Runtime(f"memory://{uuid.uuid4().hex}", agents=[definition]) as rt:
        state = await rt.run("payer", "p1", "pay")
        assert state.status == "waiting_approval"
        (approval,) = state.open_approvals()
        assert approval["arguments"] == {"amount": 5, "api_key": marker("secret-name")}
        await rt.approve("p1", approval["approval_id"])
        handle = await rt.resume("p1")
        state = await handle.wait() if handle is not None else await rt.status("p1")
    assert received == []
    assert "argument 'api_key' of tool 'transfer' was redacted" in state.messages[-2]["content"]


async def test_restored_state_shows_the_markers_and_the_journal_has_them(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    received: list = []
    definition, _model = secretive_agent(received)
    async with Runtime(url, agents=[definition], redaction=POLICY) as rt:
        await rt.run("secretive", "a1", "t")
        restored = await rt.status("a1")
    inbox = next(m for m in restored.messages if m.get("tool_call_id") == "c1")
    assert inbox["content"] == marker("ephemeral")
    async with open_store(url) as store:
        codec = RecordCodec()
        kinds = [record async for record in JournalReader(store, codec, StreamId("default", "a1")).records()]
    responded = [r for r in kinds if r.kind == Kind.MODEL_RESPONDED][0]
    assert responded.data["tool_calls"][1]["arguments"] == {"user": "bob", "password": marker("secret-name")}


_FAST_PATH_CASES = [
    (
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "c", "tool": "fetch", "result": {"rows": [{"note": "plain"}]}, "error": None},
    ),
    (
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "c", "tool": "fetch", "result": {"rows": [{"note": f"x {GH_TOKEN}"}]}, "error": None},
    ),
    (
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "c", "tool": "fetch", "result": [[{"db_password": "hunter22"}]], "error": None},
    ),
    (
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "c", "tool": "fetch", "result": None, "error": f"boom: Bearer {OPENAI_KEY}"},
    ),
    (
        Kind.TOOL_RESULT,
        {"key": "k", "call_id": "c", "tool": "charge", "result": {"card": {"number": "4242"}}, "error": None},
    ),
    (
        Kind.MODEL_RESPONDED,
        {
            "text": "calling",
            "tool_calls": [
                {"id": "c", "name": "login", "key": "k", "arguments": {"user": "ann", "apiKey": "abcdefgh"}}
            ],
            "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0},
        },
    ),
    (Kind.MODEL_RESPONDED, {"text": "ann's secret is abcdefgh", "tool_calls": [], "usage": {"input_tokens": 1}}),
    (Kind.MESSAGE_RECEIVED, {"content": {"nested": ["deep", {"deeper": f"key {OPENAI_KEY.upper()}"}]}}),
    (
        Kind.APPROVAL_REQUESTED,
        {"approval_id": "a", "tool": "login", "arguments": {"session_id": "s-123456"}, "reason": "r"},
    ),
]


def test_the_fast_path_skips_only_records_nothing_applies_to() -> None:
    # The same records through a redactor whose fast path is disabled: identical output,
    # and the same originals kept, record after record (echoes learned on the way).
    policy = RedactionPolicy(rules=(Redact("result.card.number", tool="charge"),))
    fast, full = Redactor(policy), Redactor(policy)
    full._untouched = lambda *args: False  # type: ignore[method-assign]
    skipped = 0
    for seq, (kind, data) in enumerate(_FAST_PATH_CASES * 2, start=1):
        skipped += fast._untouched(kind, data, "agent")
        assert fast.redact(kind, data, "agent", seq) == full.redact(kind, data, "agent", seq), (kind, data)
    assert (fast._texts, fast._contents, fast._arguments, fast._secrets) == (
        full._texts,
        full._contents,
        full._arguments,
        full._secrets,
    )
    assert skipped == 2, "only the plain result (twice) needs nothing; every other case takes the full path"
