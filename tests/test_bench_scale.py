"""benchmarks/bench_scale.py runs, checks its own runs, and prints its tables (no timing
is asserted: the figures are reported in docs/benchmarks.rst, never tested)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from .fixtures_core import run_benchmark

RUNS = ("bare, 1 dir", "bare, 2 dirs", "vsqs, 1 on p=2", "vsqs, 2 on p=2", "vsqs, 1 on p=1")
RATIO_HEAD = (
    "published by",
    "trials",
    "bare 2 / 1",
    "vsqs 2 / 1",
    "≥ 1.5x",
    "vsqs ÷ bare",
    "≥ 0.9x",
    "worst ≥ 0.75x",
    "p=2 ÷ p=1",
    "≤ 1.1x",
)


def _table_rows(stdout: str, rubric: str) -> list[list[str]]:
    """The header and body rows, cell by cell, of the reStructuredText table under *rubric*."""
    lines = stdout[stdout.index(rubric) :].splitlines()[2:]
    end = [i for i, line in enumerate(lines) if line.startswith("=")][2]
    return [re.split(r"\s{2,}", line) for line in lines[:end] if not line.startswith("=")]


def _assert_verdicts(row: list[str]) -> None:
    """Each floor's verdict in a row of the ratio table agrees with the figure it judges
    (a figure printed equal to its floor may have been rounded either way: not judged)."""
    checks = (  # (verdict column, figure column, median 0 or worst 1, floor, "at least")
        (4, 3, 0, 1.5, True),
        (6, 5, 0, 0.9, True),
        (7, 5, 1, 0.75, True),
        (9, 8, 0, 1.1, False),
    )
    for verdict, figure, which, floor, at_least in checks:
        value = float(row[figure].split(" / ")[which])
        if value != floor:
            assert (row[verdict] == "yes") == (value > floor if at_least else value < floor), row


def test_bench_scale_trials_print_every_ratio_and_floor(tmp_path: Path) -> None:
    """The default (issue 38's trials), tiny, on tmpfs: two trials of each role for
    ``publish`` and ``publish_batch(1000)``, five runs each, every run verified (a lost
    or doubled message raises, exit status 1); both tables per role, with every column,
    a verdict per floor, and the count of floors met."""
    done = run_benchmark(
        "bench_scale",
        "--messages",
        "2000",
        "--rounds",
        "2",
        "--batches",
        "1,1000",
        "--json",
        str(tmp_path / "scale.json"),
    )
    met = 0
    for role in ("Consumers", "Producers"):
        ratios = _table_rows(done.stdout, f"{role}, on tmpfs, /dev/shm, 2,000 messages")
        if role == "Consumers":  # how many trials had the two consumers apart: 0 to 2
            assert ratios[0].pop(2) == "apart"
            assert {row.pop(2) for row in ratios[1:]} <= {"0", "1", "2"}
        assert tuple(ratios[0]) == RATIO_HEAD
        assert [row[0] for row in ratios[1:]] == ["publish", "publish_batch(1000)"]
        for row in ratios[1:]:
            assert len(row) == len(RATIO_HEAD)
            assert row[1] == "2"  # trials
            for median_worst in (row[2], row[3], row[5], row[8]):
                assert re.fullmatch(r"\d+\.\d\d / \d+\.\d\d", median_worst)
            assert {row[i] for i in (4, 6, 7, 9)} <= {"yes", "**no**"}
            _assert_verdicts(row)
            met += sum(row[i] == "yes" for i in (4, 6, 7, 9))
        rates = _table_rows(done.stdout, f"{role}, on tmpfs, /dev/shm: median msg/s")
        assert tuple(rates[0]) == ("published by", *RUNS)
        assert [len(row) for row in rates[1:]] == [1 + len(RUNS)] * 2
    assert f"Floors met: {met} of 16" in done.stdout
    found = json.loads((tmp_path / "scale.json").read_text())
    for role in ("consumers", "producers"):
        by_batch = found["shm"][role]
        assert set(by_batch) == {"publish", "publish_batch(1000)"}
        for trials in by_batch.values():
            assert len(trials) == 2
            for trial in trials:
                assert all(trial[run] > 0 for run in RUNS)
                assert set(trial) - set(RUNS) == ({"apart"} if role == "consumers" else set())


def test_bench_scale_rejects_a_bad_batch_size() -> None:
    """``--batches`` that is not a list of sizes of 1 or more is refused with a message
    naming it, before anything runs."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_scale", "--batches", "10,0"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--batches: each size is 1 or more, not '10,0'" in done.stderr


def test_bench_scale_sweep_runs_every_column_and_prints_its_tables(tmp_path: Path) -> None:
    """Issue 27's sweep (``--sweep``), tiny, on tmpfs, K = 1 and 2: both roles, the four
    columns, the one-process comparison; every run verified."""
    done = run_benchmark(
        "bench_scale",
        "--sweep",
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
