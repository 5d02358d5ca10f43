"""The store URL fixture of tests that hold for every store with leases: memory, SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest


@pytest.fixture(params=["memory", "sqlite", "postgres"], name="url")
def leased_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new store's URL, once per store kind: a fresh memory store, a SQLite file in the test's
    ``tmp_path``, or a fresh schema on the session's PostgreSQL server (``pg_server``).
    Import it into a module whose tests take ``url``."""
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").url())
    return f"sqlite:///{tmp_path}/agents.db"
