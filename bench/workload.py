"""Seeded, realistic agent traffic: what a coding agent's journal looks like.

Every step is one model response (prose plus one tool call) and that tool's
result, as in a ReAct-style coding agent (SWE-agent, OpenHands, Claude Code).
The text is real, never random bytes, so compression ratios mean something:
prose comes from the docstrings of the Python standard library and code and
tool output from its source files, which every machine with Python has.

Where the sizes come from. There is no agent-trace data set on this machine,
so the distributions below are our model, not a fit. They follow the shape of
published coding-agent trajectories:

* the tool set and its mix mirror SWE-agent's interface (open/view a file,
  search, edit, run a command) and its trajectory format of one
  thought/action/observation triple per step (SWE-agent docs, "trajectories");
* a file view returns a window of lines (SWE-agent's default window is 100
  lines), so ``read_file`` returns 20-200 lines, median 80 (about 3 KB);
* tool observations dominate a turn's tokens (Lindenbauer et al. 2025, "The
  Complexity Trap", on SWE-agent/SWE-bench Verified), so results are the
  largest part: median about 1 KB and mean about 2 KB over all tools, long
  tail, capped at 32 KB as agent harnesses truncate long command output;
* assistant prose ("thought") is a paragraph: median 350 characters, log-normal
  with sigma 0.8, clipped to 20..6,000;
* tool arguments are small except edits, which carry code (old and new text,
  median 600 chars each).

Tool mix and result sizes (log-normal medians, sigma in brackets):

========== ====== ======================================= ==================
tool       share  arguments                               result
========== ====== ======================================= ==================
read_file  35 %   path, start, end                        80 lines (0.7)
search     25 %   pattern, path                           12 hits (0.9)
edit_file  15 %   path, old, new (600 chars each (0.8))   one line
run        20 %   command                                 1,500 chars (1.1)
list_dir    5 %   path                                    25 names (0.6)
========== ====== ======================================= ==================

Reproducible: the same seed on the same Python version gives the same steps
(the corpus is that version's standard library).
"""

from __future__ import annotations

import ast
import functools
import math
import random
import sysconfig
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durably._tools.tool import idempotency_key
from durably.schemas._records import Kind

#: How many standard-library modules feed the corpus (sorted by name, so stable).
CORPUS_MODULES = 80
MAX_RESULT_CHARS = 32 * 1024
TOOL_MIX = (("read_file", 0.35), ("search", 0.25), ("edit_file", 0.15), ("run", 0.20), ("list_dir", 0.05))
TOOL_NAMES = tuple(name for name, _ in TOOL_MIX)
MODEL_NAME = "bench-scripted"


