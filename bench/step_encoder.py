"""The journal's encode path for an agent's steps, with no runtime around it.

The limit with encoding included (``durably.bench.floor``) needs the bytes a
step's commit carries, made by the code that makes them in a run: an
``AgentJournal``'s own preparation of its entries (the ``Redactor`` of the
runtime's default ``RedactionPolicy``, then ``RecordCodec``: CBOR, zstd with the
records' dictionary, checksum, frame). ``StepEncoder`` holds such a journal,
which never commits, folds or snapshots: whatever the journal's encoding
becomes, the limit pays the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durably._journal.records import RecordCodec
from durably._journal.redaction_policy import RedactionPolicy
from durably._journal.snapshots import SnapshotPolicy, SnapshotWriter
from durably._journal.writer import AgentJournal, JournalServices
from durably._loop.state import AgentState
from durably._telemetry import Telemetry
from durably.adapters.memory import MemoryStore
from durably.storage._group_commit import GroupCommitter
from durably.storage._spi import StreamId

#: What the runtime redacts when it is given no policy (``Runtime(redaction=None)``).
DEFAULT_REDACTION = RedactionPolicy()


class StepEncoder:
    """Encodes one stream's steps as its journal would, for stream ``stream`` of an
    agent whose definition is named ``agent``.

    ``redaction``: the policy applied before encoding (default: the runtime's
    default policy; None: no redaction, to show its cost apart). Not thread-safe;
    one per stream (the redactor keeps what it took out, per activation).
    """

    def __init__(self, stream: StreamId, agent: str, *, redaction: RedactionPolicy | None = DEFAULT_REDACTION) -> None:
        unused = MemoryStore()  # the journal's services need a store; nothing is written to it
        policy = SnapshotPolicy()
        services = JournalServices(
            unused,
            RecordCodec(),
            GroupCommitter(unused),
            SnapshotWriter(unused, policy=policy),
            policy,
            Telemetry.disabled(),
            redaction=redaction,
        )
        state = AgentState(namespace=stream.namespace, agent_id=stream.agent_id, definition={"name": agent})
        self._journal = AgentJournal(services, stream, state)

    def frames(self, entries: Sequence[tuple[str, dict[str, Any]]], first: int) -> list[bytes]:
        """The frames of the commit appending ``entries`` (``(kind, data)``) from seq ``first``.

        Raises ``UnencodableValueError`` naming the field, as the journal does.
        """
        return self._journal.encode(entries, first)
