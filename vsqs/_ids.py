"""The name grammar of a queue directory: ids, expiries and message states.

Pure functions, no I/O. A message file is named by an integer unix timestamp::

    name    = id ".new"            being written   (State.NEW)
            | id                   ready           (State.READY)
            | id "." expiry        held / delayed  (State.HELD)
    id      = decimal              creation time
    expiry  = decimal ["." digits] visibility deadline (a trailing fraction is tolerated:
                                   vsqs 0.3 wrote one when given a float timeout)
    decimal = "0" | nonzero digit {digit}   at most 19 ASCII digits, no sign, no leading zero

A timestamp is in milliseconds or microseconds. Both may share one directory, so every
value is normalised to microseconds before it is compared: values below ``10**14`` are
milliseconds (``10**14`` ms is the year 5138, ``10**14`` µs is 1973). Every other name,
including dot-files, is not a message and is never touched.
"""

from __future__ import annotations

import enum
import threading
import weakref
from dataclasses import dataclass
from typing import Final

MS_LIMIT: Final = 10**14
MAX_DIGITS: Final = 19
MAX_DURATION: Final = 10**12
"""The longest duration (seconds) a name can carry: a lease, delay or retention ends at
*now* plus it, and must still fit :data:`MAX_DIGITS` digits of microseconds (``10**12`` s
is about 31,700 years; now plus it stays below ``10**19`` µs until the year 288,000).
Every duration vsqs accepts (API, CLI, stored settings, Spark and kombu options) is
checked against this one bound (:func:`vsqs._options.seconds`)."""


class Precision(str, enum.Enum):
    """The unit in which a queue *writes* ids and expiries (it reads both)."""

    MS = "ms"
    US = "us"


class State(enum.Enum):
    """The state a message file is in, told by its name alone."""

    NEW = "new"
    READY = "ready"
    HELD = "held"


@dataclass(frozen=True, slots=True)
class Entry:
    """A parsed message file name."""

    name: str
    state: State
    id: str
    key: int
    """The id normalised to microseconds: the FIFO order."""
    expires: int | None = None
    """The expiry normalised to microseconds, for held messages."""


def parse_decimal(text: str) -> int | None:
    """Return the value of a canonical decimal, or ``None`` if *text* is not one."""
    if not text or len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    if text[0] == "0" and text != "0":
        return None
    return int(text)


def to_us(value: int) -> int:
    """Normalise a millisecond or microsecond timestamp to microseconds."""
    return value * 1000 if value < MS_LIMIT else value


def format_time(us: int, precision: Precision) -> str:
    """Render a microsecond timestamp in the queue's precision."""
    return str(us // 1000) if precision is Precision.MS else str(us)


def parse_name(name: str) -> Entry | None:
    """Parse a directory entry name; ``None`` for anything that is not a message."""
    head, dot, tail = name.partition(".")
    value = parse_decimal(head)
    if value is None:
        return None
    if not dot:
        return Entry(name, State.READY, head, to_us(value))
    if tail == "new":
        return Entry(name, State.NEW, head, to_us(value))
    whole, dot, fraction = tail.partition(".")
    expiry = parse_decimal(whole)
    if expiry is None or (dot and not (fraction.isascii() and fraction.isdigit())):
        return None
    return Entry(name, State.HELD, head, to_us(value), to_us(expiry))


def parse_id(text: str) -> int | None:
    """The normalised key of a bare id, or ``None`` if *text* is not an id."""
    value = parse_decimal(text)
    return None if value is None else to_us(value)


# A ready id is kept in memory as one int, ``key * 2 + is_ms``: half the memory of a
# string, and it sorts in FIFO order. The flag restores the exact name, because a
# millisecond id and a microsecond id may share a key.
def encode_ready(value: int) -> int:
    """Pack a canonical ready id into a sortable int."""
    return (to_us(value) << 1) | (value < MS_LIMIT)


def decode_ready(code: int) -> str:
    """The file name of an id packed by :func:`encode_ready`."""
    key = code >> 1
    return str(key // 1000) if code & 1 else str(key)


class IdSource:
    """Hands out strictly increasing ids within a process (thread-safe).

    Ids of one process never repeat, so a single producer yields a strict FIFO.
    Different processes may still pick the same id; the publisher's exclusive
    create and no-replace rename detect that and it simply draws again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, int] = {1: 0, 1000: 0}

    def next(self, now_us: int, precision: Precision) -> str:
        """Return a fresh id for a message created at *now_us*."""
        unit = 1000 if precision is Precision.MS else 1
        with self._lock:
            value = max(now_us // unit, self._last[unit] + 1)
            self._last[unit] = value
        return str(value)


IDS: Final = IdSource()
"""The id source of every queue on the system clock in this process."""

_per_clock: weakref.WeakKeyDictionary[object, IdSource] = weakref.WeakKeyDictionary()
_per_clock_lock = threading.Lock()


def bind_source(clock: object, source: IdSource) -> None:
    """Make *source* the id source of the queues on *clock* (before any is created)."""
    with _per_clock_lock:
        _per_clock[clock] = source


def source_for(clock: object) -> IdSource:
    """The id source of the queues on *clock*: one per clock object.

    So one process's ids strictly increase across all its queues on one clock, and a
    manual clock's ids follow *its* time, not the ids drawn on the system clock.
    """
    with _per_clock_lock:
        source = _per_clock.get(clock)
        if source is None:
            source = _per_clock[clock] = IdSource()
        return source
