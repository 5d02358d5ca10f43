"""The SQLite adapter, ``sqlite:///path/to/agents.db``: ``SQLiteStore``, on aiosqlite.

The store, its URL options and durability are described in ``store``; ``file``
(paths, errors), ``layout`` (tables, statements) and ``leases`` are its parts.
"""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
