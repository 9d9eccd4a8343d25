"""Edges of vsqs.aio: wrapping a Queue, argument errors, and ending a lease by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import vsqs
from vsqs.aio import AsyncQueue


def test_wrap_keeps_the_options_of_the_queue(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", visibility_timeout=7, durable=False)

    async def main() -> float:
        async with AsyncQueue.wrap(queue) as aq:
            assert repr(aq) == f"AsyncQueue({queue.path!r})"
            await aq.publish(b"x")
            message = await aq.receive(timeout=1)
            assert message is not None
            return message.expires_at - message.sent_at

    held_for = asyncio.run(main())
    assert 6.0 < held_for < 60.0  # the wrapped queue's 7 s, not the default 30 s


def test_publish_batch_wants_one_dedup_id_per_body(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path / "q", durable=False) as aq:
            with pytest.raises(ValueError, match="2 dedup_ids for 1 bodies"):
                await aq.publish_batch([b"x"], dedup_ids=["a", "b"])

    asyncio.run(main())
    assert vsqs.Queue(tmp_path / "q").size() == 0


def test_a_lease_ended_by_hand(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncQueue(tmp_path / "q", durable=False) as aq:
            await aq.publish_batch([b"done", b"again"])
            first = await aq.receive(timeout=1)
            second = await aq.receive(timeout=1)
            assert first is not None and second is not None
            async with aq.lease(first) as lease:
                await lease.delete()
            async with aq.lease(second) as lease:
                await lease.release()
            back = await aq.receive(timeout=1)
            assert back is not None and back.body == b"again" and back.receive_count == 2
            await aq.delete(back)

    asyncio.run(main())
    assert vsqs.Queue(tmp_path / "q").counts().total == 0


def test_peek_oldest_key_is_the_oldest_ready_publish_time(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    assert queue.peek_oldest_key() is None
    first, _ = queue.publish_batch([b"1", b"2"])
    assert queue.peek_oldest_key() == int(first)
