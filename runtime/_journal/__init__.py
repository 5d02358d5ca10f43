"""The journal and restore (internal): an agent's appends, the record codec, snapshots, restore, the status index and redaction.

May import ``durably.storage``, ``durably.schemas``, ``durably.errors``, ``durably._figures``, ``durably._telemetry``,
``durably._tools`` and the state fold of ``durably._loop.state``.
"""
