"""The name grammar of a queue directory: ids, expiries and message states.

Pure functions, no I/O. A message file is named by an integer unix timestamp::

    name    = id ".new"            being written   (State.NEW)
            | id                   ready           (State.READY)
            | id "." expiry        held / delayed  (State.HELD)
    id      = decimal              creation time
    expiry  = decimal ["." digits] visibility deadline (a trailing fraction is tolerated:
                                   vsqs 0.3 wrote one when given a float timeout; ".0"
                                   marks a requeue hold, :data:`HOLD_TAG`; an extended
                                   lease's is its delivery, :func:`delivery_of`)
    decimal = "0" | nonzero digit {digit}   at most 19 ASCII digits, no sign, no leading zero

A timestamp is in milliseconds or microseconds. Both may share one directory, so every
value is normalised to microseconds before it is compared: values below ``10**14`` are
milliseconds (``10**14`` ms is the year 5138, ``10**14`` µs is 1973). Every other name,
including dot-files, is not a message and is never touched.

This module is the only one that reads names: every other module asks it
(:func:`parse_name`, :func:`sort_names` for a listing, :func:`ready_code` and
:func:`ready_code_of_bytes` for a ready name, :func:`id_of`, :func:`split_name`,
:func:`is_hold`, :func:`delivery_of`; :func:`decode_ready` turns a packed id back into
its name), and
``tests/test_architecture.py`` checks that none takes a name apart itself.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections.abc import Iterable
from typing import Final

MS_LIMIT: Final = 10**14
MAX_DIGITS: Final = 19
HOLD_TAG: Final = ".0"
"""The fraction that marks a held name as a requeue hold (``<id>.<hold>.0``), not a lease."""

MAX_DURATION: Final = 10**12
"""The longest duration (seconds) a name can carry: a lease, delay or retention ends at
*now* plus it, and must still fit :data:`MAX_DIGITS` digits of microseconds (``10**12`` s
is about 31,700 years; now plus it stays below ``10**19`` µs until the year 288,000).
Every duration vsqs accepts (API, CLI, stored settings, Spark and kombu options) is
checked against this one bound (:func:`vsqs.validate_seconds`)."""


class Precision(str, enum.Enum):
    """The unit in which a queue *writes* ids and expiries (it reads both)."""

    MS = "ms"
    US = "us"


class State(enum.Enum):
    """The state a message file is in, told by its name alone."""

    NEW = "new"
    READY = "ready"
    HELD = "held"


class Entry:
    """A parsed message file name (immutable: its fields are ``Final``).

    A plain class: a frozen dataclass compiles its methods, a named tuple each field's
    annotation, when the class is made, which every ``import vsqs`` would pay.
    """

    __slots__ = ("expires", "id", "key", "name", "state")

    def __init__(
        self, name: str, state: State, message_id: str, key: int, expires: int | None = None
    ) -> None:
        self.name: Final = name
        self.state: Final = state
        self.id: Final = message_id
        self.key: Final = key
        """The id normalised to microseconds: the FIFO order."""
        self.expires: Final = expires
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
    return str(us // 1000) if precision is _MS else str(us)


_MS: Final = Precision.MS  # a module global: a receive formats one name per message


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


def id_of(name: str) -> str:
    """The id part of a message name or receipt (any state): the text before its first dot.

    No check: *name* is one vsqs made or parsed already (a receipt is checked where it
    enters, see :func:`parse_name`).
    """
    return name.partition(".")[0]


def split_name(name: str) -> tuple[str, str]:
    """A message name or receipt as ``(id, lease)``: the text before its first dot and
    after it (``""`` for a ready name). No check, as :func:`id_of`."""
    message_id, _, lease = name.partition(".")
    return message_id, lease


def delivery_of(name: str) -> str:
    """The delivery a held name or receipt belongs to: the expiry its receive gave it.

    An extension carries it as the name's fraction (``<id>.<expiry>.<delivery>``, see
    :meth:`vsqs.Queue.change_visibility`), so a name with none is a receive's own lease,
    its delivery its expiry. ``""`` for a requeue hold and a ready name: no delivery.
    No check, as :func:`id_of`.
    """
    _, _, lease = name.partition(".")
    whole, dot, fraction = lease.partition(".")
    if dot and fraction == HOLD_TAG[1:]:
        return ""
    return fraction or whole


def is_hold(name: str) -> bool:
    """Whether a held name is a requeue hold (``<id>.<hold>.0``) rather than a lease."""
    return name.endswith(HOLD_TAG) and name.count(".") == 2


def ready_code(name: str) -> int | None:
    """The packed id (:func:`encode_ready`) of a ready name; ``None`` for any other name.

    Agrees with :func:`parse_name` (``State.READY``) on every string.
    """
    if (
        name.isdigit()
        and name.isascii()
        and len(name) <= MAX_DIGITS
        and (name[0] != "0" or len(name) == 1)
    ):
        value = int(name)
        return value << 1 if value >= MS_LIMIT else (value * 1000) << 1 | 1
    return None


_ZERO: Final = ord("0")


def ready_code_of_bytes(name: bytes) -> int | None:
    """:func:`ready_code` of a name as the kernel gives it (an inotify event's bytes)."""
    # bytes.isdigit() is true for ASCII digits only: no isascii() needed.
    if name.isdigit() and len(name) <= MAX_DIGITS and (name[0] != _ZERO or len(name) == 1):
        value = int(name)
        return value << 1 if value >= MS_LIMIT else (value * 1000) << 1 | 1
    return None


def sort_names(
    names: Iterable[str],
    ready: list[int],
    held: list[tuple[int, str]],
    new: list[tuple[int, str]],
    other: list[str],
) -> None:
    """Sort a directory listing by state, appending each name to one list: *ready* its
    packed id (:func:`encode_ready`), *held* ``(expiry_us, name)``, *new*
    ``(created_us, name)``, *other* the names that are not messages.

    Agrees with :func:`parse_name` on every name; one loop, because a listing of a large
    backlog is the hot path of a consumer (a call per name would cost a tenth more).
    """
    ready_append = ready.append
    for name in names:
        # Fast path for the common case, a ready id: digits only (ready_code, inline).
        if name.isdigit() and name.isascii():
            if len(name) <= MAX_DIGITS and (name[0] != "0" or len(name) == 1):
                value = int(name)
                ready_append(value << 1 if value >= MS_LIMIT else (value * 1000) << 1 | 1)
            else:
                other.append(name)
            continue
        entry = parse_name(name)
        if entry is None:
            other.append(name)
        elif entry.state is State.NEW:
            new.append((entry.key, name))
        else:  # held: a ready name is all digits, taken above
            assert entry.expires is not None
            held.append((entry.expires, name))


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
        unit = 1000 if precision is _MS else 1
        with self._lock:
            last = self._last
            value = now_us // unit
            if value <= last[unit]:  # as max(): no builtin call on every publish
                value = last[unit] + 1
            last[unit] = value
        return str(value)

    def restart(self, last: dict[int, int] | None = None) -> dict[int, int]:
        """Draw ids as a new process would (or from *last*, a value this returned);
        returns what it replaces. For tests (:func:`vsqs.testing.fresh_ids`)."""
        with self._lock:
            before, self._last = self._last, dict(last or {1: 0, 1000: 0})
        return before


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
