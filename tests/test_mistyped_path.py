"""Issue 11 item 17 (last point): the API creates no empty SQLite file for a mistyped path.

Reading through a path where no database is (a typo) finds nothing and leaves
nothing behind; the first write creates the file (owner-only, as before); a
reader opened before another process created the file sees what it wrote.
"""

from __future__ import annotations

import stat

import pytest

from durably.runtime import AgentNotFoundError, Runtime
from durably.storage import StreamId, open_store
from support_agents import list_agent


async def test_reads_through_a_mistyped_path_create_nothing(tmp_path):
    typo = tmp_path / "agnets" / "agents.db"
    async with Runtime(f"sqlite:///{typo}") as rt:
        with pytest.raises(AgentNotFoundError):
            await rt.status("a1")
        assert await rt.agents() == [] and await rt.resume_all() == []
        assert await rt.lease_holder("a1") is None
    assert not typo.exists() and not typo.parent.exists()  # main: an empty database (and its folder)


async def test_the_first_write_creates_the_file_and_an_early_reader_sees_it(tmp_path):
    path = tmp_path / "new" / "agents.db"
    effects: list = []
    definition = list_agent(1, effects)
    async with open_store(f"sqlite:///{path}") as early:  # opened before the file exists
        assert [s async for s in early.list_streams("default")] == []
        async with Runtime(f"sqlite:///{path}", agents=[definition]) as rt:
            assert (await rt.run(definition, "a1", "task")).status == "finished"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [s async for s in early.list_streams("default")] == [StreamId("default", "a1")]
        assert await early.last_seq(StreamId("default", "a1")) > 0
