"""A purged run's snapshot never lands in the next run of the same id.

An old worker's snapshot write can still be in flight when the agent is
purged and started anew; when it lands, restore must not hand the new run the
old run's run id and task (nor, through the run id, its idempotency keys).
"""

from __future__ import annotations

import pytest
from support_agents import list_agent

from durably import Runtime, SnapshotPolicy


@pytest.mark.parametrize("scheme", ["sqlite", "memory"])
async def test_a_snapshot_of_a_purged_run_landing_late_is_never_restored(tmp_path, scheme):
    url = f"sqlite:///{tmp_path}/a.db" if scheme == "sqlite" else "memory://"
    effects: list = []
    definition = list_agent(3, effects)
    policy = SnapshotPolicy(every_records=2, tail_ratio=0.0)
    async with Runtime(url, agents=[definition], snapshot_policy=policy) as rt:
        old = await rt.run(definition, "a1", "the old task")
        await rt._activations.services.snapshots.flush()
        stale = await rt.store.get_snapshot(rt.stream("a1"))  # what the old worker is still writing
        assert stale is not None
        await rt.purge("a1")
        new = await rt.run(definition, "a1", "the new task")
        await rt._activations.services.snapshots.flush()  # the new run's own snapshot first: the stale one lands last
        assert new.run_id != old.run_id and new.last_seq >= stale.seq
        await rt.store.put_snapshot(rt.stream("a1"), stale.seq, stale.data)  # the old write lands now
        restored = await rt.status("a1")
        assert restored.run_id == new.run_id and restored.task == "the new task"  # main: the old run's
        assert restored.to_wire() == new.to_wire()
