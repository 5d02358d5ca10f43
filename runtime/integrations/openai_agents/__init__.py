"""durably.integrations.openai_agents: OpenAI Agents SDK runs and sessions on durably's journal.

``DurablySession`` is the SDK's ``Session`` protocol on a durably stream::

    from durably.integrations.openai_agents import DurablySession
    result = await Runner.run(agent, "hi", session=DurablySession("user-42", rt))

Needs the ``openai-agents`` extra: ``pip install 'durably[openai-agents]'``.
"""

from durably.errors import ExtraNotInstalledError

with ExtraNotInstalledError.guard(__name__, "openai-agents", "agents"):
    import agents  # noqa: F401  (the SDK must be there before anything of the bridge is used)

    from ._session import DurablySession

__all__ = ["DurablySession"]
