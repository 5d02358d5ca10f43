"""One event loop per saver: the async methods run on it, the sync ones reach it from other threads.

A durably store's connections belong to the loop that opened them, so the
saver binds itself to the first loop that awaits it (``enter``). When that
loop has ended (an ``asyncio.run`` returned), the next loop that awaits the
saver, or the next sync call, moves it: the store is closed and opened again
there and the thread cache is dropped (its locks belonged to the old loop). A sync call
from another thread is handed to that loop (``asyncio.run_coroutine_threadsafe``,
as LangGraph's ``AsyncSqliteSaver`` does) and waits; a sync call *on* that
loop's thread would wait for the loop it blocks, so it raises
``SyncCallOnLoopError`` at once. With no loop yet (a purely synchronous app:
``graph.invoke``) the saver starts its own loop in a daemon thread, stopped by
``close()``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from durably.errors import ForeignLoopError, SyncCallOnLoopError

T = TypeVar("T")


class LoopBridge:
    """Binds a saver to one loop and opens its store there once.

    ``open`` / ``close``: coroutine functions run on that loop; ``reset``: run on
    a new loop before ``open`` when the store was opened on a loop that has ended.
    """

    def __init__(
        self,
        open: Callable[[], Awaitable[None]],
        close: Callable[[], Awaitable[None]],
        reset: Callable[[], Awaitable[None]],
    ) -> None:
        self._open_fn, self._close_fn, self._reset_fn = open, close, reset
        self._stale = False  # the store was opened on a loop that has ended
        self._leaving: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._opened: asyncio.Future[None] | None = None
        self._own: threading.Thread | None = None
        self._guard = threading.Lock()

    async def enter(self) -> None:
        """Bind to the running loop (first call, or the bound loop has ended) and open the store once.

        Raises ``ForeignLoopError`` while another loop the saver is bound to still runs."""
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
        elif loop is not self.loop:
            old, own = self.loop, self._own
            if _alive(old) and own is None:
                raise ForeignLoopError(
                    "this DurablySaver runs on another event loop that is still running; create one saver "
                    "per loop (its store's connections belong to the loop that opened them)"
                )
            self._move(loop)
            if own is not None:  # the saver's own loop (sync calls before): leave it for this one
                self._own, self._leaving = None, (old, own)
        if self._opened is None:
            self._opened = loop.create_future()
            try:
                if self._leaving is not None:
                    leaving, self._leaving = self._leaving, None
                    await _stop_own_loop(*leaving, self._close_fn)
                if self._stale:
                    self._stale = False
                    await self._reset_fn()
                await self._open_fn()
            except BaseException as exc:
                self._opened.set_exception(exc)
                self._opened.exception()  # retrieved: the waiters below re-raise it
                self._opened = None
                raise
            self._opened.set_result(None)
        elif not self._opened.done():
            await asyncio.shield(self._opened)

    def _move(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to ``loop``; a store opened on the old one is reopened by the next ``enter``."""
        self.loop = loop
        if self._opened is not None:
            self._opened, self._stale = None, True

    async def aclose(self) -> None:
        """Close the store if it was opened (on the bound loop)."""
        if self._opened is not None and self._opened.done():
            self._opened = None
            await self._close_fn()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the bound loop from this (other) thread and return its result.

        Raises ``SyncCallOnLoopError`` on the loop's own thread (or inside any
        running loop the saver is not bound to a live loop). With no bound
        loop, or one that has ended, the saver starts a loop of its own.
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and (self.loop is None or running is self.loop or not _alive(self.loop)):
            coro.close()
            raise SyncCallOnLoopError(
                "synchronous DurablySaver methods would block the event loop they need: on the loop's "
                "thread, use the async ones (await saver.aget_tuple(...), await graph.ainvoke(...))"
            )
        with self._guard:
            if self.loop is None or not _alive(self.loop):
                self._start_own_loop()
            loop = self.loop
        assert loop is not None  # bound just above
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _start_own_loop(self) -> None:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        loop.call_soon(started.set)
        self._own = threading.Thread(target=loop.run_forever, name="durably-langgraph-saver", daemon=True)
        self._own.start()
        started.wait()
        self._move(loop)

    def close(self) -> None:
        """Close the store from another thread; stop and close the loop if it is the bridge's own."""
        if self.loop is not None and self.loop.is_running():
            self.run(self.aclose())
        if self._own is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._own.join()
            self.loop.close()
            self._own, self.loop = None, None


# For a type checker the mixin is the saver it is mixed into (the async methods it calls are
# ``BaseCheckpointSaver``'s); at run time it stays a plain mixin, so the MRO is unchanged.
if TYPE_CHECKING:
    _Saver = BaseCheckpointSaver[str]
else:
    _Saver = object


def _alive(loop: asyncio.AbstractEventLoop) -> bool:
    return not loop.is_closed() and loop.is_running()


async def _stop_own_loop(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, close: Callable[[], Awaitable[None]]
) -> None:
    """Close the store on the saver's own ``loop`` (its connections are that loop's), then stop it."""
    if _alive(loop):
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_call(close), loop))
        loop.call_soon_threadsafe(loop.stop)
    await anyio.to_thread.run_sync(thread.join)
    loop.close()


async def _call(fn: Callable[[], Awaitable[None]]) -> None:
    await fn()


class SyncInterface(_Saver):
    """LangGraph's synchronous checkpointer methods, each the async one run through
    ``self._bridge`` (a ``LoopBridge``). Mixed into ``DurablySaver``."""

    _bridge: LoopBridge

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``aget_tuple`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.get_tuple``).

        Args:
            config: As ``aget_tuple``.

        Returns:
            The checkpoint tuple, or None.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """``alist`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.list``).

        Every matching tuple is collected on the saver's loop before the first
        is returned, not one at a time.

        Args:
            config: As ``alist``.
            filter: As ``alist``.
            before: As ``alist``.
            limit: As ``alist``.

        Returns:
            An iterator over the collected tuples, newest first.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """

        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._bridge.run(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``aput`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.put``).

        Args:
            config: As ``aput``.
            checkpoint: As ``aput``.
            metadata: As ``aput``.
            new_versions: As ``aput``.

        Returns:
            The config naming the stored checkpoint.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """``aput_writes`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.put_writes``).

        Args:
            config: As ``aput_writes``.
            writes: As ``aput_writes``.
            task_id: As ``aput_writes``.
            task_path: As ``aput_writes``.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """``adelete_thread`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.delete_thread``).

        Args:
            thread_id: As ``adelete_thread``.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """``adelete_for_runs`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.delete_for_runs``).

        Args:
            run_ids: As ``adelete_for_runs``.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``acopy_thread`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.copy_thread``).

        Args:
            source_thread_id: As ``acopy_thread``.
            target_thread_id: As ``acopy_thread``.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``aprune`` from a thread that is not the saver's event loop (``BaseCheckpointSaver.prune``).

        Args:
            thread_ids: As ``aprune``.
            strategy: As ``aprune``.

        Raises:
            SyncCallOnLoopError: Called on the saver's event loop thread (or in
                any running loop before the saver is bound to one).
        """
        return self._bridge.run(self.aprune(thread_ids, strategy=strategy))
