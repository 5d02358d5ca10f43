"""imports: how long a fresh ``python -c "import durably._runtime"`` takes, against its dependencies.

Each command runs in a new interpreter (``sys.executable``, with ``-c``), the
two alternating so that load on the machine falls on both alike; the figure
is the median wall time of ``REPEATS`` runs each. The floor is importing the
four libraries a plain ``Runtime("sqlite:///...")`` cannot do without:
anyio, aiosqlite, cbor2 and zstandard. ``durably._runtime / dependencies`` is
the ratio (lower is better).
"""

from __future__ import annotations

import sys
import time

import anyio

from ..context import Bench
from ..results import percentile

SUITE = "imports"
REPEATS = 7
COMMANDS = {
    "durably": "import durably._runtime",
    "dependencies": "import anyio, aiosqlite, cbor2, zstandard",
}


async def _seconds(code: str) -> float:
    t = time.perf_counter()
    await anyio.run_process([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t


async def run(bench: Bench) -> None:
    """Time both commands ``REPEATS`` times, alternating; record the medians and their ratio."""
    r = bench.results
    task = bench.progress.start("imports", 2 * REPEATS)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    await _seconds("pass")  # the interpreter's own files into the page cache
    for _ in range(REPEATS):
        for name, code in COMMANDS.items():
            times[name].append(await _seconds(code))
            bench.progress.advance(task)
    figures = {}
    for name, code in COMMANDS.items():
        figures[name] = r.add(SUITE, "import_wall_p50", percentile(times[name], 50) * 1e3, "ms", system=name,
                              store="none", command=f'python -c "{code}"', repeats=REPEATS)
    r.ratio(SUITE, "durably._runtime/dependencies", figures["durably"], figures["dependencies"], better="lower")
