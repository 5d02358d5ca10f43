"""What an agent is: a model, tools, instructions, a version, a budget."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import Model
from .tools import Tool


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits that suspend an agent when reached: model ``steps``, ``tokens``
    (input + output) and ``cost_usd`` (US dollars). None means unlimited."""

    steps: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None

    def to_wire(self) -> dict:
        """As a plain dict for the journal."""
        return {"steps": self.steps, "tokens": self.tokens, "cost_usd": self.cost_usd}


@dataclass(frozen=True)
class AgentDefinition:
    """The code side of an agent; its journal is the data side.

    ``name`` identifies the definition across processes (the journal records
    it, and a runtime resumes a stream with the definition registered under
    that name). ``version`` is the author's label; ``digest()`` fingerprints
    instructions and tool signatures so a changed definition is noticed on resume.
    """

    name: str
    model: Model
    tools: Sequence[Tool] = ()
    instructions: str = ""
    version: str = "1"
    budget: Budget = field(default_factory=Budget)

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        for candidate in self.tools:
            if candidate.name == name:
                return candidate
        return None

    def digest(self) -> str:
        """SHA-256 (hex, 16 chars) of version, instructions and tool signatures."""
        parts = [self.version, self.instructions, *sorted(t.signature() for t in self.tools)]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]
