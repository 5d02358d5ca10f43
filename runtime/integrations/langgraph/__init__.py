"""durably.integrations.langgraph: LangGraph checkpoints on durably's journal.

``DurablySaver`` is a LangGraph ``BaseCheckpointSaver`` over any durably store:

```python
from durably.integrations.langgraph import DurablySaver
graph = builder.compile(checkpointer=DurablySaver.from_url("sqlite:///agents.db"))
```

``import_sqlite_threads`` copies the threads of a LangGraph SQLite checkpoint
database (``AsyncSqliteSaver`` / ``SqliteSaver``) into a ``DurablySaver``.
Needs the ``langgraph`` extra: ``pip install -e '.[langgraph]'`` in durably's clone.
"""

from durably.errors import (
    CheckpointValueError,
    ExtraNotInstalledError,
    ForeignLoopError,
    ImportSourceError,
    InvalidPruneStrategyError,
    InvalidThreadIdError,
    SyncCallOnLoopError,
)

with ExtraNotInstalledError.guard(__name__, "langgraph", "langgraph", "langchain_core"):
    from ._importer import ImportedThread, import_sqlite_threads
    from ._saver import DurablySaver

__all__ = [
    "CheckpointValueError",
    "DurablySaver",
    "ForeignLoopError",
    "ImportSourceError",
    "ImportedThread",
    "InvalidPruneStrategyError",
    "InvalidThreadIdError",
    "SyncCallOnLoopError",
    "import_sqlite_threads",
]
