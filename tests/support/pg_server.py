"""A real PostgreSQL 15 server on 127.0.0.1 for the tests, started and stopped by them.

The binaries are Debian's ``postgresql`` package (installed on a fresh machine
by ``ensure_debian_packages``). ``initdb`` makes a throw-away cluster in a
temporary directory, owned by an unprivileged user: PostgreSQL refuses to run
as root, and CI runs the tests as root, so then the cluster belongs to the
package's ``postgres`` system user and every server command runs as that user.
The server listens on a free TCP port of 127.0.0.1 only (no Unix socket, no
password: ``trust`` for local TCP). ``restart(immediate=True)`` stops it the
way a crash does (``pg_ctl -m immediate``: no shutdown checkpoint, WAL replay
on the next start), on the same port and data, which is how the fault tests
check that nothing acknowledged is lost.

Tests use the session fixture ``pg_server`` (defined in ``tests/conftest.py``):
one server for the whole test session. A module whose tests stop, kill or
restart their server as the point of the test imports the fixture ``own_server``
instead: a server of the module's own, which its tests take as ``server``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "durably"  # the cluster's superuser role
DATABASE = "durably"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresTestServer:
    """One throw-away PostgreSQL cluster: ``start()``, ``url(schema)``, ``restart()``, ``stop()``."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="durably-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        # Root may not run PostgreSQL: the cluster then belongs to the package's system user.
        self.os_user = "postgres" if os.geteuid() == 0 else None

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=self.os_user,
            cwd=self.root,
        )
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}\n{log}")
        return proc

    def start(self) -> PostgresTestServer:
        """initdb (first time) and start the server; returns once it accepts connections."""
        if self.os_user is not None:
            entry = pwd.getpwnam(self.os_user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        if not self.data.exists():
            self._run(
                "initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"
            )
        self._pg_ctl_start()
        if not self._has_db():
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, DATABASE)
        return self

    def _pg_ctl_start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories='' "
            "-c max_connections=200 -c shared_buffers=64MB -c log_min_messages=warning"
        )
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log), "-o", options)

    def _has_db(self) -> bool:
        proc = subprocess.run(
            [
                str(BIN / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                "postgres",
                "-tAc",
                f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            user=self.os_user,
            cwd=self.root,
        )
        return proc.stdout.strip() == "1"

    def stop(self, *, immediate: bool = False) -> None:
        """Stop the server: ``fast`` (a clean shutdown) or ``immediate`` (as a crash: WAL replay on start)."""
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-D", str(self.data), "-m", "immediate" if immediate else "fast")

    def restart(self, *, immediate: bool = True) -> None:
        """Stop (by default as a crash) and start again on the same port and data."""
        self.stop(immediate=immediate)
        self._pg_ctl_start()

    def psql(self, sql: str, *, database: str = DATABASE) -> str:
        """Run ``sql`` with psql as the superuser; returns its unaligned output."""
        proc = subprocess.run(
            [
                str(BIN / "psql"),
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                database,
                "-tAc",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            user=self.os_user,
            cwd=self.root,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed: {proc.stderr[-2000:]}")
        return proc.stdout

    def psql_file(self, path: Path, *, database: str = DATABASE) -> None:
        """Run the SQL script ``path`` (a pg_dump, meta-commands included) with psql."""
        proc = subprocess.run(
            [
                str(BIN / "psql"),
                "-v",
                "ON_ERROR_STOP=1",
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                database,
            ],
            input=path.read_text(),
            capture_output=True,
            text=True,
            timeout=120,
            user=self.os_user,
            cwd=self.root,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"psql -f {path} failed: {proc.stderr[-2000:]}")

    def new_database(self) -> str:
        """Create an empty database with a new name; returns the name."""
        name = f"db_{uuid.uuid4().hex[:12]}"
        self.psql(f"CREATE DATABASE {name}", database="postgres")
        return name

    def dsn_of(self, database: str = DATABASE) -> str:
        """The libpq URL of ``database``, without durably's options."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    @property
    def dsn(self) -> str:
        """The libpq URL of the test database, without durably's options."""
        return self.dsn_of()

    def url(self, schema: str | None = None, *, database: str = DATABASE, **options: object) -> str:
        """A ``postgresql://`` store URL on a schema of its own (a new random one by default)."""
        schema = schema or f"t_{uuid.uuid4().hex[:12]}"
        query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
        return f"{self.dsn_of(database)}?{query}"

    def cleanup(self) -> None:
        try:
            self.stop()
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module", name="server")
def own_server() -> Iterator[PostgresTestServer]:
    """A started ``PostgresTestServer`` of the importing module's own (installed with apt-get if
    missing), for tests that stop, kill or restart it; removed after the module's last test."""
    from system_packages import ensure_debian_packages

    ensure_debian_packages("postgresql")
    server = PostgresTestServer()
    try:
        yield server.start()
    finally:
        server.cleanup()
