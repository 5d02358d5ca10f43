"""The S3 adapter, ``s3://bucket/prefix?endpoint_url=...``: ``S3Store`` (extra ``durably[s3]``).

The store and its key layout, faults and limits are described in ``S3Store``;
the package's private modules are its parts (``_store``, ``_journal``,
``_snapshotting``, ``_requests``, ``_batch``, ``_put_batch``, ``_window``,
``_compaction``, ``_snapshots``, ``_blobs``, ``_streams``, ``_leases``,
``_keys``, ``_retry``, ``_upload``, ``_options``).
"""

from durably.errors import ExtraNotInstalledError

with ExtraNotInstalledError.guard(__name__, "s3", "aiobotocore", "botocore"):
    from ._store import S3Store

__all__ = ["S3Store"]
