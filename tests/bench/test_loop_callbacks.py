"""The bench's hop counter: every wake-up of a waiting task and every thread hand-back is
counted on a real event loop; an await that does not wait is not; counts do not nest."""

from __future__ import annotations

import anyio
import pytest

from durably.bench.loop_callbacks import counting_callbacks


def test_each_real_wait_is_one_callback_and_an_await_that_does_not_wait_is_none() -> None:
    async def main() -> tuple[int, int, int]:
        async def ready() -> int:
            return 1

        with counting_callbacks() as quiet:
            for _ in range(50):
                await ready()
        send, receive = anyio.create_memory_object_stream[int](0)
        with counting_callbacks() as ping_pong:
            async with anyio.create_task_group() as group:

                async def echo() -> None:
                    async with receive:
                        async for _ in receive:
                            pass

                group.start_soon(echo)
                async with send:
                    for i in range(50):
                        await send.send(i)
        with counting_callbacks() as thread:
            for _ in range(10):
                await anyio.to_thread.run_sync(lambda: None)
        return quiet.total, ping_pong.total, thread.total

    quiet, ping_pong, thread = anyio.run(main, backend="asyncio")
    assert quiet == 0
    assert ping_pong >= 50, "each message handed to a waiting task wakes it"
    assert thread >= 10, "each thread's answer comes back through the loop"


def test_counts_do_not_nest() -> None:
    with counting_callbacks(), pytest.raises(RuntimeError, match="already open"):
        with counting_callbacks():
            pass
