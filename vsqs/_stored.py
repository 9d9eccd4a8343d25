"""Settings stored with a queue: one JSON file, ``.vsqs/settings.json``.

SQS keeps a queue's attributes with the queue (``SetQueueAttributes``); vsqs keeps them
in one small file, so a bare ``Queue(path)`` in any process gets the same visibility
timeout, dead-letter queue and capacity without being told. The file is a JSON object
of the :data:`STORED` keys, nothing else::

    {"visibility_timeout": 60, "dead_letter": "orders.dlq", "max_receives": 5}

* **Written atomically**: a temporary file renamed over the old one (readers see the
  old settings or the new, never a mix), fsynced with its directory, under a
  cross-process lock (``.vsqs/settings.lock``) so two concurrent ``configure`` calls
  both land.
* **Validated when read**, every key by the rule the constructor uses: a file that is
  not JSON, not an object, has an unknown or repeated key, a value of the wrong type,
  a symlink or non-file in its place, or a dead-letter queue that is not a sibling
  directory of the queue raises :class:`~vsqs.InvalidSettings` naming the file and the
  key, and nothing is changed.
* **The dead-letter queue is stored by name**, as a sibling of the queue (the same
  parent directory, the root of a :class:`~vsqs.QueueRoot`): a stored file can never
  send messages outside the root, whatever it holds.
* **Handles override** (for themselves only) every setting but ``capacity``: a stored
  capacity binds every producer, and a smaller one passed to a handle only tightens
  that handle's own bound (see :func:`resolve`).

vsqs 0.3 ignores the file (it lives in the dot-directory); a queue without it behaves
as before settings existed.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Mapping
from typing import Final, TypedDict, cast

from . import _fs, _host
from ._clock import SYSTEM_CLOCK, Clock
from ._errors import InvalidSettings, UnsafeEntry
from ._layout import READ_LIMITS, ROOT, SETTINGS, SETTINGS_LOCK, Layout
from ._lock import FileLock
from ._options import count, flag, partition_count, validate_seconds

STORED: Final = (
    "visibility_timeout",
    "delay",
    "capacity",
    "dead_letter",
    "max_receives",
    "retention",
    "dedup_window",
    "partitions",
    "fifo",
)
"""The settings a queue may store, in the order they are shown."""

SHAPE: Final = ("partitions", "fifo")
"""The settings that say how the queue is laid out and delivers: stored when a handle
that gives them creates the queue, and never overridden (a handle that disagrees is
refused: see :func:`resolve`)."""

OVERRIDABLE: Final = tuple(key for key in STORED if key != "capacity" and key not in SHAPE)
"""The stored settings a handle may replace for itself (``capacity`` only tightens)."""

# A settings file is a few hundred bytes; more is not ours (and is never read whole).
_MAX_BYTES: Final = READ_LIMITS[ROOT]
LOCK_WAIT: Final = 10.0
"""Seconds a settings change waits for another process's before giving up."""
# What reading a planted non-file gives: a symlink (ELOOP: opened with O_NOFOLLOW), a
# FIFO or directory (EINVAL from _fs's regular-file check, EISDIR), a socket (ENXIO).
# And a file larger than _layout.READ_LIMITS allows (EFBIG): refused without being read.
_NOT_A_FILE: Final = frozenset({errno.ELOOP, errno.EINVAL, errno.EISDIR, errno.ENXIO})


class Settings(TypedDict, total=False):
    """Settings as stored (``dead_letter`` is the name of a sibling queue directory)."""

    visibility_timeout: float
    delay: float
    capacity: int
    dead_letter: str
    max_receives: int
    retention: float
    dedup_window: float
    partitions: int
    fifo: bool


def _check_value(key: str, value: object) -> object:
    """*value* checked by the constructor's rule for *key* (raises TypeError/ValueError)."""
    if key in ("capacity", "max_receives"):
        return count(value, key)
    if key == "dead_letter":
        return sibling_name(value)
    if key == "partitions":
        return partition_count(value)
    if key == "fifo":
        return flag(value, key)
    return validate_seconds(value, key)


