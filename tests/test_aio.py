"""vsqs.aio: coroutines wait on the event loop (one inotify descriptor, no thread) while
real processes publish; durable publishes are synced off the loop, in batches; anyio's
asyncio backend runs it as well."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

import vsqs
from vsqs import _fs
from vsqs.aio import AsyncQueue
from vsqs.testing import drain

from .fixtures_core import inotify_fds, patch_fs

T = TypeVar("T")
PUBLISHER = """
import sys, time, vsqs
q = vsqs.Queue(sys.argv[1], durable=False)
for n in range(int(sys.argv[2])):
    q.publish(str(n).encode())
    time.sleep(float(sys.argv[3]))
"""


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run *main* on a fresh asyncio loop, bounded (a hang fails, it does not block)."""

    async def bounded() -> T:
        return await asyncio.wait_for(main(), 60)

    return asyncio.run(bounded())


async def publish_in_a_process(path: Path, count: int, pause: float = 0.0) -> None:
    """Another process publishes *count* messages; fails the test if it fails."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISHER, str(path), str(count), str(pause)
    )
    assert await child.wait() == 0


async def waiting(q: AsyncQueue, count: int) -> None:
    """Until *count* coroutines await a change of *q*'s directory."""
    while len(q._receivers) < count:
        await asyncio.sleep(0.001)


def test_publish_receive_delete_change_visibility_round_trip(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path, visibility_timeout=30) as q:
            first = await q.publish(b"one")
            ids = await q.publish_batch([b"two", b"three"], attributes={"k": "v"})
            got = await q.receive_batch(10)
            assert [m.body for m in got] == [b"one", b"two", b"three"]
            assert got[0].id == first and [m.id for m in got[1:]] == ids
            assert got[1].attributes == {"k": "v"}
            await q.change_visibility(got[0], 0)  # released now
            assert await q.delete(got[1]) and await q.delete(got[2])
            again = await q.receive(timeout=1)
            assert again is not None and again.body == b"one" and again.receive_count == 2
            assert await q.delete(again)
            assert await q.receive(timeout=0) is None
            with pytest.raises(vsqs.LeaseLost):
                await q.change_visibility(got[1], 5)  # deleted

    run(main)


def test_a_thousand_waiting_tasks_share_one_descriptor_and_no_thread(tmp_path: Path) -> None:
    """Every task awaits ``receive(timeout=None)`` while another process publishes: each
    message goes to exactly one task, one inotify descriptor, no thread started."""
    tasks_n = 1000

    async def main() -> None:
        threads = threading.active_count()
        async with AsyncQueue(tmp_path, durable=False) as q:

            async def worker() -> bytes:
                message = await q.receive(timeout=None)
                assert message is not None
                await q.delete(message)
                return message.body

            tasks = [asyncio.create_task(worker()) for _ in range(tasks_n)]
            await waiting(q, tasks_n)
            assert inotify_fds() == 1
            assert threading.active_count() <= threads  # none started (one may end)
            await publish_in_a_process(tmp_path, tasks_n)
            bodies = await asyncio.gather(*tasks)
        assert sorted(int(body) for body in bodies) == list(range(tasks_n))

    run(main)


def test_coroutines_and_a_blocked_thread_share_the_events_of_one_descriptor(
    tmp_path: Path,
) -> None:
    """A sync ``receive`` in a thread holds the reader's seat of the process's one
    descriptor; coroutines still wake (the thread hands them the events)."""

    async def main() -> None:
        sync = vsqs.Queue(tmp_path, durable=False)
        got: list[bytes] = []

        def blocked() -> None:
            message = sync.receive(timeout=None)
            assert message is not None
            got.append(message.body)

        thread = threading.Thread(target=blocked)
        thread.start()
        async with AsyncQueue(tmp_path, durable=False) as q:
            waiter = asyncio.create_task(q.receive(timeout=None))
            await waiting(q, 1)
            await publish_in_a_process(tmp_path, 2, pause=0.05)
            message = await waiter
            assert message is not None
        await asyncio.to_thread(thread.join, 30)
        assert sorted([message.body, *got]) == [b"0", b"1"]

    run(main)


