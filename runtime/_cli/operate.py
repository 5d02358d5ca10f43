"""The commands of ``durably`` that act on an agent: approve, extend, cancel, send, retry, fork.

Each appends the same command record as the API (``Runtime.approve`` and the
others) and says what the agent's status is now and where it runs (``--json``:
as one document, ``command_json``; a refusal as ``{"error": ...}``). The agent runs on in a
runtime with its definition registered (``serve()``): this process has none.
"""

from __future__ import annotations

import getpass
import importlib
import inspect
import math
import os
from typing import Any

import click

from durably._cli.options import encryption_from_env, run_async, store_command
from durably._cli.output import Output
from durably._loop.agent import AgentDefinition
from durably._loop.state import AgentState
from durably._operate.reported_result import parse_reported_result
from durably._runtime import Runtime
from durably.errors import DefinitionNotRegisteredError, InvalidCommandError


def _runtime(store: str, namespace: str) -> Runtime:
    return Runtime(store, namespace=namespace, encryption=encryption_from_env())


#: ``--json`` of the commands that act on an agent: one document, the command's outcome (or the error).
json_option = click.option(
    "--json",
    "json_mode",
    is_flag=True,
    help='print one JSON document: {"namespace", "agent_id", "command", "status", "reason", "seq", "placement"} '
    '(placement: {"where", "reason", "holder"} or null), or {"error": ...}',
)


def command_json(namespace: str, agent_id: str, command: str, state: AgentState) -> dict[str, Any]:
    """The ``--json`` document of ``command`` (its name) on ``agent_id``: the status after it and,
    for a ``CommandResult``, where the agent runs now (``placement``; None otherwise)."""
    placement = getattr(state, "placement", None)
    return {
        "namespace": namespace,
        "agent_id": agent_id,
        "command": command,
        "status": state.status,
        "reason": state.reason,
        "seq": state.last_seq,
        "placement": placement.to_json() if placement is not None else None,
    }


def _said(out: Output, agent_id: str, verdict: str, state: AgentState, *, namespace: str, command: str) -> None:
    if out.json_mode:
        out.json(command_json(namespace, agent_id, command, state))
        return
    placement = getattr(state, "placement", None)  # a CommandResult says where the agent runs now
    if placement is not None and state.status == "running":
        hint = f" ({placement.reason})"
    else:
        hint = " (a worker with its definition registered resumes it)" if state.status == "running" else ""
    out.line(f"{agent_id}: {verdict} at seq {state.last_seq}; status now {state.status}{hint}")


def default_approver() -> str:
    """Who runs the command, for ``approve --by``: ``$USER``, else the login name the
    system knows (``getpass.getuser``: ``$LOGNAME``, ``$USERNAME``, the password database);
    ``""`` when none is known (``approve`` then refuses to record a nameless decision)."""
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError, ImportError):  # no such variables and no password entry for the uid
        return ""


def refuse_unstarted(state: AgentState, approval_id: str) -> None:
    """``--happened`` answers "what became of a call whose outcome is unknown after a crash":
    the journal holds the call's intent. Raises ``InvalidCommandError`` when the approval is
    for a call that never started (a gated call waiting for its decision: nothing happened
    to report; approve it to run it, or deny it). An unknown approval is left to ``approve``."""
    request = state.approvals.get(approval_id)
    if request is None:
        return
    entry = state.ledger.get(request.get("key", ""))
    if entry is None or not entry.get("attempts"):
        raise InvalidCommandError(
            f"approval {approval_id!r} of agent {state.agent_id} is for a call that never started "
            f"({request.get('tool', '?')}): --happened is for a call whose outcome is unknown after a crash; "
            "approve it to run it, or --deny it"
        )


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.argument("approval_id", metavar="APPROVAL")
@click.option("--deny", is_flag=True, help="refuse instead of approve")
@click.option(
    "--happened",
    is_flag=True,
    help="for a call whose outcome is unknown after a crash: it did happen, with --result as its result "
    "(refused for a call that never started)",
)
@click.option("--result", "result_json", metavar="JSON", help="the call's result (JSON), with --happened")
@click.option(
    "--by",
    default=default_approver,
    show_default="$USER, else the login name",
    help="who decides (recorded with the decision; must not be empty)",
)
@click.option("--note", default="", help="a note kept with the decision")
@json_option
@store_command
def approve(
    store: str,
    namespace: str,
    agent_id: str,
    approval_id: str,
    deny: bool,
    happened: bool,
    result_json: str | None,
    by: str,
    note: str,
    json_mode: bool,
    out: Output,
) -> None:
    """Decide an open approval (what it would run: durably show AGENT)."""
    if happened and (deny or result_json is None):
        raise click.UsageError("--happened needs --result JSON and cannot be combined with --deny")
    if result_json is not None and not happened:
        raise click.UsageError("--result goes with --happened")
    by = by.strip()
    if not by:
        raise click.UsageError("--by is empty and no login name is known: say who decides, --by NAME")
    extra: dict[str, Any] = {}
    if happened:
        extra["result"] = parse_reported_result(result_json or "")  # --happened requires --result (checked above)
        if "result" not in inspect.signature(Runtime.approve).parameters:
            raise InvalidCommandError(
                "this durably cannot record 'it happened' answers (Runtime.approve has no result=)"
            )

    async def go() -> AgentState:
        async with _runtime(store, namespace) as rt:
            if happened:
                refuse_unstarted(await rt.status(agent_id), approval_id)
            return await rt.approve(
                agent_id, approval_id, approved=not deny, by=f"{by} (pid {os.getpid()})", note=note, **extra
            )

    state = run_async(go)
    _said(
        out,
        agent_id,
        "denied" if deny else "approved: it happened" if happened else "approved",
        state,
        namespace=namespace,
        command="approve",
    )


