"""``durably bench --from FILE`` with ``--markdown`` or ``--plot``: a file that is not a bench run
(empty, not UTF-8, JSON that is not an object, a directory, a missing file, a
``durably-bench/1`` document missing its fields) is refused with a one-line message
and exit status 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durably.bench.cli import main as bench_main
from durably.bench.markdown import results_from_json
from durably.errors import InvalidArgumentError

BAD = {
    "empty": b"",
    "not-utf8": b"\xff\xfe\x00",
    "not-json": b"figures: 1",
    "a-list": b"[1, 2]",
    "a-number": b"7",
    "fields-missing": json.dumps({"format": "durably-bench/1"}).encode(),
    "fields-wrong": json.dumps(
        {
            "format": "durably-bench/1",
            "store": "x",
            "mode": "quick",
            "seed": 0,
            "started_at": "",
            "machine": {},
            "figures": [7],
            "ratios": [],
        }
    ).encode(),
}


@pytest.mark.parametrize("output", ["--markdown", "--plot"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_a_file_that_is_not_a_bench_run_is_refused_with_exit_2(name: str, output: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(BAD[name])
    given = [output] if output == "--markdown" else [output, str(tmp_path / "charts")]
    assert bench_main(["--from", str(path), *given]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert str(path) in out.out or "bench" in out.out


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_a_path_that_is_no_readable_file_is_refused_with_exit_2(where: str, tmp_path: Path) -> None:
    path = tmp_path / "nothing.json" if where == "missing" else tmp_path
    assert bench_main(["--from", str(path), "--markdown"]) == 2


def test_a_document_missing_fields_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="store"):
        results_from_json({"format": "durably-bench/1"})
