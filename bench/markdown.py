"""The README's figures as Markdown, from one ``durably bench --full --json`` file.

    durably bench --from run.json --markdown

prints three tables: the headline figures (the rows of the README's "Headline
figures" this run made), the limit lines (durably, the limit with encoding
included, the raw limit) and every target beside its figure, met or not (the
targets judged again from the file's figures and ratios by this build's list,
so an earlier run shows every target known now). Rows
that another run makes (S3 requests per step, torture) are named under the
headline table with the command that makes them, never filled in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from durably.errors import InvalidArgumentError

from .limit_lines import COLUMNS, limit_lines
from .results import Figure, Ratio, Results, Target
from .targets import check_targets

Row = tuple[str, str, str, str]
_OTHER_RUNS = (
    "S3 requests per step: `durably bench --local-s3 --suite agent-steps`",
    "torture violations: `durably torture` (see docs/bench/index.md)",
)


def results_from_json(doc: dict[str, Any]) -> Results:
    """The ``Results`` of a ``--json`` file's contents (figures, ratios, targets, notes, machine).

    Raises ``InvalidArgumentError`` (a ``ValueError``) for a document that is not a ``durably-bench/1`` file,
    or one whose entries lack the fields of that format (the message names the first one missing).
    """
    if doc.get("format") != "durably-bench/1":
        raise InvalidArgumentError(f"not a durably bench --json file (format {doc.get('format')!r})")
    try:
        results = Results(store=doc["store"], mode=doc["mode"], seed=doc["seed"], argv=doc.get("argv"))
        results.started = doc["started_at"]
        results.machine = doc["machine"]
        results.figures = [Figure(**f) for f in doc["figures"]]
        results.ratios = [Ratio(**r) for r in doc["ratios"]]
        results.targets = [Target(**t) for t in doc.get("targets", [])]
        results.notes = list(doc.get("notes", []))
        results.failed = list(doc.get("failed", []))
    except KeyError as exc:
        raise InvalidArgumentError(f"a durably bench --json file without its {exc.args[0]!r} field") from exc
    except TypeError as exc:  # an entry of the wrong shape (a figure that is not an object of its fields)
        raise InvalidArgumentError(f"a durably bench --json file with a malformed entry: {exc}") from exc
    return results


def _n(value: float, unit: str = "") -> str:
    """A number as the README writes it: thousands separated, three significant digits below 100."""
    if unit == "B":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if abs(value) >= scale:
                return f"{value / scale:,.2f} {name}"
        return f"{value:,.0f} B"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}" if unit else text


def _plain_commit(store: str) -> str:
    """What the floor commits with on ``store`` (``durably.bench.floor``): plain asyncpg on
    PostgreSQL, plain aiosqlite everywhere else."""
    scheme = urlsplit(store).scheme
    return "plain asyncpg group commit" if scheme in ("postgresql", "postgres") else "plain aiosqlite group commit"


def _headline(r: Results) -> list[Row]:
    """The README's headline rows whose figures this run made."""
    rows: list[Row] = []

    def row(suite: str, figure: str, mine: Figure | None, beside: str) -> None:
        if mine is not None:
            rows.append((f"`{suite}`", figure, _n(mine.value), beside))

    floor = r.find("agent-steps", "steps_per_s", "floor-step-commit", agents=1, steps=1_000)
    encoded = r.find("agent-steps", "steps_per_s", "floor-encoded", agents=1, steps=1_000)
    row(
        "agent-steps",
        "steps/s, one agent, 1,000-step conversation",
        r.find("agent-steps", "steps_per_s", agents=1, steps=1_000),
        (f"its one-commit floor ({_plain_commit(r.store)}): {_n(floor.value)}" if floor else "")
        + (f"; with encoding included: {_n(encoded.value)}" if encoded else ""),
    )
    peers = {
        "langgraph-AsyncSqliteSaver": "LangGraph `AsyncSqliteSaver`",
        "dbos-sqlite": "DBOS Transact",
    }
    for name, figure, unit in (
        ("steps_per_s", "steps/s at 1,000 steps", ""),
        ("file_bytes", "file bytes after 1,000 steps", "B"),
    ):
        mine = r.find("peers", name, steps=1_000)
        others = [
            f"{label} {_n(found.value, unit)}"
            for system, label in peers.items()
            if (found := r.find("peers", name, system, steps=1_000)) is not None
        ]
        if mine is not None:
            rows.append(("`peers`", figure, _n(mine.value, unit), "; ".join(others)))
    cold = r.find("restore", "restore_cold", records=100_000, history="window-200")
    warm = r.find("restore", "restore_warm_p50", records=100_000, history="window-200")
    small = (
        r.find("restore", "restore_cold", records=100, history="window-200"),
        r.find("restore", "restore_warm_p50", records=100, history="window-200"),
    )
    if cold is not None and warm is not None:
        rows.append(
            (
                "`restore`",
                "restore of 100,000 records under `HistoryPolicy(200, 100)`, cold / warm p50",
                f"{_n(cold.value)} / {_n(warm.value)} ms",
                f"100 records: {_n(small[0].value)} / {_n(small[1].value)} ms" if small[0] and small[1] else "",
            )
        )
    whole = r.find("restore", "restore_cold", records=100_000, history="full")
    row("restore", "restore of a 100,000-record whole conversation, cold (ms)", whole, "")
    row(
        "scan",
        "`resume_all()` among 100,000 finished + 10 runnable agents (ms)",
        r.find("scan", "resume_all", agents=100_000),
        "",
    )
    return rows


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], right: Callable[[int], bool]) -> list[str]:
    """A Markdown pipe table; ``right(i)``: column ``i`` is right-aligned (numbers)."""
    lines = [
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---:" if right(i) else "---" for i in range(len(columns))) + " |",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def _measured(t: Target) -> str:
    if t.measured is None:
        return "not measured"
    return _n(t.measured) + (f" ({t.note})" if t.note else "")


def markdown(doc: dict[str, Any]) -> str:
    """The three tables (headline figures, limit lines, targets) of a ``--json`` file's contents.

    Raises as ``results_from_json``.
    """
    r = results_from_json(doc)
    r.targets = []
    check_targets(r)
    argv = r.argv[1:] if r.argv[:1] == ["bench"] else r.argv
    m = r.machine
    load = ", ".join(f"{x:.2f}" for x in m.get("load_average") or [])
    out = [
        f"From `durably bench {' '.join(argv)}` (mode {r.mode}, seed {r.seed}, store {r.store}; "
        f"{m.get('cores')} cores, {m.get('cpu')}, Python {m.get('python')}, SQLite {m.get('sqlite')}; "
        f"load average at start {load}).",
        "",
        *_table(("suite", "figure", "durably", "beside it"), _headline(r), lambda i: i == 2),
        "",
        "Not in this run: " + "; ".join(_OTHER_RUNS) + ".",
        *([f"Suites that failed in this run (their figures are missing): {', '.join(r.failed)}."] if r.failed else []),
        "",
        *_table(COLUMNS, [line.cells() for line in limit_lines(r)], lambda i: i > 0),
        "",
        *_table(
            ("issue", "target", "measured", "target value", "met"),
            [
                (
                    t.issue,
                    t.name,
                    _measured(t),
                    f"{t.op} {_n(t.threshold)}",
                    {True: "yes", False: "**no**", None: "-"}[t.met],
                )
                for t in r.targets
            ],
            lambda i: i in (2, 3),
        ),
    ]
    return "\n".join(out) + "\n"
