"""benchmarks/bench_serve.py runs and prints its table (no timing is asserted).

sqslite and moto are peers of ``make bench``, not of ``make test``: this runs ``vsqs
serve`` on tmpfs alone, through every phase (send, receive, depth, 64 clients'
latencies) and the library's durable rates (one thread, then two at once), and checks
both tables.
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
        "--library-threads",
        "1,2",
    )
    server_table, library_table = done.stdout.split("\n\n")
    lines = server_table.splitlines()
    assert lines[1].split() == ["figure", "vsqs", "shm"], done.stdout
    rows = {line[:50].strip(): line[50:].split() for line in lines[3:-1]}
    library = "library durable publish_batch (1 thread, /var/tmp)"
    assert list(rows) == ["send 1", "receive 1", "send 2", "receive 2", "depth", "median ms",
                          "p99 ms", library]  # fmt: skip
    for cells in rows.values():
        median, least = cells[0], cells[1]
        assert float(median.replace(",", "")) > 0, done.stdout
        assert least.startswith("(") and least.endswith(")")
    library_lines = library_table.splitlines()
    assert library_lines[1].split()[:4] == ["durable", "publish_batch", "of", "10"]
    rows = {line[:27].strip(): line[27:].split() for line in library_lines[3:-1]}
    assert list(rows) == ["1 thread, one queue", "2 threads, one queue"], done.stdout
    for cells in rows.values():
        assert all(float(cells[i].replace(",", "")) > 0 for i in (0, 2)), done.stdout
        assert cells[-2:][0].endswith("x") and cells[-1].endswith("x")
