"""Encryption at rest: AES-GCM frames bound to their place, plaintext refused,
key rotation with mixed key ids, and the re-encrypt command."""

from __future__ import annotations

import base64
import sqlite3
import struct
import uuid
import zlib

import pytest
from privacy_support import ScriptModel, files_bytes, s3_bytes, spi_frames
from s3_server import BUCKET

from durably import AgentDefinition, ModelResponse, Runtime, SnapshotPolicy, ToolCall, Usage, tool
from durably._cli.main import main as cli_main
from durably._journal.records import RecordCodec
from durably._upkeep.reencrypt import COMPACTED, CURRENT, SNAPSHOT_REWRITTEN, key_census
from durably._upkeep.retention import last_activity
from durably.errors import KeyConfigError
from durably.schemas._records import RECORD_SCHEMA_ID, Kind, Record
from durably.storage import StreamId, open_store
from durably.storage._codec import FLAG_ENCRYPTED, FLAG_ZSTD, HEADER_SIZE, Codec
from durably.storage._crypto import (
    AESGCMCipher,
    EnvKeyProvider,
    StaticKeyProvider,
    generate_key,
    key_id_of,
)
from durably.storage._errors import CorruptRecordError, DecryptionError, EncryptionRequiredError, UnknownKeyError
from durably.storage._spi import StoredRecord, StoredSnapshot

K1, K2 = generate_key(), generate_key()
PLAIN = "the-quarterly-numbers-of-acme-corp"  # stands for any personal data in a task
A = StreamId("tenant-a", "agent-1")


def cipher(*ids: str, current: str | None = None, allow_plaintext: bool = False) -> AESGCMCipher:
    keys = {"k1": K1, "k2": K2}
    return AESGCMCipher(StaticKeyProvider({i: keys[i] for i in ids}, current), allow_plaintext=allow_plaintext)


def record_codec(*ids: str, **kw) -> RecordCodec:
    return RecordCodec(cipher=cipher(*ids, **kw))


def echo_agent(steps: int = 2, *, approval: bool = False) -> AgentDefinition:
    @tool(requires_approval=approval)
    async def echo(text: str, *, ctx) -> str:
        return text.upper()

    script = [
        ModelResponse(f"step {i}", (ToolCall(f"c{i}", "echo", {"text": f"{PLAIN} {i}"}),), Usage(1, 1, 0.0))
        for i in range(steps)
    ]
    return AgentDefinition(name="echo", model=ScriptModel(script), tools=[echo])


def refit_crc(frame: bytes) -> bytes:
    """``frame`` with its CRC recomputed: a deliberate edit, not bit rot."""
    header, payload = frame[:15], frame[HEADER_SIZE:]
    return header + struct.pack(">I", zlib.crc32(payload, zlib.crc32(header))) + payload


# -- the codec layer ---------------------------------------------------------------------


def test_a_frame_decrypts_only_at_its_own_place() -> None:
    codec = record_codec("k1")
    frame = codec.encode_record(Record(2, Kind.MESSAGE_RECEIVED, {"role": "user", "content": PLAIN}, 1.0), A)
    assert frame[3] & FLAG_ENCRYPTED and key_id_of(frame) == "k1"
    assert PLAIN.encode() not in frame
    assert codec.decode_record(StoredRecord(2, frame), A).data["content"] == PLAIN
    for place, seq in ((StreamId("tenant-a", "agent-2"), 2), (StreamId("tenant-b", "agent-1"), 2), (A, 3)):
        with pytest.raises(DecryptionError):
            codec.decode_record(StoredRecord(seq, frame), place)
    with pytest.raises(DecryptionError):  # where it is stored must be said
        codec.decode_record(StoredRecord(2, frame))


