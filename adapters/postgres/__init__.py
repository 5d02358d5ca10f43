"""The PostgreSQL adapter: ``postgresql://user@host:port/db?schema=durably``, on asyncpg.

A fleet of worker processes on several hosts shares one database: appends are
fenced by their expected seq inside the database, leases hand agents to one
worker at a time with fencing tokens from a sequence, and LISTEN/NOTIFY wakes
a ``Runtime.serve()`` worker as soon as another process approves, extends,
messages or cancels one of its agents. Install with ``pip install -e
'.[postgres]'`` in durably's clone. Private modules:
``_store`` (``PostgresStore``, the SPI), ``_schema`` (tables, version row,
migrations), ``_options`` (the URL), ``_faults`` (errors and retries),
``_leases``, ``_changes`` (LISTEN/NOTIFY), ``_status_index``.
"""

from durably.errors import ExtraNotInstalledError, PostgresSetupError

with ExtraNotInstalledError.guard(__name__, "postgres", "asyncpg"):
    from ._store import PostgresStore

__all__ = ["PostgresSetupError", "PostgresStore"]
