"""Human units, the one formatting module of the command line and the dashboard."""

from __future__ import annotations

import doctest

import pytest

from vsqs import _units


def test_the_examples_in_the_docstring_hold() -> None:
    assert doctest.testmod(_units).failed == 0


@pytest.mark.parametrize(
    ("seconds", "decimals", "shown"),
    [
        (None, 0, "-"),
        (0.25, 0, "0 s"),
        (0.25, 1, "0.2 s"),
        (59.9, 1, "59.9 s"),
        (60, 0, "1.0 min"),
        (5400, 0, "1.5 h"),
        (86400 * 2, 1, "2.0 d"),
    ],
)
def test_an_age_has_its_unit(seconds: float | None, decimals: int, shown: str) -> None:
    assert _units.age(seconds, second_decimals=decimals) == shown


def test_sizes_counts_rates_and_times() -> None:
    assert [_units.size(n) for n in (0, 1023, 1024, 5 * 2**20, 2**50)] == [
        "0 B", "1023 B", "1.0 KiB", "5.0 MiB", "1024.0 TiB"
    ]  # fmt: skip
    assert [_units.count(v) for v in (None, 3, 2.5, 10**6)] == ["-", "3", "2.5", "1,000,000"]
    assert [_units.rate(v) for v in (None, 0.25, 3, 12.4)] == ["-", "0.2/s", "3/s", "12/s"]
    assert _units.when(0) == "1970-01-01 00:00:00 UTC"
    assert _units.throughput(0, 0, 0) == "0 messages in 0.00 s: 0 messages/s (0.00 MB/s)"
    assert _units.throughput(1, 0, 1) == "1 message in 1.00 s: 1 messages/s (0.00 MB/s)"
    assert [_units.count_of(n, "entry", "entries") for n in (0, 1, 1000)] == [
        "0 entries", "1 entry", "1,000 entries"
    ]  # fmt: skip
    assert [_units.duration(s) for s in (345600, 5400, 300, 0.25, 123456, 1)] == [
        "4 days", "1.5 h", "5 min", "0.25 s", "about 1.4 days", "1 s"
    ]  # fmt: skip
