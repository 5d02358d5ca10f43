"""Migrations: of an agent's state when its definition changed, and of stored snapshots.

Two kinds of change can stand between a journal and the code that resumes it.

* The **agent definition** changed (prompt, tools, version): the journal
  recorded the definition's name, version and digest when the run started. On
  resume the registered definition's ``on_definition_change`` policy decides:
  ``continue``, ``migrate`` through the user's hook, or ``stop`` (status
  ``needs_migration``, nothing appended). ``definition_change_entries`` and
  ``hold_for_migration`` are what ``Runtime.resume`` and its restore call.
* The **wire schema** changed (a new durably): records are never rewritten;
  they are lifted on read by the upcasters (``durably.schemas._upcasters``).
  Snapshots are a cache of the fold, so ``migrate_store`` (``durably migrate``)
  may rewrite old ones at the current version, at the same seq, so restore no
  longer pays for the upcasting; ``dry_run`` only reports.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Mapping
from contextlib import aclosing
from dataclasses import dataclass, field, fields
from typing import Any

from durably._journal.records import RecordCodec
from durably._loop.agent import AgentDefinition, OnDefinitionChange
from durably._loop.state import NEEDS_MIGRATION, RUNNING, AgentState
from durably.errors import DefinitionMigrationError
from durably.schemas._records import CURRENT_VERSIONS, RECORD_SCHEMA_ID, SCHEMA_NAMES, SNAPSHOT_SCHEMA_ID, Kind
from durably.schemas._upcasters import upcast
from durably.storage._codec import check_encodable
from durably.storage._errors import (
    CodecError,
    CorruptRecordError,
    DecryptionError,
    UnencodableValueError,
    UnknownSchemaVersionError,
)
from durably.storage._group_frames import decode_group, is_group, is_member, read_member
from durably.storage._spi import Store, StreamId

log = logging.getLogger("durably.migrate")

#: State fields the runtime owns; a migrate hook that changes them is refused.
RUNTIME_FIELDS = frozenset({"namespace", "agent_id", "run_id", "definition", "status", "last_seq"})
_STATE_FIELDS = frozenset(f.name for f in fields(AgentState))


def definition_changed(recorded: Mapping[str, Any], definition: AgentDefinition) -> bool:
    """True when ``definition``'s version or digest differs from ``recorded`` (journal info)."""
    return recorded.get("version") != definition.version or recorded.get("digest") not in definition.same_digests()


def _describe(recorded: Mapping[str, Any], definition: AgentDefinition) -> str:
    digests = f"digest {recorded.get('digest')} -> {definition.digest()}"
    if recorded.get("version") == definition.version:
        return f"definition {definition.name!r} changed since it was recorded: {definition.digest_covers()} ({digests})"
    return (
        f"definition {definition.name!r} changed since it was recorded (version {recorded.get('version')!r} -> "
        f"{definition.version!r}, {digests})"
    )


def stop_reason(state: AgentState, definition: AgentDefinition) -> str | None:
    """Why ``state`` must not run under ``definition`` (policy ``stop`` and a change), or None."""
    if definition.on_definition_change is not OnDefinitionChange.STOP or not definition_changed(
        state.definition, definition
    ):
        return None
    return (
        f"{_describe(state.definition, definition)} and its policy is stop: register the recorded definition, "
        f"or declare on_definition_change='continue' or 'migrate'"
    )


def hold_for_migration(state: AgentState, definitions: Mapping[str, AgentDefinition]) -> bool:
    """Report a runnable ``state`` as ``needs_migration`` when its registered definition says stop.

    In: a restored state and the runtime's definitions by name. Sets
    ``state.status`` and ``state.reason`` in memory only and returns True; the
    journal is not touched, so registering a fitting definition later resumes
    the agent where it was. Parked and finished agents are left as they are.
    """
    if state.status != RUNNING:
        return False
    definition = definitions.get(state.definition.get("name", ""))
    reason = stop_reason(state, definition) if definition is not None else None
    if reason is None:
        return False
    state.status, state.reason = NEEDS_MIGRATION, reason
    return True