def sibling_name(value: object) -> str:
    """*value* if it names a directory beside the queue (no separator, no dot-entry)."""
    if not isinstance(value, str):
        raise TypeError(f"dead_letter must be a queue name (a str), not {type(value).__name__}")
    if not value or "/" in value or "\0" in value or value.startswith(".") or len(value) > 255:
        raise ValueError(
            f"dead_letter must name a queue beside this one (in the same directory), "
            f"without '/' or a leading '.', not {value!r}"
        )
    return value


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number of seconds")


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise KeyError(key)
        result[key] = value
    return result


def parse(raw: bytes, path: str, queue: str) -> Settings:
    """The settings in *raw* (the content of the file at *path*), every key checked.

    :raises InvalidSettings: naming *path* and the key at fault.
    """
    if len(raw) > _MAX_BYTES:
        raise InvalidSettings(path, "", f"larger than {_MAX_BYTES} bytes")
    try:
        import json  # noqa: PLC0415 -- 2 ms at import: only where records are read or written

        data = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique, parse_constant=_reject_constant
        )
    except KeyError as exc:
        raise InvalidSettings(path, str(exc.args[0]), "given twice") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidSettings(path, "", f"not valid JSON (truncated?): {exc}") from None
    if not isinstance(data, dict):
        raise InvalidSettings(path, "", f"must be a JSON object, not {type(data).__name__}")
    settings: dict[str, object] = {}
    for key, value in data.items():
        if key not in STORED:
            raise InvalidSettings(path, key, f"unknown setting; known: {', '.join(STORED)}")
        try:
            settings[key] = _check_value(key, value)
        except (TypeError, ValueError) as exc:
            raise InvalidSettings(path, key, str(exc)) from None
    if "max_receives" in settings and "dead_letter" not in settings:
        raise InvalidSettings(path, "max_receives", "needs a dead_letter setting")
    if settings.get("dead_letter") == os.path.basename(queue):
        raise InvalidSettings(path, "dead_letter", "a queue cannot be its own dead-letter queue")
    return cast("Settings", settings)  # every key and value checked above


def dump(settings: Settings) -> bytes:
    """The file content for *settings*, keys in :data:`STORED` order."""
    ordered = {key: value for key in STORED if (value := settings.get(key)) is not None}
    import json  # noqa: PLC0415 -- see above

    return (json.dumps(ordered, indent=2) + "\n").encode()


def shown_path(layout: Layout) -> str:
    """The settings file's path, for messages."""
    return f"{layout.root}/{SETTINGS}"