def test_header_edits_with_a_fixed_checksum_fail_authentication() -> None:
    codec = record_codec("k1")
    frame = codec.encode_record(Record(1, Kind.FAILED, {"reason": "x" * 600}, 1.0), A)
    assert frame[3] & FLAG_ZSTD  # compressed, then encrypted
    no_zstd = refit_crc(frame[:3] + bytes([frame[3] & ~FLAG_ZSTD]) + frame[4:])
    other_version = refit_crc(frame[:5] + struct.pack(">H", struct.unpack(">H", frame[5:7])[0] + 1) + frame[7:])
    other_size = refit_crc(frame[:7] + struct.pack(">I", struct.unpack(">I", frame[7:11])[0] - 1) + frame[11:])
    for edited in (no_zstd, other_version, other_size):
        with pytest.raises(DecryptionError):
            codec.decode_record(StoredRecord(1, edited), A)
    flipped = bytearray(frame)
    flipped[-1] ^= 1
    with pytest.raises(DecryptionError):
        codec.decode_record(StoredRecord(1, refit_crc(bytes(flipped))), A)


def test_compression_comes_before_encryption() -> None:
    codec = record_codec("k1")
    text = "the same sentence again and again. " * 300
    frame = codec.encode_record(Record(1, Kind.FAILED, {"reason": text}, 1.0), A)
    assert frame[3] & FLAG_ZSTD and len(frame) < len(text) / 10  # ciphertext of compressed bytes
    assert codec.decode_record(StoredRecord(1, frame), A).data["reason"] == text


def test_every_frame_gets_a_fresh_nonce() -> None:
    codec = record_codec("k1")
    record = Record(1, Kind.STARTED, {"task": PLAIN}, 1.0)
    frames = {codec.encode_record(record, A) for _ in range(50)}
    assert len(frames) == 50
    nonces = {f[HEADER_SIZE + 3 : HEADER_SIZE + 3 + 12] for f in frames}
    assert len(nonces) == 50


def test_plaintext_is_refused_where_encryption_is_required() -> None:
    plain = RecordCodec().encode_record(Record(1, Kind.STARTED, {"task": PLAIN}, 1.0), A)
    with pytest.raises(EncryptionRequiredError):
        record_codec("k1").decode_record(StoredRecord(1, plain), A)
    assert record_codec("k1", allow_plaintext=True).decode_record(StoredRecord(1, plain), A).data["task"] == PLAIN
    encrypted = record_codec("k1").encode_record(Record(1, Kind.STARTED, {"task": PLAIN}, 1.0), A)
    with pytest.raises(DecryptionError):
        RecordCodec().decode_record(StoredRecord(1, encrypted), A)  # no cipher: no silent garbage either


def test_unknown_key_ids_and_wrong_keys_are_typed_errors() -> None:
    frame = record_codec("k1").encode_record(Record(1, Kind.STARTED, {"task": PLAIN}, 1.0), A)
    with pytest.raises(UnknownKeyError) as caught:
        record_codec("k2").decode_record(StoredRecord(1, frame), A)
    assert caught.value.key_id == "k1"
    wrong = RecordCodec(cipher=AESGCMCipher(StaticKeyProvider({"k1": K2})))
    with pytest.raises(DecryptionError):
        wrong.decode_record(StoredRecord(1, frame), A)
    with pytest.raises(ValueError):
        record_codec("k1").encode_record(Record(1, Kind.STARTED, {"task": "t"}, 1.0))  # no place to bind to


def test_a_snapshot_is_bound_to_its_stream_and_seq_and_is_not_a_record() -> None:
    codec = record_codec("k1")
    frame = codec.encode_snapshot(5, {"status": "running", "note": PLAIN}, A)
    assert codec.decode_snapshot(StoredSnapshot(5, frame), A)[1]["note"] == PLAIN
    with pytest.raises(DecryptionError):
        codec.decode_snapshot(StoredSnapshot(5, frame), StreamId("tenant-a", "other"))
    with pytest.raises(DecryptionError):
        codec.decode_snapshot(StoredSnapshot(4, frame), A)


