"""benchmarks/bench_hotpath.py runs both sides and prints its table (no timing is
asserted: the figures are reported in docs/benchmarks.rst, never tested)."""

from __future__ import annotations

from pathlib import Path

from .fixtures_core import run_benchmark

ROOT = Path(__file__).resolve().parent.parent


def test_bench_hotpath_runs_both_sides_and_prints_its_table(fast_tmp_path: Path) -> None:
    """This checkout against itself, one round of 200 messages: every row of the table,
    each loop checked to have moved every message (a shortfall raises, exit status 1)."""
    done = run_benchmark(
        "bench_hotpath",
        "--before",
        str(ROOT),
        "--dir",
        str(fast_tmp_path),
        "--rounds",
        "1",
        "--messages",
        "200",
        timeout=120,
    )
    for queue in ("plain", "2 partitions"):
        for path in ("publish", "receive+delete", "receive_batch(10)+delete_batch"):
            assert f"{queue} {path} " in done.stdout
    assert not list(fast_tmp_path.iterdir())  # every queue removed after its round
