"""The limit lines: durably beside its limit with encoding included and the raw limit.

One row per workload of a run that measured all three: each agent-steps run
(the whole runtime; the floor with encoding, ``floor-encoded``; the raw
one-commit floor of pre-encoded frames) and the overhead suite's CPU per step
on ``memory://`` (durably; the journal's encoding and ``GroupCommitter`` with
no runtime; the plain loop). durably / limit with encoding is the gap that is
the runtime's own, limit with encoding / raw limit the codec's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .results import Results

COLUMNS = ("workload", "durably", "limit with encoding", "raw limit", "durably / with encoding", "with encoding / raw")


@dataclass(frozen=True)
class LimitLine:
    """One workload: ``durably``, ``encoded`` and ``raw`` in ``unit``; ``better`` is
    "higher" (a rate) or "lower" (a cost)."""

    workload: str
    unit: str
    durably: float
    encoded: float
    raw: float
    better: str

    def cells(self) -> tuple[str, ...]:
        """The row as text, in ``COLUMNS`` order."""
        return (
            self.workload,
            _value(self.durably, self.unit),
            _value(self.encoded, self.unit),
            _value(self.raw, self.unit),
            f"{self.durably / self.encoded:.3g}" if self.encoded else "-",
            f"{self.encoded / self.raw:.3g}" if self.raw else "-",
        )


def _value(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def limit_lines(results: Results) -> list[LimitLine]:
    """Every workload of ``results`` whose durably figure, limit with encoding and raw limit were all measured."""
    lines = []
    for figure in results.figures:
        if figure.suite != "agent-steps" or figure.name != "steps_per_s" or figure.system != "durably":
            continue
        params = {k: figure.params[k] for k in ("agents", "steps") if k in figure.params}
        encoded = results.find("agent-steps", "steps_per_s", "floor-encoded", **params)
        raw = results.find("agent-steps", "steps_per_s", "floor-step-commit", **params)
        if encoded is not None and raw is not None:
            agents, steps = params.get("agents", 1), params.get("steps", 0)
            where = raw.store.split(" ", 1)[0].split(":", 1)[0]  # the floor's scheme: the store it met
            name = f"{where}, {agents} agent{'s' if agents != 1 else ''} x {steps:,} steps: steps/s"
            lines.append(LimitLine(name, "steps/s", figure.value, encoded.value, raw.value, "higher"))
    own = results.find("overhead", "cpu_per_step", "durably-memory")
    encoded = results.find("overhead", "cpu_per_step", "limit-encoded-memory")
    plain = results.find("overhead", "cpu_per_step", "plain-loop")
    if own is not None and encoded is not None and plain is not None:
        lines.append(
            LimitLine(
                "memory://: CPU per step (raw: the plain loop)", "ms", own.value, encoded.value, plain.value, "lower"
            )
        )
    return lines
