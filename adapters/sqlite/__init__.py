"""The SQLite adapter, ``sqlite:///path/to/agents.db``: ``SQLiteStore``, on aiosqlite.

The store, its URL options and durability are described in ``SQLiteStore``;
the package's private modules are its parts: ``_store``, ``_connection``
(opening, the connections), ``_journal`` (appends, reads), ``_file`` (paths,
errors), ``_layout`` (tables, statements), ``_leases`` and ``_index``.
"""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
