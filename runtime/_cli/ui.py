"""``durably ui``: the web console (``durably._console``, extra ``durably[ui]``) served by uvicorn."""

from __future__ import annotations

import click

from durably._cli.options import encryption_from_env, store_command
from durably._cli.output import Output
from durably.errors import ConsoleNotInstalledError


@click.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="address to listen on; anything but loopback needs --token"
)
@click.option("--port", type=click.IntRange(1, 65535), default=8421, show_default=True, help="TCP port to listen on")
@click.option(
    "--token",
    envvar="DURABLY_UI_TOKEN",
    show_envvar=True,
    default=None,
    help="access token every request must carry (at least 16 characters)",
)
@click.option(
    "--show-content",
    is_flag=True,
    help="show record content (messages, arguments, results), after the redaction policy masked secrets",
)
@store_command
def ui(store: str, namespace: str, host: str, port: int, token: str | None, show_content: bool, out: Output) -> None:
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
        host=host,
        content=ContentPolicy(show=show_content),
        encryption=encryption_from_env(),
    )
    out.line(
        f"durably console on http://{host}:{port}/ (namespace {namespace!r} of {store})"
        + ("; open it with ?token=..." if token else "")
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


COMMANDS = [ui]
