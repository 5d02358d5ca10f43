from durably.storage import open_store
from durably.storage.conformance import StoreConformance

from onefile_store import OneFileStore


class TestOneFileStore(StoreConformance):
    # Each instance holds the whole store in memory: one open instance per file.
    concurrent_instances = False

    def make_store(self, tmp_path):
        return OneFileStore(f"onefile://{tmp_path}/store.pickle")


def test_open_store_finds_the_adapter_by_its_scheme(tmp_path):
    assert type(open_store(f"onefile://{tmp_path}/store.pickle")) is OneFileStore
