"""The JuiceFS benchmark runs and checks its own runs (no timing is asserted: issue 3)."""

from __future__ import annotations

import pytest

from tests.fixtures_core import run_benchmark

from . import _juicefs


def test_bench_juicefs_smoke() -> None:
    """20 messages per process, one trial: every configuration prints its row."""
    reason = _juicefs.why_not()
    if reason is not None:
        pytest.skip(f"cannot test on JuiceFS: {reason}")
    done = run_benchmark("bench_juicefs", "--messages", "20", "--trials", "1")
    rows = [line.split("  ")[0] for line in done.stdout.splitlines() if "," in line[:30]]
    assert "JuiceFS, 3 hosts" in rows
    assert "local disk, 1 process, durable" in rows
    assert len(rows) == 6
