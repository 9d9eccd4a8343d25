"""benchmarks/bench_async.py runs and prints its tables (no timing is asserted)."""

from __future__ import annotations

from .fixtures_core import run_benchmark


def test_bench_async_smoke() -> None:
    done = run_benchmark("bench_async", "--samples", "3", "--messages", "300", "--fs", "shm")
    for row in ("bare", "sync", "async", "async, 1000 tasks", "sync, 1 thread "):
        assert row in done.stdout, done.stdout
