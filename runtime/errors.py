"""Every error durably raises on purpose, in one hierarchy rooted at ``DurablyError``.

Catch ``DurablyError`` for anything durably refused or could not do; catch a
subclass to act on one cause without parsing a message (a stale writer gets
``ConflictError``, bit rot ``CorruptRecordError``, an outage
``StoreUnavailableError``). A builtin is mixed in only where its meaning is the
same: ``ValueError`` for a bad argument, ``KeyError``/``LookupError`` for a
lookup that found nothing, ``TimeoutError``, ``PermissionError``,
``ImportError`` for a missing extra. A ``KeyError`` subclass prints its message
as written (``KeyError`` itself would quote it). No class inherits from another only so
that one ``except`` catches both.

The tree::

    DurablyError
    +-- InvalidArgumentError (ValueError)      a bad argument to a durably constructor or function
    +-- ArgumentTypeError (TypeError)          an argument of the wrong type (not a Tool, not a Model...)
    +-- StoreError                  storage operations (the SPI)
    |   +-- ConflictError               expected seq mismatch (optimistic concurrency)
    |   |   +-- AgentFencedError            ... seen by the runtime: this process lost the agent
    |   +-- StoreUnavailableError       outage, timeout
    |   +-- StoreClosedError
    |   +-- InvalidRequestError (ValueError)
    |   |   +-- UnsafeCompactionError
    |   |   +-- InvalidStoreURLError        a store URL no adapter can use as written
    |   |       +-- UnknownSchemeError          no installed adapter for the scheme
    |   +-- BlobNotFoundError (KeyError)
    |   +-- PurgeIncompleteError
    |   +-- PostgresSetupError
    +-- CodecError                  frames, values, schema versions
    |   +-- UnencodableValueError (TypeError)
    |   +-- CorruptRecordError
    |   |   +-- TruncatedRecordError, FrameLimitError, EncryptionRequiredError, UnfoldableRecordError
    |   |   +-- DecryptionError
    |   |       +-- UnknownKeyError
    |   +-- UnknownSchemaVersionError
    |       +-- MissingUpcasterError
    +-- KeyConfigError (ValueError) encryption keys
    +-- InvalidStoreError (TypeError) a store argument that is neither a URL nor a Store
    +-- RuntimeNotStartedError (RuntimeError) a Runtime used outside ``async with``
    +-- AgentNotFoundError (KeyError), AgentExistsError, AgentLeasedError (+ AgentLeaseLostError)
    +-- DefinitionNotRegisteredError (LookupError), DefinitionMigrationError
    +-- InvalidCommandError (ValueError)
    |   +-- ApprovalAlreadyDecidedError
    |   +-- LangGraphThreadError        the id names a LangGraph thread, not an agent
    +-- SeqOutOfRangeError (ValueError), WaitTimeoutError (TimeoutError)
    +-- TransientModelError (+ MalformedToolCallError), ModelReplyError (ValueError)
    +-- ToolArgumentsError (ValueError), RedactedArgumentError
    +-- CallFailedError, NonDeterminismError, NotInRunError (RuntimeError)   journaled calls of a run
    +-- TortureError
    +-- CheckpointValueError, InvalidThreadIdError (ValueError), SyncCallOnLoopError (RuntimeError),
    |   ForeignLoopError (RuntimeError), InvalidPruneStrategyError (ValueError), ImportSourceError
    +-- ConsoleConfigError (ValueError), CSRFError (PermissionError)
    +-- ExtraNotInstalledError (ImportError)   an optional extra's library is missing
        +-- ConsoleNotInstalledError

This module imports nothing, so every layer (storage, adapters, runtime,
bridges) may raise from it; ``durably`` and ``durably.storage`` re-export
the names their audience needs.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self

if TYPE_CHECKING:
    from collections.abc import Iterator


class _StreamAddress(Protocol):
    """The stream an error concerns, by the shape it is read with (``durably.storage.StreamId`` has it).

    Typed by shape because this module imports nothing of durably: every other module imports it."""

    @property
    def namespace(self) -> str: ...

    @property
    def agent_id(self) -> str: ...


class DurablyError(Exception):
    """Base class of every error durably raises on purpose."""


def _iso_utc(at: float) -> str:
    """Unix seconds as ISO 8601 in UTC, to the second: ``2026-12-01T09:30:00Z``."""
    from datetime import UTC, datetime  # the standard library only: this module imports nothing of durably

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unquoted(error: BaseException) -> str:
    """``str(error)`` as ``Exception`` gives it: ``KeyError`` would ``repr`` a one-argument message."""
    return BaseException.__str__(error)


# ------------------------------------------------------------------ arguments


class InvalidArgumentError(DurablyError, ValueError):
    """A durably constructor or function was given a value it cannot use
    (``RetryPolicy(attempts=0)``, ``SnapshotPolicy(keep=0)``, a negative TTL, an
    unknown model provider...). Raised when the value is given, before anything
    runs or is written; the message names the argument and what was wrong."""


class ArgumentTypeError(DurablyError, TypeError):
    """A durably constructor or function was given an argument of the wrong type
    (an agent definition's tools that are not ``Tool``, a model without
    ``respond``, ``@tool`` on something that is not a function...). Raised when
    the value is given; the message names the argument and the type found."""


# ------------------------------------------------------------------ storage (the SPI)


class StoreError(DurablyError):
    """A storage operation failed."""


class ConflictError(StoreError):
    """An append stated an expected seq that is not the stream's last seq.

    This is optimistic concurrency as in event stores (EventStoreDB's
    ``expectedRevision``, Marten, Akka Persistence): another writer appended
    first, so this writer's view of the stream is stale and it must re-read
    before it may act again. Nothing of the rejected batch was written.

    Attributes: ``stream`` (StreamId), ``expected_seq`` (int), ``actual_seq``
    (int or None when the store could not tell). An adapter builds it as
    ``ConflictError(request.stream, request.expected_seq, actual_seq)`` and
    returns it (not raises it) in ``append_batch``'s result list.
    """

    def __init__(self, stream: _StreamAddress, expected_seq: int, actual_seq: int | None) -> None:
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"conflict on {stream}: expected last seq {expected_seq}, "
            f"stream is at {actual_seq if actual_seq is not None else 'an unknown seq'}"
        )


class FencedError(ConflictError):
    """An append or snapshot carried a fencing token the stream's lease no longer has.

    A newer lease of the stream was granted since the writer's (another worker
    took the agent over), or the stream was purged (a restarted id is a new
    incarnation). Nothing was written. The writer has lost the stream for good:
    it must stop acting on it, not re-read and retry. A subclass of
    ``ConflictError``, so code that treats any conflict as "re-read before
    acting" stays safe.

    Attributes: as ``ConflictError``, plus ``fence`` (the token that was refused).
    An adapter returns it from ``append_batch`` as
    ``FencedError(request.stream, request.expected_seq, actual_seq, fence=request.fence)``.
    """

    def __init__(self, stream: _StreamAddress, expected_seq: int, actual_seq: int | None, *, fence: int) -> None:
        super().__init__(stream, expected_seq, actual_seq)
        self.fence = fence
        self.args = (f"fenced on {stream}: lease token {fence} is no longer the stream's lease (taken over or purged)",)


class AgentFencedError(ConflictError):
    """Another writer appended to this agent's stream: this process lost it.

    The stale process stops that agent without writing anything more (its
    appends would fail their expected-seq check anyway); the new owner goes on.
    """


class StoreUnavailableError(StoreError):
    """The store could not be reached or did not answer in time.

    The operation's outcome is as documented by the raising method: appends
    that raise this were not acknowledged and may be retried with the same
    expected seq (a retry then either succeeds or raises ``ConflictError``).
    """


class StoreClosedError(StoreError):
    """The store was used before ``open()`` or after ``close()``."""


class InvalidRequestError(StoreError, ValueError):
    """The caller asked for something the SPI forbids (an empty batch, a negative seq...)."""


class UnsafeCompactionError(InvalidRequestError):
    """Compaction would delete records that restore still needs.

    Records may only be deleted through the seq of an existing snapshot;
    anything after the latest snapshot is the tail that restore replays.
    """


class InvalidStoreURLError(InvalidRequestError):
    """A store URL cannot be used as written: malformed, an unknown option or a
    value out of range, or a file path whose parent directory does not exist
    (add ``?create=1`` to have it created). Every adapter raises this one type,
    from the store's constructor (the URL) or ``open()`` (the path); the
    ``durably`` command raises it too for a SQLite database file that does not
    exist (its operator verbs never create one). ``url`` is the URL as given
    (with any password replaced by ``***``)."""

    def __init__(self, message: str, *, url: str = "") -> None:
        self.url = url
        super().__init__(message)


class UnknownSchemeError(InvalidStoreURLError):
    """No installed adapter handles the URL's scheme; the message lists known schemes."""


