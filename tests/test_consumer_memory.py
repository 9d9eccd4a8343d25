"""A consuming handle's memory does not grow with the messages it has taken.

A handle remembers the leases it hands out until they end, so that it can return them
when they do; deleted ones used to stay remembered until their visibility timeout would
have passed: a fast consumer kept one entry (about 250 bytes) per message of the last
timeout, hundreds of megabytes at tens of thousands of messages a second.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import vsqs
from vsqs.testing import ManualClock


def test_a_drained_backlog_leaves_no_memory_behind(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False, visibility_timeout=3600)
    queue.publish_batch([b"x"] * 20_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        while (message := queue.receive(timeout=0)) is not None:
            assert queue.delete(message)
        del message
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # 20,000 remembered leases took about 5 MB; a bounded handful is left now.
    assert kept < 1_500_000, f"{kept:,} bytes kept after deleting every message"


def test_leases_not_deleted_still_come_back_when_they_end(tmp_path: Path) -> None:
    """Forgetting deleted leases keeps every live one: those come back on time."""
    clock = ManualClock()
    queue = vsqs.Queue(tmp_path / "q", durable=False, visibility_timeout=30, clock=clock)
    queue.publish_batch([b"%d" % i for i in range(5000)])
    kept = []
    for i in range(5000):
        message = queue.receive(timeout=0)
        assert message is not None
        if i % 5:
            assert queue.delete(message)
        else:
            kept.append(message.body)
    assert queue.receive(timeout=0) is None
    clock.advance(31)
    back = []
    while (message := queue.receive(timeout=0)) is not None:
        assert message.receive_count == 2
        back.append(message.body)
    assert back == kept  # every live lease, in order; no deleted one
