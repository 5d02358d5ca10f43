"""The storage half of durably's crash-torture kit: an fsynced ledger and a SIGKILLed writer.

``ledger.Ledger`` is the external record of what was acknowledged (and, for the
agent-level harness in ``durably._torture``, of every effect); it is
written by the process under test and read by the judge, and survives the
writer's SIGKILL because every line is fsynced before the writer goes on.
``writer`` is a storage-level writer process the conformance kit kills at
random points right after acknowledged appends (``crash_rounds``), then checks
that every acknowledged record is stored byte for byte.
"""

from .ledger import Ledger
from .writer import CrashReport, crash_rounds

__all__ = ["CrashReport", "Ledger", "crash_rounds"]