class BlobNotFoundError(StoreError, KeyError):
    """No blob with that digest is stored for the stream."""

    def __str__(self) -> str:
        return _unquoted(self)


class PurgeIncompleteError(StoreError):
    """``delete_stream`` returned but the store still shows some of the stream."""


class PostgresSetupError(StoreError):
    """The database cannot serve as a durably store as set up: read-only (a replica),
    permission denied, durably's tables altered or dropped, or the schema's lock
    held by another transaction past ``lock_timeout`` at ``open()``. Not retryable:
    an operator must act. The message says what was found."""


# ------------------------------------------------------------------ frames, values, schema versions


class CodecError(DurablyError):
    """Encoding or decoding a frame failed."""


class UnencodableValueError(CodecError, TypeError):
    """A value cannot be stored; ``path`` names the offending field.

    Raised at save time, before anything is written, so a bad value never
    reaches the journal and never surprises a restore.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class CorruptRecordError(CodecError):
    """Stored bytes are not a valid frame (bad magic, checksum mismatch, bad CBOR...).

    Attributes: ``stream`` and ``seq`` when known, else None.
    """

    def __init__(self, message: str, *, stream: _StreamAddress | None = None, seq: int | None = None) -> None:
        self.stream = stream
        self.seq = seq
        where = f" ({stream} seq {seq})" if stream is not None else ""
        super().__init__(message + where)


class TruncatedRecordError(CorruptRecordError):
    """A frame is shorter than its header says: a torn write."""


class FrameLimitError(CorruptRecordError):
    """A frame would decode past the configured size or nesting-depth bound."""


class DecryptionError(CorruptRecordError):
    """An encrypted frame failed to decrypt: AES-GCM authentication failed.

    The frame was tampered with, encrypted under another key than its key id
    names, or moved: its associated data binds it to its namespace, agent id,
    seq and schema, so a frame copied to another stream or seq never decrypts.
    Also raised when an encrypted frame meets a codec without a cipher, or a
    decode that does not say where the frame was stored.
    """


class UnknownKeyError(DecryptionError):
    """An encrypted frame names a key id the key provider does not have
    (a retired key, or the wrong provider). Attribute: ``key_id`` (str)."""

    def __init__(
        self, message: str, *, key_id: str, stream: _StreamAddress | None = None, seq: int | None = None
    ) -> None:
        self.key_id = key_id
        super().__init__(message, stream=stream, seq=seq)


class EncryptionRequiredError(CorruptRecordError):
    """A plaintext frame was read where the codec requires encryption: it was
    not written by this deployment's encrypted codec, so it is refused."""


