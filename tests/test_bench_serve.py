"""benchmarks/bench_serve.py runs and prints its table (no timing is asserted).

sqslite and moto are peers of ``make bench``, not of ``make test``: this runs ``vsqs
serve`` on tmpfs alone, through every phase (send, receive, depth, 64 clients'
latencies) and the library's durable rates (one thread, then two at once), and checks
both tables.
"""

from __future__ import annotations

from benchmarks.bench_serve import BOUND, LIBRARY, bound_key, library_key, report

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
    width = lines[0].index(" ")  # the first column's width, from the table's rule
    rows = {line[:width].strip(): line[width:].split() for line in lines[3:-1]}
    cpu = [f"send {c}: {who} CPU µs a batch" for c in (1, 2) for who in ("server", "clients'")]
    assert list(rows) == ["send 1", cpu[0], cpu[1], "receive 1", "send 2", cpu[2], cpu[3],
                          "receive 2", "depth", "fifo shallow", "fifo depth", "median ms",
                          "p99 ms"]  # fmt: skip
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


def test_the_bound_of_one_durable_client_is_each_rounds_round_trip_plus_flush() -> None:
    """One client waits for each answer, so a durable batch costs at least sqslite's
    round trip plus the library's flush: rates combine as 1 / (1/a + 1/b), round by round."""
    rounds: dict[str, list[dict[str, float]]] = {
        "sqslite": [{"send 1": 6000.0}, {"send 1": 4000.0}, {"send 1": 5000.0}],
        "vsqs disk": [
            {"send 1": 2000.0, LIBRARY: 3000.0},
            {"send 1": 1000.0, LIBRARY: 4000.0},
            {"send 1": 1500.0, LIBRARY: 5000.0},
        ],
    }
    # Figures the first server has not, measured by two others: one row each, not two.
    rounds["vsqs shm"] = [{"send 1": 5000.0, "fifo depth": 800.0} for _ in range(3)]
    for disk in rounds["vsqs disk"]:
        disk["fifo depth"] = 900.0
    lines = report(rounds, ["sqslite", "vsqs shm", "vsqs disk"]).splitlines()
    assert sum(line.startswith("fifo depth ") for line in lines) == 1
    cells = {line.split("  ")[0]: line for line in lines[3:-1]}
    assert "2,000 (2,000)" in cells[BOUND]  # 1/(1/6000+1/3000), 1/(1/4000+1/4000), 2,500
    assert "4,000 (3,000)" in cells[LIBRARY]
    ratio = cells["vsqs disk send 1 / bound (median, least)"]
    assert "0.60x (0.50x)" in ratio  # 2000/2000, 1000/2000, 1500/2500


def test_concurrent_durable_clients_are_measured_against_their_bound_and_the_lesser_limit() -> None:
    """C durable clients, each waiting for its answers, get at most 1 / (1/a + 1/b) of
    sqslite's send C and the library's C-thread rate, and could get the lesser of the
    two only if round trips overlapped flushes: ``vsqs disk`` send C against both,
    round by round (the library's C-thread rate and the bound shown beside them)."""
    four = library_key(4)
    rounds: dict[str, list[dict[str, float]]] = {
        "sqslite": [{"send 1": 5000.0, "send 4": 9000.0}, {"send 1": 5000.0, "send 4": 3000.0}],
        "vsqs disk": [
            {"send 1": 2000.0, LIBRARY: 3000.0, four: 4000.0, "send 4": 3000.0},
            {"send 1": 2000.0, LIBRARY: 3000.0, four: 6000.0, "send 4": 2700.0},
        ],
    }
    lines = report(rounds, ["sqslite", "vsqs disk"]).splitlines()
    cells = {line.split("  ")[0]: line for line in lines[3:-1]}
    assert "5,000 (4,000)" in cells[four]
    assert "2,385 (2,000)" in cells[bound_key(4)]  # 1/(1/9000+1/4000), 1/(1/3000+1/6000)
    assert "1.22x (1.08x)" in cells["vsqs disk send 4 / bound (median, least)"]  # 3000/2769, 1.35x
    ratio = cells["vsqs disk send 4 / lesser of sqslite send 4 and library (median, least)"]
    assert "0.82x (0.75x)" in ratio  # 3000/min(9000, 4000), 2700/min(3000, 6000)
    assert sum(line.startswith(four) for line in lines) == 1  # below the figures, once


def test_bounds_need_no_single_client() -> None:
    """A run without ``send 1`` (``--clients 4,8``) reports the bounds of the counts it has."""
    rounds: dict[str, list[dict[str, float]]] = {
        "sqslite": [{"send 8": 8000.0}],
        "vsqs disk": [{library_key(8): 8000.0, "send 8": 2000.0}],
    }
    cells = {
        line.split("  ")[0]: line for line in report(rounds, ["sqslite", "vsqs disk"]).splitlines()
    }
    assert "4,000 (4,000)" in cells[bound_key(8)]
    assert "0.50x (0.50x)" in cells["vsqs disk send 8 / bound (median, least)"]
    assert BOUND not in cells
