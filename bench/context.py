"""What every suite gets: sizes for the chosen run length, the store URL, a
scratch folder, the workload, the results and a progress bar."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from .results import Results
from .workload import Step, Workload


@dataclass(frozen=True)
class Sizes:
    """How much each suite does. Counts are records, steps or repeats.

    ``conversations``: steps of the single-agent conversations of agent-steps
    (the target figures use the 1,000-step one); ``agents``/``agent_steps``:
    the concurrent run; ``restore_records``: history lengths to restore;
    ``peer_series``: conversation lengths every peer runs (the bytes-vs-N chart);
    ``many_agents`` x ``many_steps``: the many suite's concurrent run,
    ``parked_agents`` its parked one; ``burst_agents``, ``burst_workers`` and
    ``takeover_agents``: the burst suite's.
    """

    append_records: int
    append_concurrency: tuple[int, ...]
    conversations: tuple[int, ...]
    agents: int
    agent_steps: int
    growth_steps: int
    restore_records: tuple[int, ...]
    restore_repeats: int
    codec_steps: int
    overhead_steps: int
    peer_steps: int
    peer_series: tuple[int, ...] = ()
    many_agents: int = 100
    many_steps: int = 5
    parked_agents: int = 200
    scan_agents: int = 2_000  # finished agents the scan suite seeds into one SQLite store
    burst_agents: int = 1_000  # parked agents the burst suite approves at once
    burst_workers: tuple[int, ...] = (1, 2)  # worker processes serving each burst
    takeover_agents: int = 50  # agents held by the worker the burst suite kills (0: no takeover)
    growing_supersteps: int = 500  # the peers-growing suite's graph: one message appended per super-step


#: Under a minute on 2 cores, every suite included.
QUICK = Sizes(
    append_records=1_024,
    append_concurrency=(1, 4, 16, 64),
    conversations=(300,),
    agents=16,
    agent_steps=30,
    growth_steps=300,
    restore_records=(100, 1_000, 10_000),
    restore_repeats=5,
    codec_steps=300,
    overhead_steps=300,
    peer_steps=200,
    peer_series=(50, 200),
    many_agents=100,
    many_steps=10,
    parked_agents=300,
    burst_agents=200,
    takeover_agents=20,
    growing_supersteps=100,
)
#: The default: the 1,000-step conversation the targets name, LangGraph on it.
MEDIUM = Sizes(
    append_records=2_000,
    append_concurrency=(1, 4, 16, 64),
    conversations=(1_000,),
    agents=16,
    agent_steps=100,
    growth_steps=1_000,
    restore_records=(100, 1_000, 10_000),
    restore_repeats=10,
    codec_steps=1_000,
    overhead_steps=1_000,
    peer_steps=1_000,
    peer_series=(100, 300, 1_000),
    many_agents=300,
    many_steps=20,
    parked_agents=2_000,
)
#: Adds the 10,000-step conversation and the 100,000-record restore.
FULL = Sizes(
    append_records=8_000,
    append_concurrency=(1, 4, 16, 64),
    conversations=(1_000, 10_000),
    agents=16,
    agent_steps=300,
    growth_steps=10_000,
    restore_records=(100, 1_000, 10_000, 100_000),
    restore_repeats=10,
    codec_steps=2_000,
    overhead_steps=2_000,
    peer_steps=1_000,
    peer_series=(100, 250, 500, 1_000),
    many_agents=1_000,
    many_steps=20,
    parked_agents=10_000,
)
FULL = replace(FULL, scan_agents=100_000)  # the scan suite's target size
MODES = {"quick": QUICK, "medium": MEDIUM, "full": FULL}


class Progress(Protocol):
    """The part of a progress display the suites use."""

    def start(self, description: str, total: int) -> Any: ...

    def advance(self, task: Any, amount: int = 1) -> None: ...


class NoProgress:
    """A ``Progress`` that shows nothing (library use, tests)."""

    def start(self, description: str, total: int) -> Any:
        return None

    def advance(self, task: Any, amount: int = 1) -> None:
        return None


@dataclass
class Bench:
    """A run's shared context. ``store``: the URL every suite measures;
    ``scratch``: a folder for the limit's and the peers' databases."""

    store: str
    scratch: Path
    sizes: Sizes
    results: Results
    workload: Workload
    progress: Progress = field(default_factory=NoProgress)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _conversations: dict[tuple[int, int], list[Step]] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)  # results shared between suites of one run
    #: Requests the store's server has answered so far, by HTTP method (the bench's own S3
    #: server, ``--local-s3``); None when they cannot be counted at the server.
    requests: Callable[[], dict[str, int]] | None = None

    def namespace(self, suite: str, *parts: object) -> str:
        """A namespace no earlier run used, so suites can share one store."""
        return "-".join(["bench", self.run_id, suite, *map(str, parts)])

    def request_counts(self) -> dict[str, int]:
        """Requests answered so far by the store's server, by HTTP method ({} when not counted)."""
        return self.requests() if self.requests is not None else {}

    def requests_since(self, before: dict[str, int]) -> dict[str, int]:
        """Requests answered since ``before`` (a ``request_counts()``), by HTTP method."""
        now = self.request_counts()
        return {method: now[method] - before.get(method, 0) for method in now}

    def series(
        self,
        suite: str,
        name: str,
        seconds: list[float],
        unit: str = "ms",
        *,
        scale: float = 1e3,
        system: str = "durably",
        **params: Any,
    ) -> None:
        """Record per-step ``seconds`` (times ``scale``, in ``unit``) as a chart series."""
        self.results.add_series(suite, name, [v * scale for v in seconds], unit, system=system, **params)

    def conversation(self, steps: int, agent: int = 0) -> list[Step]:
        """The seeded conversation of ``agent`` (cached: the same steps for every suite)."""
        key = (steps, agent)
        if key not in self._conversations:
            self._conversations[key] = self.workload.conversation(steps, agent)
        return self._conversations[key]

    @property
    def is_sqlite(self) -> bool:
        """True when the store under test is a SQLite file."""
        return urlsplit(self.store).scheme == "sqlite"

    @property
    def is_postgres(self) -> bool:
        """True when the store under test is PostgreSQL (its limit is then plain asyncpg on that server)."""
        return urlsplit(self.store).scheme in ("postgresql", "postgres")


def shareable_url(url: str, run_id: str) -> str:
    """``url`` such that a second handle sees the first one's data.

    ``memory://`` without a name is private to its instance, which would make a
    cold restore (a new store handle) find nothing; give it a name.
    """
    parts = urlsplit(url)
    if parts.scheme == "memory" and not parts.netloc:
        return f"memory://bench-{run_id}"
    return url
