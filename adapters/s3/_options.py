"""The S3 adapter's URL: ``s3://bucket/prefix?endpoint_url=...&region=...&path_style=1``.

Query parameters (all optional):

========================  =======  ====================================================
name                      default  meaning
========================  =======  ====================================================
``endpoint_url``          AWS      an S3-compatible server, e.g. ``http://127.0.0.1:9000``
``region``                chain    the region; else botocore's chain (``AWS_REGION``...)
``path_style``            0        1: ``http://host/bucket/key`` addressing (MinIO, moto...)
``create_bucket``         0        1: ``open()`` creates the bucket when it is missing
``connect_timeout``       5        seconds to establish a connection
``read_timeout``          20       seconds to wait for a response (per request)
``max_attempts``          6        tries per request, transient failures included
``deadline``              30       seconds after which no retry is started
``concurrency``           32       S3 requests in flight per store, at most
``multipart_threshold``   8388608  bytes from which snapshots and blobs use multipart upload
``part_size``             8388608  bytes per multipart part (S3 minimum 5 MiB)
========================  =======  ====================================================

Credentials always come from botocore's normal chain (environment, shared
config and credentials files, SSO, container and instance roles), never from
the URL, so URLs can be logged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durably.storage._errors import InvalidStoreURLError
from durably.storage._urls import flag, parse_store_url, seconds

from ._retry import RetryPolicy

MIN_PART_SIZE = 5 * 1024 * 1024
_MIB8 = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class S3Options:
    """The parsed URL. ``prefix`` is ``""`` or ends with ``/``; timeouts are seconds, sizes bytes."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    create_bucket: bool = False
    connect_timeout: float = 5.0
    read_timeout: float = 20.0
    concurrency: int = 32
    multipart_threshold: int = _MIB8
    part_size: int = _MIB8
    retry: RetryPolicy = RetryPolicy()

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> S3Options:
        """Parse ``url``; keyword ``overrides`` replace fields (``retry=RetryPolicy(...)`` too).

        Raises ``InvalidStoreURLError`` (a ``ValueError``) for another scheme, a
        missing bucket, an unknown query parameter or a value out of range.
        """
        converters: dict[str, Callable[[str], object]] = {
            "endpoint_url": str,
            "region": str,
            "path_style": flag,
            "create_bucket": flag,
            "connect_timeout": seconds,
            "read_timeout": seconds,
            "concurrency": int,
            "multipart_threshold": int,
            "part_size": int,
            "max_attempts": int,
            "deadline": seconds,
        }
        parsed = parse_store_url(url, ("s3",), converters)
        if not parsed.netloc:
            raise InvalidStoreURLError(f"{parsed.url!r} names no bucket (s3://bucket/prefix)", url=parsed.url)
        if "@" in parsed.netloc or ":" in parsed.netloc:
            raise InvalidStoreURLError(
                f"{parsed.url!r}: an s3:// URL carries no credentials or port (s3://bucket/prefix); the keys come "
                "from the usual AWS sources (environment, profile, instance role), the server from ?endpoint_url=",
                url=parsed.url,
            )
        prefix = parsed.path.strip("/")
        # Each value converted to its field's type above; the dataclass checks the rest (_validate).
        fields: dict[str, Any] = {"bucket": parsed.netloc, "prefix": f"{prefix}/" if prefix else ""}
        retry: dict[str, Any] = {
            name: parsed.options.pop(name) for name in ("max_attempts", "deadline") if name in parsed.options
        }
        fields.update(parsed.options)
        if retry:
            fields["retry"] = RetryPolicy(**retry)
        options = dataclasses.replace(cls(**fields), **overrides)
        options._validate()
        return options

    def _validate(self) -> None:
        if self.concurrency < 1 or self.retry.max_attempts < 1:
            raise InvalidStoreURLError("concurrency and max_attempts must be >= 1")
        if not all(math.isfinite(t) and t > 0 for t in (self.connect_timeout, self.read_timeout, self.retry.deadline)):
            raise InvalidStoreURLError("timeouts and deadline must be finite numbers of seconds > 0")
        if self.part_size < MIN_PART_SIZE or self.multipart_threshold < 1:
            raise InvalidStoreURLError(f"part_size must be >= {MIN_PART_SIZE} bytes and multipart_threshold >= 1")
