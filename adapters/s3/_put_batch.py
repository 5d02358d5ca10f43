"""Writing one batch object to S3 exactly once: a conditional PUT whose unknown outcomes are read back.

``PUT data/N/A/r/{first}`` with ``If-None-Match: *`` lets exactly one of
racing writers create the key; with ``If-Match: <etag>`` it replaces exactly
the version read, which is how a takeover marker (see ``s3_batch``) gives its
key up to the append of its own lease holder, or to a newer marker. Any
transient failure of the PUT leaves its outcome unknown (the request may have
been applied; an HTTP client may even re-send it by itself), so the key's
header is read back before anything is decided: the batch's random writer
token tells "our object", "another writer's object" and "no object" apart, and
only a key still as it was is written again. See "Faults" in the
``durably.adapters.s3`` module docstring.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from durably.storage._errors import DurablyError

from ._batch import HEADER_SIZE, BatchHeader
from ._requests import S3Requests
from ._retry import is_precondition_failed, is_transient, retried, unavailable


class BatchTaken(Exception):
    """The batch key holds another writer's object: ``header`` and ``etag`` as read back (None: no object)."""

    def __init__(self, header: BatchHeader | None, etag: str | None) -> None:
        super().__init__("the batch key holds another writer's object")
        self.header = header
        self.etag = etag


async def read_header(s3: S3Requests, key: str) -> tuple[BatchHeader, str] | None:
    """The header and ETag of the batch object ``key`` (one ranged GET), or None when there is none."""
    found = await s3.get(key, byte_range=f"bytes=0-{HEADER_SIZE - 1}")
    return None if found is None else (BatchHeader.decode(found[0]), found[1])


async def put_batch(s3: S3Requests, key: str, body: bytes, token: bytes, *, replacing: str | None = None) -> str:
    """Write the batch object ``key`` (encoded ``body`` carrying writer ``token``) exactly once.

    ``replacing`` None: create the key (``If-None-Match: *``); an ETag: replace
    that version of the object (``If-Match``). Returns the new object's ETag
    when the object at the key is ours. Raises ``BatchTaken`` with the object
    found when it is another writer's (or, when replacing, it is gone),
    ``StoreUnavailableError`` when retries run out.
    """
    limiter = s3.limiter
    assert limiter is not None
    condition = {"IfNoneMatch": "*"} if replacing is None else {"IfMatch": replacing}

    async def settled() -> str | None:
        """Our ETag if the key holds our object; raise BatchTaken if it holds another; None if unchanged."""
        current = await read_header(s3, key)
        if current is not None and current[0].token == token:
            return current[1]  # an earlier attempt of ours was applied; its answer was lost
        unchanged = current is None if replacing is None else current is not None and current[1] == replacing
        if unchanged:
            return None
        raise BatchTaken(*(current if current is not None else (None, None)))

    async def attempt() -> str:
        try:
            async with limiter:
                response = await s3.client.put_object(Bucket=s3.options.bucket, Key=key, Body=body, **condition)
            return str(response["ETag"])
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if is_precondition_failed(exc) or (replacing is not None and status == 404):
                mine = await settled()
                if mine is not None:
                    return mine
                raise BatchTaken(None, None) from None  # refused, yet unchanged: only a purge in between does this
            if not is_transient(exc):
                raise
            failure: Exception = exc
        except Exception as exc:
            if not is_transient(exc):
                raise
            failure = exc
        # The PUT may or may not have been applied: look before deciding.
        mine = await settled()
        if mine is not None:
            return mine
        raise failure  # not applied: tenacity sends it again after a backoff

    try:
        return await retried(s3.options.retry, attempt)
    except (BatchTaken, DurablyError):
        raise
    except Exception as exc:  # a transient failure that outlasted the retries, or a final S3 error
        raise unavailable(f"PutObject {key}", exc) from exc
