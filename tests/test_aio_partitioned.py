"""vsqs.aio on a partitioned queue: groups through AsyncQueue, a blocked receive woken by
a message in any partition, leases routed to the message's partition."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

import vsqs
from vsqs._reactor import reactor
from vsqs.aio import AsyncQueue

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run *main* on a fresh asyncio loop, bounded (a hang fails, it does not block)."""

    async def bounded() -> T:
        return await asyncio.wait_for(main(), 60)

    return asyncio.run(bounded())


async def waiting(q: AsyncQueue, count: int) -> None:
    """Until *count* coroutines await a change of *q*'s directories."""
    while len(q._receivers) < count:
        await asyncio.sleep(0.001)


def test_a_blocked_receive_wakes_promptly_for_a_message_in_any_partition(
    fast_tmp_path: Path,
) -> None:
    """The receive waits on every partition's directory, not only the queue's own: a
    message another process publishes straight into partition 3 wakes it at once, not
    at the next re-check (``poll_interval``: 10 s here, longer than the timeout)."""
    path = fast_tmp_path / "q"
    vsqs.PartitionedQueue(path, partitions=4)

    async def main() -> float:
        async with AsyncQueue(path, durable=False, poll_interval=10) as aq:
            assert isinstance(aq.queue, vsqs.PartitionedQueue)
            task = asyncio.create_task(aq.receive(timeout=5))
            await waiting(aq, 1)
            target = aq.queue.partition_queues[3].path
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c",
                "import sys, vsqs; vsqs.Queue(sys.argv[1], durable=False).publish(b'late')",
                target,
            )  # fmt: skip
            assert await child.wait() == 0
            published = time.monotonic()
            message = await task
            assert message is not None and message.body == b"late"
            assert message.queue == target
            assert await aq.delete(message)
            return time.monotonic() - published

    assert run(main) < 1.0


def test_aclose_stops_watching_every_partition(fast_tmp_path: Path) -> None:
    path = fast_tmp_path / "q"
    vsqs.PartitionedQueue(path, partitions=3)

    async def main() -> None:
        aq = AsyncQueue(path, durable=False)
        assert await aq.receive(timeout=0.01) is None
        watched = set(reactor()._waiters)
        assert watched == {aq.path, *(part.path for part in vsqs.partitions_of(aq.queue))}
        await aq.aclose()
        assert reactor()._waiters == {}

    run(main)


@pytest.mark.parametrize("durable", [False, True])
def test_groups_keep_their_order_through_async_queue(fast_tmp_path: Path, durable: bool) -> None:
    """Many coroutines publish to 6 groups at once (durable: batched by the publishing
    thread); each group lands in one partition, in order, and comes back with its name."""
    path = fast_tmp_path / "q"
    groups = [f"customer-{n}" for n in range(6)]

    async def main() -> dict[str, list[vsqs.Message]]:
        async with AsyncQueue(path, partitions=4, durable=durable) as aq:

            async def producer(group: str) -> None:
                for n in range(30):
                    if n % 3 == 2:
                        await aq.publish_batch([f"{n}".encode()], group=group)
                    else:
                        await aq.publish(f"{n}".encode(), group=group)

            await asyncio.gather(*(producer(group) for group in groups))
            seen: dict[str, list[vsqs.Message]] = {group: [] for group in groups}
            while got := await aq.receive_batch(7, timeout=0):
                for message in got:
                    assert message.group is not None
                    seen[message.group].append(message)
                    assert await aq.delete(message)
            return seen

    seen = run(main)
    plain = vsqs.PartitionedQueue(path)
    for group, messages in seen.items():
        assert [int(m.body) for m in messages] == list(range(30)), group
        assert {m.queue for m in messages} == {plain.partition_for(group).path}
    assert len({plain.partition_for(group).path for group in groups}) > 1


def test_bad_groups_are_refused_by_async_publish(fast_tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(fast_tmp_path / "q", partitions=2, durable=True) as aq:
            with pytest.raises(ValueError, match="group"):
                await aq.publish(b"x", group="")
            with pytest.raises(ValueError, match="group"):
                await aq.publish(b"x", group="tab\there")
            assert aq.queue.counts().total == 0

    run(main)


def job(body: bytes) -> None:
    if body == b"fails":
        raise RuntimeError("the job failed")


def test_async_leases_on_a_partitioned_queue(fast_tmp_path: Path) -> None:
    """A lease deletes its message in the message's partition on success, releases it
    there on an error (received again, count 2), and renews it meanwhile."""

    async def main() -> None:
        async with AsyncQueue(
            fast_tmp_path / "q", partitions=4, visibility_timeout=0.3, durable=False
        ) as aq:
            await aq.publish_batch([b"ok", b"fails"], group="g")  # one partition, in order
            bodies: dict[bytes, str] = {}
            async for lease in aq.consume_leases(timeout=0):
                bodies[lease.message.body] = lease.message.queue
                try:
                    async with lease:
                        await asyncio.sleep(0.8)  # past the visibility timeout: renewed
                        ready = vsqs.Queue(lease.message.queue, durable=False).browse()
                        assert lease.message.id not in {m.id for m in ready}
                        job(lease.message.body)
                except RuntimeError:
                    pass
                if len(bodies) == 2:
                    break
            assert set(bodies) == {b"ok", b"fails"}
            again = await aq.receive(timeout=1)
            assert again is not None and again.body == b"fails"
            assert again.receive_count == 2 and again.queue == bodies[b"fails"]
            assert again.group == "g"
            assert aq.queue.counts().total == 1

    run(main)


def test_a_fifo_receive_awaits_the_holders_delete(fast_tmp_path: Path) -> None:
    """``fifo=True`` through AsyncQueue: a group's second message is not handed out while
    the first is held; the delete in the partition wakes the waiting coroutine."""

    async def main() -> None:
        async with AsyncQueue(
            fast_tmp_path / "q", partitions=2, fifo=True, durable=False, poll_interval=10
        ) as aq:
            await aq.publish_batch([b"1", b"2"], group="g")
            first = await aq.receive(timeout=0)
            assert first is not None and first.body == b"1"
            task = asyncio.create_task(aq.receive(timeout=5))
            await waiting(aq, 1)
            await asyncio.sleep(0.2)  # real time: aio timeouts are the loop's clock
            assert not task.done()  # the first is held: nothing for it
            deleted = time.monotonic()
            assert await aq.delete(first)
            second = await task
            assert second is not None and second.body == b"2"
            assert time.monotonic() - deleted < 4

    run(main)
