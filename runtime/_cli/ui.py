"""``durably ui``: the web console (``durably._console``, extra ``durably[ui]``) served by uvicorn."""

from __future__ import annotations

import sys

import click

from durably._cli.options import encryption_from_env, store_command
from durably._cli.output import Output
from durably.errors import ConsoleConfigError, ConsoleNotInstalledError


def _print_token_hash(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--hash-token``: read a token from stdin, print its ``token_hash`` for an operators file, exit."""
    if not value or ctx.resilient_parsing:
        return
    token = sys.stdin.readline().rstrip("\r\n")
    try:
        try:
            from durably._console.operators import hash_token
        except ImportError as exc:
            raise ConsoleNotInstalledError.of("durably ui", "ui", exc) from None
        click.echo(hash_token(token))
    except (ConsoleConfigError, ConsoleNotInstalledError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    ctx.exit(0)


@click.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="address to listen on; anything but loopback needs a token"
)
@click.option("--port", type=click.IntRange(1, 65535), default=8421, show_default=True, help="TCP port to listen on")
@click.option(
    "--token",
    envvar="DURABLY_UI_TOKEN",
    show_envvar=True,
    default=None,
    help="access token every request must carry (at least 16 characters): one unnamed approver",
)
@click.option(
    "--operators",
    "operators_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file of named operators (name, role approver or read-only, token_hash); see --hash-token",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME[:PORT]",
    help="another Host name the console answers to, e.g. a reverse proxy's (repeatable)",
)
@click.option(
    "--hash-token",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_print_token_hash,
    help="read a token on stdin, print its token_hash for the operators file, and exit",
)
@click.option(
    "--show-content",
    is_flag=True,
    help="show record content (messages, results), after the redaction policy masked secrets",
)
@store_command
def ui(
    store: str,
    namespace: str,
    host: str,
    port: int,
    token: str | None,
    operators_file: str | None,
    allowed_hosts: tuple[str, ...],
    show_content: bool,
    out: Output,
) -> None:
    """Serve the web console: agents, timelines, state at any seq, approvals."""
    try:
        import uvicorn

        from durably._console import ContentPolicy, create_app
    except ImportError as exc:
        raise ConsoleNotInstalledError.of("durably ui", "ui", exc) from None
    app = create_app(
        store,
        namespace=namespace,
        token=token,
        operators=operators_file,
        host=host,
        port=port,
        allowed_hosts=allowed_hosts,
        content=ContentPolicy(show=show_content),
        encryption=encryption_from_env(),
    )
    out.line(
        f"durably console on http://{host}:{port}/ (namespace {namespace!r} of {store})"
        + ("; open it with ?token=..." if token or operators_file else "")
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


COMMANDS = [ui]
