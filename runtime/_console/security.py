"""Who may use the console, and proof that a state-changing request came from its own page.

* **Binding**: 127.0.0.1 by default. Any other address needs an access token
  (``--token`` or ``$DURABLY_UI_TOKEN``); ``check_binding`` refuses to start
  without one, since the console can approve what agents do.
* **Access token**: when set, every request carries it: ``Authorization:
  Bearer <token>``, or once as ``?token=<token>``, which sets an HttpOnly,
  SameSite=Strict cookie and redirects to the same page without it (so it
  does not stay in the address bar or the history).
* **CSRF**: the double-submit cookie pattern (OWASP's CSRF cheat sheet): a
  random token in a SameSite=Strict cookie, the same value in a hidden field
  of every form; a POST without the cookie or whose ``Origin`` names another
  site is refused by the middleware, one whose field does not match the cookie
  by ``require_csrf`` in the route (both 403).
* **Headers**: a Content-Security-Policy that allows only the console's own
  stylesheet and forms (no scripts at all), ``nosniff``, no referrer, no framing.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from urllib.parse import urlsplit

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from durably.errors import ConsoleConfigError, CSRFError

TOKEN_COOKIE = "durably_ui_token"
CSRF_COOKIE = "durably_csrf"
CSRF_FIELD = "csrf"
HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Raise ``ConsoleConfigError`` when ``host`` is not loopback and ``token`` is empty,
    or the token is shorter than 16 characters (guessable)."""
    if token is not None and len(token) < 16:
        raise ConsoleConfigError("the console token must be at least 16 characters")
    if not is_loopback(host) and not token:
        raise ConsoleConfigError(f"binding the console to {host} needs a token (--token or $DURABLY_UI_TOKEN)")


def csrf_token(request: Request) -> str:
    """The CSRF token of this browser (set as a cookie by the middleware)."""
    token: str = request.scope["state"]["csrf"]
    return token


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
    """ASGI middleware: the access token, the CSRF check on POST, the security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        refusal = self._refusal(request)
        if refusal is not None:
            await self._with_headers(refusal, scope, receive, send)
            return
        csrf = request.cookies.get(CSRF_COOKIE) or ""
        fresh = len(csrf) != 43  # token_urlsafe(32) is 43 characters
        if fresh:
            csrf = secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf"] = csrf
        if request.method not in ("GET", "HEAD") and not self._origin_ok(request, fresh):
            await self._with_headers(
                PlainTextResponse("CSRF check failed: reload the page and try again", 403), scope, receive, send
            )
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

    def _refusal(self, request: Request) -> Response | None:
        if not self.token:
            return None
        given = request.query_params.get("token")
        if given is not None:
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return PlainTextResponse("wrong token", 401)
            clean = URL(str(request.url)).remove_query_params("token")
            response = RedirectResponse(str(clean.replace(scheme="", netloc="")) or "/", 303)
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
            return response
        header = request.headers.get("authorization", "")
        offered = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(TOKEN_COOKIE, "")
        if offered and hmac.compare_digest(offered.encode(), self.token.encode()):
            return None
        return PlainTextResponse("this console needs its token: open it with ?token=...", 401)

    @staticmethod
    def _origin_ok(request: Request, fresh: bool) -> bool:
        """A state-changing request must come with our CSRF cookie and from our own origin;
        the form field is compared with the cookie by ``require_csrf`` in the route."""
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            return False
        return not fresh

    @staticmethod
    async def _with_headers(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
        response.headers.update(HEADERS)
        await response(scope, receive, send)
