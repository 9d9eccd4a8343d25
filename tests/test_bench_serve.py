"""benchmarks/bench_serve.py runs and prints its table (no timing is asserted).

sqslite and moto are peers of ``make bench``, not of ``make test``: this runs ``vsqs
serve`` on tmpfs alone, through every phase (send, receive, depth, 64 clients'
latencies) and the library's durable rate, and checks the table.
"""

from __future__ import annotations

from .fixtures_core import run_benchmark


def test_bench_serve_smoke() -> None:
    done = run_benchmark(
        "bench_serve",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
        "--clients",
        "1,2",
        "--depth",
        "200",
        "--servers",
        "vsqs shm",
    )
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["figure", "vsqs", "shm"], done.stdout
    rows = {line[:50].strip(): line[50:].split() for line in lines[3:-1]}
    library = "library durable publish_batch (1 thread, /var/tmp)"
    assert list(rows) == ["send 1", "receive 1", "send 2", "receive 2", "depth", "median ms",
                          "p99 ms", library]  # fmt: skip
    for cells in rows.values():
        median, least = cells[0], cells[1]
        assert float(median.replace(",", "")) > 0, done.stdout
        assert least.startswith("(") and least.endswith(")")
