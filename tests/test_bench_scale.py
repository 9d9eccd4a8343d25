"""benchmarks/bench_scale.py runs, checks its own runs, and prints its tables (no timing
is asserted: the figures are reported in docs/benchmarks.rst, never tested)."""

from __future__ import annotations

import json
from pathlib import Path

from .fixtures_core import run_benchmark


def test_bench_scale_runs_every_column_and_prints_its_tables(tmp_path: Path) -> None:
    """A tiny run on tmpfs, K = 1 and 2: both roles, the four columns, the one-process
    comparison; every run verified (a lost or doubled message raises, exit status 1)."""
    done = run_benchmark(
        "bench_scale",
        "--fs",
        "shm",
        "--max-k",
        "2",
        "--messages",
        "300",
        "--rounds",
        "1",
        "--json",
        str(tmp_path / "scale.json"),
    )
    for heading in ("Consumers, on tmpfs", "Producers, on tmpfs", "One of the consumers"):
        assert heading in done.stdout
    assert "2 on p=2 / 1 =" in done.stdout  # the floors, with their figures
    found = json.loads((tmp_path / "scale.json").read_text())
    for role in ("consumers", "producers"):
        scaling = found["shm"][role]["scaling"]
        columns = ("bare, 1 dir", "bare, K dirs", "vsqs, p=1", "vsqs, p=K")
        assert set(scaling) == {f"{c} K={k}" for c in columns for k in (1, 2)}
        assert all(rate > 0 for rates in scaling.values() for rate in rates)
        assert set(found["shm"][role]["single"]) == {"1", "2", "4", "8"}
