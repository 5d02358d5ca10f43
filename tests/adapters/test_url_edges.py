"""Store URLs an adversarial review found slipping through: each is refused with the typed error, writing nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durably.errors import InvalidStoreURLError, StoreUnavailableError
from durably.storage import open_store


@pytest.mark.parametrize(
    "url",
    [
        "s3://[b/x",
        "postgresql://[::1/db",  # urlsplit's "Invalid IPv6 URL"
        "sqlite:///a%00b.db",
        "file:///tmp/x%00y",  # a NUL no path can hold
        "s3://b?connect_timeout=nan",
        "s3://b?read_timeout=inf",
        "s3://b?deadline=nan",
        "postgresql://u@h/db?statement_timeout=inf",
        "postgresql://u@h/db?lock_timeout=1e400",
        "postgresql://u@h/db?sslmode=require&sslmode=disable",  # a repeated libpq option, as durably's own
        "file:///",  # streams/ and index/ would land at the filesystem root
    ],
)
def test_a_bad_url_is_an_invalid_store_url_error(url, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStoreURLError):
        open_store(url)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("url", [None, b"postgresql://u@h/db", 1])
def test_postgres_refuses_a_url_that_is_not_a_string(url) -> None:
    from durably.adapters.postgres import PostgresStore

    with pytest.raises(InvalidStoreURLError, match="a store URL is a string"):
        PostgresStore(url)


async def test_a_sqlite_path_the_os_refuses_is_a_store_error_not_an_oserror(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/{'a' * 300}.db")
    with pytest.raises(StoreUnavailableError, match="too long"):
        await store.open()
    assert os.listdir(tmp_path) == []
