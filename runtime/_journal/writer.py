"""The write side of one agent's stream: encode, group-commit, fold, maybe snapshot.

Every record an agent produces goes through ``AgentJournal.append``: it is
encoded (an unencodable value fails here, before anything is written), made
durable through the runtime's group committer with the expected seq the agent
last saw and the fencing token of the activation's lease, and only then folded
into the in-memory state. So the state never runs ahead of the journal, and a
stale writer is stopped by the store: by its expected seq, and, once its lease
is another's (a takeover, a purge and restart), by its token even when its seq
matches. A refused token is not a conflict to rebase on: nothing is folded in,
and the activation ends with ``AgentLeaseLostError``.

One exception, bounded: a tool's result may be *staged* (``stage``): encoded
and folded at once, so the next model call sees it, and committed either while
that call runs (``overlapped``) or, when the model answers before that commit
could start, in the same commit as its answer. Every later append carries or
follows the staged records, so nothing that comes after a result (the next
response, its tool intents, a command) is ever durable without it, and nothing
is acted on before the result is durable. A crash before that commit loses the
result: on resume its call is an intent without a result, whose tool's
``on_unknown_outcome`` policy decides, as for a crash while the tool ran.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio

from durably import _telemetry as tm
from durably._journal.journal_reader import JournalReader
from durably._journal.offloop import finish_frames
from durably._journal.records import RecordCodec
from durably._journal.redaction_policy import RedactionPolicy
from durably._journal.redactor import Redactor
from durably._journal.snapshots import SnapshotPolicy, SnapshotWriter
from durably._journal.status_index import entry_after
from durably._loop.commands import COMMAND_KINDS, rebase
from durably._loop.state import RUNNING, AgentState, apply
from durably._telemetry import Telemetry
from durably.errors import AgentFencedError, AgentLeaseLostError, InvalidArgumentError
from durably.schemas._records import Kind, Record
from durably.storage._codec import raw_size
from durably.storage._errors import ConflictError, FencedError, StoreError
from durably.storage._group_commit import GroupCommitter
from durably.storage._spi import Store, StreamId, supports_leases

if TYPE_CHECKING:
    from durably._journal.claim import LeaseClaim

_REBASE_ATTEMPTS = 8  # commands racing one append: each retry folds in what came first
_MISSING = object()
# After this many model calls in a row that answered before their overlapped commit
# could even start (they never waited), a staged result is no longer committed during
# the call (a task per step for nothing) but with its answer. A call that takes longer
# than a commit, and than _QUICK_S, makes the next ones overlap again: so a staged
# result waits for durability about one quick model call more, never a slow one more
# than once in a row.
_QUICK_BODIES = 4
_QUICK_S = 0.001
_FACTS = frozenset(
    {Kind.MODEL_RESPONDED, Kind.TOOL_RESULT, Kind.MODEL_FAILED, Kind.TOOL_FAILED, Kind.TOOL_HEARTBEAT}
)  # happened: journaled whatever came in


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


@dataclass(frozen=True, slots=True)
class _Unknown:
    """A commit handed to the store whose caller did not learn the outcome: the seq it
    follows, its frames (the staged ones first), its own records and how many staged
    batches it carried."""

    after: int
    frames: list[bytes]
    records: list[Record]
    staged: int


class _Staged:
    """Records folded into the state but not yet durable: the entries as given (to
    prepare again after a rebase), their records and payloads, and what their fold
    changed, to undo it. Only ``tool_result`` records are staged: their fold touches
    the current turn's messages, the ledger entry, the pending calls and the inbox."""

    __slots__ = ("entries", "records", "payloads", "last_seq", "turn_start", "turn", "pending", "inbox", "ledger")

    def __init__(
        self,
        state: AgentState,
        entries: tuple[tuple[str, dict[str, Any]], ...],
        records: list[Record],
        payloads: list[bytes],
    ) -> None:
        self.entries, self.records, self.payloads = entries, records, payloads
        start = state.turn_start()  # a result lands among the trailing tool messages, the inbox after them
        self.last_seq, self.turn_start, self.turn = state.last_seq, start, state.messages_from(start)
        self.pending, self.inbox = state.pending_calls, state.inbox
        held = {r.data["key"]: state.ledger_entry(r.data["key"]) for r in records}
        self.ledger = {key: _MISSING if entry is None else entry for key, entry in held.items()}

    def undo(self, state: AgentState) -> None:
        state.replace_messages_from(self.turn_start, self.turn)
        state.pending_calls, state.inbox, state.last_seq = self.pending, self.inbox, self.last_seq
        for key, entry in self.ledger.items():
            if entry is _MISSING:
                state.ledger.pop(key, None)
            else:
                state.ledger[key] = cast(dict[str, Any], entry)  # not _MISSING: an entry the ledger held


