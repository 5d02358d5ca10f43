"""What ``reencrypt`` reports is true of the files' bytes.

With another connection open, the old bytes (planted plaintext, frames sealed
under the retired key) can outlive a re-encryption (or a key rotation) in the
database file and its WAL, though every frame was rewritten under the new key.
So the WAL is checkpointed and truncated and freed pages are zeroed; when
another connection's open transaction prevents that, the report says so
(``files_scrubbed`` False, with the reason) instead of claiming success.
"""

from __future__ import annotations

import sqlite3

import pytest
from test_encryption import PLAIN, cipher, echo_agent, files_bytes

from durably import Runtime
from durably.storage import StreamId, open_store
from durably.storage import _dictionaries as dictionaries
from durably.storage._codec import Codec
from durably.storage._group_frames import is_member


@pytest.fixture(autouse=True)
def greppable_frames(monkeypatch):
    """These tests prove by grepping stored bytes for plaintext that a secret is (or is no longer)
    there, so their controls need small records stored as before the shipped zstd dictionary:
    uncompressed. Compression hides nothing from an attacker (anyone can decompress), only from
    the grep; with the dictionary on, these greps would pass without meaning anything. A
    commit's records are one group frame, larger than the size from which zstd runs: no
    compression at any size either."""
    monkeypatch.setattr(dictionaries, "DEFAULT", None)
    monkeypatch.setitem(Codec.__init__.__kwdefaults__, "min_compress_size", 1 << 30)


async def test_reencrypt_leaves_no_plaintext_in_the_files_with_another_connection_open(tmp_path):
    path = tmp_path / "agents.db"
    async with Runtime(f"sqlite:///{path}", agents=[echo_agent(1)]) as rt:
        await rt.run("echo", "a1", f"plain {PLAIN}")
    idle = sqlite3.connect(path)  # an operator's shell, a backup tool: open, no transaction
    try:
        async with Runtime(f"sqlite:///{path}", encryption=cipher("k1", allow_plaintext=True)) as rt:
            (report,) = await rt.reencrypt()
            assert set(report.after) == {"k1"}
            assert PLAIN.encode() not in files_bytes(tmp_path)  # main: still in the WAL
            assert report.files_scrubbed is True, report.residue
    finally:
        idle.close()


async def test_rotation_leaves_no_frame_under_the_retired_key_in_the_files(tmp_path):
    path = tmp_path / "agents.db"
    async with Runtime(f"sqlite:///{path}", agents=[echo_agent(1)], encryption=cipher("k1")) as rt:
        await rt.run("echo", "a1", "task")
    async with open_store(f"sqlite:///{path}") as store:
        old_frames = [r.data async for r in store.read(StreamId("default", "a1")) if not is_member(r.data)]
    idle = sqlite3.connect(path)
    try:
        async with Runtime(f"sqlite:///{path}", encryption=cipher("k1", "k2", current="k2")) as rt:
            (report,) = await rt.reencrypt()
        assert set(report.after) == {"k2"}
        data = files_bytes(tmp_path)
        assert not [frame for frame in old_frames if frame[19:51] in data]  # main: k1 ciphertexts in the WAL
        assert report.files_scrubbed is True
    finally:
        idle.close()


async def test_reencrypt_says_so_when_another_connection_keeps_the_old_bytes(tmp_path):
    path = tmp_path / "agents.db"
    url = f"sqlite:///{path}?busy_timeout=200"
    async with Runtime(url, agents=[echo_agent(1)]) as rt:
        await rt.run("echo", "a1", f"plain {PLAIN}")
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM records").fetchall()  # holds a read snapshot of the old file
    try:
        async with Runtime(url, encryption=cipher("k1", allow_plaintext=True)) as rt:
            (report,) = await rt.reencrypt()
        assert set(report.after) == {"k1"}  # every frame is under the new key ...
        assert report.files_scrubbed is False and "another connection" in report.residue  # ... and it says the rest
        assert PLAIN.encode() in files_bytes(tmp_path)  # which is true
    finally:
        reader.execute("COMMIT")
        reader.close()
    async with Runtime(url, encryption=cipher("k1", allow_plaintext=True)) as rt:
        (again,) = await rt.reencrypt()  # nothing left to rewrite; the scrub now succeeds
    assert again.files_scrubbed is True and PLAIN.encode() not in files_bytes(tmp_path)
