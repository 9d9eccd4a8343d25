"""benchmarks/bench_metrics.py runs and prints its table (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_metrics_smoke(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_metrics", "--depths", "0,200",
         "--shm-dir", str(tmp_path), "--disk-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Method" in done.stdout
    assert done.stdout.count("200") == 2  # one row per filesystem
    assert list(tmp_path.iterdir()) == []  # each run removed its queue
