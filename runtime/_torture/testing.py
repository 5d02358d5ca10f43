"""The torture harness as a pytest check for an adapter's own test suite.

    from durably.storage.conformance import TortureConformance

    class TestMyStoreUnderTorture(TortureConformance):
        torture_kills = 200

        def store_url(self, tmp_path):
            return f"myscheme://{tmp_path}"

It lives on the runtime side (the storage conformance kit never imports the
runtime); its storage-level sibling is the kit's crash check. The test is a
plain (synchronous) pytest test running its own event loop, so it needs no
async plugin.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from durably._torture.harness import run_torture
from durably.storage._spi import Store


class TortureConformance:
    """SIGKILL worker processes of a real agent on your store; every invariant must hold.

    Subclass it in a test module of its own (name the subclass ``Test...``) and
    give the URL of a fresh location:

    ```python
    from durably.storage.conformance import TortureConformance

    class TestMyStoreUnderTorture(TortureConformance):
        torture_kills = 200

        def store_url(self, tmp_path):
            return f"myscheme://{tmp_path}"
    ```

    The subclass adds one test, ``test_torture_keeps_every_invariant``: worker
    processes run agents on your store and are SIGKILLed ``torture_kills`` times
    (at every journal boundary and at random moments), then one worker that is
    never killed finishes everything, and the run is judged (no acknowledged
    record lost, no effect twice under ``reconcile``/``fail``, the final states
    equal an uninterrupted run's, nothing stuck). 200 kills take minutes: mark
    the module as slow if your suite must stay quick. A store that declares
    ``CAP_SINGLE_PROCESS`` (``memory://``) is refused: the workers are other
    processes. The same run is ``durably torture --store URL --kills N``.

    Attributes:
        torture_kills: SIGKILLs in all (default 200).
        torture_workers: Worker processes at once (default 2: takeovers between them).
        torture_seed: Seed of the crash plans (default 0: the same run each time).
        torture_agents: Agents per generation (default 4).
        torture_steps: Tool calls per agent (default 5).
        store_class: None: the workers find your adapter by its URL scheme through
            the ``durably.stores`` entry point, so it must be installed; else your
            store class, which the workers import by its module and name (needed
            when your adapter is registered with ``register_store`` in the test
            process only: that registration does not reach the workers).
    """

    torture_kills: int = 200
    torture_workers: int = 2
    torture_seed: int = 0
    torture_agents: int = 4
    torture_steps: int = 5
    store_class: type[Store] | None = None

    def store_url(self, tmp_path: Path) -> str:
        """The URL of a fresh store location under ``tmp_path``, which worker processes open. Override this.

        Args:
            tmp_path: pytest's per-test directory (the ledger goes in ``tmp_path / "ledger"``).

        Returns:
            A store URL of your adapter's scheme, for a location nothing else uses.

        Raises:
            NotImplementedError: when the subclass does not override it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define store_url(self, tmp_path) -> str")

    def test_torture_keeps_every_invariant(self, tmp_path: Path) -> None:
        report = anyio.run(
            lambda: run_torture(
                self.store_url(tmp_path),
                kills=self.torture_kills,
                workers=self.torture_workers,
                agents=self.torture_agents,
                steps=self.torture_steps,
                seed=self.torture_seed,
                ledger=tmp_path / "ledger",
                store_class=self.store_class,
            )
        )
        assert report.kills >= self.torture_kills, report.summary()
        assert not report.violations, f"{report.summary()}\n" + "\n".join(report.violations[:20])
        if self.torture_workers > 1:
            assert report.takeovers > 0, f"workers never took an agent over from each other: {report.summary()}"
