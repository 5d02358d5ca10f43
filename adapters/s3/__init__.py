"""The S3 adapter, ``s3://bucket/prefix?endpoint_url=...``: ``S3Store`` (extra ``durably[s3]``).

The store and its key layout, faults and limits are described in ``store``;
the other modules of this package are its parts (requests, batches, windows,
compaction, snapshots, blobs, streams, leases, keys, retries, uploads, options).
"""

from durably.errors import ExtraNotInstalledError

with ExtraNotInstalledError.guard(__name__, "s3", "aiobotocore", "botocore"):
    from ._store import S3Store

__all__ = ["S3Store"]
