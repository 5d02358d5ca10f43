"""The docs site builds with ``mkdocs build --strict``: a broken link, a missing
page or an API reference to a name that does not exist fails the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_build_strict(tmp_path: Path, shipped_tree: Path) -> None:
    # The API reference reads the package as installed (a folder named durably), found first on the path.
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(shipped_tree)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "durably" / "index.html").exists()
    reference = (tmp_path / "site" / "reference" / "durably" / "index.html").read_text(encoding="utf-8")
    for name in ("Runtime", "AgentDefinition", "tool", "ModelResponse"):
        assert f'id="durably.{name}"' in reference, name
    # every audience's public module has its reference page (tests/house/test_public_api.py lists them)
    for page, anchor in [
        ("storage", "durably.storage.Store"),
        ("conformance", "durably.storage.conformance.TortureConformance"),
        ("conformance", "durably.storage.conformance.StoreConformance"),
        ("schemas", "durably.schemas.upcaster"),
        ("models", "durably.models.openai.OpenAIChatModel"),
        ("models", "durably.models.anthropic.AnthropicModel"),
        ("langgraph", "durably.integrations.langgraph.DurablySaver"),
        ("openai-agents", "durably.integrations.openai_agents.DurableRunner"),
        ("durably", "durably.Runtime.wait"),  # delegated to the internal reading part
        ("schemas", "durably.schemas.RECORD_SCHEMA_ID"),
        ("schemas", "durably.schemas.Kind.TOOL_RESULT"),
        ("storage", "durably.storage.CAP_LEASES"),
    ]:
        html = (tmp_path / "site" / "reference" / page / "index.html").read_text(encoding="utf-8")
        assert f'id="{anchor}"' in html, anchor
