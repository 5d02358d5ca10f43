"""A worker leaves alone the agents whose definition it does not serve: it never takes their lease.

Two ``durably worker`` processes on one store, one serving only ``kind-a``, the
other only ``kind-b``; agents of both kinds are handed to the fleet (some before
the workers start, found by their scans; some after, found by scans on SQLite
and by change notifications on PostgreSQL). Every agent runs for the whole test
and never parks, so its lease is granted exactly once, to the worker that runs
it, and held; and its journal has exactly one ``resumed`` record, by that
worker. The grants are counted in the store: on SQLite by the lease's fencing
token (one more on every grant, per stream), on PostgreSQL (tokens from one
sequence) by a trigger on the leases table logging every grant with its owner.
A worker that claimed an agent it cannot run, restored it and let it go, as
one did before the index entry's definition was checked, leaves a second
grant, and delays the worker that can run it; so does a woken resume given up
halfway (its lease released, the agent resumed again by the next scan).
"""

from __future__ import annotations

import time
import uuid

import anyio
import asyncpg
import pytest
from fleet_processes import effects, spawn_worker, stop, wait_for
from serve_worker import slow_file_agent

from durably import Runtime
from durably.storage import StreamId, open_store

AGENTS = 6  # of each kind, half before the workers start, half after
STEPS = 1000  # long runs: no agent finishes (and no lease is given back) during the test
STEP_SECONDS = 0.2


def submit(url: str, folder, ids: list[str]) -> None:
    """Hand ``ids`` to the fleet, each of the kind its id begins with (``a-``: kind-a, ``b-``: kind-b)."""

    async def go() -> None:
        kinds = {k: slow_file_agent(STEPS, folder / "effects.jsonl", STEP_SECONDS, name=f"kind-{k}") for k in "ab"}
        async with Runtime(url, agents=list(kinds.values())) as rt:
            for agent_id in ids:
                await rt.submit(kinds[agent_id[0]], agent_id, "count")

    anyio.run(go)


# Every new token written to a lease row is a grant (a renewal keeps the token).
_GRANT_LOG = """
CREATE TABLE {s}.grants (agent_id text, owner text, token bigint);
CREATE FUNCTION {s}.log_grant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.token IS DISTINCT FROM OLD.token THEN
        INSERT INTO {s}.grants VALUES (NEW.agent_id, NEW.owner, NEW.token);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER log_grant AFTER INSERT OR UPDATE ON {s}.leases FOR EACH ROW EXECUTE FUNCTION {s}.log_grant();
"""


async def _sql(dsn: str, sql: str) -> list:
    connection = await asyncpg.connect(dsn)
    try:
        if ";" in sql:
            await connection.execute(sql)  # a script (simple query protocol)
            return []
        return await connection.fetch(sql)
    finally:
        await connection.close()


def grants_and_holders(url: str, ids: list[str], grant_log: tuple[str, str] | None) -> dict[str, tuple[list[str], str]]:
    """agent id -> (the worker ids its lease was granted to, one per grant; the holder's worker
    id), read through the store's leases. ``grant_log``: (dsn, schema) of PostgreSQL's trigger
    log of grants, each with its owner; None to count by SQLite's per-stream tokens (every
    grant, whoever to: the holder's worker id once per token)."""

    async def go() -> dict[str, tuple[list[str], str]]:
        granted: dict[str, list[str]] = {}
        if grant_log is not None:
            rows = await _sql(grant_log[0], f"SELECT agent_id, owner FROM {grant_log[1]}.grants ORDER BY token")
            for agent_id, owner in rows:
                granted.setdefault(agent_id, []).append(owner.split("/")[0])
        async with open_store(url) as store:
            found = {}
            for agent_id in ids:
                lease = await store.get_lease(StreamId("default", agent_id))
                holder = lease.owner.split("/")[0] if lease else ""
                if grant_log is None:
                    granted[agent_id] = [holder] * (lease.token if lease else 0)
                found[agent_id] = (granted.get(agent_id, []), holder)
            return found

    return anyio.run(go)


def resumed_by(url: str, ids: list[str]) -> dict[str, list[str]]:
    """agent id -> the worker id of each of its ``resumed`` records, in journal order."""

    async def go() -> dict[str, list[str]]:
        async with Runtime(url) as reader:
            return {
                agent_id: [
                    entry.payload["worker"]
                    async for entry in reader.history(agent_id, kinds=["resumed"], payload=True)
                    if entry.payload is not None
                ]
                for agent_id in ids
            }

    return anyio.run(go)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_each_agent_is_leased_only_by_the_worker_serving_its_definition(backend, tmp_path, request):
    grant_log = None
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/agents.db"
    else:
        server, schema = request.getfixturevalue("pg_server"), f"t_{uuid.uuid4().hex[:12]}"
        url, grant_log = server.url(schema), (server.dsn_of(), schema)
    early = [f"{k}-{i}" for k in "ab" for i in range(AGENTS // 2)]
    late = [f"{k}-{i}" for k in "ab" for i in range(AGENTS // 2, AGENTS)]
    submit(url, tmp_path, early)  # creates the store's tables: the grant log goes on its leases now
    if grant_log is not None:
        anyio.run(_sql, grant_log[0], _GRANT_LOG.format(s=schema))
    opts = {"steps": STEPS, "step_seconds": STEP_SECONDS}
    wa = spawn_worker(url, tmp_path, "wa", agents="worker_agents:kind_a", **opts)
    wb = spawn_worker(url, tmp_path, "wb", agents="worker_agents:kind_b", **opts)
    try:
        wait_for(lambda: {e["pid"] for e in effects(tmp_path)} >= {wa.pid, wb.pid}, 60, "both workers run agents")
        submit(url, tmp_path, late)
        ids = early + late
        wait_for(lambda: {e["agent"] for e in effects(tmp_path)} >= set(ids), 60, "every agent runs", poll=0.2)
        time.sleep(1.0)  # five more polls of each worker: a claim of the other's agents would show now
        assert wa.poll() is None and wb.poll() is None, (tmp_path / "wa.err").read_text()
        found = grants_and_holders(url, ids, grant_log)
        resumed = resumed_by(url, ids)
    finally:
        stop(wa, wb)
    runner = {a: "wa" if a.startswith("a-") else "wb" for a in ids}
    assert found == {a: ([runner[a]], runner[a]) for a in ids}
    assert resumed == {a: [runner[a]] for a in ids}
    ran_by = {(e["agent"], e["pid"]) for e in effects(tmp_path)}
    assert ran_by == {(a, wa.pid if a.startswith("a-") else wb.pid) for a in ids}
