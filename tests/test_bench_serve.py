"""benchmarks/bench_serve.py runs and prints its table (no timing is asserted).

moto is not in ``make test``'s venv (it is a peer of ``make bench``), so this runs the
floor and ``vsqs serve`` on tmpfs: the clients, the barrier, both phases, the table.
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
        "--servers",
        "floor,vsqs shm",
    )
    lines = done.stdout.splitlines()
    assert "vsqs shm / floor" in lines[1], done.stdout
    rows = [line.split() for line in lines[3:-1]]
    assert [row[:2] for row in rows] == [["send", "1"], ["send", "2"], ["receive", "1"],
                                         ["receive", "2"]]  # fmt: skip
    for row in rows:
        floor, served = (float(cell.replace(",", "")) for cell in row[2:4])
        assert floor > 0
        assert served > 0  # vsqs serve sent, received and deleted messages


def test_bench_serve_cpu_smoke() -> None:
    """``--cpu``: the server's CPU time a request, for the floor and vsqs serve, and
    their ratio (a few requests: no figure is asserted beyond being one)."""
    done = run_benchmark(
        "bench_serve", "--cpu", "--requests", "100", "--rounds", "1", "--servers", "floor,vsqs shm"
    )
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["request", "floor", "(ms)", "vsqs", "shm", "(ms)", "vsqs", "shm",
                                "/", "floor"], done.stdout  # fmt: skip
    assert lines[3].startswith("SendMessageBatch (10)")
    assert lines[4].startswith("ReceiveMessage (10) + DeleteMessageBatch")
    for line in lines[3:5]:
        *_, floor, served, ratio = line.split()
        assert float(floor) >= 0 and float(served) > 0, line
        assert ratio == "n/a" or float(ratio.removesuffix("x")) > 0, line
