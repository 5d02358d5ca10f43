"""A feature whose optional extra is not installed raises ``ExtraNotInstalledError`` naming the extra.

The same error for every extra (an ``ImportError`` and a ``DurablyError``, with
``pip install -e '.[...]'`` in its message and the ``ModuleNotFoundError`` as its
``__cause__``), and one error line from the ``durably`` command, not a traceback.
Each case runs in a subprocess in which the extra's library is made unimportable
(``sys.modules[name] = None``: ``import name`` then raises ``ModuleNotFoundError``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from durably.errors import ExtraNotInstalledError


def run_without(missing: str, body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter in which ``missing`` cannot be imported."""
    code = f"import sys\nsys.modules[{missing!r}] = None  # not installed\n{body}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


CHECK = (
    "import durably\n"
    "try:\n"
    "    {action}\n"
    "except durably.ExtraNotInstalledError as exc:\n"
    "    assert isinstance(exc, ImportError) and isinstance(exc, durably.DurablyError), exc\n"
    "    assert exc.extra == {extra!r}, exc.extra\n"
    "    assert isinstance(exc.__cause__, ModuleNotFoundError), repr(exc.__cause__)\n"
    "    assert exc.__cause__.name.partition('.')[0] == {missing!r}, exc.__cause__.name\n"
    "    print(exc)\n"
    "else:\n"
    "    raise SystemExit('no error')\n"
)


@pytest.mark.parametrize(
    "action, missing, extra, feature",
    [
        ("import durably.storage.conformance", "pytest", "testing", "durably.storage.conformance"),
        ("import durably.integrations.langgraph", "langchain_core", "langgraph", "durably.integrations.langgraph"),
        ("import durably.integrations.langgraph", "langgraph", "langgraph", "durably.integrations.langgraph"),
        ("import durably.integrations.openai_agents", "agents", "openai-agents", "durably.integrations.openai_agents"),
        ("durably.storage.open_store('s3://b/p')", "aiobotocore", "s3", "durably.adapters.s3"),
        ("import durably.adapters.s3", "aiobotocore", "s3", "durably.adapters.s3"),
        ("durably.storage.open_store('postgresql://u@h/db')", "asyncpg", "postgres", "durably.adapters.postgres"),
        ("durably.storage.open_store('postgres://u@h/db')", "asyncpg", "postgres", "durably.adapters.postgres"),
    ],
    ids=[
        "conformance-pytest",
        "langgraph-langchain_core",
        "langgraph-langgraph",
        "openai_agents-agents",
        "open_store-s3",
        "import-s3",
        "open_store-postgresql",
        "open_store-postgres",
    ],
)
def test_a_feature_without_its_extra_raises_extra_not_installed(action, missing, extra, feature):
    proc = run_without(missing, "import durably.storage\n" + CHECK.format(action=action, missing=missing, extra=extra))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"pip install -e '.[{extra}]'" in proc.stdout and feature in proc.stdout


def test_the_cli_prints_one_error_line_for_a_store_without_its_extra():
    proc = run_without(
        "aiobotocore", "from durably._cli.main import main\nsys.exit(main(['agents', '--store', 's3://b/p']))\n"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith("error: ExtraNotInstalledError: ") and "pip install -e '.[s3]'" in lines[0]


def test_the_cli_json_error_names_the_extra():
    proc = run_without(
        "asyncpg",
        "from durably._cli.main import main\nsys.exit(main(['agents', '--json', '--store', 'postgresql://u@h/db']))\n",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert '"type": "ExtraNotInstalledError"' in proc.stdout and "'.[postgres]'" in proc.stdout


def test_only_the_extras_own_modules_are_translated():
    """A module missing inside durably (a bug, a broken install) surfaces as itself."""
    with pytest.raises(ModuleNotFoundError) as caught:
        with ExtraNotInstalledError.guard("durably.adapters.s3", "s3", "aiobotocore", "botocore"):
            import durably_no_such_module  # noqa: F401
    assert not isinstance(caught.value, ExtraNotInstalledError)
    assert caught.value.name == "durably_no_such_module"


def test_a_missing_submodule_of_the_extra_is_translated():
    with pytest.raises(ExtraNotInstalledError) as caught:
        with ExtraNotInstalledError.guard("durably.adapters.s3", "s3", "aiobotocore", "botocore"):
            import botocore.no_such_submodule  # noqa: F401
    assert caught.value.extra == "s3" and isinstance(caught.value.__cause__, ModuleNotFoundError)
    assert "pip install -e '.[s3]'" in str(caught.value)


def test_an_import_error_that_is_not_a_missing_module_propagates():
    with pytest.raises(ImportError) as caught:
        with ExtraNotInstalledError.guard("durably.adapters.s3", "s3", "aiobotocore"):
            from durably.errors import NoSuchName  # type: ignore[attr-defined]  # noqa: F401
    assert not isinstance(caught.value, ExtraNotInstalledError)
