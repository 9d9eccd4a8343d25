"""A queue's configuration: every constructor option, checked once, frozen.

Pure values, no I/O. :class:`Config` is built when a :class:`~vsqs.Queue` is created
and never changes; it is what a pickled queue (a Spark closure, a multiprocessing
argument) carries to rebuild itself in another process. Every option is checked here,
once, with one rule per kind, and the error names the option:

* durations are non-negative finite numbers of seconds (``bool`` is not a number), at
  most :data:`MAX_DURATION` (what the name grammar holds);
* counts are positive ``int`` (``bool`` is not an ``int`` here either);
* flags are ``bool``; enumerations are one of their listed values.
"""

from __future__ import annotations

import enum
import math
import os
from typing import Final, Literal, NamedTuple, TypedDict, cast

from ._clock import SYSTEM_CLOCK, Clock
from ._ids import MAX_DURATION, Precision

WaitMode = Literal["auto", "inotify", "poll"]
WAIT_MODES: Final = ("auto", "inotify", "poll")


class Unset(enum.Enum):
    """The default of an option that may be stored with the queue: not given, so the
    queue's stored setting applies (or, without one, vsqs's default)."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "<the stored setting, or the default>"


UNSET: Final = Unset.UNSET


class HandleOptions(TypedDict, total=False):
    """The keyword options every queue handle takes, plain or partitioned, but
    ``dead_letter`` and ``partitions`` (see :class:`QueueOptions`)."""

    visibility_timeout: float
    durable: bool
    delay: float
    precision: str | Precision
    capacity: int | None
    max_receives: int | None
    retention: float | None
    dedup_window: float
    wait: str
    poll_interval: float | None
    refresh_interval: float
    umask: int | None
    clock: Clock | None
    fifo: bool


class PlainOptions(HandleOptions, total=False):
    """The keyword options of a plain queue (:meth:`Config.options`)."""

    dead_letter: str | os.PathLike[str] | None


class QueueOptions(PlainOptions, total=False):
    """The keyword options of :func:`vsqs.Queue` (for ``QueueRoot(**options)``)."""

    partitions: int


MAX_PARTITIONS: Final = 1024
"""The most partitions a queue may have (each is a directory)."""

FIFO_PARTITIONS: Final = 8
"""The partitions of a ``fifo=True`` queue created without a count: a ``fifo`` claim
lists its partition when its last listing is stale or used up, so short partitions keep
it cheap (groups that share one never wait for each other: see :mod:`vsqs._groups`)."""


def partition_count(value: object, name: str = "partitions") -> int:
    """*value* as a partition count (an ``int`` from 1 to :data:`MAX_PARTITIONS`)."""
    checked = count(value, name)
    if checked > MAX_PARTITIONS:
        raise ValueError(f"{name} must be at most {MAX_PARTITIONS}, not {checked!r}")
    return checked


def validate_seconds(value: object, name: str, *, positive: bool = False) -> float:
    """Return *value* as a ``float`` number of seconds if vsqs accepts it as a duration:
    a finite ``int`` or ``float`` from 0 (above 0 if *positive*) to
    :data:`~vsqs.MAX_DURATION`; raise an error naming *name* otherwise. Pure: the check
    every duration of the API goes through, for an integration that takes a duration
    of its own (a timeout it waits for before calling vsqs) to refuse what vsqs would.

    >>> import vsqs
    >>> vsqs.validate_seconds(1, "timeout")
    1.0

    :raises TypeError: not a number (a ``bool`` is not one).
    :raises ValueError: negative (or 0 with *positive*), NaN, infinite or too large.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, not {value!r}")
    if value > MAX_DURATION:
        raise ValueError(
            f"{name} must be at most {MAX_DURATION:.0e} seconds (the longest duration a "
            f"message name holds), not {value!r}"
        )
    return float(value)


