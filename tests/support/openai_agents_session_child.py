"""A child process for the session tests: one ``Runner.run`` turn with a ``DurablySession``.

``python openai_agents_session_child.py STORE_URL MODEL_URL SESSION_ID TEXT [KEY_HEX]`` prints
the run's final output; with KEY_HEX the Runtime (and so the session) encrypts.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner
from openai_agents_support import sdk_model

import durably
from durably.integrations.openai_agents import DurablySession


async def main(store_url: str, model_url: str, session_id: str, text: str, key: str | None) -> None:
    cipher = durably.AESGCMCipher(durably.StaticKeyProvider({"k": bytes.fromhex(key)})) if key else None
    async with durably.Runtime(store_url, encryption=cipher) as rt:
        agent = Agent(name="echo", instructions="Say what you saw.", model=sdk_model(model_url))
        result = await Runner.run(agent, text, session=DurablySession(session_id, rt))
        print(result.final_output, flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(*args[:4], args[4] if len(args) > 4 else None))
