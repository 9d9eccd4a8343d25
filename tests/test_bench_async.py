"""benchmarks/bench_async.py runs and prints its tables (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_async_smoke() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_async", "--samples", "3", "--messages", "300",
         "--fs", "shm"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for row in ("bare", "sync", "async", "async, 1000 tasks", "sync, 1 thread "):
        assert row in done.stdout, done.stdout