def count(value: object, name: str, *, minimum: int = 1) -> int:
    """*value* as an ``int`` of at least *minimum*, or an error naming *name*."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")
    return value


def batch_size(value: object, name: str = "max_messages") -> int:
    """*value* as a number of messages to take at once (a positive ``int``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, not {value!r}")
    return value


def flag(value: object, name: str) -> bool:
    """*value* if it is a ``bool``, or a :class:`TypeError` naming *name*."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def queue_path(value: object, name: str = "path") -> str:
    """An absolute queue path from a ``str`` or ``os.PathLike``, or an error naming *name*."""
    try:
        raw = os.fspath(cast("str", value))
    except TypeError:
        kind = type(value).__name__
        raise TypeError(f"{name} must be a str or os.PathLike, not {kind}") from None
    if not isinstance(raw, str) or not raw or "\0" in raw:
        raise ValueError(f"{name} must be a non-empty str without NUL bytes: {raw!r}")
    return os.path.abspath(raw)


class Config(NamedTuple):
    """The validated options of one queue (see :class:`~vsqs.Queue` for each one).

    A named tuple (frozen; equal when every option is, the clock by identity): a frozen
    dataclass would compile its methods at every ``import vsqs``, two milliseconds of it.
    """

    visibility_timeout: float = 30.0
    durable: bool = True
    delay: float = 0.0
    """The default delay of a publish (seconds), when the publish gives none."""
    precision: Precision = Precision.US
    capacity: int | None = None
    dead_letter: str | None = None
    """The dead-letter queue's absolute path."""
    max_receives: int | None = None
    retention: float | None = None
    dedup_window: float = 300.0
    wait: WaitMode = "auto"
    poll_interval: float | None = None
    refresh_interval: float = 1.0
    umask: int | None = None
    clock: Clock = SYSTEM_CLOCK
    fifo: bool = False
    """One message in flight per message group."""

    @classmethod
    def build(
        cls,
        *,
        visibility_timeout: object = 30.0,
        durable: object = True,
        delay: object = 0.0,
        precision: object = Precision.US,
        capacity: object = None,
        dead_letter: object = None,
        max_receives: object = None,
        retention: object = None,
        dedup_window: object = 300.0,
        wait: object = "auto",
        poll_interval: object = None,
        refresh_interval: object = 1.0,
        umask: object = None,
        clock: object = None,
        fifo: object = False,
    ) -> Config:
        """Check every option and return the configuration; an error names the option."""
        if not isinstance(precision, (str, Precision)) or precision not in ("us", "ms"):
            raise ValueError(f"precision must be 'us' or 'ms', not {precision!r}")
        if wait not in WAIT_MODES:
            raise ValueError(f"wait must be one of {', '.join(WAIT_MODES)}, not {wait!r}")
        if umask is not None:
            count(umask, "umask", minimum=0)
            if cast("int", umask) > 0o777:
                raise ValueError(f"umask must be an int between 0 and 0o777, not {umask!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must be a vsqs.Clock, not {type(clock).__name__}")
        if max_receives is not None and dead_letter is None:
            raise ValueError("max_receives needs a dead_letter queue to move messages to")
        return cls(
            visibility_timeout=validate_seconds(visibility_timeout, "visibility_timeout"),
            durable=flag(durable, "durable"),
            delay=validate_seconds(delay, "delay"),
            precision=Precision(precision),
            capacity=None if capacity is None else count(capacity, "capacity"),
            dead_letter=None if dead_letter is None else queue_path(dead_letter, "dead_letter"),
            max_receives=None if max_receives is None else count(max_receives, "max_receives"),
            retention=None if retention is None else validate_seconds(retention, "retention"),
            dedup_window=validate_seconds(dedup_window, "dedup_window"),
            wait=wait,
            poll_interval=None
            if poll_interval is None
            else validate_seconds(poll_interval, "poll_interval", positive=True),
            refresh_interval=validate_seconds(refresh_interval, "refresh_interval"),
            umask=cast("int | None", umask),
            clock=SYSTEM_CLOCK if clock is None else clock,
            fifo=flag(fifo, "fifo"),
        )

    @property
    def vt_us(self) -> int:
        """The visibility timeout in microseconds."""
        return round(self.visibility_timeout * 1e6)

    @property
    def dir_mode(self) -> int:
        """The mode of the directories vsqs creates (before the process umask, if none)."""
        return 0o777 if self.umask is None else 0o777 & ~self.umask

    @property
    def file_mode(self) -> int | None:
        """The mode to force on created files; ``None``: leave it to the process umask."""
        return None if self.umask is None else 0o666 & ~self.umask

    def options(self) -> PlainOptions:
        """The options to rebuild this configuration (``Queue(path, **options)``)."""
        return PlainOptions(
            visibility_timeout=self.visibility_timeout,
            durable=self.durable,
            delay=self.delay,
            precision=self.precision,
            capacity=self.capacity,
            dead_letter=self.dead_letter,
            max_receives=self.max_receives,
            retention=self.retention,
            dedup_window=self.dedup_window,
            wait=self.wait,
            poll_interval=self.poll_interval,
            refresh_interval=self.refresh_interval,
            umask=self.umask,
            clock=None if self.clock is SYSTEM_CLOCK else self.clock,
            fifo=self.fifo,
        )
