"""The issues' targets, each checked from the figures of one bench run.

Every target is listed in every run: one whose figures this run did not make
(another store, another suite, a shorter mode) is listed with no measurement
and says which run makes it, so the table always shows the whole list.
Ratios are within the run (durably against its floor or its peer, measured
side by side); the few absolute targets say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .results import Figure, Ratio, Results

Value = Callable[[Results], "tuple[float | None, str]"]


@dataclass(frozen=True)
class Goal:
    """One target: ``issue``, ``name``, ``op`` and ``threshold``; ``measure`` returns the
    measured value (None: not made in this run) and a note; ``basis`` says what measures it."""

    issue: str
    name: str
    op: str
    threshold: float
    basis: str
    measure: Value


def _ratio(results: Results, suite: str, name: str, **params: Any) -> Ratio | None:
    for ratio in reversed(results.ratios):
        if ratio.suite == suite and ratio.name == name and all(ratio.params.get(k) == v for k, v in params.items()):
            return ratio
    return None


def _ratio_value(suite: str, name: str, note: Callable[[Ratio], str] = lambda r: "", **params: Any) -> Value:
    def measure(results: Results) -> tuple[float | None, str]:
        ratio = _ratio(results, suite, name, **params)
        return (None, "") if ratio is None else (ratio.value, note(ratio))

    return measure


def _figure_value(
    suite: str, name: str, system: str = "durably", note: Callable[[Figure, Results], str] | None = None, **params: Any
) -> Value:
    def measure(results: Results) -> tuple[float | None, str]:
        figure = results.find(suite, name, system, **params)
        if figure is None:
            return None, ""
        return figure.value, note(figure, results) if note else ""

    return measure


def _only(scheme: tuple[str, ...], inner: Value, elsewhere: str) -> Value:
    """``inner`` on a store of one of ``scheme``; otherwise not measured, with a note."""

    def measure(results: Results) -> tuple[float | None, str]:
        if urlsplit(results.store).scheme not in scheme:
            return None, elsewhere
        return inner(results)

    return measure


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _between(ratio: Ratio) -> str:
    return f"{_number(ratio.numerator['value'])} / {_number(ratio.denominator['value'])} {ratio.numerator['unit']}"


def _floor_value(name: str, **params: Any) -> Value:
    """The agent-steps ratio ``name`` (durably against its one-commit floor), its note
    naming both sides and, when it ran, the floor with encoding included: durably
    against it is the runtime's own gap, it against the floor the codec's."""
    floor_name = name.replace("/floor", "/floor-encoded")

    def measure(results: Results) -> tuple[float | None, str]:
        ratio = _ratio(results, "agent-steps", name, **params)
        if ratio is None:
            return None, ""
        note = _between(ratio)
        encoded = _ratio(results, "agent-steps", floor_name, **ratio.params)
        if encoded is not None:
            note += (
                f"; with encoding the floor is {_number(encoded.denominator['value'])} {encoded.denominator['unit']}"
                f" (durably / it {encoded.value:.3g})"
            )
        return ratio.value, note

    return measure


def _cpu_note(figure: Figure, results: Results) -> str:
    """The limits with encoding beside durably's CPU per step on memory://, when they ran."""
    parts = [
        f"{label} {found.value:.3g} ms"
        for system, label in (
            ("limit-encoded-memory", "limit with encoding (redaction, codec, GroupCommitter)"),
            ("encode-no-redaction", "codec alone"),
        )
        if (found := results.find("overhead", "cpu_per_step", system)) is not None
    ]
    return "; ".join(parts)


def _restore_note(figure: Figure, results: Results) -> str:
    warm = results.find("restore", "restore_warm_p50", records=100_000, history="full")
    snapshot = results.find("restore", "snapshot_bytes", records=100_000, history="full")
    return (f"cold; warm p50 {warm.value:,.0f} ms" if warm else "cold") + (
        f"; snapshot {snapshot.value / 1e6:,.1f} MB" if snapshot else ""
    )


def _s3_requests(results: Results) -> tuple[float | None, str]:
    figures = [f for f in results.figures if f.suite == "agent-steps" and f.name == "requests_per_step"]
    if not figures:
        return None, ""
    single = [f for f in figures if f.params.get("agents") == 1]
    main = max(single or figures, key=lambda f: f.params.get("steps", 0))
    others = ", ".join(
        f"{f.value:.2f} at {f.params['agents']} agents x {f.params['steps']:,}" for f in figures if f is not main
    )
    return main.value, f"{main.params['agents']} agent x {main.params['steps']:,} steps" + (
        f"; {others}" if others else ""
    )


