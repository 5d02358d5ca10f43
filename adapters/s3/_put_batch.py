"""Appending one batch object to S3 exactly once: a conditional PUT whose unknown outcomes are read back.

``PUT data/N/A/r/{first}`` with ``If-None-Match: *`` lets exactly one of
racing writers create the key. Any transient failure of the PUT leaves its
outcome unknown (the request may have been applied; an HTTP client may even
re-send it by itself), so the key's 48-byte header is read back before
anything is decided: the batch's random writer token tells "our object",
"another writer's object" and "no object" apart, and only "no object" is
re-sent. See "Faults" in the ``durably.adapters.s3`` module docstring.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from durably.storage._errors import DurablyError

from ._batch import HEADER_SIZE, BatchHeader
from ._requests import S3Requests
from ._retry import is_precondition_failed, is_transient, retrying, unavailable


class BatchTaken(Exception):
    """The batch key holds another writer's object."""


async def put_new_batch(s3: S3Requests, key: str, body: bytes, token: bytes) -> None:
    """Create the batch object ``key`` (encoded ``body`` carrying writer ``token``) with ``If-None-Match: *``;
    resolve every unknown outcome by reading back.

    Returns when the object at the key is ours. Raises ``BatchTaken`` when it
    is another writer's (the caller reports ``ConflictError``),
    ``StoreUnavailableError`` when retries run out.
    """
    limiter = s3.limiter
    assert limiter is not None

    async def owner() -> bytes | None:
        found = await s3.get(key, byte_range=f"bytes=0-{HEADER_SIZE - 1}")
        return None if found is None else BatchHeader.decode(found[0]).token

    async def attempt() -> None:
        try:
            async with limiter:
                await s3.client.put_object(Bucket=s3.options.bucket, Key=key, Body=body, IfNoneMatch="*")
            return
        except ClientError as exc:
            if is_precondition_failed(exc):
                if await owner() == token:
                    return  # an earlier attempt of ours was applied; its answer was lost
                raise BatchTaken() from None
            if not is_transient(exc):
                raise
            failure: Exception = exc
        except Exception as exc:
            if not is_transient(exc):
                raise
            failure = exc
        # The PUT may or may not have been applied: look before deciding.
        current = await owner()
        if current == token:
            return
        if current is not None:
            raise BatchTaken()
        raise failure  # not applied: tenacity sends it again after a backoff

    try:
        async for state in retrying(s3.options.retry):
            with state:
                await attempt()
    except (BatchTaken, DurablyError):
        raise
    except Exception as exc:  # a transient failure that outlasted the retries, or a final S3 error
        raise unavailable(f"PutObject {key}", exc) from exc