def definition_change_entries(state: AgentState, definition: AgentDefinition) -> list[tuple[str, dict[str, Any]]]:
    """The records to journal before ``state`` resumes under ``definition``.

    Out: ``[]`` when the definition is the recorded one, else one
    ``(Kind.DEFINITION_CHANGED, data)`` entry with the previous and new
    definition info, the policy and, for ``migrate``, the state fields the hook
    rewrote. Pure: ``state`` is not modified (appending the entry folds it in).
    Raises ``DefinitionMigrationError`` for a failing or invalid hook and for
    the ``stop`` policy.
    """
    if not definition_changed(state.definition, definition):
        return []
    previous, current = dict(state.definition), definition.info()
    policy = definition.on_definition_change
    if policy is OnDefinitionChange.STOP:
        raise DefinitionMigrationError(
            stop_reason(state, definition) or _describe(previous, definition),
            agent_id=state.agent_id,
            previous=previous,
            current=current,
        )
    data: dict[str, Any] = {"previous": previous, "definition": current, "policy": policy.value}
    if policy is OnDefinitionChange.MIGRATE:
        data["state"] = _migrated_fields(state, definition, previous, current)
    return [(Kind.DEFINITION_CHANGED, data)]


def _migrated_fields(
    state: AgentState, definition: AgentDefinition, previous: dict[str, Any], current: dict[str, Any]
) -> dict[str, Any]:
    def refuse(problem: str, cause: BaseException | None = None) -> DefinitionMigrationError:
        error = DefinitionMigrationError(
            f"agent {state.agent_id!r}: migrate hook of {definition.name!r} {problem}",
            agent_id=state.agent_id,
            previous=previous,
            current=current,
        )
        error.__cause__ = cause
        return error

    before = copy.deepcopy(state.to_wire())  # the hook gets its own copy: stored elements never change
    assert definition.migrate is not None  # AgentDefinition.__post_init__ guarantees it
    try:
        after = definition.migrate(copy.deepcopy(before), copy.deepcopy(previous))
    except Exception as exc:
        raise refuse(f"raised {type(exc).__name__}: {exc}", exc) from exc
    if not isinstance(after, dict):
        raise refuse(f"returned a {type(after).__name__}, not the state dict")
    unknown = sorted(set(after) - _STATE_FIELDS)
    if unknown:
        raise refuse(f"returned unknown state fields {unknown}")
    changed = {name: value for name, value in after.items() if before[name] != value}
    owned = sorted(set(changed) & RUNTIME_FIELDS)
    if owned:
        raise refuse(f"changed fields the runtime owns: {owned}")
    for name, value in changed.items():
        kind = type(before[name])
        if kind in (list, dict, str) and type(value) is not kind:
            raise refuse(f"turned {name} from a {kind.__name__} into a {type(value).__name__}")
    try:
        check_encodable(changed, "migrate(state)")
    except UnencodableValueError as exc:
        raise refuse(f"returned a value that cannot be stored: {exc}", exc) from exc
    return changed


# -- rewriting snapshots at the current schema version ----------------------------------------


@dataclass
class SnapshotReport:
    """One stored snapshot: its ``seq``, the schema ``version`` it was written at,
    and ``action``: ``"rewrite"`` (older than the version written), ``"current"`` (at it),
    ``"newer"`` (newer than the release ``write_compat`` names reads; left as written), or
    ``"unreadable"`` (corrupt or newer than this build; left untouched, ``detail`` says why)."""

    seq: int
    version: int | None
    action: str
    detail: str = ""