def test_consume_ends_when_another_process_shuts_the_queue_down(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path, durable=False) as q:

            async def drain() -> list[bytes]:
                bodies = []
                async for message in q.consume():
                    bodies.append(message.body)
                    await q.delete(message)
                return bodies

            consumers = [asyncio.create_task(drain()) for _ in range(3)]
            await waiting(q, 3)
            await publish_in_a_process(tmp_path, 5)
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", f"import vsqs; vsqs.Queue({str(tmp_path)!r}).shutdown()"
            )
            assert await child.wait() == 0
            results = await asyncio.gather(*consumers)
        assert sorted(body for bodies in results for body in bodies) == [
            str(n).encode() for n in range(5)
        ]

    run(main)


def test_polling_where_events_cannot_be_seen(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path, wait="poll", poll_interval=0.01) as q:
            waiter = asyncio.create_task(q.receive(timeout=None))
            await asyncio.sleep(0.05)
            assert not q._watched  # polling: the loop watches no descriptor
            await publish_in_a_process(tmp_path, 1)
            message = await waiter
            assert message is not None and message.body == b"0"

    run(main)


def test_durable_publishes_are_synced_off_the_loop_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many concurrent durable publishes: all published, synced by the publishing
    thread, with fewer syncs than publishes."""
    syncs: list[str] = []
    real = _fs.sync_filesystem

    def counting(path: str) -> bool:
        syncs.append(threading.current_thread().name)
        return real(path)

    patch_fs(monkeypatch, "sync_filesystem", counting)

    async def main() -> list[str]:
        async with AsyncQueue(tmp_path) as q:
            return list(await asyncio.gather(*(q.publish(b"%d" % n) for n in range(200))))

    ids = run(main)
    assert len(set(ids)) == 200
    assert vsqs.Queue(tmp_path).counts().ready == 200
    assert syncs and all(name.startswith("vsqs-aio-publisher") for name in syncs)
    assert len(syncs) < 200


def test_a_failed_flush_tells_each_publish_its_own_visible_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent durable publishes share a batch whose directory flush fails: each
    coroutine gets a DurabilityError naming exactly its own message."""
    real = _fs.fsync_dir

    def failing(path: str) -> None:
        if threading.current_thread().name.startswith("vsqs-aio-publisher"):
            raise OSError(5, "Input/output error")
        real(path)

    patch_fs(monkeypatch, "fsync_dir", failing)

    async def main() -> list[Any]:
        async with AsyncQueue(tmp_path) as q:
            jobs = (q.publish(b"%d" % n) for n in range(50))
            return list(await asyncio.gather(*jobs, return_exceptions=True))

    results = run(main)
    assert all(isinstance(r, vsqs.DurabilityError) and len(r.ids) == 1 for r in results)
    ids = [r.ids[0] for r in results]
    assert len(set(ids)) == 50
    monkeypatch.undo()
    found = {m.id: m.body for m in drain(vsqs.Queue(tmp_path))}
    assert [found[i] for i in ids] == [b"%d" % n for n in range(50)]


def test_a_bad_argument_fails_only_its_own_publish(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        async with AsyncQueue(tmp_path) as q:
            return list(
                await asyncio.gather(
                    q.publish(b"a"),
                    q.publish(b"b", attributes={"k": 1}),  # type: ignore[dict-item]
                    q.publish("text"),  # type: ignore[arg-type]
                    q.publish(b"c"),
                    return_exceptions=True,
                )
            )

    results = run(main)
    assert isinstance(results[1], vsqs.InvalidAttributes)
    assert isinstance(results[2], vsqs.InvalidPayload)
    assert isinstance(results[0], str) and isinstance(results[3], str)
    assert sorted(m.body for m in drain(vsqs.Queue(tmp_path))) == [b"a", b"c"]


def test_a_full_bounded_queue_is_awaited_until_another_process_makes_room(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path, capacity=1) as q:
            await q.publish(b"first")
            with pytest.raises(vsqs.QueueFull):
                await q.publish(b"now", timeout=0)
            blocked = asyncio.create_task(q.publish(b"second", timeout=None))
            await asyncio.sleep(0.05)
            assert not blocked.done()
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c",
                f"import vsqs; q = vsqs.Queue({str(tmp_path)!r}); q.delete(q.receive(timeout=5))",
            )  # fmt: skip
            assert await child.wait() == 0
            await blocked
            message = await q.receive(timeout=0)
            assert message is not None and message.body == b"second"

    run(main)


