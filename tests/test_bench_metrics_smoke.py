"""benchmarks/bench_metrics.py runs and prints its table (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

from .fixtures_core import run_benchmark


def test_bench_metrics_smoke(tmp_path: Path) -> None:
    done = run_benchmark(
        "bench_metrics",
        "--depths",
        "0,200",
        "--shm-dir",
        str(tmp_path),
        "--disk-dir",
        str(tmp_path),
        timeout=120,
    )
    assert "Method" in done.stdout
    assert done.stdout.count("200") == 2  # one row per filesystem
    assert list(tmp_path.iterdir()) == []  # each run removed its queue
