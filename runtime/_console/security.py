"""Who may use the console, and proof that a request came from its own page at its own address.

* **Binding**: 127.0.0.1 by default. Any other address needs credentials
  (``--token``, ``$DURABLY_UI_TOKEN`` or ``--operators``); ``check_binding``
  refuses to start without, since the console can approve what agents do.
* **Host allowlist**: a request whose ``Host`` header is not one of the
  console's own names is refused (400) before anything else. Without it a page
  on any domain an attacker re-binds to 127.0.0.1 (DNS rebinding) is, to the
  browser, same-origin with the console: it could read pages and post forms.
  Allowed: the bound address with its port, ``localhost``, ``127.0.0.1`` and
  ``[::1]`` with the port when bound to loopback, the machine's names when
  bound to every address, and what the operator adds (``--allowed-host``: a
  name allows it on any port, ``name:port`` that port only).
* **Credentials**: when configured (``operators``), every request carries a
  token: ``Authorization: Bearer <token>``, or once as ``?token=<token>``,
  which sets an HttpOnly, SameSite=Strict cookie and redirects to the same
  page without it (so it does not stay in the address bar or the history).
  The token names the operator and the operator's role; a ``read-only``
  operator's POSTs are refused (403).
* **CSRF**: the double-submit cookie pattern (OWASP's CSRF cheat sheet): a
  random token in a SameSite=Strict cookie, the same value in a hidden field
  of every form; a POST without the cookie, or whose ``Origin`` is not one of
  the allowed hosts (or is ``null``), is refused by the middleware, one whose
  field does not match the cookie by ``require_csrf`` in the route (both 403).
* **Headers**: a Content-Security-Policy that allows only the console's own
  stylesheet and forms (no scripts at all), ``nosniff``, no referrer to other sites, no framing.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from urllib.parse import SplitResult, urlsplit

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from durably._console.operators import ANONYMOUS, Operator, Operators
from durably.errors import ConsoleConfigError, CSRFError

TOKEN_COOKIE = "durably_ui_token"
CSRF_COOKIE = "durably_csrf"
CSRF_FIELD = "csrf"
HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" even on
    # the console's own form posts, and the origin check needs the real one.
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
_WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, operators: Operators) -> None:
    """Raise ``ConsoleConfigError`` when ``host`` is not loopback and ``operators`` require no token."""
    if not is_loopback(host) and not operators.required:
        raise ConsoleConfigError(
            f"binding the console to {host} needs credentials (--token, $DURABLY_UI_TOKEN or --operators)"
        )


class HostAllowlist:
    """The ``Host`` values (and so the origins) the console answers to.

    ``host``/``port``: where it listens; ``extra``: names the operator adds,
    ``name`` (any port) or ``name:port``. Raises ``ConsoleConfigError`` for an
    extra value that is not a host name, an address or either with a port.
    """

    def __init__(self, host: str, port: int, extra: Iterable[str] = ()) -> None:
        self.exact: set[str] = set()
        self.any_port: set[str] = set()
        names = {_bracketed(host)}
        if is_loopback(host):
            names |= {"localhost", "127.0.0.1", "[::1]"}
        elif host in _WILDCARDS:
            names |= {"localhost", "127.0.0.1", "[::1]", socket.gethostname().lower(), socket.getfqdn().lower()}
        for name in names:
            self.exact.add(f"{name}:{port}")
            if port == 80:
                self.exact.add(name)
        for value in extra:
            parsed = urlsplit(f"//{value.strip().lower()}")
            given_port = _port(parsed)
            if (
                not parsed.hostname
                or given_port == -1
                or parsed.username
                or parsed.path
                or parsed.query
                or parsed.fragment
            ):
                raise ConsoleConfigError(f"--allowed-host {value!r} is not a host name or name:port")
            name = _bracketed(parsed.hostname)
            if given_port is None:
                self.any_port.add(name)
            else:
                self.exact.add(f"{name}:{given_port}")

    def allows(self, netloc: str) -> bool:
        """Whether ``netloc`` (a ``Host`` header, or an origin's host[:port]) is one of ours."""
        netloc = netloc.lower()
        if netloc in self.exact:
            return True
        parsed = urlsplit(f"//{netloc}")
        if _port(parsed) == -1 or parsed.hostname is None or parsed.username is not None:
            return False
        if parsed.path or parsed.query or parsed.fragment:
            return False
        return _bracketed(parsed.hostname) in self.any_port

    def origin_allowed(self, origin: str) -> bool:
        """Whether an ``Origin`` header names one of our own origins (``null`` never does)."""
        parsed = urlsplit(origin)
        return parsed.scheme in ("http", "https") and not parsed.path and self.allows(parsed.netloc)


def _port(parsed: SplitResult) -> int | None:
    """The port of a split URL: None when it names none, -1 when it is not a port."""
    try:
        return parsed.port
    except ValueError:
        return -1


def _bracketed(host: str) -> str:
    """An IPv6 address as it appears in a ``Host`` header: in brackets."""
    host = host.lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def csrf_token(request: Request) -> str:
    """The CSRF token of this browser (set as a cookie by the middleware)."""
    token: str = request.scope["state"]["csrf"]
    return token


def operator_of(request: Request) -> Operator:
    """Who made ``request``: the operator its credential names (set by the middleware)."""
    operator: Operator = request.scope["state"]["operator"]
    return operator


async def require_csrf(request: Request) -> dict[str, str]:
    """The request's form fields, once its ``csrf`` field matched the browser's CSRF cookie.

    Raises ``CSRFError`` otherwise. Every state-changing route calls it first.
    """
    form = await request.form()
    field = form.get(CSRF_FIELD)
    if not isinstance(field, str) or not hmac.compare_digest(field.encode(), csrf_token(request).encode()):
        raise CSRFError("CSRF check failed: reload the page and try again")
    return {k: v for k, v in form.items() if isinstance(v, str)}


class ConsoleSecurity:
    """ASGI middleware: the Host allowlist, the operator's token and role, the CSRF check on POST,
    the security headers."""

    def __init__(self, app: ASGIApp, *, operators: Operators, hosts: HostAllowlist) -> None:
        self.app = app
        self.operators = operators
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the console has none; refused before any check could be skipped
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if not self.hosts.allows(request.headers.get("host", "")):
            refusal: Response = PlainTextResponse(
                "this console does not answer to that Host (start it with --allowed-host NAME to add one)", 400
            )
            await self._with_headers(refusal, scope, receive, send)
            return
        operator = await self._operator(request)
        if isinstance(operator, Response):
            await self._with_headers(operator, scope, receive, send)
            return
        csrf = request.cookies.get(CSRF_COOKIE) or ""
        fresh = len(csrf) != 43  # token_urlsafe(32) is 43 characters
        if fresh:
            csrf = secrets.token_urlsafe(32)
        state = scope.setdefault("state", {})
        state["csrf"], state["operator"] = csrf, operator
        if request.method not in ("GET", "HEAD"):
            refused = None
            if not self._origin_ok(request, fresh):
                refused = "CSRF check failed: reload the page and try again"
            elif not operator.may_decide:
                refused = f"{operator.name} is a {operator.role} operator: nothing can be changed with this login"
            if refused is not None:
                await self._with_headers(PlainTextResponse(refused, 403), scope, receive, send)
                return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                if fresh:
                    cookie = f"{CSRF_COOKIE}={csrf}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", cookie.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _operator(self, request: Request) -> Operator | Response:
        """Who the request is, or the response to send instead (a login redirect, a 401)."""
        if not self.operators.required:
            return ANONYMOUS
        given = request.query_params.get("token")
        if given is not None:
            if await self.operators.identify(given) is None:
                return PlainTextResponse("wrong token", 401)
            clean = URL(str(request.url)).remove_query_params("token")
            response = RedirectResponse(str(clean.replace(scheme="", netloc="")) or "/", 303)
            response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
            return response
        header = request.headers.get("authorization", "")
        offered = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(TOKEN_COOKIE, "")
        operator = await self.operators.identify(offered)
        if operator is not None:
            return operator
        return PlainTextResponse("this console needs a token: open it with ?token=...", 401)

    def _origin_ok(self, request: Request, fresh: bool) -> bool:
        """A state-changing request must come with our CSRF cookie and, when it says where
        it comes from, from one of our own origins; the form field is compared with the
        cookie by ``require_csrf`` in the route."""
        origin = request.headers.get("origin")
        if origin is not None and not self.hosts.origin_allowed(origin):
            return False
        return not fresh

    @staticmethod
    async def _with_headers(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
        response.headers.update(HEADERS)
        await response(scope, receive, send)