def job(body: bytes) -> None:
    if body == b"fails":
        raise RuntimeError("the job failed")


def test_leases_delete_on_success_and_release_on_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path, visibility_timeout=30, durable=False) as q:
            await q.publish_batch([b"ok", b"fails"])
            async for lease in q.consume_leases(timeout=0):
                try:
                    async with lease:
                        job(lease.message.body)
                except RuntimeError:
                    break
            again = await q.receive(timeout=1)
            assert again is not None and again.body == b"fails"
            assert again.receive_count == 2
            assert q.queue.counts().total == 1

    run(main)


def test_a_cancelled_receive_leaves_the_message_to_the_next_waiter(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path, durable=False) as q:
            first = asyncio.create_task(q.receive(timeout=None))
            second = asyncio.create_task(q.receive(timeout=None))
            await waiting(q, 2)
            first.cancel()
            await publish_in_a_process(tmp_path, 1)
            message = await second
            assert message is not None and message.body == b"0"
            assert first.cancelled()

    run(main)


def test_anyio_asyncio_backend(tmp_path: Path) -> None:
    async def main() -> list[bytes]:
        got: list[bytes] = []
        async with AsyncQueue(tmp_path, durable=False) as q:

            async def consume() -> None:
                async for message in q.consume(timeout=2):
                    got.append(message.body)
                    await q.delete(message)
                    if len(got) == 3:
                        return

            async with anyio.create_task_group() as group:
                group.start_soon(consume)
                await waiting(q, 1)
                await publish_in_a_process(tmp_path, 3)
        return got

    assert anyio.run(main, backend="asyncio") == [b"0", b"1", b"2"]


def test_a_task_cancelled_after_its_wake_up_leaves_no_stale_waiter(tmp_path: Path) -> None:
    """The woken task is cancelled before it can look (its turn goes to the next
    waiter): the message reaches the remaining task long before the re-check, and no
    cancelled waiter stays queued."""

    async def main() -> None:
        async with AsyncQueue(tmp_path, durable=False, poll_interval=3600) as q:
            first = asyncio.create_task(q.receive(timeout=None))
            second = asyncio.create_task(q.receive(timeout=None))
            await waiting(q, 2)
            q._receivers.wake_one()  # as a change would: the first waiter's turn
            first.cancel()
            await publish_in_a_process(tmp_path, 1)
            message = await asyncio.wait_for(second, 30)  # far below the 3600 s re-check
            assert message is not None and message.body == b"0"
            assert first.cancelled() and len(q._receivers) == 0

    run(main)


def test_stored_settings_apply_and_a_closed_queue_refuses_publishes(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path).configure(visibility_timeout=42, delay=5)

    async def main() -> None:
        async with AsyncQueue(tmp_path) as q:
            assert q.queue.visibility_timeout == 42.0
            await q.publish(b"delayed by the stored setting")
            assert await q.receive(timeout=0) is None
            assert q.queue.counts().delayed == 1
            await q.shutdown()
            with pytest.raises(vsqs.QueueClosed):
                await q.publish(b"too late")  # durable: raised in the publishing thread
            with pytest.raises(vsqs.QueueClosed):
                await AsyncQueue(tmp_path, durable=False).publish(b"too late")

    run(main)
