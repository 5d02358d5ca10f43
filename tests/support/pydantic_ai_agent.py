"""The Pydantic AI agent of the bridge's tests: the frameworks bench's own (durably.bench.frameworks_pydantic_ai).

``FunctionModel`` asks for ``charge(amount=5)`` (an effect: a ledger line with the
call's idempotency key), then ``refund(amount=5)`` (``requires_approval=True``),
then answers; each model request is counted in a file. ``KILL`` names the
boundary where the process SIGKILLs itself (see that module).
"""

from durably.bench.framework_child import BOUNDARIES, lines
from durably.bench.frameworks_pydantic_ai import build_agent

__all__ = ["BOUNDARIES", "build_agent", "lines"]
