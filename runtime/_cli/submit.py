"""``durably submit``: hand a new agent to the fleet from a shell, as ``Runtime.submit`` does.

    durably submit --agents myapp.agents:support support ticket-4712 "My order is late"

The agent's ``started`` record is journaled in the store and nothing runs in
this process: a worker serving the namespace with the definition (``durably
worker``) resumes it. ``--agents`` is loaded as ``durably worker`` loads it
(the definition's digest and instructions go into the journal, so the very
definition the workers run is needed, not only its name). The command prints
where the agent will run: ``queued`` naming the live workers that serve its
definition, or ``unassigned`` when none does now.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from durably._cli.operate import command_json, json_option
from durably._cli.options import encryption_from_env, run_async, store_command
from durably._cli.output import Output
from durably._cli.worker import agents_option, load_agents
from durably._loop.agent import AgentDefinition
from durably._operate.placement import CommandResult
from durably.errors import AgentNotFoundError, CodecError, DecryptionError, DefinitionNotRegisteredError

if TYPE_CHECKING:
    from durably._runtime import Runtime
    from durably.storage._spi import StreamId


def _aware_time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """``--not-before`` as an aware datetime (None: unset); a usage error when it is not ISO 8601
    with a UTC offset (a naive time would be read in whichever zone the worker runs)."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no UTC offset: say which zone, e.g. {value}+00:00") from None
    return when


@click.command()
@agents_option("the agent definitions, as for `durably worker` (repeatable); DEFINITION names one of them")
@click.argument("definition_name", metavar="DEFINITION")
@click.argument("agent_id", metavar="AGENT_ID")
@click.argument("task", default="")
@click.option(
    "--not-before",
    metavar="TIME",
    callback=_aware_time,
    help="ISO 8601 time with a UTC offset: the agent sleeps until then (Runtime.submit's not_before)",
)
@json_option
@store_command
def submit(
    store: str,
    namespace: str,
    agent_specs: tuple[str, ...],
    definition_name: str,
    agent_id: str,
    task: str,
    not_before: datetime | None,
    json_mode: bool,
    out: Output,
) -> None:
    """Create an agent for the workers to run, without running it here.

    Journals the agent's first record (and its status index entry) as
    Runtime.submit does; a worker serving the namespace with DEFINITION runs
    it. Prints its status and where it will run. An AGENT_ID that exists, a
    DEFINITION that --agents does not define, or a store encrypted under keys
    $DURABLY_KEYS does not hold, is refused (exit 1); a bad MODULE:ATTR is a
    usage error (exit 2).
    """
    definitions = [d for spec in agent_specs for d in load_agents(spec)]
    definition = _named(definitions, definition_name)
    result = run_async(_submit, store, namespace, definitions, definition, agent_id, task, not_before)
    if out.json_mode:
        out.json(command_json(namespace, agent_id, "submit", result))
        return
    placement = result.placement
    out.line(
        f"{agent_id}: submitted at seq {result.last_seq}; status now {result.status}; "
        f"{placement.where.value}: {placement.reason}"
    )


def _named(definitions: list[AgentDefinition], name: str) -> AgentDefinition:
    """The definition called ``name``; ``DefinitionNotRegisteredError`` naming the ones there are."""
    for definition in definitions:
        if definition.name == name:
            return definition
    known = ", ".join(sorted({d.name for d in definitions}))
    raise DefinitionNotRegisteredError(f"agent definition {name!r} is not among those --agents defines ({known})")


async def _submit(
    store: str,
    namespace: str,
    definitions: list[AgentDefinition],
    definition: AgentDefinition,
    agent_id: str,
    task: str,
    not_before: datetime | None,
) -> CommandResult:
    from durably._runtime import Runtime

    async with Runtime(store, agents=definitions, namespace=namespace, encryption=encryption_from_env()) as rt:
        await _check_keys(rt)
        return await rt.submit(definition, agent_id, task, not_before=not_before)


async def _check_keys(rt: Runtime) -> None:
    """Read the first ``PROBED`` agents of the namespace with this shell's keys; ``DecryptionError``
    when they cannot decrypt one (encrypted with no key here, or under a key id here unknown): an
    agent written with them would be unreadable to the workers, and would wait forever.

    A plaintext agent read with keys passes (a store moving to encryption holds both), as
    does an empty namespace; any other error reading one says nothing of the keys."""
    streams = rt.store.list_streams(rt.namespace)
    probed: list[StreamId] = []
    try:
        async for stream in streams:
            probed.append(stream)
            if len(probed) >= PROBED:
                break
    finally:
        close = getattr(streams, "aclose", None)
        if close is not None:
            await close()  # the listing left early holds a cursor (or a page) until closed
    for stream in probed:
        try:
            await rt.status(stream.agent_id)
        except DecryptionError as exc:
            raise DecryptionError(
                f"nothing submitted: this store's agents are encrypted under keys this shell does not "
                f"hold (set $DURABLY_KEYS and $DURABLY_KEY_ID as the workers do): {exc}"
            ) from None
        except (CodecError, AgentNotFoundError):
            pass  # a corrupt stream (or a plaintext one, read with keys), or one purged since the listing


#: Agents ``durably submit`` reads before writing, to tell whether its keys read the store.
PROBED = 5


COMMANDS = [submit]
