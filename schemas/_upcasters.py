"""Upcasters: the migrations that lift a stored record or snapshot to the current schema.

An upcaster is a small pure function taking the decoded CBOR value of one
schema version N (a dict) and returning the same fact at version N + 1. It is
registered under ``(schema_id, N)``; reading chains them, so a version-1
record read by a build at version 3 goes 1 -> 2 -> 3. The idea is the event
store "upcaster" (Greg Young, *Versioning in an Event Sourced System*; Axon
Framework's ``Upcaster``): stored events are never rewritten, they are lifted
on read. Writes always use ``CURRENT_VERSIONS``; nothing ever writes an old
version (``durably migrate`` rewrites old snapshots, never records).

Adding version 2 of a schema, in one change:

1. describe it in ``schemas/record-v2.cddl`` (or ``snapshot-v2.cddl``); the
   v1 file stays as it is;
2. register the upcaster here::

       @upcaster(RECORD_SCHEMA_ID, 1)
       def record_v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
           ...  # return a new dict; never mutate ``value``

3. bump ``CURRENT_VERSIONS`` in ``schemas/_records.py`` and teach the runtime
   the new shape;
4. write ``tests/golden/v2`` with ``tests/golden/make_golden.py`` and keep
   ``tests/golden/v1``: CI then proves both still restore.

``missing_upcasters()`` lists gaps in the chains; a test keeps it empty.
This module imports nothing of durably beyond ``durably.schemas``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durably.errors import InvalidArgumentError

from ._records import CURRENT_VERSIONS, SCHEMA_NAMES, UPCASTERS

Upcaster = Callable[[Any], Any]


class NoUpcastPathError(LookupError):
    """No chain of upcasters leads from ``version`` to ``target`` for ``schema_id``.

    ``missing`` is the first version without an upcaster to the next one.
    """

    def __init__(self, schema_id: int, version: int, target: int, missing: int) -> None:
        self.schema_id = schema_id
        self.version = version
        self.target = target
        self.missing = missing
        name = SCHEMA_NAMES.get(schema_id, f"schema {schema_id}")
        super().__init__(f"{name} version {version} cannot be lifted to {target}: no upcaster from version {missing}")


def upcaster(schema_id: int, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Decorator registering ``fn(value) -> value`` as the step ``from_version`` -> ``from_version + 1``.

    Args:
        schema_id: The schema the step belongs to (``RECORD_SCHEMA_ID``, ``SNAPSHOT_SCHEMA_ID``).
        from_version: The version the step lifts from, an int >= 1.

    Returns:
        The decorator; it registers the function and returns it unchanged.

    Raises:
        InvalidArgumentError: (a ``ValueError``) for an unknown schema id or a
            version that is not an int >= 1, when called; and, when the
            decorator is applied, for a step that is already registered (two
            migrations of one step would make the result depend on import order).
    """
    if schema_id not in SCHEMA_NAMES:
        raise InvalidArgumentError(f"unknown schema id {schema_id}")
    if type(from_version) is not int or from_version < 1:
        raise InvalidArgumentError(f"from_version must be an int >= 1, got {from_version!r}")

    def register(fn: Upcaster) -> Upcaster:
        key = (schema_id, from_version)
        if key in UPCASTERS:
            raise InvalidArgumentError(
                f"{SCHEMA_NAMES[schema_id]} already has an upcaster from version {from_version}: {UPCASTERS[key]!r}"
            )
        UPCASTERS[key] = fn
        return fn

    return register


def upcast(schema_id: int, version: int, value: Any, target: int | None = None) -> Any:
    """Lift ``value`` (decoded at ``version``) to ``target`` (default: the current version).

    Applies the registered steps in order. Whatever an upcaster raises propagates.

    Args:
        schema_id: The schema of ``value`` (``RECORD_SCHEMA_ID``, ``SNAPSHOT_SCHEMA_ID``).
        version: The version ``value`` was decoded at.
        value: The decoded CBOR value.
        target: The version wanted; None (the default) for ``CURRENT_VERSIONS[schema_id]``.

    Returns:
        The lifted value; a value already at ``target`` is returned as it is.

    Raises:
        NoUpcastPathError: When a step is missing or ``version`` < 1.
        InvalidArgumentError: (a ``ValueError``) when ``version`` is above
            ``target`` (there is no downcasting: that data comes from a newer build).
    """
    target = CURRENT_VERSIONS[schema_id] if target is None else target
    if version > target:
        raise InvalidArgumentError(f"{SCHEMA_NAMES.get(schema_id, schema_id)} version {version} is newer than {target}")
    if version < 1:
        raise NoUpcastPathError(schema_id, version, target, version)
    while version < target:
        step = UPCASTERS.get((schema_id, version))
        if step is None:
            raise NoUpcastPathError(schema_id, version, target, version)
        value, version = step(value), version + 1
    return value


