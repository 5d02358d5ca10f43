"""durably.bench: checkpoint throughput suites, runnable against any store URL.

``durably bench`` (``durably.bench.cli``) runs them with a progress bar and a
table; ``durably.bench.runner.run_bench`` is the library entry point. Suites
live in ``durably.bench.suites``; the workload generator in ``workload``; the
raw-aiosqlite limit in ``limit``; the LangGraph peer in ``peers``.
"""
