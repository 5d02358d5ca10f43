"""What a bench run produces: figures with units, ratios between them, targets, the machine.

Every number is a ``Figure`` naming its suite, the system measured (durably,
the raw-SQLite limit, a peer), the store URL and the parameters, so the JSON
output can be compared across runs and machines without reading any code.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

#: Packages whose versions are recorded with every run.
PACKAGES = (
    "durably",
    "aiosqlite",
    "anyio",
    "cbor2",
    "zstandard",
    "rich",
    "opentelemetry-api",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "ormsgpack",
)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation
    (NumPy's default method); NaN for an empty list."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Figure:
    """One measured number: ``value`` in ``unit`` for ``name`` of ``system`` in ``suite``."""

    suite: str
    name: str
    value: float
    unit: str
    system: str = "durably"
    store: str = ""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ratio:
    """``numerator / denominator`` (two figures' values); ``better`` says which
    direction is good for durably ("higher" or "lower")."""

    suite: str
    name: str
    value: float
    numerator: dict[str, Any]
    denominator: dict[str, Any]
    better: str = "higher"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Target:
    """A goal from an issue: ``measured`` compared with ``threshold`` by ``op`` ("<=" or ">=").

    ``measured`` and ``met`` are None when this run did not measure it (``note`` says where it is).
    """

    name: str
    measured: float | None
    op: str
    threshold: float
    met: bool | None
    basis: str
    note: str = ""
    issue: str = ""


@dataclass
class Series:
    """A figure over a run, for the charts: ``y[i]`` (``unit``) at ``x[i]`` (e.g. step index).

    Long series are cut into at most ``MAX_POINTS`` buckets of ``bucket`` values:
    ``y`` is each bucket's median and ``y_p99`` its 99th percentile.
    """

    suite: str
    name: str
    unit: str
    system: str
    params: dict[str, Any]
    x: list[float]
    y: list[float]
    y_p99: list[float]
    bucket: int


#: Points per series at most (a 10,000-step run keeps one point per 20 steps).
MAX_POINTS = 500


def machine() -> dict[str, Any]:
    """Cores, CPU model, OS, Python, SQLite and package versions, load average."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "packages": versions,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


class Results:
    """Collects the figures, ratios, targets and notes of one run."""

    def __init__(self, *, store: str, mode: str, seed: int, argv: list[str] | None = None) -> None:
        self.store = store
        self.mode = mode
        self.seed = seed
        self.argv = argv or []
        self.started = time.time()
        self.figures: list[Figure] = []
        self.ratios: list[Ratio] = []
        self.targets: list[Target] = []
        self.notes: list[str] = []
        self.series: list[Series] = []
        self.failed: list[str] = []  # suites that raised (a run that kept going past them)
        self.machine = machine()

    def add(
        self,
        suite: str,
        name: str,
        value: float,
        unit: str,
        *,
        system: str = "durably",
        store: str | None = None,
        **params: Any,
    ) -> Figure:
        """Record a figure (``store`` defaults to the run's store) and return it."""
        figure = Figure(suite, name, float(value), unit, system, self.store if store is None else store, params)
        self.figures.append(figure)
        return figure

    def find(self, suite: str, name: str, system: str = "durably", **params: Any) -> Figure | None:
        """The last figure matching ``suite``, ``name``, ``system`` and every given parameter."""
        for figure in reversed(self.figures):
            if (figure.suite, figure.name, figure.system) == (suite, name, system) and all(
                figure.params.get(k) == v for k, v in params.items()
            ):
                return figure
        return None

    def ratio(
        self,
        suite: str,
        name: str,
        numerator: Figure | None,
        denominator: Figure | None,
        better: str = "higher",
        **params: Any,
    ) -> Ratio | None:
        """Record ``numerator.value / denominator.value``; None when either is missing or zero."""
        if numerator is None or denominator is None or not denominator.value:
            return None
        ratio = Ratio(
            suite, name, numerator.value / denominator.value, _ref(numerator), _ref(denominator), better, params
        )
        self.ratios.append(ratio)
        return ratio

    def target(
        self,
        name: str,
        measured: float | None,
        op: str,
        threshold: float,
        basis: str,
        note: str = "",
        *,
        issue: str = "",
    ) -> Target:
        """Check a target; listed as not measured (``met`` None) when this run did not make its figure."""
        met = None if measured is None else (measured <= threshold if op == "<=" else measured >= threshold)
        target = Target(name, measured, op, threshold, met, basis, note, issue)
        self.targets.append(target)
        return target

    def add_series(
        self, suite: str, name: str, values: list[float], unit: str, *, system: str = "durably", **params: Any
    ) -> Series:
        """Record ``values`` (one per step, in order) as a series of at most ``MAX_POINTS`` points."""
        bucket = max(1, -(-len(values) // MAX_POINTS))
        x, y, y_p99 = [], [], []
        for start in range(0, len(values), bucket):
            part = values[start : start + bucket]
            x.append(start + (len(part) + 1) / 2)
            y.append(percentile(part, 50))
            y_p99.append(percentile(part, 99))
        series = Series(suite, name, unit, system, params, x, y, y_p99, bucket)
        self.series.append(series)
        return series

    def note(self, text: str) -> None:
        """A line of context shown under the table and stored in the JSON."""
        self.notes.append(text)

    def to_json(self) -> dict[str, Any]:
        """Everything, as plain data (the ``--json`` file)."""
        info = dict(self.machine)
        info["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        return {
            "format": "durably-bench/1",
            "started_at": self.started,
            "duration_s": time.time() - self.started,
            "argv": self.argv,
            "mode": self.mode,
            "seed": self.seed,
            "store": self.store,
            "machine": info,
            "figures": [asdict(f) for f in self.figures],
            "ratios": [asdict(r) for r in self.ratios],
            "targets": [asdict(t) for t in self.targets],
            "notes": self.notes,
            "failed": self.failed,
            "series": [asdict(s) for s in self.series],
        }


def _ref(figure: Figure) -> dict[str, Any]:
    return {
        "suite": figure.suite,
        "name": figure.name,
        "system": figure.system,
        "value": figure.value,
        "unit": figure.unit,
        "params": figure.params,
    }
