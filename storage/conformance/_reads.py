"""Checks of reads and stream listing: after-seq, paging, sizes, many streams, odd ids, namespaces."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durably.storage._spi import AppendRequest, StreamId

from ._harness import NAMESPACE, StoreHarness, list_all, numbered, payloads, read_pairs, sid

#: Agent ids a path- or key-based backend could mishandle: separators, dot segments,
#: escapes, Unicode, case, whitespace and the longest id ``StreamId`` allows.
AWKWARD_AGENT_IDS = [
    "a/b/c",
    "../../escape",
    "..",
    ".",
    "with space",
    "percent%2Fslash",
    "back\\slash",
    "ünïcødé-日本-🙂",
    "UPPER",
    "upper",
    "a",
    "a/",
    "trailing ",
    "x" * 200,
    "é" * 200,
]


class ReadChecks(StoreHarness):
    """Promises of ``Store.read`` and ``Store.list_streams``."""

    @pytest.mark.anyio
    async def test_read_after_seq(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("after")
            data = payloads("r", 10)
            await store.append(stream, 0, data[:3])
            await store.append(stream, 3, data[3:6])
            await store.append(stream, 6, data[6:])
            for after in range(0, 13):
                assert await read_pairs(store, stream, after) == numbered(data)[after:], (
                    f"read(after_seq={after}) yields exactly the records with seq > {after}, in order"
                )

    @pytest.mark.anyio
    async def test_read_pages_smaller_than_the_stream(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            stream = sid("paged")
            data = payloads("p", 25)
            await store.append(stream, 0, data[:10])
            await store.append(stream, 10, data[10:])
            for page_size in (1, 2, 3, 7, 10, 24, 25, 26):
                assert await read_pairs(store, stream, page_size=page_size) == numbered(data), (
                    f"read(page_size={page_size}) still yields every record once, in order"
                )
                assert await read_pairs(store, stream, 4, page_size=page_size) == numbered(data)[4:]

    @pytest.mark.anyio
    async def test_read_unknown_stream_yields_nothing(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            await store.append(sid("known"), 0, [b"x"])
            assert await read_pairs(store, sid("unknown")) == []
            assert await read_pairs(store, sid("unknown"), 5) == []
            assert await store.last_seq(sid("unknown")) == 0
            assert await read_pairs(store, sid("known", namespace="other")) == [], "streams are per namespace"

    @pytest.mark.anyio
    async def test_very_large_records(self, tmp_path: Path) -> None:
        big = os.urandom(self.large_size)
        bigger = os.urandom(self.large_size + 1)
        async with self.opened(tmp_path) as store:
            stream = sid("large")
            assert await store.append(stream, 0, [b"small", big]) == 2
            assert await store.append(stream, 2, [bigger]) == 3
            records = await read_pairs(store, stream, page_size=1)
            assert [seq for seq, _ in records] == [1, 2, 3]
            assert records[1][1] == big and records[2][1] == bigger, f"{self.large_size}-byte records round-trip intact"

    @pytest.mark.anyio
    async def test_many_streams(self, tmp_path: Path) -> None:
        names = [f"agent-{n:04d}" for n in range(self.many_streams)]
        async with self.opened(tmp_path) as store:
            half = len(names) // 2
            # One group commit for the first half, one append per stream for the rest.
            results = await store.append_batch(
                [AppendRequest(sid(name), 0, [name.encode(), b"second"]) for name in names[:half]]
            )
            assert results == [2] * half, "a group commit over many streams appends to each"
            for name in names[half:]:
                await store.append(sid(name), 0, [name.encode(), b"second"])
            assert await list_all(store) == [sid(name) for name in names]
            for name in names:
                assert await read_pairs(store, sid(name)) == [(1, name.encode()), (2, b"second")], name

    @pytest.mark.anyio
    async def test_awkward_stream_ids_are_kept_apart(self, tmp_path: Path) -> None:
        streams = [sid(agent) for agent in AWKWARD_AGENT_IDS] + [
            StreamId("ns-ünï 日本", "a/b"),
            StreamId("ns.with.dots", "a/b"),
            StreamId("x" * 200, "a/b"),
        ]
        async with self.opened(tmp_path) as store:
            for index, stream in enumerate(streams):
                await store.append(stream, 0, [f"stream {index}".encode()] * (index % 3 + 1))
            for index, stream in enumerate(streams):
                assert await read_pairs(store, stream) == numbered([f"stream {index}".encode()] * (index % 3 + 1)), (
                    f"{stream!r} keeps its own records"
                )
            assert await list_all(store) == sorted(sid(agent) for agent in AWKWARD_AGENT_IDS), (
                "list_streams yields every id exactly as given, sorted by agent id"
            )
            for namespace in ("ns-ünï 日本", "ns.with.dots", "x" * 200):
                assert await list_all(store, namespace) == [StreamId(namespace, "a/b")]

    @pytest.mark.anyio
    async def test_list_streams_sorted_with_prefix(self, tmp_path: Path) -> None:
        agents = ["b", "a", "ab", "a/x", "abc", "b/a", "c", "A", "aa"]
        async with self.opened(tmp_path) as store:
            for agent in agents:
                await store.append(sid(agent), 0, [b"x"])
            assert await list_all(store) == [sid(agent) for agent in sorted(agents)], "sorted by agent id"
            for prefix in ("a", "ab", "a/", "b", "A", "zzz", ""):
                expected = [sid(agent) for agent in sorted(agents) if agent.startswith(prefix)]
                assert await list_all(store, prefix=prefix) == expected, f"list_streams(prefix={prefix!r})"

    @pytest.mark.anyio
    async def test_namespaces_are_isolated(self, tmp_path: Path) -> None:
        async with self.opened(tmp_path) as store:
            for namespace in (NAMESPACE, NAMESPACE + "2", NAMESPACE[:-1], "other"):
                await store.append(StreamId(namespace, "agent"), 0, [namespace.encode()])
            await store.append(StreamId("other", "only-other"), 0, [b"x"])
            assert await list_all(store) == [sid("agent")], "only the asked namespace, not one sharing a prefix"
            assert await list_all(store, "other") == [StreamId("other", "agent"), StreamId("other", "only-other")]
            assert await list_all(store, "nobody") == []
            for namespace in (NAMESPACE, NAMESPACE + "2", NAMESPACE[:-1]):
                assert await read_pairs(store, StreamId(namespace, "agent")) == [(1, namespace.encode())]
