"""Numbers in human units: counts, ages, durations, sizes, rates and times, as vsqs shows them.

One place for the command line (``vsqs stats``, ``pump``, ``sink``) and the dashboard's
pages (whose ``static/dashboard.js`` formats its live refreshes the same way). Pure
functions of their arguments: no I/O, no state.

>>> count(1234567), age(90), size(1536), rate(0.5), throughput(1000, 10**6, 2.0)
('1,234,567', '1.5 min', '1.5 KiB', '0.5/s', '1,000 messages in 2.00 s: 500 messages/s (0.50 MB/s)')
"""

from __future__ import annotations

import time
from typing import Final

__all__ = ["UNKNOWN", "age", "count", "count_of", "duration", "rate", "size", "throughput", "when"]

_BYTES: Final = ("B", "KiB", "MiB", "GiB", "TiB")
_UNITS: Final = ((86400, "day", "days"), (3600, "h", "h"), (60, "min", "min"), (1, "s", "s"))
UNKNOWN: Final = "\u2014"
"""What a number that could not be read shows (an em dash, never a 0 that reads as real)."""


def count(value: float | None) -> str:
    """``1,234,567``; a fraction keeps one decimal; ``-`` for ``None``."""
    if value is None:
        return "-"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}"


def count_of(number: int, singular: str, plural: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``1,000 messages``: a count and its noun."""
    return f"{number:,} {singular if number == 1 else plural or singular + 's'}"


def age(seconds: float | None, *, second_decimals: int = 0) -> str:
    """``42 s``, ``3.5 min``, ``2.0 h``, ``1.5 d``; ``-`` for ``None``.

    :param second_decimals: decimals under a minute (the command line shows ``0.3 s``).
    """
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.{second_decimals}f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def size(nbytes: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``..."""
    value = float(nbytes)
    for unit in _BYTES:
        if value < 1024 or unit == _BYTES[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def rate(value: float | None) -> str:
    """``12/s``, ``0.5/s``; ``-`` for ``None``."""
    if value is None:
        return "-"
    if value >= 10 or value == int(value):
        return f"{value:,.0f}/s"
    return f"{value:.1f}/s"


def throughput(messages: int, nbytes: int, elapsed: float) -> str:
    """``N messages in T s: R messages/s (B MB/s)``, a load generator's result."""
    elapsed = max(elapsed, 1e-9)
    return (
        f"{count_of(messages, 'message')} in {elapsed:.2f} s: {messages / elapsed:,.0f} messages/s"
        f" ({nbytes / elapsed / 1e6:,.2f} MB/s)"
    )


def when(unix: float | None) -> str:
    """A UTC time, ``2026-11-26 10:02:03 UTC``; ``-`` for ``None``."""
    if unix is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def duration(seconds: float) -> str:
    """A setting in seconds, in the largest unit that says it exactly (whole or to one
    decimal): ``345600`` -> ``4 days``, ``5400`` -> ``1.5 h``, ``300`` -> ``5 min``,
    ``0.25`` -> ``0.25 s``; otherwise ``about`` it in the largest unit it fills
    (``123456`` -> ``about 1.4 days``)."""
    for unit, one, many in _UNITS:
        value = seconds / unit
        if 1 <= value < 1000 and round(value, 1) == value:
            shown = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
            return f"{shown} {one if value == 1 else many}"
    for unit, _, many in _UNITS:
        if seconds >= unit:
            return f"about {seconds / unit:,.1f} {many}"
    return f"{seconds:g} s"