def test_key_providers_parse_the_environment_and_never_echo_keys() -> None:
    env = {
        "DURABLY_KEYS": f"old={base64.b64encode(K1).decode()}, new={base64.urlsafe_b64encode(K2).decode().rstrip('=')}",
        "DURABLY_KEY_ID": "old",
    }
    provider = EnvKeyProvider(env)
    assert provider.current_key_id() == "old" and provider.get("new") == K2 and provider.get("old") == K1
    assert EnvKeyProvider({"DURABLY_KEYS": f"h={K1.hex()}"}).get("h") == K1
    assert EnvKeyProvider({"DURABLY_KEYS": env["DURABLY_KEYS"]}).current_key_id() == "new"  # default: the last
    short = base64.b64encode(b"s3cr3t-but-too-short").decode()
    for bad in (
        {},
        {"DURABLY_KEYS": f"k={short}"},
        {"DURABLY_KEYS": "no-equals-sign"},
        {"DURABLY_KEYS": f"bad id={base64.b64encode(K1).decode()}"},
        {"DURABLY_KEYS": f"k={base64.b64encode(K1).decode()}", "DURABLY_KEY_ID": "missing"},
        # A key given without its id: base64 ends in '=', so the key would read as the id.
        {"DURABLY_KEYS": base64.b64encode(K1).decode()},
        {"DURABLY_KEYS": f"k={base64.b64encode(K2).decode()},{base64.b64encode(K1).decode()}"},
        {"DURABLY_KEYS": K1.hex()},
        {"DURABLY_KEYS": base64.urlsafe_b64encode(K1).decode().rstrip("=")},
    ):
        with pytest.raises(KeyConfigError) as caught:
            EnvKeyProvider(bad)
        message = str(caught.value)
        assert short not in message and base64.b64encode(K1).decode().rstrip("=")[:16] not in message, message
        assert K1.hex()[:16] not in message and base64.urlsafe_b64encode(K1).decode()[:16] not in message, message
    with pytest.raises(KeyConfigError):
        StaticKeyProvider({"k": b"\x00" * 16})


# -- through the runtime and the stores ---------------------------------------------------


