"""A mistyped path creates nothing.

A store whose folder does not exist is refused at open with
``InvalidStoreURLError`` and leaves nothing behind (otherwise a typo'd
``sqlite:////nonexistent/dir/x.db`` would make folders at the filesystem root
at its first write);
``?create=1`` makes the folders. In an existing folder, reading where no
database is finds nothing and creates no file; the first write creates it
(owner-only); a reader opened before another process created the file sees
what it wrote.
"""

from __future__ import annotations

import stat

import pytest
from support_agents import list_agent

from durably import AgentNotFoundError, InvalidStoreURLError, Runtime
from durably.storage import StreamId, open_store


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
async def test_a_missing_folder_is_refused_and_nothing_is_created(tmp_path, scheme):
    typo = tmp_path / "agnets" / ("agents.db" if scheme == "sqlite" else "store")
    with pytest.raises(InvalidStoreURLError, match="create=1"):
        async with Runtime(f"{scheme}:///{typo}"):
            pass
    assert not typo.parent.exists()
    async with Runtime(f"{scheme}:///{typo}?create=1") as rt:
        assert await rt.agents() == []
    assert typo.parent.is_dir()


async def test_reads_where_no_database_is_create_nothing(tmp_path):
    typo = tmp_path / "agnets.db"
    async with Runtime(f"sqlite:///{typo}") as rt:
        with pytest.raises(AgentNotFoundError):
            await rt.status("a1")
        assert await rt.agents() == [] and await rt.resume_all() == []
        assert await rt.lease_holder("a1") is None
    assert not typo.exists()  # no empty database left behind


async def test_the_first_write_creates_the_file_and_an_early_reader_sees_it(tmp_path):
    path = tmp_path / "new" / "agents.db"
    effects: list = []
    definition = list_agent(1, effects)
    async with open_store(f"sqlite:///{path}?create=1") as early:  # opened before the file exists
        assert [s async for s in early.list_streams("default")] == []
        async with Runtime(f"sqlite:///{path}?create=1", agents=[definition]) as rt:
            assert (await rt.run(definition, "a1", "task")).status == "finished"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [s async for s in early.list_streams("default")] == [StreamId("default", "a1")]
        assert await early.last_seq(StreamId("default", "a1")) > 0
