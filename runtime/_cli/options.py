"""What every ``durably`` command shares: the store options, exit statuses, and running a command.

``store_command`` gives a command ``--store`` (``$DURABLY_STORE``) and
``--namespace``, refuses a SQLite path that does not exist (an operator verb
never creates an empty database by mistake), and turns a typed error into one
line and exit status 1. Click itself gives status 2 to usage errors.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import anyio
import click

from durably._cli.output import Output
from durably._journal.write_formats import ENV, write_formats
from durably.errors import InvalidArgumentError
from durably.storage._errors import DurablyError, InvalidStoreURLError
from durably.storage._url_redaction import redact_url

if TYPE_CHECKING:
    from durably.storage._crypto import AESGCMCipher

DEFAULT_STORE = "sqlite:///durably.db"
EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2

store_option = click.option(
    "--store",
    envvar="DURABLY_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    show_envvar=True,
    metavar="URL",
    help="store URL (sqlite:///path, postgresql://user@host/db, s3://bucket/prefix, file:///dir, memory://name)",
)
namespace_option = click.option(
    "--namespace",
    envvar="DURABLY_NAMESPACE",
    default="default",
    show_default=True,
    show_envvar=True,
    help="namespace (tenant) of the agents; the demo's is 'demo'",
)
json_option = click.option("--json", "json_mode", is_flag=True, help="print one JSON document (shapes: docs/cli.md)")


def _check_write_compat(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``value`` if it names a release ``write_formats`` knows (None: unset); a usage error if not."""
    try:
        write_formats(value, source="--write-compat")
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def write_compat_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--write-compat RELEASE`` (``$DURABLY_WRITE_COMPAT``, as ``Runtime(write_compat=)`` reads it),
    checked when parsed (an unknown release is a usage error); ``help_text`` says what the
    command writes under it. The command gets ``write_compat``: the release, or None."""
    return click.option("--write-compat", envvar=ENV, metavar="RELEASE", callback=_check_write_compat, help=help_text)


def store_command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command ``--store`` and ``--namespace`` and run it on an existing store.

    The wrapped function gets ``store`` and ``namespace`` with its other
    parameters and ``out``, the ``Output`` to print with (it masks the store URL's
    passwords), and returns an exit status (None: 0). A typed error it raises is
    printed as one line and gives status 1.
    """

    @store_option
    @namespace_option
    @wraps(fn)
    def command(**kwargs: Any) -> int:
        out = Output(kwargs.get("json_mode", False), store_urls=[kwargs["store"]])
        try:
            require_database(kwargs["store"])
            with out.secrets.guarding_logs():  # a log line printed meanwhile shows no password either
                status = fn(**kwargs, out=out)
        except (DurablyError, ValueError) as exc:
            out.error(exc)
            return EXIT_REFUSED
        return EXIT_OK if status is None else status

    return command


def require_database(url: str) -> None:
    """Operator verbs read an existing store: refuse to create an empty SQLite file by mistake.

    Raises ``InvalidStoreURLError`` (the store's URL names no database) when ``url`` is a
    ``sqlite://`` URL whose file does not exist; other URLs are left to their adapter."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite" and not Path(unquote(parts.path[1:])).exists():
        raise InvalidStoreURLError(
            f"no durably database at {unquote(parts.path[1:])!r}: pass --store URL or set $DURABLY_STORE",
            url=redact_url(url),
        )


def encryption_from_env(*, allow_plaintext: bool = False) -> AESGCMCipher | None:
    """An ``AESGCMCipher`` over ``EnvKeyProvider`` when ``$DURABLY_KEYS`` is set, else None.

    Raises ``KeyConfigError`` (a ValueError) when the variables are malformed.
    """
    if not os.environ.get("DURABLY_KEYS"):
        return None
    from durably.storage._crypto import AESGCMCipher, EnvKeyProvider

    return AESGCMCipher(EnvKeyProvider(), allow_plaintext=allow_plaintext)


def run_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` (a coroutine function) in a fresh event loop: each command owns one."""
    return anyio.run(fn, *args)