class AgentJournal:
    """Appends records to ``stream`` on behalf of ``state`` (kept in step with the journal).

    ``records_since`` / ``bytes_since``: the tail after the last snapshot;
    ``snapshot_bytes``: that snapshot's size (both for the snapshot policy; bytes
    are raw, the frames' CBOR sizes before compression); ``snapshot_seq``: the
    seq of the newest snapshot this journal submitted (None: none yet), the only
    one whose written size may replace the estimate in ``snapshot_bytes``.
    ``redactor`` holds, for this activation only, what redaction took out.
    ``state`` includes staged records (see the module docstring): ``durable_seq``
    is the last seq known durable. ``claim``: the activation's lease claim, whose
    fencing token every append and snapshot carries (None: a writer that holds
    no lease, such as an operator's command, whose appends the store does not fence).
    """

    def __init__(
        self,
        services: JournalServices,
        stream: StreamId,
        state: AgentState,
        *,
        records_since: int = 0,
        bytes_since: int = 0,
        snapshot_bytes: int = 0,
        claim: LeaseClaim | None = None,
    ) -> None:
        self.services = services
        self.claim = claim
        self.stream = stream
        self.state = state
        self.records_since = records_since
        self.bytes_since = bytes_since
        self.snapshot_bytes = snapshot_bytes
        self.snapshot_seq: int | None = None
        self.redactor = Redactor(services.redaction)
        self._staged: list[_Staged] = []
        self._inflight = False  # a commit of this stream is in the store's hands
        self._turn_done: anyio.Event | None = None  # set when it is done; made by the first waiter
        self._flush_error: BaseException | None = None  # why a background commit of staged records failed
        self._hold = False  # an overlapped body ended: a flush not yet started leaves them to the next append
        self._commit_s = 0.0  # how long the last commit took
        self._quick_bodies = 0  # overlapped bodies in a row that ended before their commit started
        self._flush_started = False
        self._unknown: _Unknown | None = None  # a commit cut off in the store's hands (see _settle)
        self.folded_at = 0.0  # the timestamp of the last record folded in (unix seconds)
        #: Called with each record this journal folds and the state right after it (the actor's live events).
        self.on_fold: Callable[[Record, AgentState], None] | None = None
        #: Called after each commit, once ``durable_seq`` has moved (staged records made durable).
        self.on_commit: Callable[[], None] | None = None

    def check_lease(self) -> None:
        """Return if this activation may still act on the stream (see ``LeaseClaim.check``); a no-op without a claim.

        Raises:
            AgentLeaseLostError: The claim's lease is lost or may have lapsed.
        """
        if self.claim is not None:
            self.claim.check()

    @property
    def durable_seq(self) -> int:
        """The last seq known durable (``state.last_seq`` minus the staged records)."""
        return self.state.last_seq - sum(len(s.records) for s in self._staged)

    def durable_state(self) -> AgentState:
        """A copy of ``state`` as of ``durable_seq``: without the staged records, as a restore
        would find the agent if this process died now (``Runtime.status`` of a live agent)."""
        copy = AgentState.from_wire(self.state.to_wire())
        if not self._staged:
            return copy
        for staged in reversed(self._staged):
            staged.undo(copy)  # puts back objects the live state held before staging ...
        return AgentState.from_wire(copy.to_wire())  # ... so copied once more: nothing shared

    async def append(self, *entries: tuple[str, dict[str, Any]]) -> None:
        """Durably append ``(kind, data)`` entries as one atomic batch, then fold them.

        Staged records go first, in the same batch (or, when their commit is
        already in flight, the batch waits for it). If another process appended
        only commands meanwhile (an approval, a budget extension, a message, a
        cancel: see ``COMMAND_KINDS``), they are folded in first and the batch
        is appended after them, as a rebase.
        Raises ``UnencodableValueError`` (nothing written), ``AgentFencedError``
        (another writer took the stream over; nothing written),
        ``AgentLeaseLostError`` (the store refused the claim's fencing token: the
        lease is not this activation's any more; nothing written, nothing folded in) and
        ``StoreUnavailableError`` (outcome unknown; restore to find out).
        """
        await self._take_turn()
        try:
            await self._settle()
            await self._commit(entries)
        finally:
            self._end_turn()

    def stage(self, entry: tuple[str, dict[str, Any]]) -> None:
        """Fold a ``tool_result`` entry now and commit it with (or before) the next
        append. Raises ``UnencodableValueError`` (nothing staged)."""
        kind, _ = entry
        if kind != Kind.TOOL_RESULT:
            raise InvalidArgumentError(f"only tool results are staged, not {kind}")
        records, payloads = self._prepare((entry,), self.state.last_seq + 1)
        staged = _Staged(self.state, (entry,), records, payloads)
        self._fold(records)
        self._staged.append(staged)

    @property
    def staged(self) -> bool:
        """True while some records are folded but not yet durable."""
        return bool(self._staged)

    async def flush(self) -> None:
        """Commit the staged records now (nothing to do without any). Raises as ``append``."""
        if self._staged or self._inflight:
            await self.append()

    @contextlib.asynccontextmanager
    async def overlapped(self) -> AsyncIterator[None]:
        """Run the body (a model call) while the staged records are committed.

        The commit starts when the body first waits; a body that finishes before
        that leaves them to the next append, which commits them with whatever it
        carries. A failed commit cancels the body and is raised here (and by the
        next append); the body's own errors come out as they are, after the commit.
        """
        if not self._staged:
            yield
            return
        if self._quick_bodies >= _QUICK_BODIES:
            # A model that answers without waiting: its answer will carry the staged records.
            start = time.perf_counter()
            yield
            if time.perf_counter() - start > max(self._commit_s, _QUICK_S):
                self._quick_bodies = 0
            return
        self._hold = self._flush_started = False
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._flush_soon, tg.cancel_scope)
            try:
                yield
            except BaseException as exc:  # kept out of the task group: it would wrap it in a group
                failure = exc
            finally:
                self._hold = True
                self._quick_bodies = 0 if self._flush_started else self._quick_bodies + 1
        if self._flush_error is not None:
            raise self._flush_error
        if failure is not None:
            raise failure

    async def _flush_soon(self, scope: anyio.CancelScope) -> None:
        if self._hold or not self._staged or self._inflight:
            return  # the body is over, or an append of the actor carries them
        self._flush_started = True
        try:
            await self.append()
        except Exception as exc:  # the body cannot act on anything now; the actor stops on it
            self._flush_error = exc
            scope.cancel()

    async def _take_turn(self) -> None:
        """Wait until no commit of this stream is in flight, then claim the next one."""
        while self._inflight:
            if self._turn_done is None:
                self._turn_done = anyio.Event()
            await self._turn_done.wait()
        if self._flush_error is not None:
            raise self._flush_error
        self._inflight = True

    def _end_turn(self) -> None:
        done, self._turn_done, self._inflight = self._turn_done, None, False
        if done is not None:
            done.set()

    async def _commit(self, entries: tuple[tuple[str, dict[str, Any]], ...]) -> None:
        meters = self.services.telemetry.metrics
        for _ in range(_REBASE_ATTEMPTS):
            try:
                return await self._append_once(entries)
            except AgentFencedError:
                if meters is not None:
                    meters.conflicts.add(1, self.services.telemetry.attributes)
                limits_before = self.state.budget  # what a command entry was computed against
                staged = self._unstage()
                folded = await self._fold_in_commands()
                if folded is None:
                    if meters is not None:
                        meters.fencings.add(1, self.services.telemetry.attributes)
                    raise
                for entry in staged:  # results are facts: they follow the commands
                    self.stage(entry)
                entries = self._still_valid(entries, folded, limits_before)
                if not entries and not self._staged:
                    return  # every entry was a decision the commands overruled; the caller re-decides
        if meters is not None:
            meters.fencings.add(1, self.services.telemetry.attributes)
        raise AgentFencedError(self.stream, self.state.last_seq, None)

    def _unstage(self) -> list[tuple[str, dict[str, Any]]]:
        """Undo the fold of every staged record (newest first); their entries, in order."""
        entries = [entry for staged in self._staged for entry in staged.entries]
        for staged in reversed(self._staged):
            staged.undo(self.state)
        self._staged = []
        return entries

    async def _lost_to(self) -> AgentLeaseLostError:
        """The error of a refused fence, naming who holds the stream's lease now, or saying
        nobody does (it lapsed); the claim's error if it was lost before."""
        assert self.claim is not None  # only a fenced append is refused by its fence
        store = self.services.store
        if not supports_leases(store):
            return self.claim.lose(None)
        try:
            holder = await store.get_lease(self.stream)
        except StoreError:
            return self.claim.lose(None)  # the error still says the lease was lost; only its holder goes unnamed
        return self.claim.lose(holder, cause="taken" if holder is not None else "lapsed")

    async def _fold_in_commands(self) -> set[str] | None:
        """Fold the records appended after ours if all are commands and return their
        kinds; None if any is not (another writer took the stream over)."""
        svc, stream = self.services, self.stream
        newer = [record async for record in JournalReader(svc.store, svc.codec, stream).records(self.state.last_seq)]
        if not newer or any(record.kind not in COMMAND_KINDS for record in newer):
            if newer:  # another activation's records follow ours: two activations overlapped
                svc.telemetry.count("overlaps")
            return None
        for record in newer:
            apply(self.state, record)
            if self.on_fold is not None:
                self.on_fold(record, self.state)
        self.records_since += len(newer)
        return {record.kind for record in newer}

    def _still_valid(
        self, entries: tuple[tuple[str, dict[str, Any]], ...], folded: set[str], limits_before: dict[str, Any]
    ) -> tuple[tuple[str, dict[str, Any]], ...]:
        """The entries that still hold after folding in commands: what already happened
        (a model response, a tool result) always does; a command is re-validated
        (``commands.rebase``: raises ``InvalidCommandError`` for a lost decision race);
        a decision (finish, ask, run a tool, suspend) made before a cancel or a budget
        extension is dropped, and the actor decides again from the new state."""
        kept: list[tuple[str, dict[str, Any]]] = []
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

    def _prepare(self, entries: tuple[tuple[str, dict[str, Any]], ...], first: int) -> tuple[list[Record], list[bytes]]:
        """The records of ``entries`` from seq ``first``, redacted, and their payloads
        (``finish_frames`` makes their frames when they are committed)."""
        svc, now = self.services, time.time()
        # Redacted before encoding: the codec, the store and the fold see only the redacted form.
        agent = self.state.definition.get("name")
        records = [
            Record(first + i, kind, self.redactor.redact(kind, data, agent, first + i), now)
            for i, (kind, data) in enumerate(entries)
        ]
        return records, [svc.codec.record_payload(r) for r in records]

    def encode(self, entries: Sequence[tuple[str, dict[str, Any]]], first: int) -> list[bytes]:
        """The stored rows a commit appending ``entries`` (``(kind, data)``) from seq ``first``
        would write, redacted and encoded as ``append`` does on the loop (one group frame
        for two or more records), without committing or folding anything.

        Raises ``UnencodableValueError`` naming the field, as ``append`` does."""
        _records, payloads = self._prepare(tuple(entries), first)
        return self.services.codec.commit_frames(payloads, first, self.stream)

    def _fold(self, records: list[Record]) -> None:
        for record in records:
            self.folded_at = record.at
            before = (self.state.message_count(), len(self.state.inbox))
            apply(self.state, record)
            self.redactor.placed(record, self.state, before)
            if self.on_fold is not None:
                self.on_fold(record, self.state)

    async def _append_once(self, entries: tuple[tuple[str, dict[str, Any]], ...]) -> None:
        svc, staged = self.services, self._staged
        if not entries and not staged:
            return
        records, payloads = self._prepare(entries, self.state.last_seq + 1)
        seqs = [r.seq for r in records]
        if staged:
            payloads = [payload for s in staged for payload in s.payloads] + payloads
            seqs = [r.seq for s in staged for r in s.records] + seqs
        first = self.durable_seq + 1
        frames = await finish_frames(svc.codec, payloads, seqs, self.stream)
        # The state already holds the staged records: the entry after ``records`` is that
        # of the whole commit (staged tool results alone change no index field: None).
        index = entry_after(self.state, records) if svc.indexed else None  # committed with the records
        stored = sum(map(len, frames))
        raw = sum(map(raw_size, frames))  # what the snapshot policy weighs (runtime.snapshots)
        telemetry = svc.telemetry
        meters = telemetry.metrics
        # One span and one save measurement per commit, staged records included.
        with telemetry.span("durably.checkpoint.save") as span:
            if span is not None:
                span.set_attributes(
                    {
                        tm.AGENT_ID: self.stream.agent_id,
                        tm.SEQ: first + len(frames) - 1,
                        tm.RECORD_COUNT: len(frames),
                        tm.RAW_BYTES: raw,
                        tm.STORED_BYTES: stored,
                    }
                )
            started = time.perf_counter()
            fence = None if self.claim is None else self.claim.fence
            # Until the store answers, the commit may be made or not: a caller cancelled
            # meanwhile (a body cancelling its own call) leaves it to the next append to learn.
            self._unknown = _Unknown(first - 1, frames, records, len(staged))
            try:
                await svc.committer.append(self.stream, first - 1, frames, index=index, fence=fence)
                self._unknown = None
            except FencedError as exc:
                self._unknown = None  # refused: nothing written
                # A conflict, but not one to rebase on: the stream belongs to another lease now.
                if meters is not None:
                    meters.conflicts.add(1, telemetry.attributes)
                    meters.fencings.add(1, telemetry.attributes)
                raise await self._lost_to() from exc
            except ConflictError as exc:
                self._unknown = None  # refused: nothing written
                raise AgentFencedError(exc.stream, exc.expected_seq, exc.actual_seq) from exc
            self._commit_s = time.perf_counter() - started
        if meters is not None:
            meters.save_duration.record(self._commit_s, telemetry.attributes)
            meters.save_size.record(stored, telemetry.attributes)
        self._staged = []
        self._committed(records, len(frames), raw)

    def _committed(self, records: list[Record], count: int, raw: int) -> None:
        """Fold ``records`` once durable; ``count`` records of ``raw`` bytes were committed
        (the staged ones among them are folded already)."""
        self._fold(records)
        if self.on_commit is not None:
            self.on_commit()
        self.records_since += count
        self.bytes_since += raw
        if self.services.policy.due(self.records_since, self.bytes_since, self.snapshot_bytes):
            self.snapshot_submitted()

    async def _settle(self) -> None:
        """Learn the outcome of a commit whose caller was cancelled while the store had it.

        The store may have made it: its records then follow ``durable_seq``, byte for
        byte, and are folded now, so this append follows them instead of conflicting
        with this activation's own records. Not made: nothing to do (its staged
        records are still staged). Raises ``StoreError`` (the read failed).
        """
        unknown = self._unknown
        if unknown is None:
            return
        count = len(unknown.frames)
        stored: list[bytes] = []
        async for record in self.services.store.read(self.stream, unknown.after):
            stored.append(record.data)
            if len(stored) == count:
                break
        self._unknown = None
        if stored != unknown.frames:
            return  # not made (or another writer's records follow: the commit's conflict says so)
        later = self._staged[unknown.staged :]  # staged after the commit began: their seqs move up
        for staged in reversed(later):
            staged.undo(self.state)
        self._staged = []
        self._committed(unknown.records, count, sum(map(raw_size, unknown.frames)))
        for staged in later:
            for entry in staged.entries:
                self.stage(entry)

    def snapshot_submitted(self) -> None:
        """Hand the current state to the background snapshot writer (never with staged records)."""
        assert not self._staged, "a snapshot covers durable records only"
        # Naming the restored pages again is for paged snapshots only: a snapshot in an older
        # release's format holds the whole state inline.
        paged = self.services.codec.formats.paged
        wire = self.state.snapshot_wire() if paged else self.state.to_wire()
        self.services.snapshots.submit(self.stream, self.state.last_seq, wire, claim=self.claim)
        self.snapshot_seq = self.state.last_seq
        # Until the writer reports the real size, the state grew by about the tail.
        self.snapshot_bytes += self.bytes_since
        self.records_since = self.bytes_since = 0