def missing_upcasters() -> list[tuple[int, int]]:
    """List the upcaster steps missing between version 1 and each current version.

    Returns:
        ``(schema_id, version)`` per missing step from ``version``, sorted.
            Empty when every older version of every schema can be read; a non-empty
            answer means a version was bumped without its migration.
    """
    return [
        (schema_id, version)
        for schema_id, current in sorted(CURRENT_VERSIONS.items())
        for version in range(1, current)
        if (schema_id, version) not in UPCASTERS
    ]


# --- the registered steps -------------------------------------------------------------------------

from ._records import RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID  # noqa: E402  (the registry above comes first)


@upcaster(RECORD_SCHEMA_ID, 1)
def record_v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
    """Record version 2 only adds the kind ``forked``: every version-1 record is a
    version-2 record as it is (a copy, so the stored value is never touched)."""
    return dict(value)


@upcaster(SNAPSHOT_SCHEMA_ID, 1)
def snapshot_v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
    """Snapshot version 2 adds ``forked_from`` to the state; no version-1 agent
    was a fork (forks came with version 2), so it is null."""
    return {**value, "state": {**value["state"], "forked_from": None}}


@upcaster(RECORD_SCHEMA_ID, 2)
def record_v2_to_v3(value: dict[str, Any]) -> dict[str, Any]:
    """Record version 3 only adds (two kinds, an optional field, tagged values):
    every version-2 record is a version-3 record as it is (a copy)."""
    return dict(value)


@upcaster(SNAPSHOT_SCHEMA_ID, 2)
def snapshot_v2_to_v3(value: dict[str, Any]) -> dict[str, Any]:
    """Snapshot version 3 only adds an optional field: every version-2 snapshot
    is a version-3 snapshot as it is (a copy)."""
    return dict(value)


@upcaster(RECORD_SCHEMA_ID, 3)
def record_v3_to_v4(value: dict[str, Any]) -> dict[str, Any]:
    """Record version 4 only adds an optional ``trace`` to ``started`` and
    ``resumed``: every version-3 record is a version-4 record as it is (a copy)."""
    return dict(value)


@upcaster(SNAPSHOT_SCHEMA_ID, 3)
def snapshot_v3_to_v4(value: dict[str, Any]) -> dict[str, Any]:
    """Snapshot version 4 only adds an optional ``trace`` to the state: every
    version-3 snapshot is a version-4 snapshot as it is (a copy)."""
    return dict(value)


@upcaster(RECORD_SCHEMA_ID, 4)
def record_v4_to_v5(value: dict[str, Any]) -> dict[str, Any]:
    """Record version 5 only adds the kinds ``tool_failed``, ``tool_heartbeat``,
    ``timer_set``, ``timer_fired``, ``child_started`` and ``child_ended``, an
    optional ``parent`` in ``started`` and an optional ``usage`` in ``model_failed``
    and ``tool_result``: every version-4 record is a version-5 record as it is (a copy)."""
    return dict(value)


@upcaster(SNAPSHOT_SCHEMA_ID, 4)
def snapshot_v4_to_v5(value: dict[str, Any]) -> dict[str, Any]:
    """Snapshot version 5 only adds optional ledger-entry fields (a failed attempt
    awaiting its retry, the newest heartbeat), the statuses ``sleeping`` and
    ``waiting_child``, and optional ``wake_at``, ``parent`` and ``children`` to
    the state: every version-4 snapshot is a version-5 snapshot as it is (a copy)."""
    return dict(value)


@upcaster(SNAPSHOT_SCHEMA_ID, 5)
def snapshot_v5_to_v6(value: dict[str, Any]) -> dict[str, Any]:
    """Snapshot version 6 only adds an optional ``pages`` to the state (the older part of
    the conversation stored as page blobs): every version-5 snapshot is a version-6
    snapshot as it is, its whole conversation inline (a copy)."""
    return dict(value)