def settings_stamp(queue: str | os.PathLike[str]) -> tuple[int, int] | None:
    """A stamp of the settings stored with the queue directory *queue*: another stamp
    means they changed; ``None`` when it has none. For a process that keeps handles
    open (a server) to see at little cost that another process changed the settings
    (:meth:`~vsqs.PlainQueue.configure`, :func:`reset_settings`), and open a new handle.

    One ``lstat`` by path (no symlink followed, no lock, nothing read): a snapshot.
    Every change replaces the file by a rename, so the stamp (its inode number and
    modification time, ns) changes with it, unless a filesystem with coarse timestamps
    reuses the inode number within one tick.

    >>> import tempfile, vsqs
    >>> queue = vsqs.Queue(tempfile.mkdtemp())
    >>> vsqs.settings_stamp(queue.path) is None
    True
    >>> _ = queue.configure(visibility_timeout=90)
    >>> vsqs.settings_stamp(queue.path) is not None
    True
    """
    try:
        info = _host.lstatus(_settings_path(os.fspath(queue)))
    except (FileNotFoundError, NotADirectoryError):
        return None  # none stored (or no queue there: opening it says so)
    return (info.st_ino, info.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _settings_path(queue: str) -> str:
    """The settings file's path (cached: a server asks for each request)."""
    return shown_path(Layout(queue))


def read(layout: Layout) -> Settings:
    """The stored settings of *layout*'s queue; empty when there are none.

    One read through the layout (never following a link). A queue directory that does
    not exist yet, or a planted ``.vsqs`` that vsqs refuses to enter, has none.

    :raises InvalidSettings: the file cannot be trusted (see the module docstring).
    """
    path = shown_path(layout)
    try:
        raw = layout.read(ROOT, SETTINGS)
    except (FileNotFoundError, NotADirectoryError, UnsafeEntry):
        return Settings()  # no queue directory yet, or a .vsqs vsqs never enters
    except OSError as exc:
        if exc.errno not in _NOT_A_FILE and exc.errno != errno.EFBIG:
            raise  # permission denied, I/O error: as they are
        if exc.errno == errno.EFBIG:
            raise InvalidSettings(path, "", f"larger than {_MAX_BYTES} bytes") from None
        raise InvalidSettings(path, "", f"not a regular file ({exc.strerror})") from None
    if raw is None:
        return Settings()
    settings = parse(raw, path, layout.path)
    if "dead_letter" in settings:
        target = os.path.join(os.path.dirname(layout.path), settings["dead_letter"])
        if _fs.exists(target) and not _fs.is_plain_dir(target):
            raise InvalidSettings(
                path, "dead_letter", f"{target!r} is not a directory (a symlink?); never followed"
            )
    return settings


def load(queue: str) -> Settings:
    """The stored settings of the queue directory *queue* (descriptors released after)."""
    layout = Layout(queue)
    try:
        return read(layout)
    finally:
        layout.close()


def shape(queue: str, stored: Settings, given: Mapping[str, object]) -> dict[str, object]:
    """The :data:`SHAPE` settings a handle of *queue* must store before it uses the queue.

    *given* holds the shape options the handle was given (absent: not given). A stored
    value is final: a handle that gives another one is refused, naming both. A value
    that differs from the default and is not stored yet is returned, to be stored (the
    handle creates the queue with it).

    :raises ValueError: *given* contradicts what *queue* stores.
    """
    store: dict[str, object] = {}
    for key, default in (("partitions", 1), ("fifo", False)):
        if key not in given:
            continue
        value = _check_value(key, given[key])
        if key in stored:
            if stored[key] != value:  # type: ignore[literal-required]
                raise ValueError(
                    f"queue {queue!r} stores {key}={stored[key]!r}; this handle asked for "  # type: ignore[literal-required]
                    f"{key}={value!r}. The {key} setting is fixed when a queue is created: "
                    "open it without this option, or create a new queue with it and move "
                    "the messages there (``old.redrive(to=new)``; ``vsqs redrive``)."
                )
        elif value != default:
            store[key] = value
    return store


def resolve(queue: str, stored: Settings, given: Mapping[str, object]) -> dict[str, object]:
    """The options of a handle: the *stored* settings, replaced by those it was *given*.

    Every stored setting but ``capacity`` yields to the handle's own value. A stored
    capacity binds every producer: a handle's smaller capacity applies to that handle,
    a larger one (or none) does not lift it. The stored dead-letter name becomes the
    path beside *queue*.
    """
    options: dict[str, object] = dict(stored)
    options.pop("partitions", None)  # the directory's shape, not an option of a handle
    if "dead_letter" in stored:
        options["dead_letter"] = os.path.join(os.path.dirname(queue), stored["dead_letter"])
    options.update(given)
    if "dead_letter" in given and given["dead_letter"] is None and "max_receives" not in given:
        options.pop("max_receives", None)  # the handle opted out of dead-lettering
    if "capacity" in stored:
        mine = given.get("capacity")
        bound = stored["capacity"]
        options["capacity"] = bound if mine is None else min(bound, count(mine, "capacity"))
    return options


def update(layout: Layout, clock: Clock, changes: Mapping[str, object]) -> Settings:
    """Apply *changes* to the stored settings (``None`` removes a key); the result.

    Atomic (one rename) and serialised with every other update by ``flock`` on
    ``.vsqs/settings.lock``; a malformed stored file or a bad change raises and leaves
    the file as it was.

    :raises TypeError: an unknown key, or a value of the wrong type.
    :raises ValueError: a value out of range, or ``max_receives`` without ``dead_letter``.
    :raises InvalidSettings: the stored file cannot be trusted (fix or remove it first).
    """
    for key in changes:
        if key not in STORED:
            raise TypeError(f"unknown setting {key!r}; settings are: {', '.join(STORED)}")
    if "partitions" in changes:
        raise ValueError(
            "the partition count is fixed when a queue is created (its messages live in "
            "that many directories): create a new queue with partitions=N and move the "
            "messages there (``old.redrive(to=new)``; ``vsqs redrive OLD --to NEW``)"
        )
    checked = {
        key: None if value is None else _check_value(key, value) for key, value in changes.items()
    }
    with locked(layout, clock):
        current: dict[str, object] = dict(read(layout))
        for key, value in checked.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        if "max_receives" in current and "dead_letter" not in current:
            raise ValueError("max_receives needs a dead_letter queue to move messages to")
        if current.get("dead_letter") == os.path.basename(layout.path):
            raise ValueError("a queue cannot be its own dead-letter queue")
        result = cast("Settings", current)  # every key and value checked above
        layout.write(ROOT, SETTINGS, dump(result), durable=True)
        layout.fsync(ROOT)
    return result


def adopt(layout: Layout, clock: Clock, values: Mapping[str, object]) -> None:
    """Store the :data:`SHAPE` *values* of a queue being created (see :func:`shape`).

    Under the settings lock, one atomic rename, as :func:`update`; a value another
    handle stored first must agree.

    :raises ValueError: another handle created the queue with other values first.
    """
    with locked(layout, clock):
        current: dict[str, object] = dict(read(layout))
        shape(layout.path, cast("Settings", current), values)  # RACE: another creator won
        current.update(values)
        layout.write(ROOT, SETTINGS, dump(cast("Settings", current)), durable=True)
        layout.fsync(ROOT)


def reset_settings(queue: str | os.PathLike[str], *, clock: Clock = SYSTEM_CLOCK) -> str | None:
    """Move the settings file of the queue directory *queue* aside, whatever it holds.

    The repair for a file that cannot be read (see :class:`~vsqs.InvalidSettings`),
    which no ``configure`` will write over: it is renamed, never removed (it is evidence,
    and may hold settings worth keeping), to ``.vsqs/settings.json.bad-<UTC time>``; the
    queue then has the default settings. One rename in ``.vsqs`` (never replacing, the
    planted link or directory itself, never what it points at), under the settings lock:
    a reader sees the old file or none. The path it was moved to; ``None`` if there was
    no file. Needs no handle (a queue whose file is bad cannot be opened):

    >>> import tempfile, vsqs
    >>> queue = vsqs.Queue(tempfile.mkdtemp())
    >>> queue.configure(visibility_timeout=90)
    {'visibility_timeout': 90.0}
    >>> vsqs.reset_settings(queue.path).rpartition("/")[2].startswith("settings.json.bad-")
    True
    >>> vsqs.Queue(queue.path).settings()
    {}

    :param clock: the time the moved file is named after.
    :raises FileNotFoundError: there is no directory *queue* (``NotADirectoryError``:
        it is not a directory).
    :raises LockTimeout: another process held the settings lock too long.
    """
    layout = Layout(os.path.abspath(os.fspath(queue)))
    try:
        if not layout.exists(ROOT, SETTINGS):
            return None  # nothing to repair: no lock file made in a queue without one
        with locked(layout, clock):
            if not layout.exists(ROOT, SETTINGS):
                return None
            now_us = clock.time_us()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_us // 1_000_000))
            aside = f"{SETTINGS}.bad-{stamp}.{now_us % 1_000_000:06d}Z"
            layout.rename_noreplace(ROOT, SETTINGS, aside)
            layout.fsync(ROOT)
            return f"{layout.root}/{aside}"
    finally:
        layout.close()


def locked(layout: Layout, clock: Clock) -> FileLock:
    """The settings lock (``.vsqs/settings.lock``), for ``with locked(layout, clock):``.

    Waited for up to :data:`LOCK_WAIT` seconds, then :class:`~vsqs.LockTimeout` is
    raised and nothing is changed: its holder is stopped (it holds it only to rewrite
    one small file).
    """
    return FileLock.in_queue(layout, SETTINGS_LOCK, clock, timeout=LOCK_WAIT)
