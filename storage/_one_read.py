"""A private capability of the built-in SQLite adapter: a restore's reads in one call.

Not part of the SPI (``durably.storage._spi``): an adapter need not offer it, and
without it a restore makes its separate reads (``get_snapshot``, ``last_seq``,
``read``). A store offers it nominally, by subclassing ``OneReadRestore``, as the
SPI's optional capabilities are declared: a wrapper that forwards attributes does
not claim it by accident, and a type checker knows the method where the runtime
narrows a ``Store`` with ``offers_one_read_restore``.
"""

from __future__ import annotations

from typing import Protocol, TypeGuard

from ._spi import Store, StoredRecord, StoredSnapshot, StreamId

#: ``(snapshot, last_seq, first, tail)``, as ``OneReadRestore.read_restore`` returns it.
RestoreRead = tuple[StoredSnapshot | None, int, StoredRecord | None, list[StoredRecord]]


class OneReadRestore(Protocol):
    """What a restore reads, in one call (for SQLite: one statement, one read transaction, one hop)."""

    async def read_restore(
        self, stream: StreamId, at_or_before: int | None = None, page_size: int = 512
    ) -> RestoreRead:
        """The snapshot, last seq, first record and first page of the tail of ``stream``, of one commit.

        Args:
            stream: The stream to read.
            at_or_before: The highest snapshot seq wanted, as ``get_snapshot``; None: the latest.
            page_size: Most records in the tail, >= 1.

        Returns:
            ``(snapshot, last_seq, first, tail)``: what ``get_snapshot`` and ``last_seq``
                return, the record at seq 1 when there is a snapshot (else None), and up to
                ``page_size`` records after the snapshot's seq, in seq order.

        Raises:
            InvalidRequestError: When ``page_size`` < 1.
            CorruptRecordError: For a stored seq that is not an integer (a damaged file).
        """
        ...


def offers_one_read_restore(store: Store) -> TypeGuard[OneReadRestore]:
    """Whether ``store``'s class subclasses ``OneReadRestore`` (nominal, as ``declared_capabilities``).

    Args:
        store: Any store.

    Returns:
        True when it does; a type checker then sees ``read_restore``.
    """
    return OneReadRestore in type(store).__mro__
