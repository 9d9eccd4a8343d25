"""Guarantees of vsqs._fs that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import vsqs


def test_a_shutdown_marker_without_a_time_is_dated_by_its_mtime(tmp_path: Path) -> None:
    """A ``closed`` marker written without a time (by hand, or by vsqs before 1.0) an
    hour ago: the shutdown is long over, so an empty queue is drained at once, with no
    grace to wait for (mutant: ``mtime_us_at`` calling ``lstat`` without the name)."""
    queue = vsqs.PlainQueue(tmp_path / "q", durable=False)
    marker = Path(queue.path, ".vsqs", "closed")
    marker.parent.mkdir(exist_ok=True)
    marker.write_bytes(b"")
    hour_ago = time.time() - 3600
    os.utime(marker, (hour_ago, hour_ago))
    with pytest.raises(vsqs.QueueDrained):
        vsqs.PlainQueue(tmp_path / "q", durable=False).receive(timeout=0)
