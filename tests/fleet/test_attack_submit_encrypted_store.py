"""Attack on ``durably submit``: a shell without the store's keys must not journal an agent nobody can read.

Found by attacking the command (it journaled the agent and exited 0): on a store whose
agents are encrypted at rest, ``durably submit`` run without ``$DURABLY_KEYS``, or with
keys that read none of the store's frames, wrote the agent's ``started`` record in
plaintext (or under a key the workers lack) and printed "submitted". No worker can read
that record: every scan logs it as unreadable and skips it, so the agent waits forever
while the command said it was queued. The refused call must exit 1 with the codec's
typed error, as ``durably show`` of any of the store's agents does, and journal nothing.
"""

from __future__ import annotations

import base64
import json
import subprocess

import anyio
import pytest
from fleet_processes import durably_submit as submit_command
from worker_agents import agents

from durably import AESGCMCipher, Runtime, StaticKeyProvider, generate_key
from durably.storage import StreamId

KEY = generate_key()


def durably_submit(url: str, tmp_path, agent_id: str, keys: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return submit_command(url, tmp_path, "slow-file", agent_id, "count", "--json", environ=keys)


def last_seq(url: str, agent_id: str) -> int:
    async def go() -> int:
        async with Runtime(url) as rt:
            return await rt.store.last_seq(StreamId("default", agent_id))

    return anyio.run(go)


@pytest.mark.parametrize("keys", ["none", "another key"])
def test_submit_to_an_encrypted_store_without_its_keys_is_refused_and_writes_nothing(
    tmp_path, monkeypatch, keys: str
) -> None:
    monkeypatch.setenv("WORKER_EFFECTS", str(tmp_path / "effects.jsonl"))
    url = f"sqlite:///{tmp_path}/agents.db"

    async def seed() -> None:
        definition = agents()[0]
        cipher = AESGCMCipher(StaticKeyProvider({"k1": KEY}))
        async with Runtime(url, agents=[definition], encryption=cipher) as rt:
            await rt.submit(definition, "encrypted-1", "count")

    anyio.run(seed)
    env = {} if keys == "none" else {"DURABLY_KEYS": f"k2={base64.b64encode(generate_key()).decode()}"}
    said = durably_submit(url, tmp_path, "ticket-1", env)
    assert said.returncode == 1, said.stdout + said.stderr
    assert json.loads(said.stdout)["error"]["type"] == "DecryptionError", said.stdout
    assert last_seq(url, "ticket-1") == 0  # nothing journaled by the refused call