@dataclass
class StreamReport:
    """What ``migrate_store`` found (and did) for one stream.

    ``record_versions``: record schema version -> count of records stored at it.
    ``snapshots``: newest first. ``problems``: records that this build cannot
    read (a newer version, no upcaster, corruption); such a stream cannot be
    resumed by this build and nothing of it was written. ``target``: the snapshot
    version rewritten snapshots get (this build's newest, or an older release's).
    """

    stream: StreamId
    target: int = field(default_factory=lambda: CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID])
    record_versions: dict[int, int] = field(default_factory=dict)
    snapshots: list[SnapshotReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rewritten: int = 0

    @property
    def changes(self) -> bool:
        """True when a snapshot is (or would be) rewritten."""
        return any(s.action == "rewrite" for s in self.snapshots)

    def describe(self, *, dry_run: bool) -> str:
        """One line for an operator: what would change (``dry_run``) or what changed, and how."""
        parts = []
        for snap in self.snapshots:
            if snap.action == "rewrite":
                verb = "would be rewritten" if dry_run else "rewritten"
                parts.append(f"snapshot seq {snap.seq} v{snap.version} {verb} as v{self.target}")
            elif snap.action == "newer":
                parts.append(
                    f"snapshot seq {snap.seq} v{snap.version} left as written (newer than v{self.target}, "
                    "the newest the release --write-compat names reads)"
                )
            elif snap.action == "unreadable":
                parts.append(f"snapshot seq {snap.seq} left untouched: {snap.detail}")
        record_current = CURRENT_VERSIONS[RECORD_SCHEMA_ID]
        for version, count in sorted(self.record_versions.items()):
            if version < record_current:
                parts.append(f"{count} records at v{version} stay as written (upcast to v{record_current} on read)")
        parts += [f"cannot resume: {p}" for p in self.problems]
        return f"{self.stream}: " + ("; ".join(parts) if parts else "up to date")


async def migrate_store(
    store: Store, namespace: str, *, dry_run: bool = True, codec: RecordCodec | None = None
) -> list[StreamReport]:
    """Check every stream of ``namespace`` and rewrite its old-version snapshots.

    In: an open ``store``, a ``namespace``, ``dry_run`` (True: only report), and
    ``codec``, whose ``formats`` say which snapshot version is written: this
    build's newest, or during a rolling upgrade (``write_compat``) the newest one
    the oldest release still running reads.
    Out: one ``StreamReport`` per stream, sorted by agent id. Records are only
    read: they stay as written and are upcast on read. Each snapshot older than
    the version written is decoded (upcast), rebuilt as the runtime's
    state and, unless ``dry_run``, stored again at the same seq with
    ``put_snapshot`` (which replaces it), so the next restore reads it with
    less upcasting. A snapshot newer than that version (written by a newer
    worker) is left as written, and so is one that cannot be read (both
    reported). Every stream's records are checked before any snapshot is
    written, so a store that needs a key the codec lacks is refused whole.

    Raises ``DecryptionError`` when a frame is encrypted and ``codec`` has no
    cipher (build it with the store's ``AESGCMCipher``; ``durably migrate``
    reads ``$DURABLY_KEYS``): nothing is written, as such a frame cannot be
    read back to rewrite it. ``StoreUnavailableError`` from the store.
    """
    codec = codec or RecordCodec()
    reports = []
    async for stream in store.list_streams(namespace):
        report = StreamReport(stream, target=codec.formats.snapshot_version)
        await _check_records(store, codec, stream, report)
        reports.append(report)
    for report in reports:
        await _migrate_snapshots(store, codec, report.stream, report, dry_run)
    return reports


def _refuse_without_key(codec: RecordCodec, exc: CodecError, stream: StreamId, seq: int, written: str) -> None:
    """Raise a ``DecryptionError`` saying the key is missing, ending with ``written`` (what the refusal
    left unwritten), when ``exc`` is an encrypted frame met by ``codec`` without a cipher (the only
    ``DecryptionError`` such a codec raises); else return."""
    if codec.codec.cipher is None and isinstance(exc, DecryptionError):
        raise DecryptionError(
            f"{stream} is encrypted and no key was given: migrate needs the keys it was written with "
            f"($DURABLY_KEYS for durably migrate); {written}",
            stream=stream,
            seq=seq,
        ) from exc


async def _check_records(store: Store, codec: RecordCodec, stream: StreamId, report: StreamReport) -> None:
    versions: Counter[int] = Counter()
    name, current = SCHEMA_NAMES[RECORD_SCHEMA_ID], CURRENT_VERSIONS[RECORD_SCHEMA_ID]
    group: tuple[int, int] | None = None  # (first seq, records) of the group frame read last
    # Closed even when a refusal leaves the loop early, so the store's read cursor does not linger.
    async with aclosing(store.read(stream)) as rows:
        async for stored in rows:
            try:
                if is_member(stored.data):
                    # Holds no record (its group frame does), but must be that frame's row at this place.
                    index, count = read_member(stored.data, stream, stored.seq)
                    if group != (stored.seq - index, count):
                        raise CorruptRecordError(
                            f"the group frame at seq {stored.seq - index} this row belongs to is not there",
                            stream=stream,
                            seq=stored.seq,
                        )
                    continue
                if is_group(stored.data):
                    _schema, version, values, _raw = decode_group(codec.codec, stored.data, stream, stored.seq)
                    group = (stored.seq, len(values))
                    found = [(stored.seq + index, version, value) for index, value in enumerate(values)]
                else:
                    frame = codec.codec.decode(stored.data, stream=stream, seq=stored.seq)
                    found = [(stored.seq, frame.schema_version, frame.value)]
            except CodecError as exc:
                _refuse_without_key(codec, exc, stream, stored.seq, "nothing was written")
                report.problems.append(f"record seq {stored.seq}: {exc}")
                continue
            for seq, version, value in found:
                versions[version] += 1
                if version > current:
                    report.problems.append(
                        f"record seq {seq} is {name} v{version}, newer than this build (v{current}); left untouched"
                    )
                elif version < current:
                    try:
                        upcast(RECORD_SCHEMA_ID, version, value, current)
                    except Exception as exc:  # a missing or failing upcaster: restore would refuse it too
                        report.problems.append(f"record seq {seq} v{version}: {exc}")
    report.record_versions = dict(versions)


async def _migrate_snapshots(
    store: Store, codec: RecordCodec, stream: StreamId, report: StreamReport, dry_run: bool
) -> None:
    target = codec.formats.snapshot_version
    stored = await store.get_snapshot(stream)
    while stored is not None:
        try:
            seq, wire, frame = codec.decode_snapshot(stored, stream)
        except CodecError as exc:
            _refuse_without_key(codec, exc, stream, stored.seq, "its snapshots were left as written")
            version = exc.version if isinstance(exc, UnknownSchemaVersionError) else None
            report.snapshots.append(SnapshotReport(stored.seq, version, "unreadable", str(exc)))
        else:
            if frame.schema_version == target:
                report.snapshots.append(SnapshotReport(seq, frame.schema_version, "current"))
            elif frame.schema_version > target:
                # Not rewritten down: a newer snapshot may page its conversation out to blobs,
                # which the older version cannot hold; migrate only ever lifts snapshots.
                report.snapshots.append(SnapshotReport(seq, frame.schema_version, "newer"))
            else:
                # Rebuilt exactly as restore would, so the rewrite is what this build would have written.
                state = AgentState.from_wire(wire)
                state.last_seq = seq
                data = codec.encode_snapshot(seq, state.to_wire(), stream)
                report.snapshots.append(SnapshotReport(seq, frame.schema_version, "rewrite"))
                if not dry_run:
                    await store.put_snapshot(stream, seq, data)
                    report.rewritten += 1
                    log.info(
                        "rewrote snapshot of %s at seq %d from v%d to v%d", stream, seq, frame.schema_version, target
                    )
        if stored.seq <= 1:
            break
        stored = await store.get_snapshot(stream, stored.seq - 1)