async def test_an_encrypted_sqlite_store_holds_no_plaintext_and_restores(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/db/agents.db?create=1"
    policy = SnapshotPolicy(every_records=1, tail_ratio=0.0)
    async with Runtime(url, agents=[echo_agent()], encryption=cipher("k1"), snapshot_policy=policy) as rt:
        state = await rt.run("echo", "a1", f"summarise {PLAIN}")
        await rt._activations.services.snapshots.flush()
        raw_open = files_bytes(tmp_path / "db")  # with the WAL
    assert state.status == "finished"
    assert PLAIN.encode() not in raw_open and PLAIN.upper().encode() not in raw_open
    assert PLAIN.encode() not in files_bytes(tmp_path / "db")
    async with Runtime(url, agents=[echo_agent()], encryption=cipher("k1")) as rt:
        assert (await rt.status("a1")).to_wire() == state.to_wire()
        records, snapshots = await key_census(rt.store, rt.stream("a1"))
    assert set(records) == {"k1"} and set(snapshots) == {"k1"} and sum(snapshots.values()) >= 1
    async with Runtime(url, agents=[echo_agent()]) as rt:  # no keys: refused, never misread
        with pytest.raises(DecryptionError):
            await rt.status("a1")


async def test_a_row_copied_to_another_stream_or_seq_fails_to_decrypt(tmp_path) -> None:
    path = tmp_path / "agents.db"
    for encryption in (None, cipher("k1")):
        if path.exists():
            path.unlink()
        async with Runtime(
            f"sqlite:///{path}",
            agents=[echo_agent(1)],
            encryption=encryption,
            snapshot_policy=SnapshotPolicy(every_records=0),
        ) as rt:
            await rt.run("echo", "a1", "first task")
            await rt.run("echo", "a2", "second task")
        with sqlite3.connect(path) as db:
            ids = dict(db.execute("SELECT agent_id, id FROM streams"))
            (row,) = db.execute("SELECT data FROM records WHERE stream_id = ? AND seq = 1", (ids["a1"],))
            db.execute("UPDATE records SET data = ? WHERE stream_id = ? AND seq = 1", (row[0], ids["a2"]))
        async with Runtime(f"sqlite:///{path}", agents=[echo_agent(1)], encryption=encryption) as rt:
            if encryption is None:
                # The copy does not go unnoticed (a2 claiming a1's task): frame format 2 seeds
                # the plaintext CRC with the frame's place.
                with pytest.raises(CorruptRecordError, match="copied from another stream or seq"):
                    await rt.status("a2")
                assert (await rt.status("a1")).task == "first task"
            else:
                with pytest.raises(DecryptionError):
                    await rt.status("a2")
                assert (await rt.status("a1")).task == "first task"
    with sqlite3.connect(path) as db:  # and a swap of two seqs within one stream
        a1 = db.execute("SELECT id FROM streams WHERE agent_id = 'a1'").fetchone()[0]
        rows = dict(db.execute("SELECT seq, data FROM records WHERE stream_id = ? AND seq IN (2, 3)", (a1,)))
        db.execute("UPDATE records SET data = ? WHERE stream_id = ? AND seq = 2", (rows[3], a1))
        db.execute("UPDATE records SET data = ? WHERE stream_id = ? AND seq = 3", (rows[2], a1))
    async with Runtime(f"sqlite:///{path}", agents=[echo_agent(1)], encryption=cipher("k1")) as rt:
        # A sealed frame moved fails to open (DecryptionError); a group's member row, which
        # holds no ciphertext, fails its place-seeded checksum: both a CorruptRecordError.
        with pytest.raises(CorruptRecordError, match="decrypt|copied from another stream or seq"):
            await rt.status("a1")


async def test_a_plaintext_store_is_refused_then_moved_to_encryption(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(url, agents=[echo_agent(1)]) as rt:
        before = await rt.run("echo", "a1", f"plain {PLAIN}")
    async with Runtime(url, agents=[echo_agent(1)], encryption=cipher("k1")) as rt:
        with pytest.raises(EncryptionRequiredError):
            await rt.status("a1")
    async with Runtime(url, encryption=cipher("k1", allow_plaintext=True)) as rt:
        (report,) = await rt.reencrypt()
        assert report.action == COMPACTED and set(report.before) == {None} and set(report.after) == {"k1"}
    async with Runtime(url, encryption=cipher("k1")) as rt:
        after = await rt.status("a1")
    assert {k: v for k, v in after.to_wire().items() if k != "last_seq"} == {
        k: v for k, v in before.to_wire().items() if k != "last_seq"
    }
    assert PLAIN.encode() not in files_bytes(tmp_path)


async def test_rotation_mixes_key_ids_until_reencrypt_retires_the_old_key(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(url, agents=[echo_agent(2, approval=True)], encryption=cipher("k1")) as rt:
        parked = await rt.run("echo", "a1", PLAIN)
    assert parked.status == "waiting_approval"
    # Rotate: k2 is current, k1 still readable. The approval resumes the agent, which writes under k2.
    async with Runtime(url, agents=[echo_agent(2, approval=True)], encryption=cipher("k1", "k2", current="k2")) as rt:
        state = parked
        while state.status == "waiting_approval":
            (request,) = state.open_approvals()
            state = await rt.approve("a1", request["approval_id"])
            handle = await rt.resume("a1")
            state = await handle.wait() if handle is not None else await rt.status("a1")
        assert state.status == "finished"
        records, _ = await key_census(rt.store, rt.stream("a1"))
        assert set(records) == {"k1", "k2"}  # mixed, and readable
        last_at = await last_activity(rt.store, rt.codec, rt.stream("a1"))
    async with Runtime(url, encryption=cipher("k2")) as rt:  # k1 dropped too early
        with pytest.raises(UnknownKeyError):
            await rt.status("a1")
    async with Runtime(url, encryption=cipher("k1", "k2", current="k2")) as rt:
        (report,) = await rt.reencrypt()
        assert report.action == COMPACTED and set(report.after) == {"k2"}
        assert (await rt.reencrypt())[0].action == CURRENT  # idempotent
        # The retention clock still counts from the last real activity.
        assert await last_activity(rt.store, rt.codec, rt.stream("a1")) == last_at
    async with Runtime(url, encryption=cipher("k2")) as rt:  # now k1 can go
        final = await rt.status("a1")
    assert final.status == "finished" and final.result == state.result and final.ledger == state.ledger


async def test_reencrypt_rewrites_a_snapshot_only_stream_in_place(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    compacting = SnapshotPolicy(every_records=1, tail_ratio=0.0, keep=1, compact=True)
    async with Runtime(url, agents=[echo_agent(1)], encryption=cipher("k1"), snapshot_policy=compacting) as rt:
        state = await rt.run("echo", "a1", "t")
        await rt._activations.services.snapshots.flush()
        records, snapshots = await key_census(rt.store, rt.stream("a1"))
    assert not records and set(snapshots) == {"k1"}
    async with Runtime(url, encryption=cipher("k1", "k2", current="k2")) as rt:
        (report,) = await rt.reencrypt()
    assert report.action == SNAPSHOT_REWRITTEN and report.after == {"k2": 1}
    async with Runtime(url, encryption=cipher("k2")) as rt:
        assert (await rt.status("a1")).to_wire() == state.to_wire()


async def test_the_reencrypt_command_uses_keys_from_the_environment(tmp_path, monkeypatch, capsys) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(url, agents=[echo_agent(1)], encryption=cipher("k1"), namespace="ops") as rt:
        await rt.run("echo", "a1", "t")
    keys = f"k1={base64.b64encode(K1).decode()},k2={base64.b64encode(K2).decode()}"
    monkeypatch.setenv("DURABLY_KEYS", keys)
    monkeypatch.setenv("DURABLY_KEY_ID", "k2")
    assert await _cli(["reencrypt", "--store", url, "--namespace", "ops"]) == 0
    assert "every frame now under key 'k2'" in capsys.readouterr().out
    async with open_store(url) as store:
        records, snapshots = await key_census(store, StreamId("ops", "a1"))
    assert set(records) | set(snapshots) == {"k2"}
    monkeypatch.delenv("DURABLY_KEYS")
    assert await _cli(["reencrypt", "--store", url, "--namespace", "ops"]) == 2


async def _cli(argv: list[str]) -> int:
    import anyio

    return await anyio.to_thread.run_sync(cli_main, argv)


async def test_s3_objects_hold_only_ciphertext(s3_server) -> None:
    prefix = f"enc-{uuid.uuid4().hex[:10]}"
    url = s3_server.url(prefix)
    async with Runtime(
        url,
        agents=[echo_agent()],
        encryption=cipher("k1"),
        snapshot_policy=SnapshotPolicy(every_records=1, tail_ratio=0.0),
    ) as rt:
        state = await rt.run("echo", "a1", PLAIN)
        await rt._activations.services.snapshots.flush()
        frames = await spi_frames(rt.store, "default")
    assert state.status == "finished" and any(kind == "snapshot" for _, kind, _, _ in frames)
    assert all(key_id_of(data) == "k1" for *_, data in frames)
    assert PLAIN.encode() not in s3_bytes(s3_server, BUCKET, prefix)


def test_an_encrypting_codec_still_checks_the_crc_first() -> None:
    frame = Codec(cipher=cipher("k1")).encode(RECORD_SCHEMA_ID, 1, {"a": 1}, stream=A, seq=1)
    damaged = bytearray(frame)
    damaged[-1] ^= 0xFF
    with pytest.raises(Exception) as caught:
        Codec(cipher=cipher("k1")).decode(bytes(damaged), stream=A, seq=1)
    assert "checksum" in str(caught.value) and not isinstance(caught.value, DecryptionError)
