"""A SQLite store left open never makes the interpreter hang at exit.

aiosqlite runs each connection on its own thread; a non-daemon one would keep the
interpreter waiting for ever when a store was not closed (an exception before
``close``, or a ``Runtime`` entered and never exited). What was acknowledged
before the exit stays durable.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from durably.storage import StreamId, open_store

SCRIPTS = {
    "exception-before-close": """
        store = open_store(URL)
        await store.open()
        await store.append(StreamId("default", "a1"), 0, [b"acknowledged"])
        raise RuntimeError("boom before close")
    """,
    "store-never-closed": """
        store = open_store(URL)
        await store.open()
        await store.append(StreamId("default", "a1"), 0, [b"acknowledged"])
    """,
    "runtime-never-exited": """
        rt = Runtime(URL)
        await rt.__aenter__()
        await rt.store.append(StreamId("default", "a1"), 0, [b"acknowledged"])
    """,
}


@pytest.mark.parametrize("case", sorted(SCRIPTS))
async def test_an_unclosed_sqlite_store_does_not_hang_the_exit(tmp_path, case):
    url = f"sqlite:///{tmp_path}/a.db"
    body = textwrap.indent(textwrap.dedent(SCRIPTS[case]), "    ")
    script = (
        f"import anyio\nfrom durably import Runtime\nfrom durably.storage import StreamId, open_store\n"
        f"URL = {url!r}\nasync def main():\n{body}\nanyio.run(main)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the interpreter hung at exit (main: aiosqlite's non-daemon thread)")
    assert done.returncode in (0, 1), done.stderr
    async with open_store(url) as store:
        assert [r.data async for r in store.read(StreamId("default", "a1"))] == [b"acknowledged"]
