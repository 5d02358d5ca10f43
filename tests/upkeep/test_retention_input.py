"""Retention refuses the inputs that would purge by accident: a NaN or infinite ``now`` or TTL
(NaN compares false with everything, so every age "passed" its TTL), a bool, a string, an
unknown status, in ``RetentionPolicy``, ``Runtime.sweep`` and ``durably sweep``, before
anything is read or deleted."""

from __future__ import annotations

import math
import time
import uuid

import anyio
import pytest
from support_agents import list_agent

import durably
from durably import Runtime
from durably._cli.main import main as cli_main
from durably._upkeep.retention import DAY, RetentionPolicy, parse_duration


async def agents_in(rt: Runtime) -> set[str]:
    return {s.agent_id async for s in rt.store.list_streams(rt.namespace)}


@pytest.mark.parametrize(
    ("now", "match"),
    [
        (math.nan, "now"),
        (math.inf, "now"),
        (-math.inf, "now"),
        # time.time() * 1000 reads as a date ~50,000 years ahead: every TTL would have passed.
        (time.time() * 1000, "before year 10000"),
        (1e30, "before year 10000"),
    ],
)
async def test_a_nan_infinite_or_millisecond_now_purges_nothing(now: float, match: str) -> None:
    async with Runtime(f"memory://{uuid.uuid4().hex}", agents=[list_agent(1, [])]) as rt:
        assert (await rt.run("list-agent", "keep-me", "t")).status == "finished"
        with pytest.raises(durably.InvalidArgumentError, match=match):
            await rt.sweep(RetentionPolicy(default=365 * DAY), now=now)
        assert await agents_in(rt) == {"keep-me"}
        # The control: a real far-future now expires it (a future now on purpose is allowed).
        items = await rt.sweep(RetentionPolicy(default=365 * DAY), now=time.time() + 366 * DAY, dry_run=True)
        assert [(i.stream.agent_id, i.outcome) for i in items] == [("keep-me", "expired")]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"now": "x"}, durably.ArgumentTypeError),
        ({"now": True}, durably.ArgumentTypeError),
        ({"dry_run": None}, durably.ArgumentTypeError),  # None is falsy: it would have purged
        ({"dry_run": "yes"}, durably.ArgumentTypeError),
    ],
)
async def test_sweep_refuses_a_now_or_dry_run_of_the_wrong_type(kwargs: dict, error: type) -> None:
    async with Runtime(f"memory://{uuid.uuid4().hex}", agents=[list_agent(1, [])]) as rt:
        await rt.run("list-agent", "keep-me", "t")
        with pytest.raises(error):
            await rt.sweep(RetentionPolicy(default=0.0), **kwargs)
        with pytest.raises(durably.ArgumentTypeError):
            await rt.sweep({"finished": 0})  # type: ignore[arg-type]
        assert await agents_in(rt) == {"keep-me"}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ttl": {"finished": math.nan}}, durably.InvalidArgumentError),
        ({"ttl": {"finished": math.inf}}, durably.InvalidArgumentError),
        ({"ttl": {"finished": -1}}, durably.InvalidArgumentError),
        ({"default": math.nan}, durably.InvalidArgumentError),
        ({"default": math.inf}, durably.InvalidArgumentError),
        ({"default": -1.0}, durably.InvalidArgumentError),
        ({"ttl": {"bogus": 1}}, durably.InvalidArgumentError),
        ({"ttl": {"Finished": 1}}, durably.InvalidArgumentError),
        ({"default": True}, durably.ArgumentTypeError),
        ({"ttl": {"finished": False}}, durably.ArgumentTypeError),
        ({"ttl": {"finished": "1"}}, durably.ArgumentTypeError),
        ({"default": "1d"}, durably.ArgumentTypeError),
        ({"ttl": [1]}, durably.ArgumentTypeError),
        ({"ttl": {1: 1}}, durably.ArgumentTypeError),
    ],
)
def test_a_bad_policy_is_refused_at_construction(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        RetentionPolicy(**kwargs)


def test_good_policies_still_build_and_none_keeps_a_status_forever() -> None:
    policy = RetentionPolicy({"finished": 0, "running": None, "failed": 1.5}, default=30 * DAY)
    assert policy.ttl_for("running") is None and policy.ttl_for("cancelled") == 30 * DAY
    assert policy.shortest() == 0
    source = {"finished": 5.0}
    copied = RetentionPolicy(source)
    source["finished"] = math.nan  # checked once: a later change to the caller's dict is not seen
    assert copied.ttl_for("finished") == 5.0


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "infd", "nand", "1e400"])
def test_parse_duration_refuses_nan_and_infinity(text: str) -> None:
    with pytest.raises(durably.InvalidArgumentError):
        parse_duration(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["--default", "nan"],
        ["--default", "inf"],
        ["--ttl", "finished=nan"],
        ["--ttl", "bogus=1d"],
    ],
)
async def test_the_sweep_command_refuses_nan_and_unknown_statuses(tmp_path, capsys, argv: list[str]) -> None:
    url = f"sqlite:///{tmp_path}/agents.db"
    async with Runtime(url, agents=[list_agent(1, [])]) as rt:
        await rt.run("list-agent", "keep-me", "t")
    for extra in (["--dry-run"], ["--yes"]):
        status = await anyio.to_thread.run_sync(cli_main, ["sweep", *argv, *extra, "--store", url])
        captured = capsys.readouterr()
        assert status == 2, captured.out + captured.err
        assert "expired" not in captured.out and "purged" not in captured.out
        assert "Invalid value" in captured.err
    async with Runtime(url) as rt:
        assert await agents_in(rt) == {"keep-me"}
