"""The README stays true: its embedding example runs, and its test command is .ci/run's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def embedding_example() -> str:
    section = README[README.index("## Embedding it") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def optional_modules() -> set[str]:
    """The top-level modules only the optional extras install: absent after the README's ``pip install -e .``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower().replace("_", "-") for r in requirements}

    core = names(project["dependencies"])
    extras = set().union(*map(names, project["optional-dependencies"].values())) - core - {"durably"}
    return {
        module
        for module, dists in packages_distributions().items()
        if dists and all(d.lower().replace("_", "-") in extras for d in dists)
    }


def plain_install(code: str) -> str:
    """``code`` run as on the README's plain install: every module of an optional extra fails to import."""
    return (
        f"import sys\nBLOCKED = {sorted(optional_modules())!r}\n"
        "class PlainInstall:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, PlainInstall())\n"
    ) + code


def test_the_plain_install_check_hides_the_extras():
    assert {"openai", "anthropic", "asyncpg", "aiobotocore", "starlette"} <= optional_modules()
    assert not {"anyio", "cbor2", "click", "pydantic", "durably"} & optional_modules()
    proc = subprocess.run([sys.executable, "-c", plain_install("import openai")], capture_output=True, text=True)
    assert proc.returncode == 1 and "No module named 'openai'" in proc.stderr


def test_embedding_example_runs_on_the_plain_install(tmp_path):
    """The README installs durably without extras: its example must run as pasted there."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        [sys.executable, "-c", plain_install(embedding_example())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished Replied to the customer."


def test_embedding_example_with_a_key_but_no_extra_names_the_extra(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": "sk-never-sent"}
    proc = subprocess.run(
        [sys.executable, "-c", plain_install(embedding_example())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 1
    assert "ExtraNotInstalledError" in proc.stderr and "pip install -e '.[openai]'" in proc.stderr


def test_embedding_example_runs(tmp_path):
    code = embedding_example()
    # Without an API key the example uses its stand-in model (never a real provider from CI).
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished Replied to the customer."
    again = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert again.stdout.strip() == "finished Replied to the customer."  # resumed from agents.db, not re-run


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```sh\n(python3 -m venv .*?)\n```", README)
    assert len(commands) == 2, commands
    demo, tests = commands
    assert "durably demo" in demo and "pytest" in tests
    assert tests in (ROOT / ".ci" / "run").read_text()


def readme_table() -> list[str]:
    start = README.index("| you want to | read |")
    return README[start : README.index("\n\n", start)].splitlines()


def test_the_docs_index_has_every_row_of_the_readmes_table():
    index = (ROOT / "docs" / "index.md").read_text()
    rows = [row.replace("](docs/", "](").replace(" (`examples/`)", "") for row in readme_table()]
    missing = [row for row in rows if row not in index.splitlines()]
    assert not missing, missing


def test_the_readme_table_names_every_page_of_the_guide():
    """Every page of the site's guide (beside the index and the reference) is one the README points to."""
    table = "\n".join(readme_table())
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert not [page for page in sorted(pages) if f"(docs/{page})" not in table]


def operator_block() -> str:
    section = README[README.index("Operators use the same verbs") :]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_operator_commands_work_on_the_embedding_examples_store(tmp_path):
    """Pasted after the embedding example, each operator command naming its agent succeeds."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "DURABLY_STORE", "DURABLY_NAMESPACE")}
    ran = subprocess.run([sys.executable, "-c", embedding_example()], cwd=tmp_path, capture_output=True, env=env)
    assert ran.returncode == 0, ran.stderr
    lines = [line.split("#", 1)[0].strip() for line in operator_block().splitlines()]
    for line in lines:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = value
    durably = str(Path(sys.executable).with_name("durably"))
    naming_agents = [line for line in lines if "ticket-4711" in line or line == "durably agents"]
    assert len(naming_agents) >= 3, lines
    for line in naming_agents:
        proc = subprocess.run(
            [durably, *line.split()[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
        )
        assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        assert proc.stdout.strip(), line


def test_getting_started_runs_after_the_readmes_example(tmp_path):
    """A newcomer runs the README's example, then the getting-started one, in one folder: both run."""
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    first = re.search(r"```python\n(.*?)```", guide[guide.index("## A first agent") :], re.S).group(1)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "DURABLY_STORE", "DURABLY_NAMESPACE")}
    for code in (embedding_example(), first):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished Good news: order 4711 left the warehouse yesterday."
    history = re.search(r"`durably history ([^`]*)`", guide).group(1).split()
    durably = str(Path(sys.executable).with_name("durably"))
    shown = subprocess.run([durably, "history", *history], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "tool_result" in shown.stdout and "finished" in shown.stdout


def test_every_install_line_installs_from_a_clone():
    """durably is not on the package index yet (getting-started.md): no page may tell a reader to
    ``pip install 'durably[...]'`` from it; every install line is the clone's ``pip install -e``."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    from_the_index = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"pip install (-q )?['\"]?durably", line)
    ]
    assert not from_the_index, "\n".join(from_the_index)
