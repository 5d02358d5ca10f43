"""Fixtures shared by every test folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pg_server import PostgresTestServer
from system_packages import ensure_debian_packages

if TYPE_CHECKING:
    from s3_server import S3TestServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of this checkout (so the checkout gets no build/ or egg-info)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "site", "__pycache__", ".pytest_cache", ".hypothesis"
        ),
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return next((work / "dist").glob("durably-*.whl"))


@pytest.fixture(scope="session")
def shipped_tree(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the ``durably`` package as the wheel installs it (for tools that read a package tree:
    mypy, the docs' API reference)."""
    target = tmp_path_factory.mktemp("site")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    return target


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresTestServer]:
    """One PostgreSQL 15 server on 127.0.0.1 for the whole session (installed with apt-get if missing).

    Defined here, once, so every test folder shares it: a test isolates itself on it with a schema
    (``url()`` makes a new one) or a database (``new_database()``) of its own."""
    ensure_debian_packages("postgresql")
    server = PostgresTestServer()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def s3_session_server() -> Iterator[S3TestServer]:
    """One local S3 server (moto's, see ``tests/support/s3_server.py``) for the whole session;
    tests take it as ``s3_server``. Imported here only when a test needs it (moto loads slowly)."""
    from s3_server import running_server

    with running_server() as server:
        yield server


@pytest.fixture
def s3_server(s3_session_server: S3TestServer) -> Iterator[S3TestServer]:
    """The session's S3 server, left as the next test expects it: the faults this test armed
    are cleared, and the server is revived if the test killed it."""
    yield s3_session_server
    s3_session_server.clear_faults()
    if s3_session_server.killed:
        s3_session_server.revive()