class UnfoldableRecordError(CorruptRecordError):
    """A record decoded but does not fit the state it follows (a field missing
    or of the wrong type, e.g. a usage figure that is not a number).

    The fold is total: this is the only error it raises for bad data, so the
    agent whose journal holds the record is reported unreadable (``status``,
    ``agents``, ``resume_all``) and its neighbours in the namespace carry on.
    ``seq`` names the record; nothing stored is changed.
    """


class UnknownSchemaVersionError(CodecError):
    """A frame names a schema version this build cannot read (a newer durably wrote it).

    The data is left untouched; upgrade durably or register an upcaster.
    Attributes: ``schema``, ``version``, ``supported`` (highest known), ``stream``, ``seq``.
    """

    def __init__(
        self, schema: str, version: int, supported: int, *, stream: _StreamAddress | None = None, seq: int | None = None
    ) -> None:
        self.schema = schema
        self.version = version
        self.supported = supported
        self.stream = stream
        self.seq = seq
        where = f" in {stream} at seq {seq}" if stream is not None else ""
        super().__init__(
            f"{schema} version {version}{where} is newer than this build supports "
            f"(up to {supported}); the data was left untouched"
        )


class MissingUpcasterError(UnknownSchemaVersionError):
    """A frame's schema version is older than this build's and no upcaster chain
    lifts it (``missing``: the first version without a step), or it is below 1.

    Like its base class it stops that agent and leaves the data untouched.
    """

    def __init__(
        self,
        schema: str,
        version: int,
        supported: int,
        missing: int,
        *,
        stream: _StreamAddress | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(schema, version, supported, stream=stream, seq=seq)
        self.missing = missing
        where = f" in {stream} at seq {seq}" if stream is not None else ""
        self.args = (
            f"{schema} version {version}{where} has no upcaster from version {missing} to the "
            f"current version {supported}; the data was left untouched",
        )


class UnknownDictionaryError(UnknownSchemaVersionError):
    """A frame names a zstd dictionary this build does not ship (a newer durably wrote it).

    Like its base class it stops that agent and leaves the data untouched;
    upgrade durably to read it. Attributes: ``dictionary_id``, ``known`` (the
    ids this build ships), ``stream``, ``seq``; ``schema`` is
    ``"durably.frame dictionary"`` and ``version`` the id, for callers that
    report every unreadable version alike.
    """

    def __init__(
        self,
        dictionary_id: int,
        known: frozenset[int] = frozenset(),
        reason: str = "",
        *,
        stream: _StreamAddress | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__("durably.frame dictionary", dictionary_id, max(known, default=0), stream=stream, seq=seq)
        self.dictionary_id = dictionary_id
        self.known = known
        where = f" in {stream} at seq {seq}" if stream is not None else ""
        ids = ", ".join(f"{i:#x}" for i in sorted(known)) or "none"
        self.args = (
            reason
            or f"frame{where} names zstd dictionary {dictionary_id:#x}, which this build does not ship "
            f"(it ships {ids}); the data was left untouched",
        )


class KeyConfigError(DurablyError, ValueError):
    """A key provider was given a malformed key id, a key of the wrong size, or
    an environment variable it cannot parse. The message never holds key bytes."""


# ------------------------------------------------------------------ the runtime


class InvalidStoreError(DurablyError, TypeError):
    """``Runtime`` (or another entry point taking a store) was given something that
    is neither a store URL (a ``str`` such as ``"sqlite:///agents.db"``) nor a
    ``Store``. Raised by the constructor, before any I/O."""


class RuntimeNotStartedError(DurablyError, RuntimeError):
    """A ``Runtime`` method that needs the store was called outside ``async with``
    (before it was entered, or after it was left): enter it first,
    ``async with Runtime(...) as rt: await rt.run(...)``."""


# ------------------------------------------------------------------ agents and commands


class AgentNotFoundError(DurablyError, KeyError):
    """No stream exists for that agent id in the runtime's namespace."""

    def __str__(self) -> str:
        return _unquoted(self)


class AgentExistsError(DurablyError):
    """``start`` was called for an agent id that already has a journal."""


class DefinitionNotRegisteredError(DurablyError, LookupError):
    """The journal names an agent definition this runtime has not registered."""


class DefinitionMigrationError(DurablyError):
    """The registered definition differs from the journal's and cannot take it over.

    Raised by ``Runtime.resume`` when the ``migrate`` hook raised, returned
    something that is not a state, or changed fields it may not (``RUNTIME_FIELDS``,
    unknown names, a value of another type, unencodable data). Nothing was
    appended; ``resume_all`` skips the agent (as it skips one whose definition
    is not registered) instead of stopping every other one.
    Attributes: ``agent_id``, ``previous`` and ``current`` definition info.
    """

    def __init__(self, message: str, *, agent_id: str, previous: dict[str, Any], current: dict[str, Any]) -> None:
        self.agent_id = agent_id
        self.previous = previous
        self.current = current
        super().__init__(message)


class InvalidCommandError(DurablyError, ValueError):
    """A command does not fit the agent's state (unknown approval, already decided, terminal agent...)."""


class ApprovalAlreadyDecidedError(InvalidCommandError):
    """The approval was decided already, perhaps a moment ago by another process.

    Attributes: ``agent_id``, ``approval_id`` and ``decision`` (the journaled
    decision: ``approved``, ``by``, ``note``). Of two racing decisions exactly
    one is acknowledged; the other caller gets this error.
    """

    def __init__(self, agent_id: str, approval_id: str, decision: dict[str, Any]) -> None:
        self.agent_id, self.approval_id, self.decision = agent_id, approval_id, decision
        verdict = "approved" if decision.get("approved") else "denied"
        by = f" by {decision['by']}" if decision.get("by") else ""
        super().__init__(f"approval {approval_id!r} of {agent_id} is already decided ({verdict}{by})")


class LangGraphThreadError(InvalidCommandError):
    """The id names a LangGraph thread (a ``DurablySaver``'s stream), not a durably agent.

    Agent commands (approve, deny, send, cancel, retry, extend) and ``resume``
    do not apply to it: a thread stopped at ``interrupt()`` continues with
    ``graph.invoke(Command(resume=...), config)`` on a graph compiled with its
    saver. Attribute: ``agent_id`` (the thread's stream id).
    """

    def __init__(self, namespace: str, agent_id: str) -> None:
        self.agent_id = agent_id
        super().__init__(
            f"{namespace}/{agent_id} is a LangGraph thread, not a durably agent: approve, deny, send, "
            "cancel, retry and extend do not apply to it. Resume it through LangGraph: "
            "graph.invoke(Command(resume=...), config) on the graph compiled with its DurablySaver "
            "(durably show and history read the thread)"
        )


#: Why an activation's lease was lost (``AgentLeaseLostError.cause``).
LeaseLoss = Literal["taken", "lapsed", "expired", "renewal_failed"]


class AgentLeasedError(DurablyError):
    """Another runtime holds the agent's lease: it runs the agent now.

    Attributes: ``agent_id``, ``owner`` (the holder, or None if unknown) and
    ``expires_at`` (unix seconds, or None; the message shows it as ISO 8601 UTC).
    Wait for it to finish or park, or for the lease to expire if that runtime died.
    """

    def __init__(self, agent_id: str, owner: str | None, expires_at: float | None) -> None:
        self.agent_id, self.owner, self.expires_at = agent_id, owner, expires_at
        until = f" (lease until {_iso_utc(expires_at)})" if expires_at is not None else ""
        holder = f"{owner}{until}" if owner else "another runtime"
        super().__init__(f"agent {agent_id!r} is run by {holder}")


class AgentLeaseLostError(AgentLeasedError):
    """This runtime's activation of the agent stopped because its lease is not its own any more.

    This runtime paused (or lost the store) past the lease TTL, and another
    worker took the lapsed lease, or the lease lapsed by this process's clock
    before a model or tool call, or the store refused the activation's fencing
    token (a takeover, or a purge and restart of the id). The agent is not run
    here any more, and anything this activation would still append is refused
    by the store. Raised by ``AgentHandle.wait`` and so ``Runtime.run``.
    Attributes as ``AgentLeasedError`` (``owner`` None when the new holder is unknown),
    and ``cause``, what this runtime knew when it stopped: ``"taken"`` (another
    owner holds the lease, ``owner`` when known), ``"lapsed"`` (the store said nobody
    holds it), ``"expired"`` (it may have lapsed by this process's clock) or
    ``"renewal_failed"`` (the same, after its last renewal failed with
    ``renewal_error``, the store's error as text; None otherwise). The message says which.
    """

    def __init__(
        self,
        agent_id: str,
        owner: str | None,
        expires_at: float | None,
        *,
        cause: LeaseLoss = "taken",
        renewal_error: str | None = None,
    ) -> None:
        super().__init__(agent_id, owner, expires_at)
        if owner is not None:
            cause = "taken"  # a named holder is the whole story, whatever else was seen
        self.cause, self.renewal_error = cause, renewal_error
        lost = f"agent {agent_id!r} lost its lease here"
        if cause == "lapsed":
            text = f"{lost}: it lapsed, and no runtime holds it now"
        elif cause in ("expired", "renewal_failed"):
            why = f"renewing it failed ({renewal_error}), and " if cause == "renewal_failed" else ""
            text = (
                f"{lost}: {why}it may have lapsed by this process's clock (its TTL, less a safety margin, "
                "passed since the last renewal was sent), so another runtime may run it now"
            )
        else:
            until = f" (lease until {_iso_utc(expires_at)})" if owner and expires_at is not None else ""
            text = f"{lost}; it is run by {owner or 'another runtime'}{until} now"
        self.args = (text,)


class WorkerExistsError(DurablyError):
    """``serve()`` on a store without leases found another live worker serving the namespace.

    Nothing in such a store keeps two workers from running the same agents (and
    their tools) twice, so the second one does not start. Attributes:
    ``worker_id``, ``host`` and ``pid`` of the worker found. Stop it, or serve
    from a store with leases (sqlite, postgresql, s3) to run several workers.
    """

    def __init__(self, namespace: str, worker_id: str, host: str, pid: int) -> None:
        self.namespace, self.worker_id, self.host, self.pid = namespace, worker_id, host, pid
        super().__init__(
            f"worker {worker_id!r} (host {host}, pid {pid}) serves namespace {namespace!r} on this store, "
            "which has no leases: a second worker would run the same agents twice; stop that one, "
            "or use a store with leases (sqlite, postgresql, s3) for several workers"
        )


class SeqOutOfRangeError(DurablyError, ValueError):
    """A seq outside an agent's journal was asked for (``state_at``, ``fork``):
    below 1, past its last record, or in a part compacted away with no snapshot
    at or before it."""


class WaitTimeoutError(DurablyError, TimeoutError):
    """``Runtime.wait`` gave up: the agent did not reach one of the wanted
    statuses in time. ``state`` holds the last state seen (an ``AgentState``)."""

    def __init__(self, message: str, state: Any) -> None:
        super().__init__(message)
        self.state = state


# ------------------------------------------------------------------ models and tools


class TransientModelError(DurablyError):
    """A model call failed in a way worth retrying (rate limit, overload, outage).

    Adapters raise it; ``retry_after`` (seconds, or None) is the provider's
    ``Retry-After``, which the retry policy honours. ``status`` is the HTTP
    status when there was one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after, self.status = retry_after, status


class MalformedToolCallError(TransientModelError):
    """The model's tool call does not parse (its arguments are not a JSON object).

    Transient: the reply is sampled, so the next attempt usually parses; the
    retry policy retries it and journals each failed attempt. ``usage`` is
    what the provider billed for the reply (a ``durably.Usage``, or None when
    unknown): the failed attempt's record counts it towards the budgets.
    """

    def __init__(self, message: str, *, usage: object = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.usage = usage


class ModelReplyError(DurablyError, ValueError):
    """A model adapter returned something that is not a valid ``ModelResponse``.

    ``path`` names the field (``usage.cost_usd``, ``tool_calls[2].arguments``)
    and ``problem`` what is wrong with it. Nothing of the reply is journaled.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"invalid model reply: {path}: {problem}")


class ToolArgumentsError(DurablyError, ValueError):
    """The model's arguments for a tool call do not fit the tool's schema.

    ``tool``: the tool's name; ``problems``: ``(field path, message)`` pairs,
    the path dotted from the argument (``order.lines[0].qty``). The message
    (``str(error)``) is what the model is told, so it can correct the call.
    """

    def __init__(self, tool: str, problems: list[tuple[str, str]]) -> None:
        self.tool, self.problems = tool, problems
        said = "; ".join(f"{path or 'arguments'}: {message}" for path, message in problems)
        super().__init__(f"invalid arguments for tool {tool!r}: {said}")


class ToolTimeoutError(DurablyError, TimeoutError):
    """A tool attempt was cancelled: it ran past its ``timeout``, or sent no
    heartbeat for its ``heartbeat_timeout`` (``heartbeat`` is then True).

    It counts as a failed attempt; the tool's ``ToolRetry`` retries it unless its
    ``retry_timeouts`` is False. ``seconds`` is the limit that was passed.
    """

    def __init__(self, message: str, *, seconds: float, heartbeat: bool = False) -> None:
        super().__init__(message)
        self.seconds, self.heartbeat = seconds, heartbeat


class RedactedArgumentError(DurablyError):
    """A tool call's arguments hold redaction markers and the originals are gone
    (they lived only in the activation that received them, which ended).

    ``tool`` (str) and ``paths`` (list of dotted argument paths).
    """

    def __init__(self, tool: str, paths: list[str]) -> None:
        self.tool = tool
        self.paths = paths
        names = ", ".join(repr(p) for p in paths)
        verb = "was" if len(paths) == 1 else "were"
        noun = "argument" if len(paths) == 1 else "arguments"
        super().__init__(
            f"{noun} {names} of tool {tool!r} {verb} redacted and {'is' if len(paths) == 1 else 'are'} "
            "not available after a restart; the call was not run"
        )


class CallFailedError(DurablyError):
    """A journaled call of a run (``Run.call``) raised: its failure is journaled and
    raised again as this on every replay, so the run's body sees the same thing.

    ``name``: the call's name; ``call_id``: its id in the run; ``error_type``: the
    original exception's type name (module-qualified unless a builtin);
    ``error_message``: its message. On the activation that ran the call, the original
    exception is its ``__cause__``.
    """

    def __init__(self, name: str, call_id: str, error_type: str, error_message: str) -> None:
        self.name, self.call_id = name, call_id
        self.error_type, self.error_message = error_type, error_message
        super().__init__(f"call {name!r} ({call_id}) failed: {error_type}: {error_message}")


class NonDeterminismError(DurablyError):
    """A run's body, replayed, made a call that its journal does not hold at that place:
    the journal's call there has another name (the body changed, or depends on
    something that is not journaled). The agent fails; its data is untouched.

    ``call_id``: where; ``expected``: the journal's call name; ``got``: the body's.
    """

    def __init__(self, call_id: str, expected: str, got: str) -> None:
        self.call_id, self.expected, self.got = call_id, expected, got
        super().__init__(
            f"non-deterministic replay at call {call_id}: the journal holds {expected!r}, the body called {got!r}. "
            "To go on, restore the body that wrote this journal and retry the agent (durably retry), "
            "or fork the agent at a seq before this call (durably fork) so that the changed body runs on from there"
        )


class NotInRunError(DurablyError, RuntimeError):
    """``current_run()`` was called outside a function agent's run."""


# ------------------------------------------------------------------ kits, bridges, operator surfaces


class TortureError(DurablyError):
    """The torture run could not be carried out (a single-process store, a worker that failed)."""


class AgentRunFailedError(DurablyError):
    """A bridge's durable run ended ``failed`` (``durably.integrations.openai_agents.DurableRunner``):
    the framework raised (a guardrail's tripwire, too many turns, a model error) or
    the run's result could not be stored.

    ``agent_id``: the run's agent id; ``reason``: the journaled reason (the
    exception's type name and message).
    """

    def __init__(self, agent_id: str, reason: str) -> None:
        super().__init__(f"agent {agent_id!r} failed: {reason}")
        self.agent_id, self.reason = agent_id, reason


class CheckpointValueError(DurablyError):
    """A stored LangGraph channel value or pending write could not be rebuilt exactly.

    Raised instead of handing LangGraph a ``None`` or a raw dict: the value's
    class is unknown here (not importable, or blocked by the serializer's
    allowlist), its bytes do not decode, or a delta's base is missing.
    Attributes: ``thread_id``, ``checkpoint_ns``, ``checkpoint_id`` (str or None),
    ``channel`` (the channel name), ``reason`` (str).
    """

    def __init__(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None, channel: str, reason: str
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.channel = channel
        self.reason = reason
        where = f"thread {thread_id!r}" + (f" ns {checkpoint_ns!r}" if checkpoint_ns else "")
        if checkpoint_id:
            where += f" checkpoint {checkpoint_id}"
        super().__init__(f"channel {channel!r} of {where} cannot be loaded: {reason}")


class InvalidThreadIdError(DurablyError, ValueError):
    """A ``thread_id`` durably cannot use as a stream id (empty, over 200
    characters, or holding NUL), or a config without ``configurable.thread_id``."""


class SyncCallOnLoopError(DurablyError, RuntimeError):
    """A synchronous ``DurablySaver`` method was called on the event loop thread
    the saver runs on: it would block the loop it needs, so it fails at once.
    Use the async method (``aget_tuple``, ``graph.ainvoke``...) there."""


class ForeignLoopError(DurablyError, RuntimeError):
    """An async ``DurablySaver`` method was awaited on another event loop than
    the one it opened its store on (store connections belong to one loop)."""


class InvalidPruneStrategyError(DurablyError, ValueError):
    """``prune`` was given a strategy other than ``keep_latest`` or ``delete``."""


class ImportSourceError(DurablyError):
    """The source is not a LangGraph SQLite checkpoint database (missing file or tables)."""


class ConsoleConfigError(DurablyError, ValueError):
    """The console's settings are refused: another address without credentials, a short token,
    an operators file it cannot use, or an allowed host that is not a host name."""


class CSRFError(DurablyError, PermissionError):
    """A state-changing request without the CSRF token of the page it claims to come from."""


class ExtraNotInstalledError(DurablyError, ImportError):
    """A feature needs an optional extra whose library is not installed (a model
    adapter without its vendor client, ``durably ui`` without Starlette...).

    The message names the command that installs it (``pip install -e '.[openai]'`` in durably's
    clone: durably is not on the package index yet).
    Attributes: ``extra`` (the extra's name, e.g. ``openai``) and ``name`` (as for
    ``ImportError``: the module that is missing).
    """

    def __init__(self, message: str, *, extra: str, name: str | None = None) -> None:
        super().__init__(message, name=name)
        self.extra = extra

    @classmethod
    def of(cls, feature: str, extra: str, missing: ImportError) -> Self:
        """The error for ``feature`` (e.g. ``durably.models.openai``), which needs ``extra``
        and failed to import with ``missing``."""
        module = missing.name or str(missing)
        return cls(
            f"{feature} needs the {extra} extra: pip install -e '.[{extra}]' in durably's clone "
            f"({module} is not installed)",
            extra=extra,
            name=missing.name,
        )

    @classmethod
    @contextmanager
    def guard(cls, feature: str, extra: str, *modules: str) -> Iterator[None]:
        """Turn a ``ModuleNotFoundError`` for one of ``modules`` raised in the block into this error.

        Wraps the imports of a feature that needs an optional extra::

            with ExtraNotInstalledError.guard("durably.adapters.s3", "s3", "aiobotocore", "botocore"):
                from ._store import S3Store

        Only a missing module that is (or is inside) one of ``modules``, the extra's
        own libraries, is translated; any other ``ImportError`` (a bug in durably, a
        broken install) propagates as itself.

        Args:
            feature: What needs the extra, e.g. ``durably.adapters.s3``.
            extra: The extra's name, e.g. ``s3``.
            *modules: The top-level modules the extra installs, e.g. ``aiobotocore``.

        Yields:
            Nothing: the block runs inside.

        Raises:
            ExtraNotInstalledError: One of ``modules`` is not installed; the
                ``ModuleNotFoundError`` is its ``__cause__``.
        """
        try:
            yield
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] not in modules:
                raise
            raise cls.of(feature, extra, exc) from exc


class ConsoleNotInstalledError(ExtraNotInstalledError):
    """``durably ui`` without the ``ui`` extra (Starlette, Jinja2, uvicorn)."""


__all__ = [
    "AgentRunFailedError",
    "AgentExistsError",
    "AgentFencedError",
    "AgentLeaseLostError",
    "AgentLeasedError",
    "AgentNotFoundError",
    "ApprovalAlreadyDecidedError",
    "ArgumentTypeError",
    "BlobNotFoundError",
    "CSRFError",
    "CallFailedError",
    "CheckpointValueError",
    "CodecError",
    "ConflictError",
    "ConsoleConfigError",
    "ConsoleNotInstalledError",
    "CorruptRecordError",
    "DecryptionError",
    "DefinitionMigrationError",
    "DefinitionNotRegisteredError",
    "DurablyError",
    "EncryptionRequiredError",
    "ExtraNotInstalledError",
    "FencedError",
    "ForeignLoopError",
    "FrameLimitError",
    "ImportSourceError",
    "InvalidArgumentError",
    "InvalidCommandError",
    "LangGraphThreadError",
    "InvalidPruneStrategyError",
    "InvalidRequestError",
    "InvalidStoreError",
    "InvalidStoreURLError",
    "InvalidThreadIdError",
    "KeyConfigError",
    "MalformedToolCallError",
    "MissingUpcasterError",
    "ModelReplyError",
    "NonDeterminismError",
    "NotInRunError",
    "PostgresSetupError",
    "PurgeIncompleteError",
    "RedactedArgumentError",
    "RuntimeNotStartedError",
    "SeqOutOfRangeError",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "SyncCallOnLoopError",
    "ToolArgumentsError",
    "ToolTimeoutError",
    "TortureError",
    "TransientModelError",
    "TruncatedRecordError",
    "UnencodableValueError",
    "UnfoldableRecordError",
    "UnknownDictionaryError",
    "UnknownKeyError",
    "UnknownSchemaVersionError",
    "UnknownSchemeError",
    "UnsafeCompactionError",
    "WaitTimeoutError",
    "WorkerExistsError",
]
