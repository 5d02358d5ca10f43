"""``durably bench --plot DIR``: charts of a run, drawn with matplotlib (the ``plot`` extra).

From a run's JSON document (``Results.to_json()`` or a ``--json`` file):

* ``bytes_vs_steps.png``: file bytes after close against conversation length,
  for durably and each peer (the peers suite's series; log-log, so LangGraph's
  quadratic growth shows as a line twice as steep as durably's);
* ``steps_per_s_vs_steps.png``: steps/s against conversation length, same systems;
* ``step_latency.png``: per-step latency over a long run (median and p99 of
  each bucket of steps): durably's longest single-agent conversation beside
  the peers' headline runs.

``plot(doc, folder)`` returns the paths written; charts whose figures the run
did not make are left out. Raises ``ImportError`` naming the extra when
matplotlib is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: One colour and marker per system, the same on every chart.
STYLE = {
    "durably": ("#1b7837", "o"),
    "langgraph-AsyncSqliteSaver": ("#c51b7d", "s"),
    "langgraph-DurablySaver": ("#5aae61", "D"),
    "dbos-sqlite": ("#2166ac", "^"),
}
LABELS = {
    "durably": "durably (SQLite)",
    "langgraph-AsyncSqliteSaver": "LangGraph + AsyncSqliteSaver",
    "langgraph-DurablySaver": "LangGraph + DurablySaver",
    "dbos-sqlite": "DBOS Transact (SQLite)",
}


def _pyplot() -> Any:  # matplotlib.pyplot (the plot extra), imported on use
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - the message is the point
        raise ImportError("durably bench --plot needs matplotlib: pip install 'durably[plot]'") from exc
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _by_system(doc: dict[str, Any], suite: str, name: str) -> dict[str, list[tuple[float, float]]]:
    points: dict[str, list[tuple[float, float]]] = {}
    for f in doc["figures"]:
        if f["suite"] == suite and f["name"] == name and "steps" in f["params"]:
            points.setdefault(f["system"], []).append((f["params"]["steps"], f["value"]))
    lines = {system: sorted(set(values)) for system, values in points.items()}
    if any(len(values) > 1 for values in lines.values()):  # a series: drop the one-point extras
        lines = {system: values for system, values in lines.items() if len(values) > 1}
    return lines


def _subtitle(doc: dict[str, Any]) -> str:
    m = doc.get("machine", {})
    load = m.get("load_average") or []
    return (
        f"durably bench --{doc.get('mode', '?')}, {m.get('cores', '?')} cores, load {load[0]:.1f}"
        if load
        else f"durably bench --{doc.get('mode', '?')}"
    )


def _line_chart(
    plt: Any,
    doc: dict[str, Any],
    series: dict[str, list[tuple[float, float]]],
    ylabel: str,
    title: str,
    path: Path,
    label_value: Callable[[float], str],
) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    for system, points in series.items():
        colour, marker = STYLE.get(system, ("#555555", "x"))
        xs, ys = zip(*points, strict=False)
        ax.plot(xs, ys, marker=marker, color=colour, label=LABELS.get(system, system), linewidth=2)
        ax.annotate(
            label_value(ys[-1]),
            (xs[-1], ys[-1]),
            textcoords="offset points",
            xytext=(6, 0),
            va="center",
            fontsize=8,
            color=colour,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    lengths = sorted({x for points in series.values() for x, _ in points})
    ax.set_xticks(lengths, [f"{x:,.0f}" for x in lengths])
    ax.minorticks_off()
    ax.set_xlabel("conversation length (agent steps)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="best")
    fig.text(0.99, 0.01, _subtitle(doc), ha="right", va="bottom", fontsize=7, color="#666666")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def _bytes(value: float) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _latency_chart(plt: Any, doc: dict[str, Any], path: Path) -> Path | None:
    series = [s for s in doc.get("series", []) if s["name"] == "step_latency"]
    durably = [s for s in series if s["suite"] == "agent-steps" and s["params"].get("agents") == 1]
    if not durably:
        return None
    chosen = [max(durably, key=lambda s: s["params"].get("steps", 0))]
    chosen += [s for s in series if s["suite"] == "peers" and s["system"] != "durably"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    for s in chosen:
        colour, _ = STYLE.get(s["system"], ("#555555", "x"))
        label = f"{LABELS.get(s['system'], s['system'])}, {s['params'].get('steps', 0):,} steps"
        ax.plot(s["x"], s["y"], color=colour, linewidth=1.6, label=f"{label}: median")
        ax.plot(s["x"], s["y_p99"], color=colour, linewidth=0.8, alpha=0.45, linestyle="--")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(f"per-step latency ({chosen[0]['unit']}); dashed: p99 of each bucket")
    ax.set_title("Per-step latency over a run", fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="best")
    fig.text(0.99, 0.01, _subtitle(doc), ha="right", va="bottom", fontsize=7, color="#666666")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def plot(doc: dict[str, Any], folder: Path) -> list[Path]:
    """Write the charts of the run ``doc`` (a bench JSON document) into ``folder``; returns their paths."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    file_bytes = _by_system(doc, "peers", "file_bytes")
    if file_bytes:
        written.append(
            _line_chart(
                plt,
                doc,
                file_bytes,
                "file bytes after close (database + -wal + -shm)",
                "Stored bytes against conversation length",
                folder / "bytes_vs_steps.png",
                _bytes,
            )
        )
    rates = _by_system(doc, "peers", "steps_per_s")
    if rates:
        written.append(
            _line_chart(
                plt,
                doc,
                rates,
                "agent steps per second",
                "Throughput against conversation length",
                folder / "steps_per_s_vs_steps.png",
                lambda v: f"{v:,.0f}/s",
            )
        )
    latency = _latency_chart(plt, doc, folder / "step_latency.png")
    if latency is not None:
        written.append(latency)
    return written
