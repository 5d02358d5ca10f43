"""Snapshots of the S3 adapter: one object per snapshot, ``data/N/A/s/{seq}`` with the seq descending.

Descending names (see ``s3_keys``) make "the latest snapshot at or before X"
one list call (``StartAfter`` = the name of X + 1, ``MaxKeys=1``) and one GET.
Snapshots above ``multipart_threshold`` bytes are multipart uploads (``s3_upload``).
"""

from __future__ import annotations

from durably.storage._errors import StoreUnavailableError
from durably.storage._spi import StoredSnapshot, StreamId

from ._keys import MAX_SEQ, StreamKeys, seq_from_name
from ._options import S3Options
from ._requests import S3Requests
from ._upload import upload


async def put_snapshot(s3: S3Requests, options: S3Options, keys: StreamKeys, seq: int, data: bytes) -> None:
    """Store ``data`` as the snapshot at ``seq`` (already checked by ``S3Store.put_snapshot``).

    A multipart upload above ``options.multipart_threshold`` bytes. Raises
    ``StoreUnavailableError`` when S3 stays unreachable.
    """
    await upload(s3.call, keys.snapshot(seq), data, threshold=options.multipart_threshold, part_size=options.part_size)


async def get_snapshot(
    s3: S3Requests, stream: StreamId, keys: StreamKeys, at_or_before: int | None
) -> StoredSnapshot | None:
    """The latest snapshot of ``stream`` at or before ``at_or_before`` (None: any), or None: one list call and one GET.

    Raises ``StoreUnavailableError`` when S3 stays unreachable or listed
    snapshots keep being deleted before they can be read.
    """
    if at_or_before is not None and at_or_before < 1:
        return None
    start_after = None if at_or_before is None or at_or_before >= MAX_SEQ else keys.snapshot(at_or_before + 1)
    for _ in range(8):  # a listed snapshot can be deleted before the GET; look again
        names, _token = await s3.list_page(keys.snapshots, start_after=start_after, max_keys=1)
        if not names:
            return None
        found = await s3.get(names[0])
        if found is not None:
            return StoredSnapshot(seq_from_name(names[0]), found[0])
        start_after = names[0]
    raise StoreUnavailableError(f"snapshots of {stream} keep vanishing while read")


async def delete_snapshots(s3: S3Requests, keys: StreamKeys, before_seq: int) -> None:
    """Delete the snapshots below ``before_seq``, keeping the latest one whatever ``before_seq`` says.

    Raises ``StoreUnavailableError`` when S3 stays unreachable.
    """
    latest, _token = await s3.list_page(keys.snapshots, max_keys=1)
    if not latest or before_seq <= 1:
        return
    start_after = keys.snapshot(min(before_seq, MAX_SEQ + 1))
    token: str | None = None
    while True:
        names, token = await s3.list_page(keys.snapshots, start_after=start_after, token=token)
        await s3.delete_keys([name for name in names if name != latest[0]])
        if token is None:
            return
