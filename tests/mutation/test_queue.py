"""Guarantees of vsqs._queue that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring."""

from __future__ import annotations

from pathlib import Path

import vsqs
from vsqs.testing import ManualClock


def test_publish_file_to_a_partitioned_queue_deduplicates(tmp_path: Path) -> None:
    """A file published twice with one ``dedup_id`` to a partitioned queue is published
    once, and the duplicate file is consumed (mutant: the partition told no dedup id)."""
    queue = vsqs.Queue(tmp_path / "q", partitions=4, durable=False, clock=ManualClock())
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"1")
    second.write_bytes(b"1")
    message_id = queue.publish_file(first, dedup_id="file-1")
    assert queue.publish_file(second, dedup_id="file-1") == message_id
    assert not second.exists()
    assert queue.size() == 1
