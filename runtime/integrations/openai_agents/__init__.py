"""durably.integrations.openai_agents: OpenAI Agents SDK runs and sessions on durably's journal.

``DurableRunner`` is a drop-in for ``Runner.run`` whose runs are durable: model
requests, function tools, handoffs and guardrails journaled, ``needs_approval``
tools as durably approvals, resumable by id from any process::

    from durably.integrations.openai_agents import DurableRunner
    result = await DurableRunner(rt).run(agent, "refund order 7", agent_id="order-7")

``DurablySession`` is the SDK's ``Session`` protocol on a durably stream::

    from durably.integrations.openai_agents import DurablySession
    result = await Runner.run(agent, "hi", session=DurablySession("user-42", rt))

Needs the ``openai-agents`` extra: ``pip install -e '.[openai-agents]'`` in durably's clone.
"""

from durably.errors import AgentRunFailedError, ExtraNotInstalledError, NotInRunError

with ExtraNotInstalledError.guard(__name__, "openai-agents", "agents"):
    import agents  # noqa: F401  (the SDK must be there before anything of the bridge is used)

    from ._calls import current_call
    from ._runner import DurableRunner, DurableRunResult
    from ._session import DurablySession

__all__ = [
    "AgentRunFailedError",
    "DurableRunResult",
    "DurableRunner",
    "DurablySession",
    "NotInRunError",
    "current_call",
]
