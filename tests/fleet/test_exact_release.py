"""An activation gives back only the lease it acquired, even when its own runtime claims the agent again.

Activation A of an agent is stopped by a conflict (a record another writer appended to
its journal while its tool ran). While A is still stopping, its runtime resumes the agent
again: activation B, whose claim (same owner, same stream) may find A's lease still live in
the store. A's clean-up then releases a lease with the owner and stream of B's. It must
not end B's: B keeps running under a lease held in the store, so another runtime is
refused the agent and B's appends are not fenced. The same holds for the renewal loop: a
lease that lapsed and came back to this owner under a new token is given back, but never
once a new claim of this runtime holds that very token. Tried on one SQLite file and on one
PostgreSQL schema on a local server, the race driven by hooks in the store (a subclass of
the real adapter), never by sleeps.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from durably import AgentDefinition, AgentLeasedError, ModelResponse, Runtime, ToolCall, tool
from durably._fleet.handle import AgentHandle
from durably._fleet.leases import LeaseKeeper
from durably._journal.records import RecordCodec
from durably.schemas._records import Kind, Record
from durably.storage import StreamId, open_store

AGENT = "exact-release"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_server").url())
    return f"sqlite:///{tmp_path}/agents.db"


def hooked(url: str, on_release: Any) -> Any:
    """The real store for ``url`` (not opened), subclassed: ``on_release(lease)`` is awaited
    before each lease release."""
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def release_lease(self, lease: Any) -> None:
            await on_release(lease)
            return await super().release_lease(lease)

    return Hooked(url)


def definition(gate: anyio.Event, inside: anyio.Event, check: Any) -> AgentDefinition:
    """One tool call, then an answer. The first attempt of ``work`` waits for ``gate``; a later
    attempt (the next activation retrying the call whose result was lost) runs ``check()``."""
    attempts: list[int] = []

    @tool(name="work", on_unknown_outcome="retry")
    async def work(*, ctx: Any) -> str:
        attempts.append(ctx.attempt)
        if len(attempts) == 1:
            inside.set()
            await gate.wait()
        else:
            await check()
        return "done"

    class Model:
        name = "scripted"

        async def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
            if any(m["role"] == "tool" for m in messages):
                return ModelResponse("finished")
            return ModelResponse("", (ToolCall("w1", "work", {}),))

    return AgentDefinition(name="exact", model=Model(), tools=[work])


async def test_a_conflicted_activation_never_releases_the_lease_its_runtime_claimed_again(url: str) -> None:
    stream = StreamId("default", AGENT)
    gate, inside, b_started = anyio.Event(), anyio.Event(), anyio.Event()
    first: list[AgentHandle] = []
    second: list[AgentHandle] = []
    seen: dict[str, Any] = {}
    releases: list[Any] = []

    async def claim_again() -> None:
        # Resume the agent in the same runtime again and again: A's handle while A is live,
        # then, as soon as A is no longer live (maybe before its clean-up ran), B.
        while True:
            handle = await rt.resume(AGENT)
            if handle is not None and handle._actor is not first[0]._actor:
                second.append(handle)
                b_started.set()
                return
            await anyio.sleep(0)

    async def on_release(lease: Any) -> None:
        releases.append(lease)
        for _ in range(20):
            await anyio.sleep(0)  # let B's claim run before (or beside) A's release

    async def check() -> None:
        # Inside B's tool call: B's lease is held in the store, by this runtime, with B's token.
        actor = second[0]._actor if second else rt._activations.live[AGENT]
        assert actor.journal.claim is not None and actor.journal.claim.lease is not None
        mine = actor.journal.claim.lease
        held = await other_store.get_lease(stream)
        assert held is not None, "B runs without a lease in the store: A's release ended it"
        assert (held.owner, held.token) == (mine.owner, mine.token)
        with pytest.raises(AgentLeasedError):
            await other.resume(AGENT)  # another runtime is refused while B runs
        seen["checked"] = True

    agent = definition(gate, inside, check)
    async with (
        hooked(url, on_release) as store,
        open_store(url) as other_store,
        Runtime(store, agents=[agent], lease_ttl=30.0) as rt,
        Runtime(other_store, agents=[agent], lease_ttl=30.0) as other,
        anyio.create_task_group() as tg,
    ):
        first.append(await rt.start(agent, AGENT, "Work."))
        with anyio.fail_after(30):
            await inside.wait()
        # Another writer's record (not a command A could fold in): A's next append conflicts and A stops.
        codec = RecordCodec()
        last = await other_store.last_seq(stream)
        foreign = Record(last + 1, Kind.RESUMED, {"worker": "elsewhere", "pid": 0}, time.time())
        await other_store.append(stream, last, [codec.encode_record(foreign, stream)])
        tg.start_soon(claim_again)
        gate.set()
        with anyio.fail_after(60):
            await b_started.wait()
            state = await second[0].wait()  # raises AgentLeaseLostError if B lost its lease
    assert first[0]._actor.error is not None  # A was stopped by the conflict
    assert seen.get("checked"), "B never retried the call, so its lease was never checked"
    assert state.status == "finished"
    assert releases, "A's activation released nothing"


async def test_a_renewal_finding_a_lease_lapsed_never_releases_it_under_a_claim_made_meanwhile(url: str) -> None:
    # A's lease lapsed in the store (its process paused) while A's claim is still held here;
    # the renewal round takes the stream anew for this owner (the next token) and, as nobody
    # here uses that token, gives it back. Meanwhile a new activation B of this runtime
    # claims the stream: same owner, lease live, so the store renews it in place, and B gets
    # that very token. Both acquires share one lease transaction and return in order; the
    # renewal's coroutine runs first. Its release must not end B's lease.
    stream = StreamId("default", AGENT)
    b_acquired = anyio.Event()
    renewal_acquired = anyio.Event()
    calls: list[str] = []
    claims: dict[str, Any] = {}

    def acquired(name: str) -> Any:
        async def hook(lease: Any) -> None:
            calls.append(name)
            if name == "renewal":
                renewal_acquired.set()
                tg.start_soon(claim_b)
                await b_acquired.wait()  # B's acquire is in the store too, and returned first
            elif name == "b":
                b_acquired.set()
                for _ in range(20):
                    await anyio.sleep(0)  # the renewal's coroutine runs on before B's does

        return hook

    order = iter(["a", "renewal", "b"])
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def acquire_lease(self, stream: StreamId, owner: str, ttl: float) -> Any:
            lease = await super().acquire_lease(stream, owner, ttl)
            name = next(order, "later")
            if name in ("renewal", "b"):
                await acquired(name)(lease)
            return lease

    async def claim_b() -> None:
        claims["b"], _ = await keeper.claim_or_holder(stream)

    lost: list[Any] = []
    async with Hooked(url) as store, anyio.create_task_group() as tg:
        keeper = LeaseKeeper(store, "worker", ttl=30.0)
        claims["a"], _ = await keeper.claim_or_holder(stream)
        assert claims["a"] is not None
        await store.release_lease(claims["a"].lease)  # as if it lapsed: A's process was paused
        tg.start_soon(keeper.renew_forever, lambda claim, holder: lost.append(claim))
        with anyio.fail_after(30):
            await renewal_acquired.wait()
            while "b" not in claims or not lost:
                await anyio.sleep(0.01)
        b = claims["b"]
        assert b is not None and b.lease is not None
        held = await store.get_lease(stream)
        assert held is not None, "the renewal released the lease B had just claimed"
        assert (held.owner, held.token) == (b.lease.owner, b.lease.token)
        tg.cancel_scope.cancel()


async def test_a_release_in_flight_never_ends_the_lease_a_new_claim_of_the_same_runtime_took(url: str) -> None:
    # A's release has left the keeper but not yet reached the store when a new claim of the
    # same keeper (same owner) asks for the stream. Had that acquire reached the store first,
    # it would renew A's live lease in place (same owner and token), and A's release would
    # end it. The new claim must end up holding a lease that is in the store.
    stream = StreamId("default", AGENT)
    releasing = anyio.Event()
    claims: dict[str, Any] = {}
    base = type(open_store(url))

    class Hooked(base):  # type: ignore[valid-type, misc]
        async def release_lease(self, lease: Any) -> None:
            releasing.set()
            for _ in range(20):
                await anyio.sleep(0)  # the new claim runs as far as it can meanwhile
            return await super().release_lease(lease)

    async def claim_b() -> None:
        await releasing.wait()
        claims["b"], _ = await keeper.claim_or_holder(stream)

    async with Hooked(url) as store:
        keeper = LeaseKeeper(store, "worker", ttl=30.0)
        a, _ = await keeper.claim_or_holder(stream)
        assert a is not None
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(claim_b)
                await keeper.release(a)
        b = claims["b"]
        assert b is not None and b.lease is not None
        held = await store.get_lease(stream)
        assert held is not None, "A's release ended the lease B had just claimed"
        assert (held.owner, held.token) == (b.lease.owner, b.lease.token)
