"""Time, as the queue sees it.

Ids, expiries and retention use the wall clock (they are shared with other hosts through
file names). Timeouts of blocking calls use a monotonic clock. Tests pass a manual clock
(``vsqs.testing.ManualClock``) so that visibility timeouts expire without sleeping.
"""

from __future__ import annotations

import math
import time
from typing import Final, Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What a queue needs to know about time."""

    def time_us(self) -> int:
        """Wall-clock time in integer microseconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards, for timeouts."""

    def sleep(self, seconds: float) -> None:
        """Let *seconds* pass."""

    @property
    def is_real(self) -> bool:
        """Whether this clock follows real time (so the queue may block in the kernel)."""


class SystemClock:
    """The real clocks of the operating system."""

    def time_us(self) -> int:
        return time.time_ns() // 1000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    @property
    def is_real(self) -> bool:
        return True


SYSTEM_CLOCK: Final = SystemClock()


def check_seconds(value: float, what: str, *, allow_zero: bool = True) -> float:
    """Return *value* as float seconds; a clear error if it is not a finite duration."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)
