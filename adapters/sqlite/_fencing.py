"""Fencing in the SQLite adapter: an append or snapshot carrying a lease token is checked
against the ``leases`` table inside its own write transaction.

The contract (``AppendRequest.fence``): a token is admitted when the stream's
``leases`` row holds exactly that token and was not ended by a purge (an empty
``owner``, ``SQLiteLeases._end_lease``); an expired or released lease keeps its
row, owner and token, so its holder is still admitted until another owner takes
the lease (which writes a greater token). The check and the write are one
atomic step because SQLite has one writer at a time: the slow path reads the
lease rows after ``BEGIN IMMEDIATE`` has taken the write lock, and the fast
path's single INSERT starts a write transaction before it reads anything, so an
``acquire_lease`` of another connection or process commits either before the
check (and the old token is refused) or after the write.

A file on which no lease was ever taken has no ``leases`` table (it is created
lazily): a token there was never granted, so every fenced request is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _layout as layout

if TYPE_CHECKING:
    import aiosqlite

HAS_LEASES_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'leases'"

#: The fast path's rows when some request carries a fence: 5 parameters each
#: (namespace, agent id, fence or NULL, seq, data), so at most 192 rows (960
#: parameters, under SQLite's historic limit of 999).
FAST_MAX_FENCED_ROWS = 192
FAST_FENCED_PAD = (None, None, None, None, None)


@functools.cache
def fast_insert_fenced_sql(rows: int) -> str:
    """The fast path's statement for ``rows`` rows of which some carry a fence.

    As ``layout.fast_insert_sql``, but a row's stream id is found only when its
    fence is NULL or is the stream's unended lease token: a fenced row of a stale
    holder gets a NULL stream id, the ``records_continue_stream`` trigger then
    aborts the whole statement (nothing written), and the slow path names the
    FencedError. Rows go in stream and seq order, which the trigger needs.
    """
    values = ", ".join(["(?, ?, ?, ?, ?)"] * rows)
    return (
        f"WITH v (namespace, agent_id, fence, seq, data) AS (VALUES {values}) "
        "INSERT INTO records (stream_id, seq, data) "
        "SELECT (SELECT s.id FROM streams AS s WHERE s.namespace = v.namespace AND s.agent_id = v.agent_id "
        "AND (v.fence IS NULL OR EXISTS (SELECT 1 FROM leases AS l WHERE l.namespace = v.namespace "
        "AND l.agent_id = v.agent_id AND l.token = v.fence AND l.owner <> ''))), v.seq, v.data "
        "FROM v ORDER BY v.namespace, v.agent_id, v.seq"
    )


def _lease_tokens_sql(count: int) -> str:
    values = ", ".join(["(?, ?)"] * count)
    return f"SELECT namespace, agent_id, token FROM leases WHERE owner <> '' AND (namespace, agent_id) IN (VALUES {values})"


async def has_leases_table(db: aiosqlite.Connection) -> bool:
    """Whether the file has the ``leases`` table, read on ``db`` (inside its transaction)."""
    return bool(await db.execute_fetchall(HAS_LEASES_TABLE))


async def admitted_tokens(db: aiosqlite.Connection, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The token a fence must carry for each of ``keys`` (namespace, agent id), read on ``db``.

    Call it inside the write transaction that then writes (after ``BEGIN IMMEDIATE``),
    so the lease cannot change between this read and the write, and only on a file
    that has the ``leases`` table (``has_leases_table``). A stream missing from the
    answer admits no token: never leased, or its lease was ended by a purge.
    """
    found: dict[tuple[str, str], int] = {}
    for start in range(0, len(keys), layout.KEYS_PER_STATEMENT):
        chunk = list(keys[start : start + layout.KEYS_PER_STATEMENT])
        padded = layout.bucket(len(chunk))
        params = [part for key in chunk for part in key]
        params += params[-2:] * (padded - len(chunk))  # a repeated key matches the same row: harmless
        for namespace, agent_id, token in await db.execute_fetchall(_lease_tokens_sql(padded), params):
            found[(namespace, agent_id)] = token
    return found
