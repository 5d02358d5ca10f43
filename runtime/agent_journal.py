"""The write side of one agent's stream: encode, group-commit, fold, maybe snapshot.

Every record an agent produces goes through ``AgentJournal.append``: it is
encoded (an unencodable value fails here, before anything is written), made
durable through the runtime's group committer with the expected seq the agent
last saw, and only then folded into the in-memory state. So the state never
runs ahead of the journal, and a stale writer is stopped by its expected seq.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from durably.schemas.records import Kind, Record
from durably.storage.codec import raw_size
from durably.storage.errors import ConflictError
from durably.storage.group_commit import GroupCommitter
from durably.runtime.record_codec import RecordCodec
from durably.storage.spi import Store, StreamId

from . import telemetry as tm
from .telemetry import Telemetry
from .commands import COMMAND_KINDS, rebase
from .errors import AgentFencedError
from .redaction import RedactionPolicy, Redactor
from .snapshots import SnapshotPolicy, SnapshotWriter
from .state import RUNNING, AgentState, apply
from .status_index import entry_after


_REBASE_ATTEMPTS = 8  # commands racing one append: each retry folds in what came first
_FACTS = frozenset({Kind.MODEL_RESPONDED, Kind.TOOL_RESULT, Kind.MODEL_FAILED})  # happened: journaled whatever came in


@dataclass
class JournalServices:
    """What every agent journal of one runtime shares. ``redaction``: what is
    taken out of records before they are encoded (None: nothing)."""

    store: Store
    codec: RecordCodec
    committer: GroupCommitter
    snapshots: SnapshotWriter
    policy: SnapshotPolicy
    telemetry: Telemetry
    redaction: RedactionPolicy | None = None
    indexed: bool = False  # the store keeps a status index: appends carry its entry (status_index)


class AgentJournal:
    """Appends records to ``stream`` on behalf of ``state`` (kept in step with the journal).

    ``records_since`` / ``bytes_since``: the tail after the last snapshot;
    ``snapshot_bytes``: that snapshot's size (both for the snapshot policy; bytes
    are raw, the frames' CBOR sizes before compression).
    ``redactor`` holds, for this activation only, what redaction took out.
    """

    def __init__(self, services: JournalServices, stream: StreamId, state: AgentState,
                 *, records_since: int = 0, bytes_since: int = 0, snapshot_bytes: int = 0) -> None:
        self.services = services
        self.stream = stream
        self.state = state
        self.records_since = records_since
        self.bytes_since = bytes_since
        self.snapshot_bytes = snapshot_bytes
        self.redactor = Redactor(services.redaction)

    async def append(self, *entries: tuple[str, dict[str, Any]]) -> None:
        """Durably append ``(kind, data)`` entries as one atomic batch, then fold them.

        If another process appended only commands meanwhile (an approval, a
        budget extension, a message, a cancel: see ``COMMAND_KINDS``), they are
        folded in first and the batch is appended after them, as a rebase.
        Raises ``UnencodableValueError`` (nothing written), ``AgentFencedError``
        (another writer took the stream over; nothing written) and
        ``StoreUnavailableError`` (outcome unknown; restore to find out).
        """
        meters = self.services.telemetry.metrics
        for _ in range(_REBASE_ATTEMPTS):
            try:
                return await self._append_once(entries)
            except AgentFencedError:
                if meters is not None:
                    meters.conflicts.add(1, self.services.telemetry.attributes)
                limits_before = self.state.budget  # what a command entry was computed against
                folded = await self._fold_in_commands()
                if folded is None:
                    if meters is not None:
                        meters.fencings.add(1, self.services.telemetry.attributes)
                    raise
                entries = self._still_valid(entries, folded, limits_before)
                if not entries:
                    return  # every entry was a decision the commands overruled; the caller re-decides
        if meters is not None:
            meters.fencings.add(1, self.services.telemetry.attributes)
        raise AgentFencedError(self.stream, self.state.last_seq, None)

    async def _fold_in_commands(self) -> set[str] | None:
        """Fold the records appended after ours if all are commands and return their
        kinds; None if any is not (another writer took the stream over)."""
        svc, stream = self.services, self.stream
        newer = [svc.codec.decode_record(stored, stream) async for stored in svc.store.read(stream, self.state.last_seq)]
        if not newer or any(record.kind not in COMMAND_KINDS for record in newer):
            return None
        for record in newer:
            apply(self.state, record)
        self.records_since += len(newer)
        return {record.kind for record in newer}

    def _still_valid(self, entries, folded: set[str], limits_before: dict[str, Any]):
        """The entries that still hold after folding in commands: what already happened
        (a model response, a tool result) always does; a command is re-validated
        (``commands.rebase``: raises ``InvalidCommandError`` for a lost decision race);
        a decision (finish, ask, run a tool, suspend) made before a cancel or a budget
        extension is dropped, and the actor decides again from the new state."""
        kept = []
        for kind, data in entries:
            if kind in COMMAND_KINDS:
                kept.append((kind, rebase(self.state, kind, data, limits_before)))
            elif kind in _FACTS:
                kept.append((kind, data))
            elif kind == Kind.BUDGET_EXCEEDED and Kind.BUDGET_EXTENDED in folded:
                continue
            elif self.state.status == RUNNING:  # not cancelled meanwhile
                kept.append((kind, data))
        return tuple(kept)

    async def _append_once(self, entries: tuple[tuple[str, dict[str, Any]], ...]) -> None:
        svc = self.services
        first = self.state.last_seq + 1
        now = time.time()
        # Redacted before encoding: the codec, the store and the fold see only the redacted form.
        agent = self.state.definition.get("name")
        records = [Record(first + i, kind, self.redactor.redact(kind, data, agent, first + i), now)
                   for i, (kind, data) in enumerate(entries)]
        frames = [svc.codec.encode_record(r, self.stream) for r in records]
        index = entry_after(self.state, records) if svc.indexed else None  # committed with the records
        stored = sum(map(len, frames))
        raw = sum(map(raw_size, frames))  # what the snapshot policy weighs (runtime.snapshots)
        telemetry = svc.telemetry
        meters = telemetry.metrics
        started = time.perf_counter() if meters is not None else 0.0
        with telemetry.span("durably.checkpoint.save") as span:
            if span is not None:
                span.set_attributes({tm.AGENT_ID: self.stream.agent_id, tm.SEQ: records[-1].seq,
                                     tm.RECORD_COUNT: len(records), tm.RAW_BYTES: raw,
                                     tm.STORED_BYTES: stored})
            try:
                await svc.committer.append(self.stream, first - 1, frames, index=index)
            except ConflictError as exc:
                raise AgentFencedError(exc.stream, exc.expected_seq, exc.actual_seq) from exc
        if meters is not None:
            meters.save_duration.record(time.perf_counter() - started, telemetry.attributes)
            meters.save_size.record(stored, telemetry.attributes)
        for record in records:
            before = (len(self.state.messages), len(self.state.inbox))
            apply(self.state, record)
            self.redactor.placed(record, self.state, before)
        self.records_since += len(records)
        self.bytes_since += raw
        if svc.policy.due(self.records_since, self.bytes_since, self.snapshot_bytes):
            self.snapshot_submitted()

    def snapshot_submitted(self) -> None:
        """Hand the current state to the background snapshot writer."""
        self.services.snapshots.submit(self.stream, self.state.last_seq, self.state.to_wire())
        # Until the writer reports the real size, the state grew by about the tail.
        self.snapshot_bytes += self.bytes_since
        self.records_since = self.bytes_since = 0
