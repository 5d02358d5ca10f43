"""Run the chosen suites against one store and check the issue's targets.

    results = anyio.run(run_bench, "sqlite:///bench.db", ["append"], QUICK)

The library entry point behind ``durably bench``; the CLI adds the progress
bar, the table and the JSON file.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from .context import Bench, NoProgress, Progress, Sizes, shareable_url
from .results import Results
from .suites import SUITES
from .targets import check_targets
from .workload import Workload


def _scratch_for(store: str) -> Path:
    """A new scratch folder, beside the store's file when it is SQLite (same disk as the
    store under test, so the limit and the peers meet the same fsync)."""
    parts = urlsplit(store)
    parent = None
    if parts.scheme == "sqlite" and len(parts.path) > 1:
        parent = Path(parts.path[1:]).absolute().parent
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="durably-bench-", dir=parent))


async def run_bench(
    store: str | None,
    suites: Iterable[str],
    sizes: Sizes,
    *,
    mode: str = "custom",
    seed: int = 0,
    progress: Progress | None = None,
    argv: list[str] | None = None,
    requests: Callable[[], dict[str, int]] | None = None,
    keep_going: bool = False,
) -> Results:
    """Run ``suites`` (names of ``SUITES``) on ``store`` (a URL; None: a temporary SQLite file).

    ``requests``: the store's server's request counts by method so far (the
    bench's own S3 server), for requests per step counted at the server.
    Returns the ``Results`` with figures, ratios and target checks. Raises
    ``KeyError`` for an unknown suite name and whatever the store raises;
    with ``keep_going``, a suite that raises is named in ``Results.failed`` and
    in a note instead, and the next suite runs (a long run keeps what it made).
    Temporary files (the default store, the limit's and LangGraph's databases)
    are removed at the end.
    """
    names = list(suites)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise KeyError(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    if store is None:
        scratch = Path(tempfile.mkdtemp(prefix="durably-bench-"))
        url = f"sqlite:///{scratch / 'durably-bench.db'}"
    else:
        scratch, url = _scratch_for(store), store
    try:
        results = Results(store=url, mode=mode, seed=seed, argv=argv)
        workload = await anyio.to_thread.run_sync(Workload, seed)  # reads the corpus files
        bench = Bench(
            store=url,
            scratch=scratch,
            sizes=sizes,
            results=results,
            workload=workload,
            progress=progress or NoProgress(),
            requests=requests,
        )
        bench.store = results.store = shareable_url(url, bench.run_id)
        if bench.is_postgres:
            from durably.storage._url_redaction import redact_url

            results.store = redact_url(bench.store)  # a password in the URL never reaches the report
            results.note("the limit is plain asyncpg on the same PostgreSQL server (durably.bench.limit_postgres)")
        elif not bench.is_sqlite:
            results.note(f"the limit is plain aiosqlite on {scratch}; durably runs on {bench.store}")
        if requests is not None:
            results.note("requests per step are counted at the bench's own S3 server (durably.bench.s3_server)")
        elif urlsplit(bench.store).scheme == "s3":
            results.note("requests per step are counted only at the bench's own server: durably bench --local-s3")
        for name in names:
            try:
                await SUITES[name](bench)
            except Exception as exc:
                if not keep_going:
                    raise
                results.failed.append(name)
                results.note(f"suite {name} failed: {type(exc).__name__}: {str(exc)[-500:]}")
        check_targets(results)
        return results
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(scratch, ignore_errors=True))
