"""Streams of the S3 adapter as a whole: listing them by their index entries, and purging one.

A stream is listable through its index entry ``streams/N/A`` (written before
its first record or blob; see the key layout in ``durably.adapters.s3``).
Listing pages through those entries; escaped names sort like the agent ids
they stand for (``s3_keys``), so the listing comes out in agent-id order.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from botocore.exceptions import ClientError

from durably.storage._spi import StreamId

from ._keys import StreamKeys, decode_segment, encode_segment, index_prefix
from ._requests import S3Requests

_log = logging.getLogger("durably.adapters.s3")


async def delete_stream(s3: S3Requests, keys: StreamKeys) -> None:
    """Purge a stream: abort its unfinished uploads, delete every object under it but its lease
    object (ended beforehand by the store, kept for its fencing token), then its index entry
    (last, so an interrupted purge stays listed and can be redone).

    Must not race writers of the stream (see "Limits" in ``durably.adapters.s3``).
    Raises ``StoreUnavailableError`` when S3 stays unreachable.
    """
    markers: dict[str, Any] = {}
    while True:
        uploads = await s3.call("list_multipart_uploads", Prefix=keys.root, **markers)
        for item in uploads.get("Uploads", []):
            try:
                await s3.call("abort_multipart_upload", Key=item["Key"], UploadId=item["UploadId"], expect=(404,))
            except ClientError:
                pass  # finished or aborted meanwhile
        if not uploads.get("IsTruncated"):
            break
        markers = {"KeyMarker": uploads["NextKeyMarker"], "UploadIdMarker": uploads["NextUploadIdMarker"]}
    while True:
        # The lease object stays (ended by the caller): its token is the floor of the next lease.
        names = [name for name in (await s3.list_page(keys.root))[0] if name != keys.lease]
        if not names:
            break
        await s3.delete_keys(names)
    await s3.call("delete_object", Key=keys.index)


async def list_streams(s3: S3Requests, root: str, namespace: str, prefix: str = "") -> AsyncIterator[StreamId]:
    """The streams of ``namespace`` whose agent id starts with ``prefix``, in agent-id order.

    ``root`` is the store's key prefix. Pages through the index entries,
    1,000 per request; an invalid namespace yields nothing. A key under the
    index that durably cannot have written (a malformed escape: another tool's
    object) is skipped with a warning, so it cannot hide the namespace's
    streams. Raises ``StoreUnavailableError`` when S3 stays unreachable.
    """
    if not isinstance(namespace, str) or not namespace or "/" in namespace or "\x00" in namespace:
        return
    base = index_prefix(root, namespace)
    token: str | None = None
    while True:
        names, token = await s3.list_page(base + encode_segment(prefix), token=token)
        for name in names:
            try:
                agent_id = decode_segment(name[len(base) :])
            except ValueError as exc:
                _log.warning("skipping S3 key %r: not a stream index key durably wrote (%s)", name, exc)
                continue
            yield StreamId(namespace, agent_id)
        if token is None:
            return
