"""Uploading one large object to S3: a single PUT below a threshold, multipart above it.

Multipart upload (S3's ``CreateMultipartUpload`` / ``UploadPart`` /
``CompleteMultipartUpload``) sends the parts concurrently, retries each part on
its own (re-sending a part number replaces it, so a part retry is idempotent)
and makes the object visible atomically at completion. An upload that fails
is aborted so its parts stop costing storage; a bucket lifecycle rule
``AbortIncompleteMultipartUpload`` is the backstop for a process killed mid-upload.

Completion may be ambiguous (the response is lost): a retry then finds the
upload gone (``NoSuchUpload``), and the object's ``x-amz-meta-durably-upload``
token, set when the upload was created, tells whether it was ours.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from botocore.exceptions import ClientError

from durably.storage._errors import StoreUnavailableError

#: ``call(operation, *, expect=(), **params)``: one retried S3 request (see ``S3Requests.call``).
Call = Callable[..., Awaitable[dict[str, Any]]]

TOKEN_META = "durably-upload"


async def upload(call: Call, key: str, data: bytes, *, threshold: int, part_size: int) -> None:
    """Store ``data`` at ``key`` (replacing what is there): one PUT if ``len(data) < threshold``
    bytes, else a multipart upload of ``part_size``-byte parts.

    Raises ``StoreUnavailableError`` when S3 cannot be reached in time; nothing
    new is visible at ``key`` then, unless a completion of ours that S3
    applied lost its response *and* its retry could not confirm it.
    """
    if len(data) < threshold:
        await call("put_object", Key=key, Body=data)
        return
    token = secrets.token_hex(16)
    created = await call("create_multipart_upload", Key=key, Metadata={TOKEN_META: token})
    upload_id = created["UploadId"]
    done = False
    try:
        chunks = [data[offset : offset + part_size] for offset in range(0, len(data), part_size)]
        etags: list[str] = [""] * len(chunks)
        failures: list[Exception] = []

        async def send_part(index: int) -> None:
            try:
                response = await call(
                    "upload_part", Key=key, UploadId=upload_id, PartNumber=index + 1, Body=chunks[index]
                )
            except Exception as exc:  # kept, so the caller sees the error itself, not an ExceptionGroup
                failures.append(exc)
            else:
                etags[index] = response["ETag"]

        async with anyio.create_task_group() as group:
            for index in range(len(chunks)):
                group.start_soon(send_part, index)
        if failures:
            raise failures[0]
        parts = [{"PartNumber": number, "ETag": etag} for number, etag in enumerate(etags, start=1)]
        try:
            await call(
                "complete_multipart_upload",
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                expect=(404,),
            )
        except ClientError:
            # NoSuchUpload: an earlier attempt completed it and lost the answer, or it was aborted.
            try:
                head = await call("head_object", Key=key, expect=(404,))
            except ClientError:
                head = {}
            if head.get("Metadata", {}).get(TOKEN_META) != token:
                raise StoreUnavailableError(f"multipart upload of {key} vanished before completion") from None
        done = True
    finally:
        if not done:
            # Shielded: a cancelled upload must still release its parts.
            with anyio.CancelScope(shield=True):
                try:
                    await call("abort_multipart_upload", Key=key, UploadId=upload_id, expect=(404,))
                except (ClientError, StoreUnavailableError):
                    pass  # the lifecycle rule reclaims it; the original error is the one to report
