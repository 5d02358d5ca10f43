"""What a ``durably`` command imports: only its own command's module and what it runs on.

The command modules are found through ``durably._cli.main.LAZY_COMMANDS``, and
durably's own store adapters through ``durably.storage._registry.BUILTIN``;
both must stay equal to what they stand for (each module's ``COMMANDS``, the
entry points ``pyproject.toml`` declares).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from durably._cli.main import LAZY_COMMANDS, cli
from durably.storage._registry import BUILTIN

ROOT = Path(__file__).resolve().parents[2]


def test_the_lazy_command_table_names_every_command_of_its_modules() -> None:
    for module in set(LAZY_COMMANDS.values()):
        names = {command.name for command in importlib.import_module(module).COMMANDS}
        assert names == {name for name, owner in LAZY_COMMANDS.items() if owner == module}, module
    assert set(LAZY_COMMANDS) <= set(cli.commands)  # the whole tree, once walked


def test_the_builtin_schemes_are_the_declared_entry_points() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["durably.stores"]
    assert BUILTIN == declared


def test_agents_json_imports_neither_rich_nor_the_other_commands(tmp_path) -> None:
    path = tmp_path / "a.db"
    path.touch()  # an empty file: the store sets it up on open
    code = (
        "import sys\nfrom durably._cli.main import main\n"
        f"status = main(['agents', '--store', 'sqlite:///{path}', '--json'])\n"
        "print(sorted(sys.modules))\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    document, _, modules = done.stdout.rpartition("\n[")
    assert json.loads(document)["agents"] == []
    loaded = set(eval("[" + modules))  # our own printed list of names
    for unneeded in (
        "rich",
        "tenacity",
        "opentelemetry",
        "importlib.metadata",
        "durably._cli.privacy",
        "durably._cli.operate",
        "durably._cli.langgraph",
        "durably._torture",
    ):
        assert unneeded not in loaded, unneeded
