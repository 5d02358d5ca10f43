"""Every error durably raises on purpose is a ``DurablyError``.

A bad argument raises ``InvalidArgumentError`` (a ``ValueError``) and an
argument of the wrong type ``ArgumentTypeError`` (a ``TypeError``), so both
``except durably.DurablyError`` and the builtin catch it. A source scan keeps
bare ``raise ValueError(`` / ``raise TypeError(`` out of the package, except
the few listed (with the reason) below.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import durably
from durably._journal.records import RecordCodec
from durably._journal.status_index import rebuild
from durably._telemetry import Telemetry
from durably._upkeep.reencrypt import reencrypt_stream
from durably.storage._spi import StreamId

ROOT = Path(__file__).resolve().parents[2]


class _NoModel:
    """Not a Model: no respond()."""


class _EchoModel:
    async def respond(self, messages: Any, tools: Any) -> Any:
        raise AssertionError("never called")


async def _lookup(order_id: str) -> str:
    """Look up an order."""
    return order_id


class _NoIndexStore:
    """A store that declares no capability (so no status index)."""

    capabilities: frozenset[str] = frozenset()


def _reencrypt_without_cipher() -> None:
    asyncio.run(
        reencrypt_stream(
            _NoIndexStore(),
            RecordCodec(),
            StreamId("ns", "a"),  # type: ignore[arg-type]
            telemetry=Telemetry("ns"),
        )
    )


def _rebuild_without_index() -> None:
    async def go() -> None:
        async for _ in rebuild(_NoIndexStore(), RecordCodec(), "ns"):  # type: ignore[arg-type]
            pass

    asyncio.run(go())


BAD_VALUES: list[tuple[str, Callable[[], object]]] = [
    ("RetryPolicy(attempts=0)", lambda: durably.RetryPolicy(attempts=0)),
    ("SnapshotPolicy(keep=0)", lambda: durably.SnapshotPolicy(keep=0)),
    ("HistoryPolicy(keep_recent > max_messages - 4)", lambda: durably.HistoryPolicy(max_messages=10, keep_recent=9)),
    ("HistoryPolicy(max_messages=-1)", lambda: durably.HistoryPolicy(max_messages=-1)),
    ("RetentionPolicy(negative ttl)", lambda: durably.RetentionPolicy({"finished": -1})),
    ("Runtime(lease_ttl=-1)", lambda: durably.Runtime("sqlite:///unused.db", lease_ttl=-1)),
    (
        "Tool(reconcile policy, no hook)",
        lambda: durably.Tool("t", _lookup, on_unknown_outcome=durably.OnUnknownOutcome.RECONCILE),
    ),
    (
        "AgentDefinition(duplicate tools)",
        lambda: durably.AgentDefinition("a", _EchoModel(), tools=[durably.tool(_lookup), durably.tool(_lookup)]),
    ),
    ("AgentDefinition(max_parallel_tools=0)", lambda: durably.AgentDefinition("a", _EchoModel(), max_parallel_tools=0)),
    ("reencrypt without a cipher", _reencrypt_without_cipher),
    ("status index rebuild on a store without one", _rebuild_without_index),
    ("StreamId('', 'a')", lambda: StreamId("", "a")),
    ("Tool(name='')", lambda: durably.Tool("", _lookup)),
    ("tool('')", lambda: durably.tool("")(_lookup)),
    ("tool('look up')", lambda: durably.tool("look up")(_lookup)),
    ("tool(a lambda)", lambda: durably.tool(lambda order_id: order_id)),
    ("AgentDefinition(name='')", lambda: durably.AgentDefinition("", _EchoModel())),
    ("Runtime(mailbox_size=-1)", lambda: durably.Runtime("sqlite:///unused.db", mailbox_size=-1)),
    ("Runtime(mailbox_size=1.5)", lambda: durably.Runtime("sqlite:///unused.db", mailbox_size=1.5)),  # type: ignore[arg-type]
]

BAD_TYPES: list[tuple[str, Callable[[], object]]] = [
    ("AgentDefinition(name=42)", lambda: durably.AgentDefinition(42, _EchoModel())),  # type: ignore[arg-type]
    ("AgentDefinition(model not a Model)", lambda: durably.AgentDefinition("a", _NoModel())),  # type: ignore[arg-type]
    ("AgentDefinition(tools=[a function])", lambda: durably.AgentDefinition("a", _EchoModel(), tools=[_lookup])),  # type: ignore[list-item]
    ("@tool on a non-function", lambda: durably.tool()(42)),  # type: ignore[arg-type]
    ("@tool on a tool", lambda: durably.tool()(durably.tool(_lookup))),
    ("Tool(name=42)", lambda: durably.Tool(42, _lookup)),  # type: ignore[arg-type]
    ("tool(42)", lambda: durably.tool(42)(_lookup)),  # type: ignore[call-overload]
    ("Tool(fn not a function)", lambda: durably.Tool("t", 42)),  # type: ignore[arg-type]
    ("EnvKeyProvider(not a mapping)", lambda: durably.EnvKeyProvider(123)),  # type: ignore[arg-type]
    ("Runtime(redaction=3)", lambda: durably.Runtime("sqlite:///unused.db", redaction=3)),  # type: ignore[arg-type]
    ("Runtime(encryption=3)", lambda: durably.Runtime("sqlite:///unused.db", encryption=3)),  # type: ignore[arg-type]
    ("Runtime(snapshot_policy=3)", lambda: durably.Runtime("sqlite:///unused.db", snapshot_policy=3)),  # type: ignore[arg-type]
    ("Runtime(agents=3)", lambda: durably.Runtime("sqlite:///unused.db", agents=3)),  # type: ignore[arg-type]
    ("Runtime(agents=[3])", lambda: durably.Runtime("sqlite:///unused.db", agents=[3])),  # type: ignore[list-item]
    ("Runtime(worker_id=3)", lambda: durably.Runtime("sqlite:///unused.db", worker_id=3)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("case", "call"), BAD_VALUES, ids=[case for case, _ in BAD_VALUES])
def test_a_bad_value_is_a_durably_error_and_a_value_error(case: str, call: Callable[[], object]) -> None:
    with pytest.raises(durably.DurablyError) as caught:
        call()
    assert isinstance(caught.value, ValueError), case
    assert isinstance(caught.value, durably.InvalidArgumentError), case


@pytest.mark.parametrize(("case", "call"), BAD_TYPES, ids=[case for case, _ in BAD_TYPES])
def test_a_bad_type_is_a_durably_error_and_a_type_error(case: str, call: Callable[[], object]) -> None:
    with pytest.raises(durably.DurablyError) as caught:
        call()
    assert isinstance(caught.value, TypeError), case
    assert isinstance(caught.value, durably.ArgumentTypeError), case


# Bare builtin raises that stay, each caught inside durably (control flow) or
# standing for something that is not a caller's bad argument: (file, message start).
ALLOWED: dict[tuple[str, str], str] = {
    # msgpack ext hook: StrictSerde._fail raises, values.py catches it and raises CheckpointValueError.
    ("runtime/integrations/langgraph/_values.py", "raise ValueError(problem)"): "caught in values.py",
    # json parse_constant hook of parse_reported_result, which turns it into InvalidCommandError.
    ("runtime/_operate/reported_result.py", 'raise ValueError(f"{name} is not a number'): "caught there",
    # URL option parsers: parse_store_url catches their ValueError and raises InvalidStoreURLError.
    ("adapters/sqlite/_file.py", 'raise ValueError("known: FULL, NORMAL")'): "caught in storage/_urls.py",
    ("adapters/sqlite/_file.py", 'raise ValueError("a whole number of milliseconds")'): "caught in storage/_urls.py",
    ("storage/_urls.py", 'raise ValueError(f"not a boolean flag'): "caught in storage/_urls.py",
    ("storage/_urls.py", 'raise ValueError("not a finite number of seconds")'): "caught in storage/_urls.py",
    # zstd size checks on a stored frame: the codec turns them into CorruptRecordError.
    ("storage/_dictionaries/__init__.py", 'raise ValueError(f"zstd frame declares'): "caught in storage/_codec.py",
    ("storage/_dictionaries/__init__.py", 'raise ValueError(f"payload is'): "caught in storage/_codec.py",
    # A malformed stored S3 key (another tool's object): list_streams catches it and skips the key.
    ("adapters/s3/_keys.py", 'raise ValueError(f"truncated escape'): "caught in adapters/s3/_streams.py",
    # The fold's seq invariant (a misread journal); status_index.py catches it.
    ("runtime/_loop/state.py", 'raise ValueError(f"record seq'): "internal invariant",
}

_BARE = re.compile(r"raise (ValueError|TypeError)\(")
_FOLDERS = ("runtime", "storage", "adapters", "models", "schemas", "bench")


def test_no_bare_value_or_type_error_outside_the_allow_list() -> None:
    found: set[tuple[str, str]] = set()
    unexpected = []
    for folder in _FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if not _BARE.search(line):
                    continue
                text = line.strip()
                hit = next((key for key in ALLOWED if key[0] == rel and text.startswith(key[1])), None)
                if hit is None:
                    unexpected.append(f"{rel}:{number}: {text}")
                else:
                    found.add(hit)
    assert not unexpected, "raise InvalidArgumentError / ArgumentTypeError instead:\n" + "\n".join(unexpected)
    assert found == set(ALLOWED), f"allow-list entries that no longer match: {set(ALLOWED) - found}"
