"""The benchmark harness runs and its results parse (no timing is asserted: issue 3)."""

from __future__ import annotations

import json
from pathlib import Path

from .fixtures_core import run_benchmark


def test_bench_smoke(tmp_path: Path) -> None:
    """``--smoke``: a 200-message backlog, vsqs and the raw floor only, in a few seconds."""
    done = run_benchmark(
        "run",
        "--smoke",
        "--no-peers",
        "--fs",
        "shm",
        "--shm-dir",
        str(tmp_path),
        "--results-dir",
        str(tmp_path),
        "--name",
        "smoke",
        timeout=120,
    )
    assert "Method" in done.stdout
    results = json.loads((tmp_path / "smoke.json").read_text())
    backends = {row["backend"] for row in results["depth"]}
    assert {"raw", "raw+fsync", "vsqs", "vsqs durable"} <= backends
    for row in results["depth"]:
        assert row["per_op_s"]["publish"]["median"] > 0
    assert all(r["delivered"] == r["expected"] for r in results["mp"])
