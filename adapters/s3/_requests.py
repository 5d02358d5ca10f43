"""Requests of the S3 adapter: one bucket's retried calls, GETs, listings and bulk deletes.

``S3Requests`` is what every other part of the adapter (appends, reads,
compaction, snapshots, leases) talks to S3 through. It holds the aiobotocore
client and the ``anyio.CapacityLimiter`` that bounds the requests in flight
(both set by ``S3Store.open()``, cleared by ``close()``) and sends each
request through ``s3_retry`` (tenacity retries of transient failures).

It also makes the aiobotocore session without blocking the event loop
(botocore's JSON models are read in a worker thread, once per process), and
holds the checks ``open()`` runs on the bucket: that it exists, and that the
server honours conditional writes.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import anyio
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import ClientError

from durably.storage._errors import StoreUnavailableError
from durably.storage._url_redaction import redact_url

from ._options import S3Options
from ._retry import call_with_retries, retrying

_DELETE_CHUNK = 1000  # S3's DeleteObjects limit


class _DeleteIncomplete(Exception):
    """DeleteObjects reported keys it could not delete (retried like a transient error)."""


_shared_loader: Any = None  # botocore's data loader, once its JSON models are read: pure, cached data


def _load_botocore_data(session: AioSession) -> None:
    """Read botocore's JSON models into the session's loader cache (run in a worker thread)."""
    loader = session.get_component("data_loader")
    loader.load_service_model("s3", "service-2")
    loader.load_service_model("s3", "endpoint-rule-set-1")
    for name in ("endpoints", "partitions", "_retry", "sdk-default-configuration"):
        loader.load_data(name)
    session.get_scoped_config()


def preload_models() -> None:
    """Read botocore's models now, in this thread, for every later session of this process to share.

    For a process that forks workers (a fork server, such as ``durably
    torture``'s): each fork then starts with the parsed models instead of
    reading and parsing them again (about 0.3 s of CPU per process). The
    loader's data is pure and never written after it is read, so forks share
    it safely. Does nothing once the models are loaded.
    """
    global _shared_loader
    if _shared_loader is None:
        session = get_session()
        _load_botocore_data(session)
        _shared_loader = session.get_component("data_loader")


async def new_session() -> AioSession:
    """An aiobotocore session whose file reads happen off the event loop.

    The first one reads botocore's models in a worker thread; later ones share
    that loader (``register_component("data_loader", ...)``, botocore's way to
    share model data between sessions) and read only the small config files.
    """
    global _shared_loader
    session = get_session()
    if _shared_loader is not None:
        session.register_component("data_loader", _shared_loader)
        await anyio.to_thread.run_sync(session.get_scoped_config)
    else:
        await anyio.to_thread.run_sync(_load_botocore_data, session)
        _shared_loader = session.get_component("data_loader")
    return session


class S3Requests:
    """Retried requests on the bucket of ``options`` (see ``s3_retry`` for what is retried).

    In: ``options`` (bucket and retry policy). ``client`` (aiobotocore S3
    client) and ``limiter`` are set by ``S3Store.open()``; requests made
    before that fail an assertion. Every method raises
    ``StoreUnavailableError`` when a transient failure outlasts the retries.
    """

    def __init__(self, options: S3Options) -> None:
        self.options = options
        self.client: Any = None
        self.limiter: anyio.CapacityLimiter | None = None

    async def call(self, operation: str, /, *, expect: tuple[int, ...] = (), **params: Any) -> dict[str, Any]:
        """One S3 request on this bucket, retried (see ``s3_retry.call_with_retries``)."""
        method = getattr(self.client, operation)
        limiter = self.limiter
        assert limiter is not None

        async def attempt() -> dict[str, Any]:
            async with limiter:
                response: dict[str, Any] = await method(Bucket=self.options.bucket, **params)
                return response

        return await call_with_retries(self.options.retry, operation, attempt, expect=expect)

    async def get(self, key: str, *, byte_range: str | None = None) -> tuple[bytes, str] | None:
        """GET ``key`` (optionally a ``bytes=a-b`` range): its bytes and ETag, or None if absent."""
        extra = {"Range": byte_range} if byte_range else {}
        limiter = self.limiter
        assert limiter is not None

        async def attempt() -> tuple[bytes, str] | None:
            async with limiter:
                try:
                    response = await self.client.get_object(Bucket=self.options.bucket, Key=key, **extra)
                except ClientError as exc:
                    if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                        return None
                    raise
                async with response["Body"] as body:
                    return await body.read(), response["ETag"]

        return await call_with_retries(self.options.retry, "GetObject", attempt)

    async def list_page(
        self, prefix: str, *, start_after: str | None = None, max_keys: int = 1000, token: str | None = None
    ) -> tuple[list[str], str | None]:
        """One ListObjectsV2 page: the keys, and the continuation token when there are more."""
        params: dict[str, Any] = {"Prefix": prefix, "MaxKeys": max_keys}
        if token is not None:
            params["ContinuationToken"] = token
        elif start_after is not None:
            params["StartAfter"] = start_after
        response = await self.call("list_objects_v2", **params)
        names = [item["Key"] for item in response.get("Contents", [])]
        return names, response.get("NextContinuationToken") if response.get("IsTruncated") else None

    async def delete_keys(self, names: Sequence[str]) -> None:
        """Delete ``names`` with DeleteObjects (1,000 per request), retrying keys S3 reports as failed."""
        for start in range(0, len(names), _DELETE_CHUNK):
            remaining = list(names[start : start + _DELETE_CHUNK])

            async def attempt() -> None:
                response = await self.call(
                    "delete_objects", Delete={"Objects": [{"Key": k} for k in remaining], "Quiet": True}
                )
                failed = {error["Key"] for error in response.get("Errors", [])}
                remaining[:] = [k for k in remaining if k in failed]
                if remaining:
                    raise _DeleteIncomplete(f"S3 could not delete {len(remaining)} keys: {response['Errors'][:3]}")

            try:
                async for state in retrying(self.options.retry, lambda e: isinstance(e, _DeleteIncomplete)):
                    with state:
                        await attempt()
            except _DeleteIncomplete as exc:
                raise StoreUnavailableError(str(exc)) from exc

    async def check_bucket(self) -> None:
        """Make sure the bucket exists: HEAD it, and create it when ``options.create_bucket`` allows.

        Raises ``StoreUnavailableError`` when it does not exist and may not be created.
        """
        try:
            await self.call("head_bucket", expect=(404,))
        except ClientError:
            if not self.options.create_bucket:
                raise StoreUnavailableError(f"S3 bucket {self.options.bucket!r} does not exist") from None
            params: dict[str, Any] = {}
            region = self.client.meta.region_name
            if region and region != "us-east-1":
                params["CreateBucketConfiguration"] = {"LocationConstraint": region}
            try:
                await self.call("create_bucket", expect=(409,), **params)
            except ClientError:
                pass  # created meanwhile by another process

    async def check_conditional_writes(self) -> None:
        """Refuse a server that ignores ``If-None-Match: *`` (it would let two writers win one seq).

        Three small requests per ``open()``: create a probe object, try to
        create it again (must be 412), delete it. AWS S3 honours the header
        since August 2024; some S3-compatible servers do not, or only in newer versions.
        Raises ``StoreUnavailableError`` for such a server.
        """
        key = f"{self.options.prefix}probe/{secrets.token_hex(8)}"
        await self.call("put_object", Key=key, Body=b"probe", IfNoneMatch="*")
        try:
            await self.call("put_object", Key=key, Body=b"probe again", IfNoneMatch="*", expect=(412,))
        except ClientError:
            pass  # 412: the server keeps the promise the whole layout relies on
        else:
            raise StoreUnavailableError(
                f"{redact_url(self.options.endpoint_url or '') or 'the S3 endpoint'} ignores If-None-Match on PutObject: "
                "it cannot keep two writers from both appending; use a server with conditional writes"
            )
        finally:
            with anyio.CancelScope(shield=True):
                await self.call("delete_object", Key=key)
