"""durably._bench: checkpoint throughput suites, runnable against any store URL.

``durably bench`` (``durably._bench.cli``) runs them with a progress bar and a
table; ``durably._bench.runner.run_bench`` is the library entry point. Suites
live in ``durably._bench.suites``; the workload generator in ``workload``; the
raw-aiosqlite limit in ``limit``; the LangGraph peer in ``peers``.
"""
