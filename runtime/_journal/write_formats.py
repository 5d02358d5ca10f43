"""Which formats this build writes: its newest, or the ones an older release still reads.

A fleet is upgraded one worker at a time, so for a while a worker of the
previous release may take over an agent that a new worker wrote. This build
reads every format ever written, but the previous release reads only its own:
meeting a newer frame or snapshot it refuses the agent (it logs the journal as
unreadable and leaves it for a newer worker, docs/versions.md). So during the
upgrade every worker writes what the oldest release still running reads, and
only once the whole fleet runs this build does it write its newest formats, as
Kafka's ``log.message.format.version`` and Cassandra's
``storage_compatibility_mode`` do.

The setting (``Runtime(write_compat=...)``, ``$DURABLY_WRITE_COMPAT``,
``durably worker --write-compat``) names that oldest release; ``write_formats``
turns it into a ``WriteFormats``, the one thing the record codec and the
snapshot writer consult. Reading never depends on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from durably.errors import ArgumentTypeError, InvalidArgumentError
from durably.schemas._records import CURRENT_VERSIONS, SNAPSHOT_SCHEMA_ID

#: The environment variable read when ``Runtime(write_compat=)`` is not given.
ENV = "DURABLY_WRITE_COMPAT"

#: The first snapshot version whose state may name pages (blobs of older messages).
FIRST_PAGED = 6


@dataclass(frozen=True, slots=True)
class WriteFormats:
    """The formats a runtime writes.

    Attributes:
        release: The release these formats are for (``"0.1"``), or None: this build's newest.
        group_frames: Whether a commit of several records is one group frame (format 4)
            with member rows (format 5); False: one frame per record (format 3, or 1
            when encrypted).
        snapshot: The ``durably.snapshot`` version stamped on snapshots, or None:
            the current one (``CURRENT_VERSIONS``, read when a snapshot is written).
    """

    release: str | None
    group_frames: bool
    snapshot: int | None

    @property
    def snapshot_version(self) -> int:
        """The snapshot version written; below ``FIRST_PAGED`` a snapshot holds its whole conversation inline."""
        return CURRENT_VERSIONS[SNAPSHOT_SCHEMA_ID] if self.snapshot is None else self.snapshot

    @property
    def paged(self) -> bool:
        """Whether snapshots page their older messages and ledger entries out to blobs."""
        return self.snapshot_version >= FIRST_PAGED

    @property
    def levels(self) -> tuple[int, int]:
        """``(frame format, snapshot version)``: the highest of each written, what a reader must read."""
        return (5 if self.group_frames else 3, self.snapshot_version)


#: This build's formats: group frames and paged snapshots.
NEWEST = WriteFormats(None, group_frames=True, snapshot=None)

#: Releases a fleet may still run during an upgrade, with what they read: the 0.1
#: release reads frame formats 1 to 3 and snapshots up to version 5.
RELEASES: Mapping[str, WriteFormats] = {"0.1": WriteFormats("0.1", group_frames=False, snapshot=5)}


#: What a worker reads whose heartbeat does not say: the 0.1 release's workers never did.
UNSTATED = RELEASES["0.1"].levels


def readable(written: tuple[int, int], reads: tuple[int, int]) -> bool:
    """Whether a worker that reads up to ``reads`` reads what ``written`` levels describe (``WriteFormats.levels``)."""
    return written[0] <= reads[0] and written[1] <= reads[1]


def release_name(levels: tuple[int, int]) -> str:
    """An operator's name for format ``levels``: a release of ``RELEASES``, ``"this release"``, or the levels."""
    if levels == NEWEST.levels:
        return "this release"
    for name, formats in RELEASES.items():
        if formats.levels == levels:
            return name
    return f"frames {levels[0]}, snapshots {levels[1]}"


def write_formats(write_compat: str | None, *, source: str = "write_compat") -> WriteFormats:
    """The formats to write while the fleet may still run release ``write_compat``.

    Args:
        write_compat: A release in ``RELEASES`` (``"0.1"``; ``"0.1.3"`` names the same
            release), or None or ``""``: this build's newest formats.
        source: What the value came from, for the error message.

    Returns:
        The ``WriteFormats`` of that release, or ``NEWEST``.

    Raises:
        ArgumentTypeError: ``write_compat`` is neither a ``str`` nor None.
        InvalidArgumentError: It names no release in ``RELEASES``.
    """
    if write_compat is None:
        return NEWEST
    if not isinstance(write_compat, str):
        raise ArgumentTypeError(f"{source} must be a release such as '0.1' (a str), got {type(write_compat).__name__}")
    value = write_compat.strip()
    if not value:
        return NEWEST
    parts = value.split(".")
    release = ".".join(parts[:2]) if len(parts) == 3 and parts[2].isdigit() else value
    try:
        return RELEASES[release]
    except KeyError:
        known = ", ".join(sorted(RELEASES))
        raise InvalidArgumentError(
            f"{source}={write_compat!r} names no release this build can write for (known: {known}); "
            "leave it unset to write this release's formats"
        ) from None


def write_formats_from_env(environ: Mapping[str, str] | None = None) -> WriteFormats:
    """``write_formats`` of ``$DURABLY_WRITE_COMPAT`` (unset or empty: ``NEWEST``).

    Raises:
        InvalidArgumentError: The variable names no release in ``RELEASES``.
    """
    env = os.environ if environ is None else environ
    return write_formats(env.get(ENV), source=f"${ENV}")
