"""The console's ASGI app: server-rendered pages over one store, no build step, no script.

    GET  /                          agents, with status and definition filters
    GET  /agent?id=AGENT            one agent: description, result, open approvals, timeline
    GET  /state?agent=AGENT&seq=N   its folded state at seq N (content: see ContentPolicy)
    POST /decide                    approve, deny, or "it happened" (with a JSON result); the
                                    form names the agent and the approval (agent_q, approval_q)

Agent ids may hold any character, ``/`` included, so they travel as query
parameters or form fields, never as a piece of the path a route could split.
In a form (``*_q`` fields) they are percent-encoded: every page value passes
through ``neutralise``, which would change an id holding control characters,
and a browser would not send some characters of a field back as they were.

Pages are Jinja2 templates with autoescaping, and every value printed passes
through ``neutralise`` first (``finalize``), so control characters chosen by a
model show as escapes here as on the terminal. Decisions call
``Runtime.approve`` on a runtime with no definitions: they append the same
records as ``durably approve``, and a ``serve()`` elsewhere runs the agent on.
The decision records the operator the request's credential names (see
``operators``); an approval's arguments are always shown, after the redaction
policy, since nobody can decide a call they cannot see.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from collections.abc import AsyncIterator, Iterable
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from durably._cli.activity import steps_cell, steps_line
from durably._cli.output import neutralise, when
from durably._console.operators import Operators
from durably._console.security import (
    ConsoleSecurity,
    HostAllowlist,
    check_binding,
    csrf_token,
    operator_of,
    require_csrf,
)
from durably._console.timeline import ContentPolicy, timeline
from durably._operate.reported_result import parse_reported_result
from durably._reading import threads
from durably._runtime import Runtime
from durably.errors import (
    AgentNotFoundError,
    CSRFError,
    InvalidArgumentError,
    InvalidCommandError,
    SeqOutOfRangeError,
)
from durably.storage._codec import FrameCipher
from durably.storage._errors import DurablyError
from durably.storage._url_redaction import SecretScrubber, redact_url

_HERE = files("durably._console")
#: State fields that describe the run rather than quote a model, a tool or a user.
_NOT_CONTENT = frozenset(
    {"namespace", "agent_id", "run_id", "definition", "status", "usage", "budget", "last_seq", "forked_from"}
)
TIMELINE_ROWS = 500  # rows of one timeline page
STATUSES = (
    "running",
    "waiting_approval",
    "waiting_child",
    "suspended",
    "sleeping",
    "finished",
    "failed",
    "cancelled",
    "unreadable",
)


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(_HERE / "templates")),
        autoescape=select_autoescape(default=True),
        finalize=lambda value: neutralise(value, newlines=True) if isinstance(value, str) else value,
    )
    env.filters["when"] = when
    env.filters["steps_cell"] = steps_cell  # a function agent's calls where it took no model steps, as the CLI says
    env.filters["steps_line"] = steps_line
    env.filters["url"] = lambda value: quote(str(value), safe="")
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True, default=str)
    return env


def create_app(
    store: str,
    *,
    namespace: str = "default",
    token: str | None = None,
    operators: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8421,
    allowed_hosts: Iterable[str] = (),
    content: ContentPolicy | None = None,
    encryption: FrameCipher | None = None,
) -> Starlette:
    """The console for ``namespace`` of ``store`` (a URL), to serve on ``host``:``port``.

    ``token``: one unnamed approver's token; ``operators``: an operators file
    (named operators, their roles and token hashes, see ``operators``). With
    either, every request must carry a token, and one of them is required when
    ``host`` is not loopback. ``allowed_hosts``: more ``Host`` names to answer
    to than the bound address and localhost (``name`` or ``name:port``, e.g.
    a reverse proxy's). ``content``: what of record content the pages show
    (default: none but approval arguments); ``encryption``: to read an
    encrypted store. Raises ``ConsoleConfigError`` for a non-loopback ``host``
    without credentials, a token shorter than 16 characters, an operators file
    that cannot be used, or an allowed host that is not a host name.
    """
    credentials = Operators.build(token=token, file=operators)
    check_binding(host, credentials)
    hosts = HostAllowlist(host, port, allowed_hosts)
    content = content or ContentPolicy()
    env = _templates()
    runtime = Runtime(store, namespace=namespace, encryption=encryption)
    # Every page names its store: redacted, and the page scrubbed of the URL's secrets
    # whatever else embedded them (an error message), as the CLI's output is.
    secrets, shown_store = SecretScrubber([store]), redact_url(store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with runtime:
            yield

    def page(request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        body = env.get_template(name).render(
            namespace=namespace,
            store=shown_store,
            csrf=csrf_token(request),
            operator=operator_of(request),
            show_content=content.show,
            **context,
        )
        return HTMLResponse(secrets.text(body), code)

    async def agents(request: Request) -> Response:
        status, definition = request.query_params.get("status", ""), request.query_params.get("definition", "")
        found = await runtime.describe_all()
        definitions = sorted({d.definition.get("name", "") for d in found} - {""})
        shown = [
            d
            for d in found
            if (not status or d.status == status) and (not definition or d.definition.get("name") == definition)
        ]
        shown.sort(key=lambda d: d.last_activity_at or 0.0, reverse=True)
        return page(
            request,
            "agents.html",
            agents=shown,
            statuses=STATUSES,
            definitions=definitions,
            status=status,
            definition=definition,
        )

    async def agent(request: Request) -> Response:
        agent_id = request.query_params.get("id", "")
        after = request.query_params.get("after")
        after_seq = (
            int(after) if after is not None and after.isascii() and after.isdigit() and len(after) <= 18 else None
        )
        try:
            info = await runtime.describe(agent_id)
        except AgentNotFoundError as exc:
            return page(request, "error.html", code=404, message=str(exc))
        except InvalidArgumentError as exc:
            return page(request, "error.html", code=400, heading="Refused", message=str(exc))
        entries = runtime.history(agent_id, after_seq=after_seq or 0, payload=True)
        rows = await timeline(entries, content, info.definition.get("name"), TIMELINE_ROWS, newest=after_seq is None)
        name = info.definition.get("name")
        approvals = [
            dict(a, arguments=content.redacted("approval_requested", a, name).get("arguments"))
            for a in info.open_approvals
        ]
        result = None
        if info.status == "finished":
            shown = content.view("finished", {"result": info.result}, name)
            result = shown["result"] if shown is not None else _shape(info.result)
        children = []
        for child in info.state.children.values():
            try:
                status = (await runtime.status(child["agent_id"])).status  # its own journal: the live truth
            except AgentNotFoundError:
                status = "purged"
            children.append({**child, "status": status})
        earlier = max(rows[0].seq - 1 - TIMELINE_ROWS, 0) if rows and rows[0].seq > 1 else None
        full = after_seq is not None and len(rows) >= TIMELINE_ROWS
        later = (rows[-1].result_seq or rows[-1].seq) if full else None
        return page(
            request,
            "agent.html",
            info=info,
            rows=rows,
            approvals=approvals,
            earlier=earlier,
            later=later,
            result=result,
            parent=(info.state.parent or {}).get("agent_id"),
            children=children,
            notice=request.query_params.get("notice", ""),
            can_answer=_can_answer(),
        )

    async def state(request: Request) -> Response:
        agent_id = request.query_params.get("agent") or unquote(request.query_params.get("agent_q", ""))
        thread = await threads.summary_if_thread(runtime.store, runtime.codec.codec, runtime.namespace, agent_id)
        if thread is not None:  # a LangGraph thread: its summary, and its newest values as content
            values = await threads.newest_values(runtime.store, runtime.namespace, agent_id, runtime.encryption)
            shape = {**thread.to_json(), "values": values if content.show else _shape(values)}
            return page(request, "state.html", agent_id=agent_id, seq=thread.seq, status=thread.status, state=shape)
        try:
            seq = int(request.query_params.get("seq", "0"))
            folded = await (runtime.state_at(agent_id, seq) if seq else runtime.status(agent_id))
        except InvalidArgumentError as exc:
            return page(request, "error.html", code=400, heading="Refused", message=str(exc))
        except ValueError as exc:
            return page(request, "error.html", code=400, message=f"bad seq: {exc}")
        except (AgentNotFoundError, SeqOutOfRangeError) as exc:
            return page(request, "error.html", code=404, message=str(exc))
        wire = folded.to_wire()
        shape = {k: (v if content.show or k in _NOT_CONTENT else _shape(v)) for k, v in wire.items()}
        return page(request, "state.html", agent_id=agent_id, seq=folded.last_seq, status=folded.status, state=shape)

    async def decide(request: Request) -> Response:
        try:
            form = await require_csrf(request)
        except CSRFError as exc:
            return PlainTextResponse(str(exc), 403)
        agent_id, approval_id = unquote(form.get("agent_q", "")), unquote(form.get("approval_q", ""))
        action = form.get("action", "")
        kwargs: dict[str, Any] = {
            "approved": action != "deny",
            "by": f"console: {operator_of(request).name}",
            "note": form.get("note", ""),
        }
        try:  # the form itself: a bad one is the request's fault (400)
            if action not in ("approve", "deny", "happened"):
                raise InvalidCommandError(f"unknown action {action!r}")
            if action == "happened":
                if not _can_answer():
                    raise InvalidCommandError("this durably cannot record 'it happened' answers")
                kwargs["result"] = parse_reported_result(form.get("result") or "null")
        except InvalidCommandError as exc:
            return page(request, "error.html", code=400, heading="Refused", message=str(exc))
        try:  # the decision: the agent's state may refuse it (shown on its page)
            state = await runtime.approve(agent_id, approval_id, **kwargs)
            placement = getattr(state, "placement", None)  # where the agent runs now, when the runtime says
            where = f" ({placement.reason})" if placement is not None and state.status == "running" else ""
            notice = f"{approval_id}: {'denied' if action == 'deny' else 'approved'}; status now {state.status}{where}"
        except DurablyError as exc:
            notice = f"refused: {type(exc).__name__}: {exc}"
        return RedirectResponse(
            f"/agent?id={quote(agent_id, safe='')}&notice={quote(secrets.text(notice), safe='')}", 303
        )

    async def stylesheet(request: Request) -> Response:
        return Response((_HERE / "static" / "console.css").read_text(encoding="utf-8"), media_type="text/css")

    routes = [
        Route("/", agents),
        Route("/console.css", stylesheet),
        Route("/agent", agent),
        Route("/state", state),
        Route("/decide", decide, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(ConsoleSecurity, operators=credentials, hosts=hosts)
    return app


def _can_answer() -> bool:
    """Whether ``Runtime.approve`` takes ``result=`` (an "it happened" answer)."""
    return "result" in inspect.signature(Runtime.approve).parameters


def _shape(value: Any) -> Any:
    """What the state holds without its content: sizes and types, never the values."""
    if isinstance(value, dict):
        return f"{{{len(value)} entries}}"
    if isinstance(value, list):
        return f"[{len(value)} items]"
    if isinstance(value, str):
        return f"text, {len(value)} characters"
    return value if isinstance(value, (int, float, bool)) or value is None else type(value).__name__


def token_from_env(token: str | None) -> str | None:
    """``token``, else ``$DURABLY_UI_TOKEN``, else None."""
    return token or os.environ.get("DURABLY_UI_TOKEN") or None
