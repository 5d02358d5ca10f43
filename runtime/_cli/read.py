"""The read commands of ``durably``: ``agents``, ``show``, ``history``, ``state``.

Each opens the store, reads journals through the ``Runtime`` read API (no
agent runs here) and prints either lines for people or, with ``--json``, one
JSON document whose shape ``docs/cli.md`` documents. All text that came from a
model, a tool or a user is neutralised (``output``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from durably._cli.activity import calls_made, steps_cell, steps_line
from durably._cli.options import EXIT_OK, EXIT_REFUSED, encryption_from_env, json_option, run_async, store_command
from durably._cli.output import Output, error_json, neutralise, to_json, when
from durably._fleet.owner import OwnerIdentity
from durably._loop.state import AgentState
from durably._reading import threads
from durably._reading.describe import AgentDescription
from durably._reading.history import clip
from durably._reading.threads import ThreadSummary
from durably._runtime import Runtime
from durably.errors import AgentNotFoundError
from durably.storage._errors import DurablyError


def _runtime(store: str, namespace: str) -> Runtime:
    return Runtime(store, namespace=namespace, encryption=encryption_from_env())


async def _thread(rt: Runtime, agent_id: str) -> ThreadSummary | None:
    return await threads.summary_if_thread(rt.store, rt.codec.codec, rt.namespace, agent_id)


async def _thread_values(rt: Runtime, agent_id: str) -> dict[str, str] | str:
    return await threads.newest_values(rt.store, rt.namespace, agent_id, rt.encryption)


def _thread_lines(out: Output, summary: ThreadSummary) -> None:
    """A thread for people, as ``show`` prints an agent."""
    fields = [
        ("thread", f"{summary.stream.namespace}/{summary.stream.agent_id} (LangGraph)"),
        ("status", f"{summary.status}: {summary.reason}"),
        ("seq", str(summary.seq)),
        ("checkpoints", f"{summary.checkpoints} in namespaces {', '.join(map(repr, summary.namespaces)) or '-'}"),
        ("writes", f"{summary.writes} pending writes"),
        ("latest", ", ".join(f"{ns or 'root'}: {cid}" for ns, cid in sorted(summary.latest.items())) or "-"),
        ("step", "-" if summary.step is None else str(summary.step)),
        ("run", summary.run_id or "-"),
        ("channels", ", ".join(f"{c['channel']} ({c['form']})" for c in summary.channels) or "-"),
        ("created", when(summary.created_at)),
        ("last activity", when(summary.last_activity_at)),
    ]
    for name, value in fields:
        out.line(f"{name + ':':<15}{value}")


def short_owner(owner: str) -> str:
    """The worker id in a lease owner string durably wrote (``durably._fleet.owner``; host:pid
    unless the worker was given ``--worker-id``), else the string itself."""
    identity = OwnerIdentity.parse(owner)
    return owner if identity is None else identity.worker_id


def lease_text(info: AgentDescription, now: float | None = None, *, short: bool = False) -> str:
    """Who holds the agent's lease and until when, for people.

    ``short``: name the holder by its worker id alone, for the ``agents`` table: the full
    owner (nonce, process start, boot id, pid namespace) is ~90 characters a row and
    stays in ``show`` and ``--json``."""
    lease = info.lease
    if lease is None:
        return "none" if info.leases_supported else "(this store has no leases)"
    now = time.time() if now is None else now
    left = lease.expires_at - now
    owner = short_owner(lease.owner) if short else lease.owner
    if lease.dead:
        return f"{owner}: process gone (dead holder), lease lapses at {when(lease.expires_at)}"
    return f"{owner} until {when(lease.expires_at)} ({left:.0f}s)"


def approvals_text(info: AgentDescription) -> str:
    """Each open approval with the call it would run: the operator sees what they approve."""
    return "; ".join(
        f"{a['approval_id']}: {a['tool']}({json.dumps(a['arguments'], sort_keys=True, default=str)})"
        for a in info.open_approvals
    )


def limit_wait_text(info: AgentDescription) -> str:
    """The fleet limit a model call of the agent waits for, for people ("" when none)."""
    wait = info.waiting_for
    if not wait:
        return ""
    until = wait.get("until")
    return f"waiting for {wait.get('kind', '')} limit {wait.get('limit')!r}" + (
        f" until ~{when(until)}" if isinstance(until, (int, float)) else " (a free slot)"
    )


def agent_row_json(info: AgentDescription) -> dict[str, Any]:
    """One agent of ``agents --json``."""
    lease = info.to_json()["lease"]
    return {
        "agent_id": info.agent_id,
        "definition": info.definition.get("name", ""),
        "status": info.status,
        "reason": info.reason,
        "seq": info.seq,
        "steps": info.steps,
        "calls": dict(zip(("started", "done"), calls_made(info), strict=True)),
        "created_at": info.created_at,
        "last_activity_at": info.last_activity_at,
        "lease": lease,
        "waiting_for": info.waiting_for,
        "open_approvals": [{k: a[k] for k in ("approval_id", "tool", "arguments")} for a in info.open_approvals],
    }


@click.command()
@click.option(
    "--status",
    "statuses",
    multiple=True,
    metavar="STATUS",
    help="only agents with this status (repeatable): running, waiting_approval, waiting_child, suspended, "
    "sleeping, finished, failed, cancelled, unreadable",
)
@click.option(
    "--definition",
    "definitions",
    multiple=True,
    metavar="NAME",
    help="only agents of this agent definition (repeatable)",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="at most this many agents (most recent first)")
@click.option("--tree", is_flag=True, help="child agents under their parents, indented")
@json_option
@store_command
def agents(
    store: str,
    namespace: str,
    statuses: tuple[str, ...],
    definitions: tuple[str, ...],
    limit: int | None,
    tree: bool,
    json_mode: bool,
    out: Output,
) -> None:
    """List agents, the most recently active first, with their lease holder and what they wait for."""

    async def go() -> list[AgentDescription]:
        async with _runtime(store, namespace) as rt:
            return await rt.describe_all(statuses=statuses or None)  # the status index, where the store has one

    found = [
        d
        for d in run_async(go)
        if (not statuses or d.status in statuses) and (not definitions or d.definition.get("name") in definitions)
    ]
    found.sort(key=lambda d: d.last_activity_at or 0.0, reverse=True)
    found = found[:limit] if limit else found
    depths = {d.agent_id: 0 for d in found}
    if tree:
        found, depths = as_tree(found)
    if json_mode:
        out.json({"store": store, "namespace": namespace, "agents": [agent_row_json(d) for d in found]})
        return
    if not found:
        filtered = " matching the filters" if statuses or definitions else ""
        out.line(
            f"no agents{filtered} in namespace {namespace!r} of {store} "
            "(each namespace is separate: the demo's is 'demo')"
        )
        return
    now = time.time()
    rows = [
        [
            "  " * depths[d.agent_id] + ("└ " if depths[d.agent_id] else "") + d.agent_id,
            d.definition.get("name", ""),
            d.status,
            str(d.seq),
            steps_cell(d),
            when(d.last_activity_at),
            lease_text(d, now, short=True),
            "; ".join(filter(None, [d.reason, approvals_text(d), limit_wait_text(d)])),
        ]
        for d in found
    ]
    running = any(d.status == "running" for d in found)
    out.table(
        ["agent", "definition", "status", "seq", "steps", "last activity", "lease", "reason"],
        rows,
        title=f"agents in namespace {namespace!r} of {store}",
        caption="running: runnable; any runtime with its definition registered resumes it" if running else None,
        keep=("agent", "definition", "status"),
    )


def parent_of(info: AgentDescription) -> str | None:
    """The id of the agent whose call started ``info``'s agent (None: not a child agent)."""
    parent = info.state.parent if info.state is not None else None
    return parent.get("agent_id") if parent else None


