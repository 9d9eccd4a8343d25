"""Time, as the queue sees it.

Ids, expiries and retention use the wall clock (they are shared with other hosts through
file names). Timeouts of blocking calls use a monotonic clock. Tests pass a manual clock
(``vsqs.testing.ManualClock``) so that visibility timeouts expire without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol, TypeVar, runtime_checkable

from ._ids import IDS, bind_source

_T = TypeVar("_T")


@runtime_checkable
class Clock(Protocol):
    """What a queue needs to know about time."""

    def time_us(self) -> int:
        """Wall-clock time in integer microseconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards, for timeouts."""

    def sleep(self, seconds: float) -> None:
        """Let *seconds* pass."""

    def wait(self, seconds: float, block: Callable[[float], _T]) -> _T:
        """Let up to *seconds* pass while waiting for an event; what *block* returned.

        *block(s)* waits in the kernel for an event, at most *s* real seconds. The
        system clock calls it with *seconds*; a manual clock moves its own time instead,
        and calls it only to collect events that already happened. Either way the caller
        runs the same code: a clock changes what time it is, never which branch runs.
        """


class SystemClock:
    """The real clocks of the operating system."""

    def time_us(self) -> int:
        return time.time_ns() // 1000

    # The C function itself, not a method calling it: read twice per receive.
    monotonic: Final = staticmethod(time.monotonic)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, seconds: float, block: Callable[[float], _T]) -> _T:
        return block(max(0.0, seconds))

    def __reduce__(self) -> str:
        # Unpickled as the one system clock of the receiving process (its id source too).
        return "SYSTEM_CLOCK"

    @property
    def is_real(self) -> bool:
        """``True``: this clock follows real time (kept for code written for 1.0 betas)."""
        return True


SYSTEM_CLOCK: Final = SystemClock()
bind_source(SYSTEM_CLOCK, IDS)
