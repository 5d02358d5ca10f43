"""Moving threads from LangGraph's SQLite checkpointer to a ``DurablySaver``.

``import_sqlite_threads`` reads a database written by ``AsyncSqliteSaver`` /
``SqliteSaver`` (LangGraph's ``langgraph-checkpoint-sqlite``) and replays every
checkpoint of every thread, oldest first, through the ``DurablySaver``'s own
``aput`` / ``aput_writes``, with each checkpoint's parent, metadata and pending
writes. So the imported thread is stored as if the graph had run on durably:
values once per version, conversations as appended items. One checkpoint is
held in memory at a time, whatever the source thread's size.

The source's values are read with the saver's own checks (``StrictSerde``): a
type off the saver's allowlist is refused by name, never imported, and never
copied as a raw payload in its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig

from durably.errors import ImportSourceError

from ._saver import DurablySaver
from ._values import StrictSerde


@dataclass(frozen=True, slots=True)
class ImportedThread:
    """One thread copied by ``import_sqlite_threads``.

    Attributes:
        thread_id: The thread's id (kept in the ``DurablySaver``).
        checkpoints: How many checkpoints the source thread had.
        writes: How many pending writes were copied.
    """

    thread_id: str
    checkpoints: int
    writes: int


async def import_sqlite_threads(
    source: str | Path, saver: DurablySaver, *, thread_ids: list[str] | None = None
) -> list[ImportedThread]:
    """Copy threads of the LangGraph SQLite database at ``source`` into ``saver``.

    The database is opened read-only. Importing a thread twice stores nothing
    new the second time (checkpoints keep their ids; values and writes already
    stored are kept). The store's errors propagate.

    Args:
        source: Path of the ``AsyncSqliteSaver`` / ``SqliteSaver`` database file.
        saver: The ``DurablySaver`` to write to (threads keep their ids).
        thread_ids: Only these threads (None: every thread in the file).

    Returns:
        One ``ImportedThread`` per thread copied, in thread id order.

    Raises:
        ImportSourceError: ``source`` is not a file, or not a database with
            LangGraph's tables, or holds a value the saver's serializer does
            not build (a type off its allowlist, ``allowed_types``).
        CheckpointValueError: A value cannot be stored.
        UnencodableValueError: A value cannot be stored.
        TypeError: The saver's ``serde`` cannot serialize a value.
    """
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = Path(source)
    if not path.is_file():
        raise ImportSourceError(f"{path} is not a file")
    async with aiosqlite.connect(f"file:{path}?mode=ro", uri=True) as conn:
        try:
            rows = await (
                await conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
            ).fetchall()
        except Exception as exc:  # aiosqlite raises sqlite3 errors: no such table, not a database
            raise ImportSourceError(f"{path} is not a LangGraph SQLite checkpoint database: {exc}") from exc
        source_saver = AsyncSqliteSaver(conn, serde=_CheckedSerde(saver.values, path))
        wanted = None if thread_ids is None else set(thread_ids)
        done = []
        for (thread_id,) in rows:
            if wanted is None or thread_id in wanted:
                done.append(await _copy_thread(conn, source_saver, saver, thread_id))
        return done


class _CheckedSerde:
    """LangGraph's ``dumps_typed``/``loads_typed`` over ``StrictSerde``: a value of
    the source that the saver's serializer would not build raises ``ImportSourceError``."""

    def __init__(self, values: StrictSerde, path: Path) -> None:
        self.values, self.path = values, path

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.values.dumps(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.values.loads(data[0], data[1], self._refused)

    def _refused(self, reason: str) -> ImportSourceError:
        return ImportSourceError(f"{self.path} holds a value that is not imported: {reason}")


async def _task_paths(conn: Any, thread_id: str, ns: str, checkpoint_id: str) -> dict[str, str]:
    """task id -> task path of one checkpoint's writes (the order LangGraph applies them in);
    empty for a database from before LangGraph stored task paths."""
    try:
        rows = await (
            await conn.execute(
                "SELECT DISTINCT task_id, task_path FROM writes WHERE thread_id = ? AND checkpoint_ns = ? "
                "AND checkpoint_id = ?",
                (thread_id, ns, checkpoint_id),
            )
        ).fetchall()
    except Exception:  # no task_path column: an older schema
        return {}
    return {task_id: path or "" for task_id, path in rows}


async def _copy_thread(conn: Any, source: Any, saver: DurablySaver, thread_id: str) -> ImportedThread:
    ids = await (
        await conn.execute(
            "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id",
            (thread_id,),
        )
    ).fetchall()
    versions_by_id: dict[tuple[str, str], dict[str, Any]] = {}
    writes = 0
    for ns, checkpoint_id in ids:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
        tup = await source.aget_tuple(config)
        if tup is None:
            continue
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        versions = tup.checkpoint["channel_versions"]
        before = versions_by_id.get((ns, parent), {}) if parent else {}
        new_versions = {ch: v for ch, v in versions.items() if before.get(ch) != v}
        versions_by_id[(ns, checkpoint_id)] = dict(versions)
        target: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        if parent:
            target["configurable"]["checkpoint_id"] = parent
        stored = await saver.aput(target, tup.checkpoint, tup.metadata, new_versions)
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in tup.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        paths = await _task_paths(conn, thread_id, ns, checkpoint_id) if by_task else {}
        for task_id, task_writes in by_task.items():
            await saver.aput_writes(stored, task_writes, task_id, paths.get(task_id, ""))
            writes += len(task_writes)
    return ImportedThread(thread_id, len(ids), writes)
