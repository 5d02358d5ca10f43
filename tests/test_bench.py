"""durably bench: every suite runs on a tiny size and its JSON has the promised shape.

No timing is asserted: only that the figures exist, carry units and parameters,
and hold values that make sense (positive rates, p99 >= p50, byte counts that
add up). The numbers themselves are the bench's business, not the tests'.
"""

from __future__ import annotations

import json
import math

import aiosqlite
import pytest

from durably.bench import peers
from durably.bench.cli import main as bench_main
from durably.bench.context import Sizes
from durably.bench.limit import RawSQLite, run_writers
from durably.bench.report import write_json
from durably.bench.runner import run_bench
from durably.bench.suites import SUITES
from durably.bench.workload import MAX_RESULT_CHARS, TOOL_NAMES, Workload, journal_entries
from durably.cli.main import build_parser

TINY = Sizes(append_records=8, append_concurrency=(1, 16), conversations=(24,), agents=3, agent_steps=4,
             growth_steps=24, restore_records=(10, 250), restore_repeats=2, codec_steps=40, overhead_steps=12,
             peer_steps=6)

RATE_UNITS = {"records/s", "steps/s", "MB/s"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    import anyio

    out = tmp_path_factory.mktemp("bench")
    results = anyio.run(lambda: run_bench(f"sqlite:///{out / 'store.db'}", list(SUITES), TINY, mode="tiny", seed=3))
    path = out / "bench.json"
    write_json(results, path)
    return json.loads(path.read_text(encoding="utf-8"))


def figures(doc, suite, name=None, system="durably"):
    return [f for f in doc["figures"] if f["suite"] == suite and (name is None or f["name"] == name)
            and f["system"] == system]


def test_json_names_the_run_and_the_machine(tiny_run):
    assert tiny_run["format"] == "durably-bench/1"
    assert tiny_run["mode"] == "tiny" and tiny_run["seed"] == 3
    assert tiny_run["store"].startswith("sqlite:///")
    machine = tiny_run["machine"]
    assert machine["cores"] >= 1 and machine["python"].count(".") == 2
    assert machine["packages"]["durably"] and machine["packages"]["aiosqlite"]


def test_every_figure_has_unit_suite_store_params_and_a_finite_value(tiny_run):
    assert {f["suite"] for f in tiny_run["figures"]} >= set(SUITES) - {"peers"}
    for f in tiny_run["figures"]:
        assert f["unit"] and f["name"] and f["system"] and f["store"], f
        assert isinstance(f["params"], dict)
        assert math.isfinite(f["value"]), f
        if f["unit"] in RATE_UNITS:
            assert f["value"] > 0, f


def test_append_reports_every_level_for_durably_and_the_limit(tiny_run):
    for system in ("durably", "limit-per-commit", "limit-group-commit"):
        for agents in TINY.append_concurrency:
            (p50,) = [f for f in figures(tiny_run, "append", "append_p50", system) if f["params"]["agents"] == agents]
            (p99,) = [f for f in figures(tiny_run, "append", "append_p99", system) if f["params"]["agents"] == agents]
            assert 0 < p50["value"] <= p99["value"]
    ratios = [r for r in tiny_run["ratios"] if r["suite"] == "append"]
    assert {r["name"] for r in ratios} == {"durably/limit-per-commit", "durably/limit-group-commit"}
    assert all(r["value"] > 0 for r in ratios)


def test_agent_steps_split_first_and_last_tenth(tiny_run):
    names = {f["name"] for f in figures(tiny_run, "agent-steps")}
    assert {"steps_per_s", "step_p50_first10", "step_p50_last10", "step_p99_last10", "stored_bytes_per_step"} <= names
    (ratio,) = [r for r in tiny_run["ratios"] if r["name"] == "step_p50_last10/first10" and r["suite"] == "agent-steps"]
    assert ratio["params"]["steps"] == TINY.conversations[0] and ratio["value"] > 0


def test_growth_adds_up(tiny_run):
    by_name = {f["name"]: f for f in figures(tiny_run, "growth") if "at_step" not in f["params"]}
    total = by_name["stored_bytes"]["value"]
    assert by_name["journal_bytes_per_step"]["value"] > 0
    steps = TINY.growth_steps
    assert by_name["stored_bytes_per_step"]["value"] * steps == pytest.approx(total)
    series = [f["value"] for f in figures(tiny_run, "growth", "stored_bytes_at")]
    assert len(series) == 10 and series == sorted(series) and series[-1] == pytest.approx(total)


def test_restore_reads_a_snapshot_and_a_tail_that_cover_the_history(tiny_run):
    for records in TINY.restore_records:
        found = {f["name"]: f["value"] for f in figures(tiny_run, "restore") if f["params"]["records"] == records}
        assert found["snapshot_seq"] + found["tail_records"] == records
        assert found["restore_cold"] > 0 and found["restore_warm_p50"] <= found["restore_warm_p99"]
    assert figures(tiny_run, "restore", "snapshot_decode")  # 250 records pass the default policy's 200


def test_codec_and_overhead(tiny_run):
    ratios = {f["params"]["kind"]: f["value"] for f in figures(tiny_run, "codec", "compression_ratio")}
    assert ratios["record"] > 1 and ratios["snapshot"] > 1  # real text compresses
    systems = {f["system"] for f in tiny_run["figures"] if f["suite"] == "overhead"}
    assert systems == {"plain-loop", "durably-memory", "durably"}


def test_peers_side_by_side_or_a_clear_note(tiny_run):
    if not peers.available():
        assert any("peers skipped" in note for note in tiny_run["notes"])
        return
    lg = figures(tiny_run, "peers", system="langgraph-AsyncSqliteSaver")
    assert {"steps_per_s", "stored_bytes", "restore_cold", "checkpoints"} <= {f["name"] for f in lg}
    names = {r["name"] for r in tiny_run["ratios"] if r["suite"] == "peers"}
    assert "stored_bytes durably/langgraph" in names and "steps_per_s durably/langgraph" in names
    bridge = {f["name"]: f for f in figures(tiny_run, "peers", system="langgraph-DurablySaver")}
    assert {"checkpoints_per_s", "file_bytes_after_close", "aget_state_cold", "checkpoints"} <= set(bridge)
    theirs = {f["name"]: f for f in lg}
    assert bridge["checkpoints"]["value"] == theirs["checkpoints"]["value"] > 0  # the same graph, the same run
    assert 0 < bridge["file_bytes_after_close"]["value"]
    assert {"checkpoints_per_s DurablySaver/AsyncSqliteSaver", "file_bytes DurablySaver/AsyncSqliteSaver"} <= names
    assert any("DurablySaver" in t["name"] for t in tiny_run["targets"])


def test_targets_are_checked_with_their_basis(tiny_run):
    names = [t["name"] for t in tiny_run["targets"]]
    assert any("70%" in n for n in names) and any("last 10%" in n for n in names) and any("100,000" in n for n in names)
    for target in tiny_run["targets"]:
        assert target["op"] in ("<=", ">=") and target["basis"] and isinstance(target["met"], bool)


def test_cli_quick_codec_on_memory_writes_json(tmp_path, capsys):
    path = tmp_path / "out.json"
    assert bench_main(["--quick", "--suite", "codec", "--store", "memory://", "--json", str(path)]) == 0
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["mode"] == "quick" and doc["store"].startswith("memory://bench-")
    assert {f["suite"] for f in doc["figures"]} == {"codec"}
    assert "codec" in capsys.readouterr().out


def test_durably_command_has_a_bench_subcommand():
    args = build_parser().parse_args(["bench", "--quick", "--suite", "append"])
    assert args.command == "bench" and args.mode == "quick" and args.suites == ["append"]


def test_unknown_suite_is_refused():
    import anyio

    with pytest.raises(KeyError, match="unknown suite"):
        anyio.run(lambda: run_bench("memory://", ["nope"], TINY))


def test_workload_is_seeded_real_text_with_documented_bounds():
    one, again, other = Workload(7).conversation(60), Workload(7).conversation(60), Workload(8).conversation(60)
    assert one == again and one != other
    assert {s.tool for s in one} <= set(TOOL_NAMES)
    assert all(20 <= len(s.text) <= 6000 and len(s.result) <= MAX_RESULT_CHARS for s in one)
    assert any("def " in s.result or "class " in s.result for s in one)  # source text, not random bytes
    entries = journal_entries(one, "ns", "a")
    assert len(entries) == 1 + 3 * len(one) and entries[0][0] == "started"


async def test_limit_group_commit_stores_every_row(tmp_path):
    frames = [[f"w{w}-{i}".encode() for i in range(20)] for w in range(5)]
    async with RawSQLite(tmp_path / "raw.db") as raw:
        wall, latencies = await run_writers(raw.group, frames)
        assert raw.commits <= 100 and len(latencies) == 100
    async with aiosqlite.connect(tmp_path / "raw.db") as db:
        ((rows,),) = await db.execute_fetchall("SELECT count(*) FROM journal")
        ((mode,),) = await db.execute_fetchall("PRAGMA journal_mode")
    assert rows == 100 and mode == "wal"
