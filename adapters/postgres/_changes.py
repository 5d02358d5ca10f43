"""Change notifications (``CAP_CHANGES``) of the PostgreSQL adapter: LISTEN/NOTIFY.

``publish_change(stream)`` is ``SELECT pg_notify(channel, '["namespace", "agent id"]')``
on a pooled connection: delivered at once to every session listening on the
store's channel (one per schema), in any process on any host. A
subscription holds one dedicated connection (not from the pool: a listening
session must stay open) that ``LISTEN``s on the channel, in a task of the
subscription's own task group. When that connection drops (server restart,
network, an operator terminating it) the feed reconnects with capped, jittered
exponential backoff, and the next ``wait()`` returns None: notifications may
have been missed, so the waiter looks at everything once. A half-open
connection is found by a ``SELECT 1`` every ``PING_INTERVAL`` seconds.

PostgreSQL's notifications are at-most-once hints (a session that is not
listening at the moment of the commit never gets them), which is why
``Runtime.serve`` still polls, less often. They are untrusted too: any role
that can connect may NOTIFY any channel. A payload that is not a
``[namespace, agent id]`` pair of valid text is dropped (logged once a
minute, without a traceback), and more than ``MAX_PENDING`` streams waiting
to be read turn into one "missed" (the waiter scans once): a flood costs
bounded memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import asyncpg
from anyio.abc import TaskStatus

from durably.storage._spi import StreamId

if TYPE_CHECKING:
    from ._options import PostgresOptions

log = logging.getLogger("durably.adapters.postgres")

#: Seconds between liveness checks of a listening connection.
PING_INTERVAL = 5.0
#: Reconnect backoff: first wait and cap, in seconds (full jitter).
BACKOFF_BASE, BACKOFF_CAP = 0.05, 5.0
#: Streams notified and not yet read past which the feed reports "missed" instead.
MAX_PENDING = 1024
#: Seconds between two warnings about malformed notifications.
MALFORMED_LOG_INTERVAL = 60.0


def channel_of(schema: str) -> str:
    """The NOTIFY channel of a schema: ``durably.<schema>``, hashed when it would pass 63 bytes."""
    name = f"durably.{schema}"
    return name if len(name) <= 63 else "durably." + hashlib.sha256(schema.encode()).hexdigest()[:32]


class ChangeFeed:
    """A subscription to one namespace's change notifications (``durably.storage._spi.ChangeSubscription``).

    Made by ``PostgresStore.subscribe_changes``; ``wait()`` returns the streams
    notified since the last call, or None after the feed was (re)connected.
    ``connected`` tells whether it listens right now, ``reconnects`` how often it had to.
    """

    def __init__(self, dsn: str, connect_timeout: float, application_name: str, channel: str, namespace: str) -> None:
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._application_name = application_name
        self._channel = channel
        self._namespace = namespace
        self._changed: set[StreamId] = set()
        self._missed = False
        self._event = anyio.Event()
        self.connected = False
        self.reconnects = 0
        self.malformed = 0
        self._malformed_logged_at = -MALFORMED_LOG_INTERVAL

    async def wait(self) -> frozenset[StreamId] | None:
        """The streams notified since the last call (waits for one), or None when some may have been missed."""
        while not (self._changed or self._missed):
            await self._event.wait()
            self._event = anyio.Event()
        if self._missed:
            self._missed = False
            self._changed.clear()
            return None
        changed, self._changed = frozenset(self._changed), set()
        return changed

    def _wake(self) -> None:
        self._event.set()

    def _on_notification(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        try:
            namespace, agent_id = json.loads(str(payload))
            if namespace != self._namespace:
                return
            agent_id.encode("utf-8")  # a lone surrogate names no stream any store holds
            stream = StreamId(namespace, agent_id)
        except (ValueError, TypeError, AttributeError):  # UnicodeError and InvalidArgumentError are ValueErrors
            self._malformed()
            return
        if self._missed:
            return  # the waiter scans anyway
        if len(self._changed) >= MAX_PENDING and stream not in self._changed:
            self._missed = True  # a flood: one scan instead of following every id
            self._changed.clear()
        else:
            self._changed.add(stream)
        self._wake()

    def _malformed(self) -> None:
        """Count a malformed notification; warn at most once per ``MALFORMED_LOG_INTERVAL``."""
        self.malformed += 1
        now = time.monotonic()
        if now - self._malformed_logged_at >= MALFORMED_LOG_INTERVAL:
            self._malformed_logged_at = now
            log.warning(
                "ignoring malformed durably notifications on %s (%d so far): another role may be sending them",
                self._channel,
                self.malformed,
            )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled, reconnecting with backoff; ``started`` after the first attempt."""
        failures = 0
        self._task_status: TaskStatus[None] | None = task_status
        while True:
            try:
                await self._listen_once()
                failures = 0
            except (
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.InternalClientError,
                OSError,
                TimeoutError,
            ) as exc:
                # InternalClientError: a ping cut off by a server restart left the connection mid-operation.
                log.warning(
                    "durably change feed on %s lost: %s: %s; polling until it is back",
                    self._channel,
                    type(exc).__name__,
                    exc,
                )
            finally:
                self.connected = False
            self._started()
            # Whatever was notified while we were not listening is lost: say so.
            self._missed = True
            self._wake()
            failures += 1
            self.reconnects += 1
            await anyio.sleep(random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2**failures)))

    def _started(self) -> None:
        """Tell the task group's ``start`` (once) that the first attempt is over."""
        task_status, self._task_status = self._task_status, None
        if task_status is not None:
            task_status.started()

    async def _listen_once(self) -> None:
        """One listening connection, from connect to its loss (returns or raises when it is gone)."""
        conn = await asyncpg.connect(
            self._dsn, timeout=self._connect_timeout, server_settings={"application_name": self._application_name}
        )
        try:
            lost = anyio.Event()
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(self._channel, self._on_notification)
            self.connected = True
            self._started()
            while not lost.is_set():
                with anyio.move_on_after(PING_INTERVAL):
                    await lost.wait()
                if not lost.is_set():
                    with anyio.fail_after(self._connect_timeout):
                        await conn.fetchval("SELECT 1")
        finally:
            conn.terminate()  # no round trip: the session (and its LISTEN) ends with the socket