SQLITE = ("sqlite",)
POSTGRES = ("postgresql", "postgres")

GOALS: tuple[Goal, ...] = (
    Goal(
        "16",
        "one agent FULL: per-step cost <= 1.7x the one-commit floor",
        "<=",
        1.7,
        "agent-steps, 1,000-step conversation: durably's step mean / the floor's (same frames, one plain commit a step)",
        _only(
            SQLITE,
            _floor_value("step_mean durably/floor", agents=1, steps=1_000),
            "measured on sqlite:// (the default store)",
        ),
    ),
    Goal(
        "16",
        "runtime CPU per step on memory:// <= 0.15 ms",
        "<=",
        0.15,
        "overhead suite: process CPU time / steps, durably on memory://",
        _figure_value("overhead", "cpu_per_step", "durably-memory"),
    ),
    Goal(
        "16",
        "16 agents through the full runtime >= 70% of raw group commit",
        ">=",
        0.7,
        "agent-steps, 16 agents: steps/s durably / the one-commit floor (plain aiosqlite group commit of the same frames)",
        _only(
            SQLITE,
            _floor_value("steps_per_s durably/floor", agents=16),
            "measured on sqlite:// (the default store)",
        ),
    ),
    Goal(
        "5, storage only",
        "(storage only) append suite, 16 writers: GroupCommitter >= 70% of raw group commit",
        ">=",
        0.7,
        "append suite: codec + GroupCommitter, no Runtime, records/s vs plain aiosqlite group commit",
        _only(
            SQLITE,
            _ratio_value("append", "durably/limit-group-commit", _between, agents=16),
            "measured on sqlite:// (the default store)",
        ),
    ),
    Goal(
        "16",
        "1,000 agents: steps/s within 20% of 16 agents'",
        ">=",
        0.8,
        "many suite (1,000 x 20 steps) / agent-steps (16 agents), steps/s",
        _ratio_value("many", "steps_per_s 1000 agents/16 agents", _between, agents=1_000),
    ),
    Goal(
        "16, 33",
        "file bytes after 1,000 steps <= 1/3 of DBOS's",
        "<=",
        1 / 3,
        "peers, 1,000 steps, every file after close",
        _ratio_value("peers", "file_bytes durably/dbos", _between, steps=1_000),
    ),
    Goal(
        "16",
        "file bytes after 1,000 steps <= 1/2,000 of LangGraph's",
        "<=",
        1 / 2_000,
        "peers, 1,000 steps, every file after close",
        _ratio_value("peers", "file_bytes durably/langgraph", _between, steps=1_000),
    ),
    Goal(
        "16, 33",
        "restore, whole conversation, 100,000 records <= 250 ms",
        "<=",
        250,
        "restore suite (--full), Runtime.status on a new store handle, ms",
        _figure_value("restore", "restore_cold", note=_restore_note, records=100_000, history="full"),
    ),
    Goal(
        "16",
        "restore with a HistoryPolicy, 100,000 records <= 2x 100 records",
        "<=",
        2,
        "restore suite (--full), warm p50",
        _ratio_value("restore", "restore_warm_p50 100000/100 (window-200)", _between),
    ),
    Goal(
        "16",
        "S3: <= 1.2 requests per step (agent-steps)",
        "<=",
        1.2,
        "agent-steps on the bench's own S3 server (--local-s3), requests counted at the server",
        _s3_requests,
    ),
    Goal(
        "16",
        "50 concurrent agents: status() p95 <= 20 ms",
        "<=",
        20,
        "scan suite",
        _figure_value("scan", "status_p95", agents=50),
    ),
    Goal(
        "16",
        "idle serve() with 1,000 finished agents <= 1% of a core",
        "<=",
        1,
        "scan suite, % of one core",
        _figure_value("scan", "idle_serve_cpu"),
    ),
    Goal(
        "16",
        "100,000 finished + 10 runnable agents: resume_all() <= 50 ms",
        "<=",
        50,
        "scan suite, ms",
        _figure_value("scan", "resume_all", agents=100_000),
    ),
    Goal(
        "16",
        "100,000 finished agents: durably agents --status waiting_approval <= 0.5 s",
        "<=",
        500,
        "scan suite, ms",
        _figure_value("scan", "agents_status_cli", agents=100_000),
    ),
    Goal(
        "16",
        'python -c "import durably._runtime" <= 1.5x its dependencies\'',
        "<=",
        1.5,
        "imports suite: median of fresh interpreters, alternating",
        _ratio_value("imports", "durably._runtime/dependencies", _between),
    ),
    Goal(
        "15, 33",
        "16 agents through the full runtime on Postgres >= 60% of raw asyncpg group commit",
        ">=",
        0.6,
        "agent-steps on postgresql://, 16 agents: steps/s durably / the one-commit floor (plain asyncpg)",
        _only(POSTGRES, _floor_value("steps_per_s durably/floor", agents=16), "measured with --store postgresql://"),
    ),
    Goal(
        "5",
        "step p50, last 10% / first 10% <= 1.3 (longest conversation)",
        "<=",
        1.3,
        "agent-steps, 1 agent",
        lambda results: _longest_drift(results),
    ),
    Goal(
        "5",
        "agent steps/s >= 50x LangGraph AsyncSqliteSaver (sync)",
        ">=",
        50,
        "peers, 1,000 steps",
        _ratio_value("peers", "steps_per_s durably/langgraph", _between, steps=1_000),
    ),
    Goal(
        "10",
        "LangGraph on DurablySaver: file bytes <= 1/200 of AsyncSqliteSaver's",
        "<=",
        1 / 200,
        "peers, the same graph on both savers, 1,000 steps",
        _ratio_value("peers", "file_bytes DurablySaver/AsyncSqliteSaver", _between, steps=1_000),
    ),
    Goal(
        "10",
        "LangGraph on DurablySaver: checkpoints/s >= 3x AsyncSqliteSaver's",
        ">=",
        3,
        "peers, the same graph on both savers, 1,000 steps",
        _ratio_value("peers", "checkpoints_per_s DurablySaver/AsyncSqliteSaver", _between, steps=1_000),
    ),
    Goal(
        "33",
        "runtime CPU per step on memory:// <= 0.10 ms",
        "<=",
        0.10,
        "overhead suite: process CPU time / steps, durably on memory://",
        _figure_value("overhead", "cpu_per_step", "durably-memory", note=_cpu_note),
    ),
    Goal(
        "33",
        "16 agents on SQLite >= 0.5 of raw group commit",
        ">=",
        0.5,
        "agent-steps, 16 agents: steps/s durably / the one-commit floor (plain aiosqlite group commit of the same frames)",
        _only(
            SQLITE, _floor_value("steps_per_s durably/floor", agents=16), "measured on sqlite:// (the default store)"
        ),
    ),
    Goal(
        "33",
        "1 agent on SQLite <= 1.3x the one-commit floor (fast disk)",
        "<=",
        1.3,
        "agent-steps, 1,000-step conversation: durably's step mean / the floor's; the floor's step is the disk's pace",
        _only(
            SQLITE,
            _floor_value("step_mean durably/floor", agents=1, steps=1_000),
            "measured on sqlite:// (the default store)",
        ),
    ),
    Goal(
        "29",
        "burst: 1,000 agents approved at once, all resumed by one worker <= 2 s after the approvals",
        "<=",
        2.0,
        "burst suite on the store under test, 1 durably worker process, from the last approval acknowledged to the"
        " last resumed record",
        _only(
            SQLITE + POSTGRES,
            _figure_value("burst", "burst_resumed_after_approved", agents=1_000, workers=1),
            "measured on sqlite:// (the default store) and with --store postgresql://",
        ),
    ),
)


def _longest_drift(results: Results) -> tuple[float | None, str]:
    found = [
        r
        for r in results.ratios
        if r.suite == "agent-steps" and r.name == "step_p50_last10/first10" and r.params.get("agents") == 1
    ]
    if not found:
        return None, ""
    longest = max(found, key=lambda r: r.params.get("steps", 0))
    others = ", ".join(f"{r.value:.2f} at {r.params['steps']:,}" for r in found if r is not longest)
    return longest.value, f"{longest.params['steps']:,} steps" + (f"; {others}" if others else "")


def check_targets(results: Results) -> None:
    """Add every goal of ``GOALS`` to ``results.targets``, measured or not."""
    for goal in GOALS:
        value, note = goal.measure(results)
        results.target(goal.name, value, goal.op, goal.threshold, goal.basis, note, issue=goal.issue)
