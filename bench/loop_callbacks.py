"""Counting the event loop's callbacks while a block runs: the task hops a step costs.

Every time a task resumes after an await that really waited (another task's
event, a worker thread's answer), and every time a thread hands a result back,
the asyncio loop runs one callback (``asyncio.Handle._run``). Per step, that
count is the number of hops between tasks and threads the runtime makes; an
await that completes without waiting costs none. The count is exact and does
not depend on the machine's load, unlike the time it costs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class CallbackCount:
    """How many callbacks the loop ran while ``counting_callbacks`` was open."""

    def __init__(self) -> None:
        self.total = 0


@contextmanager
def counting_callbacks() -> Iterator[CallbackCount]:
    """Count every callback any asyncio loop of this process runs inside the block.

    Out: a ``CallbackCount`` whose ``total`` grows while the block runs. Raises
    ``RuntimeError`` when a count is already open (the counts would mix).
    """
    real: Callable[[asyncio.Handle], Any] = asyncio.Handle._run
    if getattr(real, "_counting", False):
        raise RuntimeError("a callback count is already open")
    count = CallbackCount()

    def counted(handle: asyncio.Handle) -> Any:
        count.total += 1
        return real(handle)

    counted._counting = True  # type: ignore[attr-defined]
    setattr(asyncio.Handle, "_run", counted)  # noqa: B010  (a method replaced for the block)
    try:
        yield count
    finally:
        setattr(asyncio.Handle, "_run", real)  # noqa: B010
