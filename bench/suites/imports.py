"""imports: how long a fresh ``python -c "import durably._runtime"`` takes, against its dependencies.

Each command runs in a new interpreter (``sys.executable``, with ``-c``), the
two alternating so that load on the machine falls on both alike; the figure
is the median wall time of ``REPEATS`` runs each. The floor is importing the
four libraries a plain ``Runtime("sqlite:///...")`` cannot do without:
anyio, aiosqlite, cbor2 and zstandard. ``durably / dependencies`` is
the ratio (lower is better).

Both sides are measured from bytecode: the dependencies' was written when pip
installed them, durably's (an editable install has none) by one unmeasured run
of each command that may write it (``bytecode_env``), as installing a wheel
would. Without it, under ``PYTHONDONTWRITEBYTECODE`` every timed run would
compile durably's sources and none of the dependencies'.
"""

from __future__ import annotations

import os
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


def bytecode_env() -> dict[str, str]:
    """This process's environment, but allowed to write bytecode (``PYTHONDONTWRITEBYTECODE`` unset)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


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
    for code in COMMANDS.values():  # durably's bytecode written (see the module docstring), not timed
        await anyio.run_process([sys.executable, "-c", code], check=True, env=bytecode_env())
    for _ in range(REPEATS):
        for name, code in COMMANDS.items():
            times[name].append(await _seconds(code))
            bench.progress.advance(task)
    figures = {}
    for name, code in COMMANDS.items():
        figures[name] = r.add(
            SUITE,
            "import_wall_p50",
            percentile(times[name], 50) * 1e3,
            "ms",
            system=name,
            store="none",
            command=f'python -c "{code}"',
            repeats=REPEATS,
        )
    r.ratio(SUITE, "durably._runtime/dependencies", figures["durably"], figures["dependencies"], better="lower")
