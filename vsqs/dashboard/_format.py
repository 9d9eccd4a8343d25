"""Numbers in human units, as the pages show them (``static/dashboard.js`` formats the
live refreshes the same way)."""

from __future__ import annotations

import time
from typing import Final

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


def age(seconds: float | None) -> str:
    """``42 s``, ``3.5 min``, ``2.0 h``, ``1.5 d``; ``-`` for ``None``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
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
