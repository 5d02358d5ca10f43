"""Check of durability after a crash: a writer process SIGKILLed right after acknowledged appends.

Closing and reopening cleanly proves little: a cache flushed by ``close`` hides
a missing fsync. Here a writer process (``durably.storage._torture.writer``)
appends random batches and logs each acknowledgement to an fsynced ledger; it
is SIGKILLed ``crash_kills`` times, by itself right after an acknowledgement
or by the kit at a random moment, and restarted. Then every record the ledger
says was acknowledged must be stored, byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.storage._torture import crash_rounds

from ._harness import StoreHarness


class CrashChecks(StoreHarness):
    """Every acknowledged record survives SIGKILLs of the writer (``crash_kills`` of them)."""

    @pytest.mark.anyio
    async def test_acknowledged_records_survive_sigkill(self, tmp_path: Path) -> None:
        store_class, url = self.require_processes(tmp_path)
        report = await crash_rounds(store_class, url, tmp_path / "crash-ledger.jsonl", kills=self.crash_kills, seed=17)
        assert report.acknowledged > 0, "the writer acknowledged nothing before it was killed"
        assert not report.violations, (
            f"nothing is acknowledged from a cache: after {report.kills} SIGKILLs of a writer, "
            f"{len(report.violations)} acknowledged records were lost or altered: {report.violations[:5]}"
        )
