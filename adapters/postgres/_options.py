"""The PostgreSQL adapter's URL: ``postgresql://user@host:port/db?schema=durably``.

libpq's connection parameters stay in the URL and go to asyncpg as they are
(user, password, host, port, database, ``sslmode``, ``target_session_attrs``,
``options``...: ``LIBPQ_OPTIONS``; any other option is refused);
parts left out come from the libpq environment variables (``PGHOST``,
``PGUSER``, ``PGPASSWORD``, ``PGDATABASE``...) and ``~/.pgpass``, as with
``psql``. durably's own query parameters are taken out first:

===============================  =======  ======================================================
name                             default  meaning
===============================  =======  ======================================================
``schema``                       durably  the schema holding durably's tables (created on open)
``pool_min``                     1        connections the pool keeps open
``pool_max``                     10       connections the pool opens at most
``statement_timeout``            30       seconds a statement may run on the server (then it is
                                          cancelled there: ``statement_timeout``)
``idle_in_transaction_timeout``  10       seconds a session may sit idle inside a transaction
                                          before the server ends it, and with it its row locks
                                          (``idle_in_transaction_session_timeout``): a worker
                                          paused mid-transaction (SIGSTOP, a frozen VM) cannot
                                          keep another from taking its leases over
``connect_timeout``              10       seconds to establish a connection
``deadline``                     30       seconds after which no retry of a failed call starts
``lock_timeout``                 10       seconds ``open()`` waits for the schema's lock
``listen_dsn``                   the URL  a libpq URL (percent-encoded) for the LISTEN connection
                                          of change notifications: a direct one where the
                                          pool goes through PgBouncer's transaction mode,
                                          which cannot LISTEN
===============================  =======  ======================================================

A password in the URL is never logged: ``redact_url(url)`` replaces it, and the
store's ``repr`` uses that.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from durably.storage._errors import InvalidStoreURLError
from durably.storage._url_redaction import redact_url
from durably.storage._urls import parse_store_url, seconds

SCHEMES = ("postgresql", "postgres")
#: The largest ``statement_timeout`` / ``idle_in_transaction_session_timeout`` PostgreSQL
#: accepts (2**31 - 1 milliseconds), in whole seconds.
_MAX_SETTING_SECONDS = (2**31 - 1) // 1000
#: A schema name durably accepts: an unquoted PostgreSQL identifier (lower case, so
#: it means the same quoted or not), at most 63 bytes.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: The libpq connection parameters asyncpg reads from a URL's query (its connect_utils), plus
#: ``application_name`` and ``options`` (libpq's way to set server settings: ``-c name=value``).
#: asyncpg sends any other query option to the server as a setting, so a
#: typo (``?shema=x``) would surface as a refused connection, retried until the deadline:
#: durably refuses it when it parses the URL instead, like every adapter's unknown option.
LIBPQ_OPTIONS = frozenset(
    {
        "host",
        "port",
        "dbname",
        "database",
        "user",
        "password",
        "passfile",
        "service",
        "sslmode",
        "sslcert",
        "sslkey",
        "sslrootcert",
        "sslnegotiation",
        "sslcrl",
        "sslpassword",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
        "application_name",
        "options",
    }
)


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """The parsed URL: ``dsn`` (what asyncpg gets), the schema, pool bounds, timeouts in seconds."""

    dsn: str
    schema: str = "durably"
    pool_min: int = 1
    pool_max: int = 10
    statement_timeout: float = 30.0
    idle_in_transaction_timeout: float = 10.0
    connect_timeout: float = 10.0
    deadline: float = 30.0
    lock_timeout: float = 10.0
    listen_dsn: str = ""  # "" = dsn

    @classmethod
    def from_url(cls, url: str) -> PostgresOptions:
        """Parse ``url``.

        Raises:
            InvalidStoreURLError: A ``ValueError``: another scheme, a schema name that is not a
                plain identifier, an option out of range, or an option that is neither
                durably's nor a libpq connection parameter (``LIBPQ_OPTIONS``).
        """
        if not isinstance(url, str):
            raise InvalidStoreURLError(f"a store URL is a string, got {type(url).__name__}", url=repr(url))
        numbers: dict[str, Callable[[str], Any]] = {
            "pool_min": int,
            "pool_max": int,
            "statement_timeout": seconds,
            "idle_in_transaction_timeout": seconds,
            "connect_timeout": seconds,
            "deadline": seconds,
            "lock_timeout": seconds,
        }
        parsed = parse_store_url(
            url, SCHEMES, {"schema": str, "listen_dsn": str, **numbers}, display=redact_url(url), passthrough=True
        )  # libpq's own options (sslmode...) go on to asyncpg
        fields: dict[str, Any] = parsed.options  # each converted to its field's type; _validate checks ranges
        passed = parsed.passthrough
        unknown = sorted({name for name, _ in passed} - LIBPQ_OPTIONS)
        if unknown:
            raise InvalidStoreURLError(
                f"unknown option(s) {', '.join(unknown)} in {redact_url(url)}: durably's are schema, pool_min, pool_max, "
                "statement_timeout, idle_in_transaction_timeout, connect_timeout, deadline, lock_timeout and listen_dsn; libpq's: "
                + ", ".join(sorted(LIBPQ_OPTIONS))
                + " (server settings go in options=-c%20name%3Dvalue)",
                url=redact_url(url),
            )
        parts = urlsplit(url)
        dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(passed), ""))
        fields.setdefault("listen_dsn", dsn)
        options = cls(dsn=dsn, **fields)
        options._validate()
        return options

    def _validate(self) -> None:
        if not _SCHEMA_NAME.fullmatch(self.schema):
            raise InvalidStoreURLError(
                f"schema {self.schema!r} must be a plain lower-case identifier ([a-z_][a-z0-9_]*, at most 63 chars)"
            )
        if self.pool_min < 0 or self.pool_max < 1 or self.pool_min > self.pool_max:
            raise InvalidStoreURLError(
                f"need 0 <= pool_min <= pool_max and pool_max >= 1 (got {self.pool_min}, {self.pool_max})"
            )
        for name in ("statement_timeout", "idle_in_transaction_timeout", "connect_timeout", "deadline", "lock_timeout"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise InvalidStoreURLError(f"{name} must be a finite number of seconds > 0")
        for name in ("statement_timeout", "idle_in_transaction_timeout"):  # server settings in int32 milliseconds
            if getattr(self, name) > _MAX_SETTING_SECONDS:
                raise InvalidStoreURLError(f"{name} must be at most {_MAX_SETTING_SECONDS} seconds")