def as_tree(found: list[AgentDescription]) -> tuple[list[AgentDescription], dict[str, int]]:
    """``found`` reordered so each child agent follows its parent (siblings in their given
    order), and each agent's depth under the listed agents."""
    listed = {d.agent_id for d in found}
    children: dict[str | None, list[AgentDescription]] = {}
    for d in found:
        parent = parent_of(d)
        children.setdefault(parent if parent in listed else None, []).append(d)
    ordered: list[AgentDescription] = []
    depths: dict[str, int] = {}
    stack = [(d, 0) for d in reversed(children.get(None, []))]
    while stack:
        d, depth = stack.pop()
        ordered.append(d)
        depths[d.agent_id] = depth
        stack.extend((c, depth + 1) for c in reversed(children.get(d.agent_id, [])))
    return ordered, depths


@click.command()
@click.argument("agent_id", metavar="AGENT")
@json_option
@store_command
def show(store: str, namespace: str, agent_id: str, json_mode: bool, out: Output) -> None:
    """Describe one agent: status and why, definition, usage and budget, approvals, lease, times."""

    async def go() -> tuple[AgentDescription | ThreadSummary, list[tuple[dict[str, Any], str]]]:
        async with _runtime(store, namespace) as rt:
            thread = await _thread(rt, agent_id)
            if thread is not None:
                return thread, []
            info = await rt.describe(agent_id)
            children = []
            for child in info.state.children.values() if info.state is not None else ():
                try:
                    status = (await rt.status(child["agent_id"])).status  # its own journal: the live truth
                except AgentNotFoundError:
                    status = "purged"
                children.append((child, status))
            return info, children

    info, children = run_async(go)
    if isinstance(info, ThreadSummary):
        if json_mode:
            out.json(info.to_json())
        else:
            _thread_lines(out, info)
        return
    if json_mode:
        shown = info.to_json()
        shown["parent"] = parent_of(info)
        shown["children"] = [{**child, "status": status} for child, status in children]
        out.json(shown)
        return
    definition = info.definition
    fields = [
        ("agent", f"{info.namespace}/{info.agent_id}"),
        ("status", f"{info.status}{': ' + info.reason if info.reason else ''}"),
        (
            "definition",
            f"{definition.get('name', '')} v{definition.get('version', '')} digest {definition.get('digest', '')}",
        ),
        ("run", info.run_id),
        ("task", clip(info.task, 200)),
        ("seq", str(info.seq)),
        steps_line(info),
        (
            "usage",
            f"{info.usage['input_tokens']} input + {info.usage['output_tokens']} output tokens, "
            f"${info.usage['cost_usd']:.4f}",
        ),
        ("budget left", ", ".join(f"{k} {'unlimited' if v is None else v}" for k, v in info.budget_left.items())),
        ("lease", lease_text(info)),
        ("created", when(info.created_at)),
        ("last activity", when(info.last_activity_at)),
    ]
    if info.waiting_for:
        fields.append(("waiting", limit_wait_text(info)))
    if info.forked_from:
        origin = info.forked_from
        fields.append(("forked from", f"{origin['namespace']}/{origin['agent_id']} at seq {origin['seq']}"))
    if (parent := parent_of(info)) is not None:
        fields.append(("parent", parent))
    if info.status == "finished":
        fields.append(("result", clip(info.result, 2000)))
    for name, value in fields:
        out.line(f"{name + ':':<15}{value}")
    for a in info.open_approvals:
        out.line(
            f"{'approval:':<15}{a['approval_id']}: {a['tool']}({json.dumps(a['arguments'], sort_keys=True, default=str)})"
            f" ({a['reason']})"
        )
    for c in info.pending_calls:
        started = f"started, attempt {c['attempts']}" if c["started"] else "not started"
        if "retry_at" in c:
            started += f" failed ({clip(c['last_error'])}), retry at {when(c['retry_at'])}"
        out.line(f"{'pending call:':<15}{c['id']}: {c['tool']}({clip(c['arguments'])}) [{started}]")
        if "heartbeat" in c:
            out.line(f"{'heartbeat:':<15}{c['id']}: {clip(c['heartbeat'])}")
    for child, status in children:
        out.line(f"{'child:':<15}{child['agent_id']} ({child['definition']}) {status}, for call {child['call_id']}")


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option(
    "--kind", "kinds", multiple=True, metavar="KIND", help="only records of this kind (repeatable), e.g. tool_result"
)
@click.option(
    "--after",
    "after_seq",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="only records with a seq above this one",
)
@click.option("--payload", is_flag=True, help="include each record's data")
@json_option
@store_command
def history(
    store: str,
    namespace: str,
    agent_id: str,
    kinds: tuple[str, ...],
    after_seq: int,
    payload: bool,
    json_mode: bool,
    out: Output,
) -> int:
    """The agent's journal, one record a line: seq, time (UTC), kind, summary. Streams any length."""

    async def go() -> int:
        async with _runtime(store, namespace) as rt:
            entries = rt.history(agent_id, after_seq=after_seq, kinds=kinds or None, payload=payload)
            if not json_mode:
                async for e in entries:
                    out.line(f"{e.seq:>6}  {when(e.at)}  {e.kind:<18} {neutralise(e.summary)}")
                    if payload:
                        out.block("        " + to_json(e.payload).replace("\n", "\n        "))
                return EXIT_OK
            # One JSON document, written as it is read: memory stays flat on any length. A
            # journal that fails to read part-way closes the document with its "error", so
            # stdout stays one parseable document (with the records read before the damage).
            first = True
            try:
                async for e in entries:
                    if first:
                        out.block(
                            f'{{"namespace": {json.dumps(namespace)}, '
                            f'"agent_id": {json.dumps(agent_id, ensure_ascii=True)}, "records": ['
                        )
                    out.block(("" if first else ",") + to_json(e.to_json()))
                    first = False
            except (DurablyError, ValueError) as exc:
                if first:
                    raise  # nothing written yet: the usual {"error": ...} document
                out.block('], "error": ' + to_json(error_json(exc)["error"]) + "}")
                return EXIT_REFUSED
            if first:  # nothing matched: still one document
                out.json({"namespace": namespace, "agent_id": agent_id, "records": []})
            else:
                out.block("]}")
            return EXIT_OK

    status: int = run_async(go)
    return status


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option("--at", "seq", type=click.IntRange(min=1), default=None, help="the seq to fold up to (default: the last)")
@json_option
@store_command
def state(store: str, namespace: str, agent_id: str, seq: int | None, json_mode: bool, out: Output) -> None:
    """The agent's folded state at a seq: nearest snapshot plus replay, as restore does (a LangGraph thread: its newest values)."""

    async def go() -> AgentState | tuple[ThreadSummary, dict[str, str] | str]:
        async with _runtime(store, namespace) as rt:
            summary = await _thread(rt, agent_id)
            if summary is not None:
                return summary, await _thread_values(rt, agent_id)
            return await (rt.status(agent_id) if seq is None else rt.state_at(agent_id, seq))

    folded = run_async(go)
    if isinstance(folded, tuple):
        summary, values = folded
        thread_doc = {**summary.to_json(), "values": values}
        if json_mode:
            out.json({"namespace": namespace, "agent_id": agent_id, "seq": summary.seq, "state": thread_doc})
            return
        _thread_lines(out, summary)
        if isinstance(values, str):
            out.line(f"{'values:':<15}{neutralise(values)}")
        for channel, line in values.items() if isinstance(values, dict) else ():
            out.line(f"{'value ' + channel + ':':<15}{neutralise(line)}")
        return
    document = {"namespace": namespace, "agent_id": agent_id, "seq": folded.last_seq, "state": folded.to_wire()}
    if json_mode:
        out.json(document)
    else:
        out.line(f"state of {namespace}/{agent_id} at seq {folded.last_seq}: {folded.status}")
        out.block(to_json(folded.to_wire()))


COMMANDS = [agents, show, history, state]
