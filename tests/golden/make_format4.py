"""Write ``tests/golden/format4``: one commit of three records as frame format 4 (a group
frame) and its two format 5 member rows, once.

Run by hand by the build that introduced formats 4 and 5 (``python tests/golden/make_format4.py``);
never again: the rows prove that every later build still reads them. A new
format gets a new folder, and this one stays.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from durably._journal.records import RecordCodec
from durably.schemas._records import Kind, Record
from durably.storage._spi import StreamId

OUT = Path(__file__).resolve().parent / "format4"
NAMESPACE, AGENT_ID, FIRST = "tenant-x", "agent ü", 9

RECORDS = [
    (Kind.MODEL_RESPONDED, {
        "text": "I will read the failing test first.",
        "tool_calls": [{"id": "call-2", "name": "read_file", "arguments": {"path": "lib/abc.py"}, "key": "k-9a0e"}],
        "usage": {"input_tokens": 1200, "output_tokens": 40, "cost_usd": 0.0042}, "plan": None, "model": "golden"}),
    (Kind.TOOL_INTENT, {"key": "k-9a0e", "call_id": "call-2", "tool": "read_file", "attempt": 1}),
    (Kind.TOOL_RESULT, {
        "key": "k-9a0e", "call_id": "call-2", "tool": "read_file", "error": None,
        "result": "\n".join(f"{n:>5} def handler_{n}(request):\n        return request.reply({n})" for n in range(1, 20))}),
]


def main() -> None:
    OUT.mkdir(exist_ok=True)
    if any(OUT.iterdir()) and "--force" not in sys.argv:
        sys.exit(f"{OUT} exists: golden frames are never regenerated")
    codec, stream = RecordCodec(), StreamId(NAMESPACE, AGENT_ID)
    records = [Record(FIRST + i, kind, data, 1_700_000_000.0 + i) for i, (kind, data) in enumerate(RECORDS)]
    rows = codec.commit_frames([codec.record_payload(r) for r in records], FIRST, stream)
    assert [row[2] for row in rows] == [4, 5, 5], "a golden group must be formats 4 and 5"
    entries = []
    for index, (row, record) in enumerate(zip(rows, records, strict=True)):
        name = f"row-{index}.bin"
        (OUT / name).write_bytes(row)
        entries.append({"file": name, "seq": record.seq, "kind": str(record.kind), "data": record.data,
                        "at": record.at, "sha256": hashlib.sha256(row).hexdigest()})
    manifest = {"format": 4, "namespace": NAMESPACE, "agent_id": AGENT_ID, "rows": entries}
    (OUT / "rows.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
