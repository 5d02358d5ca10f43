"""The storage adapter conformance kit: every promise of ``durably.storage.Store``, as pytest tests.

Subclass ``StoreConformance`` in a test module, name the subclass ``Test...``
and give the URL of a fresh location (other OS processes open it too):

```python
from durably.storage.conformance import StoreConformance

class TestMyStore(StoreConformance):
    def store_url(self, tmp_path):
        return f"myscheme://{tmp_path}"
```

Override ``make_store(tmp_path)`` as well only when a store is not simply
``open_store(store_url(tmp_path))``; without ``store_url`` the checks that
need other processes fail and say so.

Run it with ``pytest -rs`` to see the reasons of skipped checks (optional
capabilities your store does not declare). The async checks run on anyio's
pytest plugin, installed with durably; pytest-asyncio is not needed and does not
interfere in either of its modes. The same idea as Akka Persistence's plugin TCK
and the eventsourcing library's recorder test cases. See docs/writing-an-adapter.md.

``TortureConformance`` is the crash-torture kit as a pytest check: real agents on
your store, worker processes SIGKILLed at every journal boundary (see its
docstring: it runs for minutes, so keep it in a test module of its own).
"""

from typing import TYPE_CHECKING

from durably.errors import ExtraNotInstalledError

with ExtraNotInstalledError.guard(__name__, "testing", "pytest", "_pytest"):
    import pytest

# The checks live in this package, not in the user's test module, so ask pytest to
# rewrite their asserts too: failures then show the compared values.
pytest.register_assert_rewrite(
    *(
        f"{__name__}._{name}"
        for name in (
            "appends",
            "blobs",
            "compaction",
            "concurrency",
            "crash",
            "faults",
            "fencing",
            "harness",
            "lease_renewal",
            "leases",
            "lifecycle",
            "processes",
            "purge",
            "reads",
            "scale",
            "snapshots",
            "status_index",
        )
    )
)

from ._appends import AppendChecks  # noqa: E402
from ._blobs import BlobChecks, BlobDeleteChecks  # noqa: E402
from ._compaction import CompactionChecks  # noqa: E402
from ._concurrency import ConcurrencyChecks  # noqa: E402
from ._crash import CrashChecks  # noqa: E402
from ._faults import FaultChecks  # noqa: E402
from ._fencing import FencingChecks  # noqa: E402
from ._harness import StoreHarness, files_bytes  # noqa: E402
from ._lease_renewal import LeaseRenewChecks  # noqa: E402
from ._leases import LeaseChecks  # noqa: E402
from ._lifecycle import LifecycleChecks  # noqa: E402
from ._processes import ProcessChecks  # noqa: E402
from ._purge import PurgeChecks  # noqa: E402
from ._reads import ReadChecks  # noqa: E402
from ._scale import ScaleChecks  # noqa: E402
from ._snapshots import SnapshotChecks  # noqa: E402
from ._status_index import StatusIndexChecks  # noqa: E402


class StoreConformance(
    LifecycleChecks,
    AppendChecks,
    ConcurrencyChecks,
    ReadChecks,
    SnapshotChecks,
    CompactionChecks,
    BlobChecks,
    BlobDeleteChecks,
    FencingChecks,
    LeaseRenewChecks,
    LeaseChecks,
    ProcessChecks,
    CrashChecks,
    PurgeChecks,
    ScaleChecks,
    FaultChecks,
    StatusIndexChecks,
):
    """Every conformance check; subclass it as ``Test<YourStore>`` and override ``make_store``.

    Hooks and settings (see ``StoreHarness``): ``make_store(tmp_path) -> Store``
    (a new, unopened store of the location ``tmp_path``; two calls with the same
    path give two stores of the same location) and ``store_url(tmp_path) -> str``
    (that location's URL, for other OS processes; give either, or both),
    the optional ``stored_bytes(tmp_path)``, ``outage(tmp_path)`` and
    ``backend_server(tmp_path)``, ``cannot_fail`` (None: the kit must be able to
    make the store fail; else the reason it cannot),
    ``concurrent_instances`` (default True), ``race_tasks`` (16), ``large_size``
    (5 MiB), ``many_streams`` (100), ``lease_short_ttl`` (0.2 s),
    ``huge_record_size`` (16 MiB), ``huge_snapshot_size`` (64 MiB),
    ``scale_records`` (100,000), ``crash_kills`` (8), ``race_processes`` (4), and
    the ``anyio_backend`` fixture ("asyncio"). Optional capabilities are read from ``store.capabilities``; their
    checks skip with the reason when a capability is not declared. Not collected
    itself: its name has no ``Test`` prefix.
    """


if TYPE_CHECKING:  # for type checkers and the API reference; at run time __getattr__ imports it
    from durably._torture.testing import TortureConformance

__all__ = ["StoreConformance", "StoreHarness", "TortureConformance", "files_bytes"]


def __getattr__(name: str) -> object:
    """``TortureConformance``, imported on first use (PEP 562).

    It drives real agents, so it lives on the runtime side; importing it lazily
    keeps ``import durably.storage.conformance`` free of the runtime.

    Raises:
        AttributeError: for any other name.
    """
    if name == "TortureConformance":
        from durably._torture.testing import TortureConformance

        return TortureConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