def _amount(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise click.BadParameter(f"{value} is not a finite amount >= 0", param_hint="--cost-usd")
    return value


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option("--steps", type=click.IntRange(min=0), default=0, show_default=True, help="more model steps")
@click.option("--tokens", type=click.IntRange(min=0), default=0, show_default=True, help="more tokens")
@click.option(
    "--cost-usd",
    type=float,
    default=0.0,
    show_default=True,
    callback=lambda c, p, v: _amount(v),
    help="more spend, in US dollars",
)
@json_option
@store_command
def extend(
    store: str, namespace: str, agent_id: str, steps: int, tokens: int, cost_usd: float, json_mode: bool, out: Output
) -> None:
    """Raise an agent's budget; a suspended one becomes runnable."""

    async def go() -> AgentState:
        async with _runtime(store, namespace) as rt:
            return await rt.extend_budget(agent_id, steps=steps, tokens=tokens, cost_usd=cost_usd)

    _said(out, agent_id, "budget extended", run_async(go), namespace=namespace, command="extend")


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option("--reason", default="cancelled from the command line", show_default=True, help="why (recorded)")
@json_option
@store_command
def cancel(store: str, namespace: str, agent_id: str, reason: str, json_mode: bool, out: Output) -> None:
    """Stop an agent for good (after its current step)."""

    async def go() -> AgentState:
        async with _runtime(store, namespace) as rt:
            return await rt.cancel(agent_id, reason)

    _said(out, agent_id, "cancelled", run_async(go), namespace=namespace, command="cancel")


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.argument("text")
@click.option("--role", default="user", show_default=True, help="the message's role in the conversation")
@json_option
@store_command
def send(store: str, namespace: str, agent_id: str, text: str, role: str, json_mode: bool, out: Output) -> None:
    """Add a message to the agent's conversation (its next model call sees it)."""

    async def go() -> AgentState:
        async with _runtime(store, namespace) as rt:
            return await rt.send(agent_id, text, role=role)

    _said(out, agent_id, "message sent", run_async(go), namespace=namespace, command="send")


def load_definitions(specs: tuple[str, ...]) -> list[AgentDefinition]:
    """The agent definitions named by ``MODULE:ATTR`` specs (an ``AgentDefinition`` or an
    iterable of them, as ``uvicorn`` names an app). Raises ``click.BadParameter``."""
    found: list[AgentDefinition] = []
    for spec in specs:
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise click.BadParameter(f"{spec!r} is not MODULE:ATTR", param_hint="--agents")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise click.BadParameter(f"{spec}: {exc}", param_hint="--agents") from None
        items = (
            [value] if isinstance(value, AgentDefinition) else list(value) if isinstance(value, (list, tuple)) else []
        )
        if not items or not all(isinstance(item, AgentDefinition) for item in items):
            raise click.BadParameter(f"{spec} is not an AgentDefinition or a list of them", param_hint="--agents")
        found.extend(items)
    return found


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option(
    "--agents",
    "agent_specs",
    multiple=True,
    metavar="MODULE:ATTR",
    help="import the agent's definition (an AgentDefinition, or a list of them) to run it here",
)
@json_option
@store_command
def retry(
    store: str, namespace: str, agent_id: str, agent_specs: tuple[str, ...], json_mode: bool, out: Output
) -> None:
    """Run a failed agent again from its journal (Runtime.retry).

    With --agents MODULE:ATTR (its definition, importable) it runs here until
    it stops or parks; without, it is made runnable for a serve() worker that
    has its definition.
    """
    if not hasattr(Runtime, "retry"):
        raise InvalidCommandError("this durably has no Runtime.retry")
    definitions = load_definitions(agent_specs)

    async def go() -> AgentState:
        async with Runtime(store, namespace=namespace, agents=definitions, encryption=encryption_from_env()) as rt:
            handle = await rt.retry(agent_id)
            return await handle.wait() if handle is not None else await rt.status(agent_id)

    try:
        state = run_async(go)
    except DefinitionNotRegisteredError as exc:
        raise DefinitionNotRegisteredError(f"{exc}: name it with --agents MODULE:ATTR") from None
    _said(out, agent_id, "retried", state, namespace=namespace, command="retry")


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option(
    "--at", "at_seq", type=click.IntRange(min=1), required=True, help="the source's seq the fork starts after"
)
@click.option("--as", "new_agent_id", required=True, metavar="NEW", help="the new agent's id")
@json_option
@store_command
def fork(
    store: str, namespace: str, agent_id: str, at_seq: int, new_agent_id: str, json_mode: bool, out: Output
) -> None:
    """Fork an agent at a seq: a new agent with its history up to there, run anew from then on."""

    async def go() -> AgentState:
        async with _runtime(store, namespace) as rt:
            return await rt.fork(agent_id, at_seq, new_agent_id)

    state = run_async(go)
    if json_mode:
        out.json({**command_json(namespace, new_agent_id, "fork", state), "forked_from": agent_id, "at_seq": at_seq})
        return
    out.line(
        f"{new_agent_id}: fork of {agent_id} at seq {at_seq}; status {state.status}"
        + (" (a worker with its definition registered runs it)" if state.status == "running" else "")
    )


COMMANDS = [approve, extend, cancel, send, retry, fork]
