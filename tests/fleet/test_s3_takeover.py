"""Two runtime processes, one bucket: takeover after SIGKILL, and a stale worker fenced off.

The S3 test server (moto, serialised conditional writes: see ``s3_server``)
runs in this pytest process on 127.0.0.1; the workers (``s3_worker.py``) are
separate processes talking HTTP to it with dummy credentials from the
environment, like runtime processes on two machines sharing a bucket.
Everything is judged from outside the runtime: the tool's own effects file,
the workers' acknowledgement logs, the bucket's objects and the server's
request log.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import anyio
import pytest
from s3_server import BUCKET, S3TestServer
from support_agents import read_lines

from durably.adapters.s3._batch import HEADER_SIZE, BatchHeader
from durably.adapters.s3._keys import StreamKeys
from durably.storage import StreamId, open_store

WORKER = Path(__file__).resolve().parents[1] / "support" / "s3_worker.py"
AGENTS, STEPS = 4, 6
NAMESPACE = "default"
EXPECTED_RESULT = f"done {[n * 10 for n in range(1, STEPS + 1)]}"
MUTATING = {"PUT", "POST", "DELETE"}
# Lease TTLs, seconds. A worker renews every third of its TTL and counts its lease lost once
# 0.9 TTL passed since the last renewal it sent; on this machine under load (2 cores, load 10
# or more, the moto server sharing this process's CPU time) one renewal round trip takes up to
# about a second, so a 2 s TTL lets a live worker lose its lease with nobody else there.
# RUNNING: a worker that must keep its leases (B, and A until it dies: a SIGKILLed worker of
# this host is taken over at once, its process being gone, never by waiting out the TTL).
RUNNING_TTL = 30.0
# FROZEN: the worker the stale test freezes; B must wait its lease out (up to 1.1 x this), and
# it must keep it, renewing, until it reaches the hold point.
FROZEN_TTL = 6.0


def worker_cmd(url: str, tmp_path: Path, *extra: str, ttl: float = RUNNING_TTL) -> list[str]:
    return [
        sys.executable,
        str(WORKER),
        "--store",
        url,
        "--effects",
        str(tmp_path / "effects.jsonl"),
        "--acks",
        str(tmp_path / "acks.jsonl"),
        "--steps",
        str(STEPS),
        "--lease-ttl",
        str(ttl),
        *extra,
    ]


def run_worker(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    # The fixture put dummy credentials into os.environ; the child inherits them.
    return subprocess.run(worker_cmd(url, tmp_path, *extra), capture_output=True, text=True, timeout=120)


def last_json(proc: subprocess.CompletedProcess | str) -> dict:
    out = proc if isinstance(proc, str) else proc.stdout
    return json.loads(out.strip().splitlines()[-1])


def stored_digests(url: str, agents: int) -> dict[tuple[str, int], str]:
    """(agent, seq) -> SHA-256 of the frame, for every record in the bucket, read through the adapter."""

    async def read() -> dict[tuple[str, int], str]:
        found = {}
        async with open_store(url) as store:
            for i in range(agents):
                async for record in store.read(StreamId(NAMESPACE, f"agent-{i}")):
                    found[(f"agent-{i}", record.seq)] = hashlib.sha256(record.data).hexdigest()
        return found

    return anyio.run(read)


def last_seq(url: str, agent_id: str) -> int:
    async def read() -> int:
        async with open_store(url) as store:
            return await store.last_seq(StreamId(NAMESPACE, agent_id))

    return anyio.run(read)


def bucket_listing(server: S3TestServer, prefix: str) -> dict[str, str]:
    """Every object under ``prefix`` (except open()'s probes): key -> ETag."""
    client = server.client()
    listing = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            if not item["Key"].startswith(f"{prefix}/probe/"):
                listing[item["Key"]] = item["ETag"]
    return listing


def assert_each_effect_once(tmp_path: Path, agents: int) -> list[dict]:
    """The tool's own record of what it did: every call exactly once, none missing."""
    effects = read_lines(tmp_path / "effects.jsonl")
    duplicated = [key for key, n in Counter(e["key"] for e in effects).items() if n > 1]
    assert not duplicated, duplicated
    assert sorted((e["agent"], e["n"]) for e in effects) == sorted(
        (f"agent-{i}", n) for i in range(agents) for n in range(1, STEPS + 1)
    )
    return effects


@pytest.fixture
def url(s3_server: S3TestServer) -> tuple[str, str]:
    prefix = f"takeover-{uuid.uuid4().hex[:10]}"
    return s3_server.url(prefix), prefix


@pytest.mark.parametrize(
    "boundary,at",
    [
        ("before_intent", 6),  # a step's model response is journaled, its tool intent is not
        ("before_effect", 5),  # the intent is durable, the tool has not acted: B runs it (once)
        ("after_effect", 2),  # the tool acted, its result is not journaled: B must reconcile, not redo
        ("after_effect", 13),
        ("after_result", 7),
        ("put_landed", 11),  # a batch is on S3, its append not acknowledged: mid group commit, mid step
        ("put_landed", 25),  # (of 4 x 8 batches: one commit per step)
        ("snapshot", 2),  # inside the background snapshot writer, before its upload
    ],
)
def test_sigkilled_worker_is_taken_over_from_the_bucket(url, tmp_path, boundary, at):
    store_url, _prefix = url
    crashed = run_worker(store_url, tmp_path, "--agents", str(AGENTS), "--crash", boundary, "--at", str(at))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    acked_before_crash = read_lines(tmp_path / "acks.jsonl")
    assert acked_before_crash, "worker A acknowledged nothing before dying"
    if boundary == "put_landed":
        # The batch that landed as A died is durable though A never acknowledged it: B must build on it.
        acked = {(ack["agent"], ack["seq"]) for ack in acked_before_crash}
        assert set(stored_digests(store_url, AGENTS)) - acked

    resumed = run_worker(store_url, tmp_path, "--agents", str(AGENTS))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    states = last_json(resumed)
    assert {s["status"] for s in states.values()} == {"finished"}, states
    assert all(s["result"] == EXPECTED_RESULT for s in states.values()), states

    effects = assert_each_effect_once(tmp_path, AGENTS)
    assert len({e["pid"] for e in effects}) == 2, "both workers should have acted (A before dying, B after)"

    # Every record A acknowledged before dying is in the bucket, byte for byte.
    stored = stored_digests(store_url, AGENTS)
    for ack in acked_before_crash:
        assert stored.get((ack["agent"], ack["seq"])) == ack["sha"], ack


@pytest.mark.parametrize("hold", ["model", "tool"])
def test_stale_worker_wakes_up_fenced_and_stops_cleanly(s3_server, url, tmp_path, hold):
    """A is frozen (SIGSTOP) between two appends, B takes the agent over and finishes it, A is woken (SIGCONT).

    ``model``: A is inside a slow model call; ``tool``: A's tool has acted and
    its result is not journaled yet (B must reconcile that call, not redo it).
    """
    store_url, prefix = url
    agent = "agent-0"
    stale = subprocess.Popen(
        worker_cmd(store_url, tmp_path, "--agents", "1", "--hold", hold, "--hold-at", "3", ttl=FROZEN_TTL),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        held = stale.stdout.readline()  # EOF (not a hang) if A dies instead
        assert held.startswith("HELD "), held + stale.communicate(timeout=60)[1][-3000:]
        os.kill(stale.pid, signal.SIGSTOP)
        try:
            seq_at_freeze = last_seq(store_url, agent)

            taker = run_worker(store_url, tmp_path, "--agents", "1")
            assert taker.returncode == 0, taker.stderr[-3000:]
            assert last_json(taker)[agent]["status"] == "finished"
            assert last_json(taker)[agent]["result"] == EXPECTED_RESULT

            listing_before = bucket_listing(s3_server, prefix)
            seq_before = last_seq(store_url, agent)
            assert seq_before > seq_at_freeze
            mark = len(s3_server.requests)
            stale.stdin.write("go\n")
            stale.stdin.flush()
        finally:
            os.kill(stale.pid, signal.SIGCONT)
        out, err = stale.communicate(timeout=60)
        after_wake = s3_server.requests[mark:]  # before this test's own reads add theirs
    finally:
        if stale.poll() is None:
            stale.kill()
            stale.wait()

    # A stopped that agent cleanly: exit 0, told it was fenced, no traceback.
    assert stale.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert f"{agent} fenced" in out
    assert last_json(out)[agent]["status"] == "fenced"

    # A wrote nothing to the journal: the bucket is as B left it (but for the
    # lease object, which A may renew and release on its way out, and the takeover
    # marker a lease grant puts at the next seq: no records).
    keys = StreamKeys(f"{prefix}/", StreamId(NAMESPACE, agent))
    marker_key = keys.batch(seq_before + 1)

    def journal_only(listing: dict) -> dict:
        return {key: etag for key, etag in listing.items() if not key.endswith("/lease") and key != marker_key}

    after = bucket_listing(s3_server, prefix)
    if marker_key in after:
        body = s3_server.client().get_object(Bucket=BUCKET, Key=marker_key)["Body"].read()
        assert BatchHeader.decode(body[:HEADER_SIZE]).is_marker, "only a takeover marker follows B's last batch"
    assert journal_only(after) == journal_only(listing_before)
    assert last_seq(store_url, agent) == seq_before
    writes = [
        r
        for r in after_wake
        if r.method in MUTATING and not r.path.endswith("/lease") and r.path != f"/{BUCKET}/{marker_key}"
    ]
    # A woke past its lease: its claim's clock says so before it writes anything; should its last
    # check have passed just before the freeze, its one write is the conditional PUT of the seq B had
    # already taken, refused by the store.
    lost_key = keys.batch(seq_at_freeze + 1)
    assert [(r.method, r.path) for r in writes] in ([], [("PUT", f"/{BUCKET}/{lost_key}")]), writes

    effects = assert_each_effect_once(tmp_path, 1)
    assert len({e["pid"] for e in effects}) == 2