@dataclass(frozen=True, slots=True)
class Corpus:
    """Real text: ``prose`` (docstring paragraphs), ``files`` (path, lines) of source."""

    prose: tuple[str, ...]
    files: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Every file name of the corpus."""
        return tuple(path for path, _ in self.files)


@functools.lru_cache(maxsize=2)
def corpus(start: int = 0) -> Corpus:
    """The corpus of this Python: docstrings and source lines of ``CORPUS_MODULES``
    top-level standard-library modules from the ``start``-th on, by name (loaded
    once, ~0.5 s). The bench uses ``start=0``; the shipped zstd dictionary was
    trained on the next ones (``durably.bench.dictionary``), so it holds no text
    the bench measures."""
    root = Path(sysconfig.get_paths()["stdlib"])
    prose: list[str] = []
    files: list[tuple[str, tuple[str, ...]]] = []
    for path in sorted(root.glob("*.py"))[start : start + CORPUS_MODULES]:
        source = path.read_text(encoding="utf-8", errors="replace")
        files.append((f"lib/{path.name}", tuple(source.splitlines())))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    prose.extend(p.strip() for p in doc.split("\n\n") if len(p.strip()) > 20)
    return Corpus(tuple(prose), tuple(files))


@dataclass(frozen=True, slots=True)
class Step:
    """One agent step: the model's ``text`` and tool call (``tool``, ``arguments``),
    the tool's ``result`` (str), and the model call's token counts."""

    call_id: str
    text: str
    tool: str
    arguments: dict[str, Any]
    result: str
    input_tokens: int
    output_tokens: int


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> int:
    return int(min(high, max(low, rng.lognormvariate(math.log(median), sigma))))


def _prose(rng: random.Random, text: Corpus, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        part = text.prose[rng.randrange(len(text.prose))]
        parts.append(part)
        size += len(part) + 1
    return " ".join(parts)[:chars]


def _lines(rng: random.Random, text: Corpus, count: int) -> tuple[str, int, list[str]]:
    path, lines = text.files[rng.randrange(len(text.files))]
    start = rng.randrange(max(1, len(lines) - count))
    return path, start, list(lines[start : start + count])


class Workload:
    """Generates ``Step`` sequences; ``seed`` makes them reproducible.

    Token counts model a growing context: input tokens are the conversation so
    far (chars / 4), output tokens the response's chars / 4.
    """

    def __init__(self, seed: int = 0, corpus_start: int = 0) -> None:
        self.seed = seed
        self.text = corpus(corpus_start)

    def conversation(self, steps: int, agent: int = 0) -> list[Step]:
        """``steps`` steps of one agent's conversation (agent ``agent`` of a seeded run)."""
        rng = random.Random(f"{self.seed}:{agent}")
        weights = [w for _, w in TOOL_MIX]
        out: list[Step] = []
        context = 0
        for i in range(steps):
            tool = rng.choices(TOOL_NAMES, weights)[0]
            text = _prose(rng, self.text, _lognormal(rng, 350, 0.8, 20, 6000))
            arguments, result = getattr(self, f"_{tool}")(rng)
            result = result[:MAX_RESULT_CHARS]
            out_tokens = (len(text) + sum(len(str(v)) for v in arguments.values())) // 4
            context += out_tokens + len(result) // 4
            out.append(Step(f"call-{agent}-{i + 1}", text, tool, arguments, result, context, out_tokens))
        return out

    def _read_file(self, rng: random.Random) -> tuple[dict[str, Any], str]:
        path, start, lines = _lines(rng, self.text, _lognormal(rng, 80, 0.7, 20, 200))
        numbered = "\n".join(f"{start + n + 1:>5} {line}" for n, line in enumerate(lines))
        return {"path": path, "start": start + 1, "end": start + len(lines)}, f"[File: {path}]\n{numbered}"

    def _search(self, rng: random.Random) -> tuple[dict[str, Any], str]:
        hits = _lognormal(rng, 12, 0.9, 1, 200)
        path, start, lines = _lines(rng, self.text, hits * 3)
        words = [w for w in " ".join(lines).split() if w.isidentifier() and len(w) > 3] or ["def"]
        pattern = rng.choice(words)
        rows = [f"{path}:{start + n + 1}: {line.strip()}" for n, line in enumerate(lines) if n % 3 == 0]
        return {"pattern": pattern, "path": "lib/"}, f"Found {len(rows)} matches for {pattern!r}:\n" + "\n".join(rows)

    def _edit_file(self, rng: random.Random) -> tuple[dict[str, Any], str]:
        size = _lognormal(rng, 600, 0.8, 40, 8000)
        path, start, lines = _lines(rng, self.text, max(2, size // 40))
        old = "\n".join(lines)[:size]
        _, _, new_lines = _lines(rng, self.text, max(2, size // 40))
        new = "\n".join(new_lines)[:size]
        changed = abs(new.count("\n") - old.count("\n")) + 1
        return {"path": path, "old": old, "new": new}, f"Edited {path}: {changed} lines changed at line {start + 1}."

    def _run(self, rng: random.Random) -> tuple[dict[str, Any], str]:
        size = _lognormal(rng, 1500, 1.1, 30, MAX_RESULT_CHARS)
        _, _, lines = _lines(rng, self.text, 3)
        command = rng.choice(("python -m pytest -x -q", "git diff --stat", "python -c", "grep -rn", "ls -la"))
        command = f"{command} {lines[0].strip()[:60] if lines else ''}".strip()
        body = _prose(rng, self.text, size)
        return {"command": command}, f"$ {command}\n{body}\n[exit status {rng.choice((0, 0, 0, 1))}]"

    def _list_dir(self, rng: random.Random) -> tuple[dict[str, Any], str]:
        count = _lognormal(rng, 25, 0.6, 3, 150)
        names = [rng.choice(self.text.names).removeprefix("lib/") for _ in range(count)]
        return {"path": "lib/"}, "\n".join(sorted(set(names)))


def journal_entries(
    steps: list[Step],
    namespace: str,
    agent_id: str,
    run_id: str | None = None,
    task: str = "Fix the failing test in the standard library.",
) -> list[tuple[str, dict[str, Any]]]:
    """The ``(kind, data)`` records the runtime journals for ``steps``, in order.

    The same shapes ``durably`` writes: ``started``, then per step
    ``model_responded``, ``tool_intent``, ``tool_result`` (3 records a step).
    Used where the bench writes a journal without running an agent (append,
    restore fixtures, codec), so the bytes are those of a real run.
    """
    run_id = run_id or uuid.UUID(int=random.Random(agent_id).getrandbits(128)).hex
    entries: list[tuple[str, dict[str, Any]]] = [
        (
            Kind.STARTED,
            {
                "namespace": namespace,
                "agent_id": agent_id,
                "run_id": run_id,
                "task": task,
                "definition": {"name": "bench-agent", "version": "1", "digest": "0" * 16},
                "instructions": "You are a careful software engineer. Use the tools.",
                "budget": {"steps": None, "tokens": None, "cost_usd": None},
                "worker": "bench",
            },
        )
    ]
    for turn, step in enumerate(steps, start=1):
        # As the actor journals it (AgentActor._journal_calls): the key from the turn and the
        # call's position, written into the call, so restore never derives it again.
        key = idempotency_key(namespace, agent_id, run_id, f"{turn}:0:{step.call_id}")
        usage = {
            "input_tokens": step.input_tokens,
            "output_tokens": step.output_tokens,
            "cost_usd": round(step.input_tokens * 3e-6 + step.output_tokens * 15e-6, 6),
        }
        call = {"id": step.call_id, "name": step.tool, "arguments": step.arguments, "key": key}
        entries.append(
            (
                Kind.MODEL_RESPONDED,
                {"text": step.text, "tool_calls": [call], "usage": usage, "plan": None, "model": MODEL_NAME},
            )
        )
        entries.append((Kind.TOOL_INTENT, {"key": key, "call_id": step.call_id, "tool": step.tool, "attempt": 1}))
        entries.append(
            (
                Kind.TOOL_RESULT,
                {"key": key, "call_id": step.call_id, "tool": step.tool, "result": step.result, "error": None},
            )
        )
    return entries
