"""``StoreBase``: the parts of the SPI that every adapter would otherwise write again.

Subclass it and implement ``_open``, ``_close`` and the data methods; you get the
async context manager, the open/closed guard, and ``append`` in terms of
``append_batch``. Subclass the optional protocols you implement too, after it
(``class MyStore(StoreBase, LeaseStore)``): a type checker then checks their
methods, and ``capabilities`` is derived from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from ._errors import StoreClosedError
from ._spi import AppendRequest, Store, StreamId, declared_capabilities


class StoreBase(Store):
    """Lifecycle and convenience methods shared by adapters (see ``durably.storage._spi.Store``).

    ``capabilities`` of a subclass: the optional protocols it subclasses (``BlobStore``,
    ``LeaseStore``, ``ChangeStore``), plus what it lists itself (``CAP_SINGLE_PROCESS``).
    """

    capabilities: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.capabilities = frozenset(cls.capabilities) | declared_capabilities(cls)

    def __init__(self) -> None:
        self._is_open = False

    async def open(self) -> None:
        """Connect (idempotent); adapters implement ``_open``."""
        if not self._is_open:
            await self._open()
            self._is_open = True

    async def close(self) -> None:
        """Disconnect (idempotent); adapters implement ``_close``."""
        if self._is_open:
            self._is_open = False
            await self._close()

    async def _open(self) -> None:  # pragma: no cover - adapters override when they need to
        return None

    async def _close(self) -> None:  # pragma: no cover
        return None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        where = self._location()
        return (
            f"{type(self).__name__}({where!r}, {'open' if self._is_open else 'closed'})"
            if where
            else f"<{type(self).__name__} {'open' if self._is_open else 'closed'}>"
        )

    def _location(self) -> str:
        """What ``repr`` shows of where the data lives (a URL without secrets, a path); adapters override."""
        return ""

    def _check_open(self) -> None:
        """Raise ``StoreClosedError`` outside the open/close window."""
        if not self._is_open:
            raise StoreClosedError(f"{type(self).__name__} is not open")

    async def append(
        self, stream: StreamId, expected_seq: int, records: Sequence[bytes], *, fence: int | None = None
    ) -> int:
        """Append one stream's batch as a one-request ``append_batch``; see ``Store.append``.

        Args:
            stream: The stream to append to.
            expected_seq: The last seq the writer saw; 0 for a new stream.
            records: The encoded frames, at least one.
            fence: The writer's lease token (``AppendRequest.fence``); None: no check.

        Returns:
            The stream's new last seq.

        Raises:
            FencedError: When ``fence`` is no longer the stream's lease (returned by ``append_batch``, raised).
            ConflictError: When the stream's last seq is not ``expected_seq``
                (the error ``append_batch`` returned, raised; nothing written).
            StoreUnavailableError: From ``append_batch``, when the backend fails.
            InvalidRequestError: From ``append_batch``, for a malformed append.
        """
        (result,) = await self.append_batch([AppendRequest(stream, expected_seq, list(records), fence=fence)])
        if isinstance(result, Exception):  # a ConflictError or FencedError, the errors append_batch returns
            raise result
        return result
