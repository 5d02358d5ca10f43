"""docs/writing-an-adapter.md and the SPI agree: the guide's contract table is the SPI's docstrings,
and every hook and setting of the kit is in the guide with its default."""

from __future__ import annotations

from pathlib import Path

from durably.storage._spi_docs import contract_table, guide_table
from durably.storage.conformance import StoreConformance

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-an-adapter.md"


def test_the_guides_contract_table_is_the_spi_docstrings() -> None:
    found = guide_table(GUIDE.read_text())
    assert found is not None, "the guide has lost its generated contract table"
    assert found == contract_table(), (
        "docs/writing-an-adapter.md disagrees with storage/_spi*.py: run "
        "`python -m durably.storage._spi_docs docs/writing-an-adapter.md` and review the diff"
    )


def _settings() -> dict[str, object]:
    """The kit's public settings: class attributes that are plain values, not checks or hooks."""
    found: dict[str, object] = {}
    for cls in reversed(StoreConformance.__mro__):
        for name, value in vars(cls).items():
            if not name.startswith("_") and isinstance(value, (bool, int, float)):
                found[name] = value
    return found


def _shown(value: object) -> list[str]:
    """How the guide may show a default: as code, or in MiB."""
    shown = [f"`{value}`"]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 20 and value % (1 << 20) == 0:
        shown.append(f"{value >> 20} MiB")
    return shown


def test_every_kit_setting_and_hook_is_in_the_guide_with_its_default() -> None:
    guide = GUIDE.read_text()
    rows = {line.split("|")[1].strip(): line for line in guide.splitlines() if line.strip().startswith("| `")}
    settings = _settings()
    assert {"concurrent_instances", "race_tasks", "crash_kills", "scale_records"} <= set(settings)
    for name, value in settings.items():
        row = rows.get(f"`{name}`")
        assert row is not None, f"the kit's setting {name!r} is not in the guide's settings table"
        assert any(form in row.split("|")[2] for form in _shown(value)), (
            f"{name}: the guide shows another default: {row}"
        )
    for hook in ("store_url", "make_store", "stored_bytes", "outage", "backend_server"):
        assert f"{hook}(" in guide, f"the kit's hook {hook!r} is not in the guide"
    assert "| `cannot_fail` | `None` |" in guide, "the kit's declared skip of the fault checks is not in the guide"
