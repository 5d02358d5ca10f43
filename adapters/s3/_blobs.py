"""Blobs of the S3 adapter: content-addressed objects ``data/N/A/b/{sha256}``.

The key is the SHA-256 of the bytes, so storing the same bytes twice is the
same object (a large re-upload is skipped after a HEAD), and a read checks
the bytes against their name. Blobs above ``multipart_threshold`` bytes are
multipart uploads (``s3_upload``).
"""

from __future__ import annotations

import hashlib
import json
import re

from botocore.exceptions import ClientError

from durably.storage._errors import BlobNotFoundError, CorruptRecordError
from durably.storage._spi import StreamId

from ._keys import StreamKeys
from ._options import S3Options
from ._requests import S3Requests
from ._upload import upload

_DIGEST = re.compile(r"[0-9a-f]{64}")


async def put_blob(s3: S3Requests, options: S3Options, stream: StreamId, keys: StreamKeys, data: bytes) -> str:
    """Store ``data`` (bytes, already type-checked) under its SHA-256; returns the hex digest.

    Also writes the stream's index entry, so a stream with blobs is listed.
    Raises ``StoreUnavailableError`` when S3 stays unreachable.
    """
    digest = hashlib.sha256(data).hexdigest()
    key = keys.blob(digest)
    if len(data) >= options.multipart_threshold:
        try:  # content-addressed: the same digest is the same bytes, so skip a large re-upload
            head = await s3.call("head_object", Key=key, expect=(404,))
            if head.get("ContentLength") == len(data):
                return digest
        except ClientError:
            pass
    await upload(s3.call, key, data, threshold=options.multipart_threshold, part_size=options.part_size)
    await s3.call(
        "put_object",
        Key=keys.index,
        Body=json.dumps({"namespace": stream.namespace, "agent_id": stream.agent_id}).encode(),
    )
    return digest


async def get_blob(s3: S3Requests, stream: StreamId, keys: StreamKeys, digest: str) -> bytes:
    """The bytes of blob ``digest`` of ``stream``.

    Raises ``BlobNotFoundError`` for a malformed or unknown digest,
    ``CorruptRecordError`` when the stored bytes do not hash to ``digest``,
    ``StoreUnavailableError`` when S3 stays unreachable.
    """
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise BlobNotFoundError(f"no blob {digest!r} in {stream}")
    found = await s3.get(keys.blob(digest))
    if found is None:
        raise BlobNotFoundError(f"no blob {digest} in {stream}")
    if hashlib.sha256(found[0]).hexdigest() != digest:
        raise CorruptRecordError(f"blob {digest} does not match its digest", stream=stream)
    return found[0]
