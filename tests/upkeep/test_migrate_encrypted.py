"""``durably migrate`` on a store encrypted at rest.

The command takes the keys from ``$DURABLY_KEYS`` as every other store command does: with them
it lifts an encrypted snapshot written at an older version and stores it encrypted again (under
``$DURABLY_KEY_ID``'s key), and the agent still restores with the key; without them it refuses
with ``DecryptionError`` and exit status 1, having written nothing, not even the snapshots of the
plaintext streams it checked first.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from durably import AESGCMCipher, Runtime, SnapshotPolicy, StaticKeyProvider
from durably._cli.demo.survey import survey_agent, survey_task
from durably._cli.main import main
from durably._journal.records import RecordCodec
from durably._journal.restore import restore
from durably._journal.write_formats import NEWEST, RELEASES
from durably._upkeep.migrate import migrate_store
from durably.storage._crypto import key_id_of
from durably.storage._errors import DecryptionError
from durably.storage._registry import open_store
from durably.storage._spi import StreamId

K1, K2 = bytes(range(32)), bytes(range(32, 64))
CIPHER = AESGCMCipher(StaticKeyProvider({"k1": K1}))
OLD = RELEASES["0.1"].snapshot_version  # what a fleet under write_compat="0.1" writes
SECRET, PLAIN = StreamId("default", "secret"), StreamId("default", "a-plain")


async def write_old_survey(url: str, workdir: Path, agent_id: str, encryption: AESGCMCipher | None) -> None:
    """The survey up to its approval, its snapshots at version OLD (written under write_compat="0.1")."""
    agent = survey_agent(workdir, latency=0)
    policy = SnapshotPolicy(every_records=4, tail_ratio=0, keep=2)
    async with Runtime(url, agents=[agent], snapshot_policy=policy, write_compat="0.1", encryption=encryption) as rt:
        state = await rt.run(agent, agent_id, survey_task(["colorsys", "bisect"]))
    assert state.status == "waiting_approval"


def stored(db: Path) -> dict[str, list[tuple]]:
    """Every record and snapshot row, read with the sqlite3 module (not durably)."""
    with sqlite3.connect(db) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall() for table in ("records", "snapshots")
        }


def snapshot_frames(db: Path) -> list[bytes]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT data FROM snapshots")]


def version_of(frame: bytes) -> int:
    return int.from_bytes(frame[5:7], "big")


async def migrate(*argv: str) -> int:
    """``durably migrate ARGV`` in a worker thread (the command runs its own event loop)."""
    return await anyio.to_thread.run_sync(main, ["migrate", *argv])


async def folded(url: str, codec: RecordCodec, stream: StreamId) -> dict:
    async with open_store(url) as store:
        return (await restore(store, codec, stream)).state.to_wire()


async def test_migrate_lifts_an_encrypted_snapshot_with_the_key_and_refuses_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    db = tmp_path / "secret.db"
    url = f"sqlite:///{db}"
    await write_old_survey(url, tmp_path / "work", SECRET.agent_id, CIPHER)
    before = stored(db)
    assert {version_of(f) for f in snapshot_frames(db)} == {OLD} and NEWEST.snapshot_version > OLD
    expected = await folded(url, RecordCodec(cipher=CIPHER), SECRET)

    monkeypatch.delenv("DURABLY_KEYS", raising=False)
    for dry_run in (["--dry-run"], []):
        assert await migrate("--store", url, *dry_run) == 1
        out = capsys.readouterr().out
        assert "DecryptionError" in out and "default/secret is encrypted and no key was given" in out, out
        assert "$DURABLY_KEYS" in out and "nothing was written" in out, out
        assert stored(db) == before

    # Both keys known, k2 current: the lifted snapshot is written under k2 (a rotation's new key).
    monkeypatch.setenv("DURABLY_KEYS", f"k1={K1.hex()},k2={K2.hex()}")
    monkeypatch.setenv("DURABLY_KEY_ID", "k2")
    assert await migrate("--store", url) == 0
    out = capsys.readouterr().out
    assert f"rewritten as v{NEWEST.snapshot_version}" in out and "1 changed" in out, out
    after = stored(db)
    assert after["records"] == before["records"]  # migrate never writes records
    frames = snapshot_frames(db)
    assert len(frames) == len(before["snapshots"])
    assert {version_of(f) for f in frames} == {NEWEST.snapshot_version}
    assert {key_id_of(f) for f in frames} == {"k2"}  # encrypted still, under the current key

    both = AESGCMCipher(StaticKeyProvider({"k1": K1, "k2": K2}, current="k2"))
    assert await folded(url, RecordCodec(cipher=both), SECRET) == expected
    with pytest.raises(DecryptionError):
        await folded(url, RecordCodec(), SECRET)
    async with Runtime(url, encryption=both) as rt:
        assert (await rt.status(SECRET.agent_id)).status == "waiting_approval"


async def test_a_namespace_with_an_encrypted_stream_is_refused_before_any_snapshot_is_written(tmp_path: Path) -> None:
    db = tmp_path / "mixed.db"
    url = f"sqlite:///{db}"
    await write_old_survey(url, tmp_path / "plain", PLAIN.agent_id, None)  # listed first: checked first
    await write_old_survey(url, tmp_path / "secret", SECRET.agent_id, CIPHER)
    before = stored(db)

    async with open_store(url) as store:
        with pytest.raises(DecryptionError) as caught:
            await migrate_store(store, "default", dry_run=False, codec=RecordCodec())
    assert caught.value.stream == SECRET and "no key was given" in str(caught.value)
    assert stored(db) == before  # the plaintext stream's old snapshots too