class PostgresChanges:
    """Mixin giving ``PostgresStore`` the ``ChangeStore`` methods (see ``durably.storage._spi``).

    Relies on the host's ``_check_open()``, ``_execute(what, sql, *args)``, ``options``
    and ``_application_name``.
    """

    if TYPE_CHECKING:  # the host's (PostgresStore), declared for the type checker
        options: PostgresOptions
        _application_name: str

        def _check_open(self) -> None: ...

        async def _execute(self, what: str, sql: str, *args: Any) -> str: ...

    @property
    def _channel(self) -> str:
        return channel_of(self.options.schema)

    async def publish_change(self, stream: StreamId) -> None:
        """Notify the subscribers of ``stream.namespace``, in any process on any host, that ``stream`` changed.

        ``SELECT pg_notify(channel, payload)`` on a pooled connection, on the store's channel
        (one per schema, ``channel_of``). A hint, at most once: a session not listening at
        that moment never gets it.

        Args:
            stream: The stream that changed.

        Raises:
            StoreUnavailableError: When the notification could not be sent before the URL's
                ``deadline``.
        """
        self._check_open()
        payload = json.dumps([stream.namespace, stream.agent_id])
        await self._execute("publish_change", "SELECT pg_notify($1, $2)", self._channel, payload)

    @asynccontextmanager
    async def subscribe_changes(self, namespace: str) -> AsyncIterator[ChangeFeed]:
        """Listen for changes of the streams of ``namespace`` for the ``async with`` block.

        ``async with store.subscribe_changes(ns) as changes:``, then ``await changes.wait()``
        inside. The feed holds one dedicated connection (``listen_dsn``, not from the pool)
        that LISTENs on the store's channel. Entering waits for the first connection attempt
        (so a notification published after entering is seen when the database is up); an
        outage never raises here: the feed reconnects with backoff and ``wait()`` reports the
        gap by returning None.

        Args:
            namespace: Only streams of this namespace are reported.

        Yields:
            The ``ChangeFeed`` (a ``ChangeSubscription``); it stops listening when the block
                ends.
        """
        self._check_open()
        options = self.options
        feed = ChangeFeed(
            options.listen_dsn, options.connect_timeout, f"{self._application_name}-listen", self._channel, namespace
        )
        async with anyio.create_task_group() as group:
            await group.start(feed.run)
            try:
                yield feed
            finally:
                group.cancel_scope.cancel()
