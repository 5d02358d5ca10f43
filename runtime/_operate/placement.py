"""What a command answers: the agent's state, and truthfully whether and where it will run now.

A folded status says what the journal implies (the agent *may* run); it
cannot say whether a worker will run it: after a restart an agent whose status
is ``running`` runs nowhere until a dead process's lease lapses. So every
command (``approve``, ``extend_budget``, ``send``, ``cancel``) returns a
``CommandResult``: the ``AgentState`` after the command, plus a ``Placement``:

* ``here``: it runs in this runtime now (``handle`` waits for it);
* ``elsewhere``: a live runtime holds its lease and runs it (``holder``);
* ``after_lease``: a runtime this one cannot see holds its lease (another host):
  it runs there, or after ``holder.expires_at`` wherever ``serve()`` polls;
* ``queued``: runnable, nobody holds it, and live workers serving its
  namespace with its definition registered (their heartbeats say so: see
  ``durably._fleet.workers``) will take it at their next scan or wake-up
  (``reason`` names them);
* ``unassigned``: runnable, and nobody runs it yet: the next ``serve()`` (or
  ``resume``) with its definition registered will (e.g. no live worker has
  its definition, this runtime does not register it, or is draining);
* ``not_running``: parked (waiting for a human) or finished, failed, cancelled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from durably._fleet.owner import LeaseHolder, Liveness
from durably._loop.state import RUNNING, AgentState
from durably.errors import AgentFencedError, AgentLeasedError
from durably.storage._errors import StoreError

if TYPE_CHECKING:
    from durably._fleet.activations import Activations
    from durably._fleet.handle import AgentHandle


class Where(StrEnum):
    """Where an agent runs after a command (public as ``durably.Where``; a ``str``, so
    ``placement.where == "here"`` works too): ``HERE``, ``ELSEWHERE``, ``AFTER_LEASE``,
    ``QUEUED``, ``UNASSIGNED``, ``NOT_RUNNING``, as the module docstring explains."""

    HERE = "here"
    ELSEWHERE = "elsewhere"
    AFTER_LEASE = "after_lease"
    QUEUED = "queued"
    UNASSIGNED = "unassigned"
    NOT_RUNNING = "not_running"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an agent runs after a command (public as ``durably.Placement``).

    Attributes:
        where: A ``Where``: here, elsewhere, after_lease, queued, unassigned, not_running.
        reason: One sentence for an operator.
        holder: The lease holder (a ``LeaseHolder``), when one is known.
        handle: The activation (an ``AgentHandle``), when ``where`` is ``here``.
    """

    where: Where
    reason: str
    holder: LeaseHolder | None = None
    handle: AgentHandle | None = None

    def to_json(self) -> dict[str, Any]:
        """The placement as a plain, JSON-ready dict.

        Returns:
            ``where`` and ``reason`` (str), ``holder`` (the lease holder's fields,
                or None); the handle is a live object and is left out.
        """
        return {
            "where": self.where.value,
            "reason": self.reason,
            "holder": {**asdict(self.holder), "liveness": self.holder.liveness.value} if self.holder else None,
        }

    @classmethod
    def held_by(cls, holder: LeaseHolder | None, *, registered: bool) -> Placement:
        """The placement of a runnable agent this runtime does not run, given its lease holder.

        Args:
            holder: The agent's lease holder (None: no lease is held).
            registered: Whether this runtime registers the agent's definition
                (only changes the reason's wording).

        Returns:
            ``unassigned`` when nobody holds the lease or its holder is dead,
                ``elsewhere`` when it is alive, ``after_lease`` when it is remote.
        """
        if holder is None:
            # Said on the success path of an operator's command: what happens next, not a fault.
            why = "it waits for a worker: the next serve() or resume() with its definition runs it"
            if not registered:
                why += "; this process only recorded the command"
            return cls(Where.UNASSIGNED, why)
        if holder.liveness is Liveness.ALIVE:
            return cls(Where.ELSEWHERE, f"run by {holder.worker_id} (pid {holder.pid})", holder)
        if holder.liveness is Liveness.DEAD:
            return cls(
                Where.UNASSIGNED,
                f"its lease holder {holder.worker_id} (pid {holder.pid}) is gone: "
                "the next resume or serve() with its definition takes it at once",
                holder,
            )
        until = datetime.fromtimestamp(holder.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(
            Where.AFTER_LEASE,
            f"leased by {holder.worker_id} until {until}; it runs there, or after that wherever serve() polls",
            holder,
        )


@dataclass
class CommandResult(AgentState):
    """The ``AgentState`` after a command, plus ``placement``: where it runs now.

    It is an ``AgentState`` in every respect (callers reading ``status`` keep
    working); ``placement`` is never journaled or snapshotted.

    Attributes:
        namespace: As in ``AgentState``: the agent's namespace.
        agent_id: The agent's id.
        run_id: The id of the current run.
        definition: The recorded definition: ``{"name", "version", "digest"}``.
        status: The agent's status after the command.
        reason: Why the status is what it is.
        task: The task the run was started with.
        messages: The working conversation.
        inbox: Messages waiting for pending tool calls to resolve.
        pending_calls: The unresolved tool calls of the last model response.
        ledger: Idempotency key -> the executed call.
        approvals: Approval id -> the request and its decision.
        plan: The model's latest plan.
        artifacts: Stored artifacts: ``{"name", "digest", "size"}``.
        usage: What the run used so far (steps, tokens, US dollars).
        budget: The run's limits (None: unlimited).
        result: The run's result once ``finished``.
        last_seq: The seq of the last record folded in.
        forked_from: A fork's origin, or None.
        trace: The latest activation's trace reference, or None.
        wake_at: While ``sleeping``: when its timer fires (unix seconds), else None.
        parent: A child agent's parent (``agent_id``, ``run_id``, ``key``), or None.
        children: Call key -> the child agent that call started.
        placement: A ``durably.Placement`` (compare its ``where`` with
            ``durably.Where``); None only for a result built without one.
    """

    placement: Placement | None = None

    @classmethod
    def of(cls, state: AgentState, placement: Placement) -> CommandResult:
        """Attach a placement to a state.

        Args:
            state: The agent's state after the command; its fields are shared,
                not copied.
            placement: Where the agent runs now.

        Returns:
            A ``CommandResult`` with ``state``'s fields and ``placement``.
        """
        return cls(**{f.name: getattr(state, f.name) for f in fields(AgentState)}, placement=placement)

    def to_wire(self) -> dict[str, Any]:
        """The state as a plain dict, as ``AgentState.to_wire``: the placement is not state.

        Returns:
            ``AgentState.to_wire``'s dict, without ``placement``.
        """
        wire = super().to_wire()
        wire.pop("placement", None)
        return wire


def live_here(state: AgentState, handle: AgentHandle) -> Placement:
    """The placement after a command a live actor of this runtime took in."""
    if state.status != RUNNING:
        return Placement(Where.NOT_RUNNING, f"agent is {state.status}")
    return Placement(Where.HERE, "runs in this runtime", handle=handle)


async def place(activations: Activations, state: AgentState, *, was_parked: bool) -> Placement:
    """Where the agent of ``state`` (just after a command appended to its journal) runs now.

    An agent the command un-parked is resumed here when this runtime has its
    definition (single-flight, lease taken; a dead holder's lease at once).
    One that was runnable before may run elsewhere: its lease holder says where.
    """
    if state.status != RUNNING:
        why = f"agent is {state.status}" + (f": {state.reason}" if state.reason else "")
        return Placement(Where.NOT_RUNNING, why)
    registered = state.definition.get("name") in activations.definitions
    if was_parked and registered and not activations.draining:
        try:
            handle = await activations.resume(state.agent_id)
        except (AgentLeasedError, AgentFencedError):
            handle = None  # another runtime holds it, or resumed it first: its lease says which
        if handle is not None:
            return Placement(Where.HERE, "resumed in this runtime", handle=handle)
    if not activations.leases.enabled:
        return Placement(
            Where.UNASSIGNED,
            "this store has no leases: whether another runtime runs it cannot be "
            "told; a serve() with its definition resumes it if none does",
        )
    holder = await activations.leases.holder_info(activations.stream(state.agent_id))
    placed = Placement.held_by(holder, registered=registered)
    if placed.where is Where.UNASSIGNED:
        return await queued(activations, state.definition.get("name", ""), placed)
    return placed


async def queued(activations: Activations, definition: str, otherwise: Placement) -> Placement:
    """``queued`` naming the live workers that serve the namespace with ``definition``; ``otherwise``
    when there are none (or their heartbeats cannot be read now, or this runtime has no heartbeats)."""
    heartbeats = activations.leases.heartbeats
    if heartbeats is None:
        return otherwise
    try:
        workers = await heartbeats.live_workers(activations.namespace, definition)
    except StoreError:
        return otherwise
    if not workers:
        return otherwise
    names = ", ".join(sorted({w.worker_id for w in workers})[:5]) + (", ..." if len(workers) > 5 else "")
    return Placement(
        Where.QUEUED,
        f"a live worker will run it: {len(workers)} live worker(s) serve {definition!r} ({names})",
        otherwise.holder,
    )
