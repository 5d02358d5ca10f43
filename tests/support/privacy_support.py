"""Helpers for the privacy tests: a scripted model, planted secrets, and every way
to look at the bytes a store holds (through the SPI, in files, in S3 objects)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import cbor2

from durably import ModelResponse, Usage
from durably._journal.records import RecordCodec
from durably.storage import StreamId
from durably.storage._group_frames import decode_group, is_group, is_member

PASSWORD = "correct-horse-battery-staple-42"
GH_TOKEN = "ghp_" + "Zx9" * 12  # the GitHub token format: ghp_ + 36 alphanumerics
OPENAI_KEY = "sk-proj-" + "Q7w" * 10
PRIVATE_DOC = "inbox: the lab results of patient 4711 are positive"
SECRETS = (PASSWORD, GH_TOKEN, OPENAI_KEY, PRIVATE_DOC)


class ScriptModel:
    """Answers with ``script[n]`` at its n-th turn (n = assistant messages so far),
    then "done". ``seen`` keeps a deep copy of every conversation it was given."""

    name = "script-model"

    def __init__(self, script: list[ModelResponse]) -> None:
        self.script = script
        self.seen: list[list[dict[str, Any]]] = []

    async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
        self.seen.append(copy.deepcopy(messages))
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn < len(self.script):
            return self.script[turn]
        return ModelResponse("done", (), Usage(1, 1, 0.0))


async def spi_frames(store, namespace: str) -> list[tuple[StreamId, str, int, bytes]]:
    """Every record and snapshot frame of ``namespace``: (stream, "record"/"snapshot", seq, bytes)."""
    frames = []
    async for stream in store.list_streams(namespace):
        async for stored in store.read(stream):
            if not is_member(stored.data):  # a group's member row holds no data: its group frame does
                frames.append((stream, "record", stored.seq, stored.data))
        snapshot = await store.get_snapshot(stream)
        while snapshot is not None:
            frames.append((stream, "snapshot", snapshot.seq, snapshot.data))
            snapshot = await store.get_snapshot(stream, snapshot.seq - 1)
    return frames


def decoded_text(frames, codec: RecordCodec | None = None) -> str:
    """All frames decoded (decompressed, decrypted) and dumped as one text, to search."""
    codec = codec or RecordCodec()
    parts = []
    for stream, _kind, seq, data in frames:
        if is_group(data):
            value = decode_group(codec.codec, data, stream, seq)[2]
        else:
            value = codec.codec.decode(data, stream=stream, seq=seq).value
        parts.append(repr(value))
        parts.append(cbor2.dumps(value).decode("latin-1"))
    return "\n".join(parts)


def files_bytes(root: Path) -> bytes:
    """The bytes of every file under ``root`` (a SQLite file with its -wal and -shm, a store directory)."""
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def s3_bytes(server, bucket: str, prefix: str = "") -> bytes:
    """The bytes of every object under ``prefix`` in ``bucket`` of the test S3 server."""
    client = server.client()
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            out.append(item["Key"].encode())
            out.append(client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
    return b"".join(out)


def s3_keys(server, bucket: str, prefix: str = "") -> list[str]:
    """Every object key under ``prefix``."""
    client = server.client()
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


#: The adapters every privacy test runs on (a fixture's ``params``).
BACKENDS = ["memory", "sqlite", "file", "s3"]


class Backend(NamedTuple):
    """One adapter to run a privacy test on: its URL and every byte it holds.

    ``raw_bytes()`` is None for ``memory://`` (no bytes outside the process);
    ``where`` is the memory store's name or the S3 ``(server, prefix)``.
    """

    kind: str
    url: str
    raw_bytes: Callable[[], bytes] | None
    where: Any = None


def backend(request, tmp_path: Path, prefix: str) -> Backend:
    """The ``Backend`` of ``request.param`` (one of ``BACKENDS``) on a fresh location; S3 on the session server."""
    from s3_server import BUCKET

    if request.param == "memory":
        name = uuid.uuid4().hex
        return Backend("memory", f"memory://{name}", None, name)
    if request.param == "sqlite":
        return Backend("sqlite", f"sqlite:///{tmp_path}/db/agents.db?create=1", lambda: files_bytes(tmp_path / "db"))
    if request.param == "file":
        return Backend("file", f"file://{tmp_path}/store", lambda: files_bytes(tmp_path / "store"))
    server = request.getfixturevalue("s3_server")
    key_prefix = f"{prefix}-{uuid.uuid4().hex[:10]}"
    return Backend("s3", server.url(key_prefix), lambda: s3_bytes(server, BUCKET, key_prefix), (server, key_prefix))
