"""Write ``tests/golden/format3``: record frames of frame format 3 (a shipped zstd dictionary), once.

Run by hand by the build that introduced format 3 (``python tests/golden/make_format3.py``);
never again: the frames prove that every later build still reads them. A new
dictionary or format gets a new folder, and this one stays.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from durably.schemas._records import Kind, Record
from durably._journal.records import RecordCodec
from durably.storage._spi import StreamId

OUT = Path(__file__).resolve().parent / "format3"

FRAMES = [
    ("default", "a1", 2, Kind.TOOL_INTENT, {"key": "k-3f1c", "call_id": "call-1", "tool": "read_file", "attempt": 1}),
    ("default", "a2", 2, Kind.TOOL_INTENT, {"key": "k-3f1c", "call_id": "call-1", "tool": "read_file", "attempt": 1}),
    ("tenant-x", "agent ü", 9, Kind.MODEL_RESPONDED, {
        "text": "I will read the failing test first, then the module it imports.",
        "tool_calls": [{"id": "call-2", "name": "read_file", "arguments": {"path": "lib/abc.py", "start": 1, "end": 80},
                        "key": "k-9a0e"}],
        "usage": {"input_tokens": 1200, "output_tokens": 40, "cost_usd": 0.0042}, "plan": None, "model": "golden"}),
    ("tenant-x", "agent ü", 10, Kind.TOOL_RESULT, {
        "key": "k-9a0e", "call_id": "call-2", "tool": "read_file", "error": None,
        "result": "\n".join(f"{n:>5} def handler_{n}(request):\n        return request.reply({n})" for n in range(1, 40))}),
]


def main() -> None:
    OUT.mkdir(exist_ok=True)
    if any(OUT.iterdir()) and "--force" not in sys.argv:
        sys.exit(f"{OUT} exists: golden frames are never regenerated")
    codec = RecordCodec()
    entries = []
    for index, (namespace, agent_id, seq, kind, data) in enumerate(FRAMES):
        frame = codec.encode_record(Record(seq, kind, data, 1_700_000_000.0 + seq), StreamId(namespace, agent_id))
        assert frame[2] == 3, "a golden frame of format 3 must be format 3"
        name = f"record-{index}.bin"
        (OUT / name).write_bytes(frame)
        entries.append({"file": name, "namespace": namespace, "agent_id": agent_id, "seq": seq, "kind": str(kind),
                        "data": data, "dictionary_id": int.from_bytes(frame[15:19], "big"),
                        "sha256": hashlib.sha256(frame).hexdigest()})
    (OUT / "frames.json").write_text(json.dumps({"format": 3, "frames": entries}, indent=1, ensure_ascii=False) + "\n",
                                     encoding="utf-8")


if __name__ == "__main__":
    main()
