"""tests/third_party holds a stand-alone adapter project, not tests of durably.

``tests/adapters/test_third_party_adapter.py`` copies it to a temporary directory,
"installs" it there and runs its own test suite in a fresh pytest process,
as its author would; the main test run must not collect it directly.
"""

collect_ignore = ["onefile_store"]
