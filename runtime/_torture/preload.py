"""Imported once by the torture harness's fork server, so that each worker forked from it starts warm.

Worker processes are forked from a server process that imported this module:
the worker and the adapters' code, botocore's parsed S3 models (read and
parsed once here rather than in each worker: about a third of a second of CPU
per S3 worker) and the tool-schema machinery the torture agents' definitions
build on first use. Only pure, read-only data is made here; no store, client,
connection, thread or event loop, which a fork could not share.
"""

from __future__ import annotations

import os

import durably.adapters.filesystem
import durably.adapters.sqlite  # noqa: F401
from durably._torture import fleet_worker, worker  # noqa: F401
from durably._torture.agents import torture_definitions
from durably.storage._torture import Ledger

try:
    from durably.adapters.s3._requests import preload_models
except ImportError:  # without the s3 extra (aiobotocore)
    pass
else:
    preload_models()
torture_definitions(1, Ledger(os.devnull))  # the first definitions build pydantic's schema machinery
