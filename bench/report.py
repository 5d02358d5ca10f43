"""The human side of the results: rich tables (per suite, ratios, targets) and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .limit_lines import COLUMNS, limit_lines
from .results import Figure, Results

#: Table titles that say what a suite measures where its name alone could mislead.
TITLES = {
    "append": "append (storage only: codec + GroupCommitter, no Runtime)",
    "agent-steps": "agent-steps (the full Runtime)",
}
MET = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]not measured[/]"}


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in params.items())


def _value(value: float, unit: str) -> str:
    if unit == "B":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if abs(value) >= scale:
                return f"{value / scale:,.2f} {name}"
        return f"{value:,.0f} B"
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}"
    if abs(value) >= 1:
        return f"{value:,.2f} {unit}"
    return f"{value:.3g} {unit}"


def print_report(results: Results, console: Console) -> None:
    """Print one table per suite, then the ratios, the targets and the notes."""
    suites: dict[str, list[Figure]] = {}
    for figure in results.figures:
        suites.setdefault(figure.suite, []).append(figure)
    for suite, figures in suites.items():
        table = Table(title=TITLES.get(suite, suite), title_justify="left", show_lines=False)
        table.add_column("system")
        table.add_column("metric")
        table.add_column("parameters")
        table.add_column("value", justify="right")
        for f in figures:
            table.add_row(f.system, f.name, _params(f.params), _value(f.value, f.unit))
        console.print(table)
    if results.ratios:
        table = Table(title="ratios", title_justify="left")
        for column in ("suite", "ratio", "parameters", "value", "better"):
            table.add_column(column, justify="right" if column == "value" else "left")
        for r in results.ratios:
            table.add_row(r.suite, r.name, _params(r.params), f"{r.value:.4g}", r.better)
        console.print(table)
    lines = limit_lines(results)
    if lines:
        table = Table(title="limits: durably, the limit with encoding included, the raw limit", title_justify="left")
        for column in COLUMNS:
            table.add_column(column, justify="left" if column == "workload" else "right")
        for line in lines:
            table.add_row(*line.cells())
        console.print(table)
    if results.targets:
        table = Table(title="targets", title_justify="left")
        for column in ("issue", "target", "measured", "target value", "met", "measured on"):
            table.add_column(column)
        for t in results.targets:
            table.add_row(
                t.issue,
                t.name,
                "-" if t.measured is None else f"{t.measured:.4g}",
                f"{t.op} {t.threshold:.4g}",
                MET[t.met],
                t.basis + (f"; {t.note}" if t.note else ""),
            )
        console.print(table)
    m = results.machine
    console.print(
        f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, SQLite {m['sqlite']}, "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['load_average'] or [])}"
    )
    for note in results.notes:
        console.print(f"note: {note}", markup=False)


def write_json(results: Results, path: Path) -> None:
    """Write every figure, ratio, target and the machine to ``path`` (UTF-8 JSON)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results.to_json(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
