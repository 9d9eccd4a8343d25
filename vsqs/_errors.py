"""The vsqs exception hierarchy.

Every error vsqs raises on purpose derives from :class:`VsqsError` *and* from the
builtin exception a caller would naturally catch, so ``except TimeoutError`` works
for a full queue without importing vsqs. Most live here; the integrations' own live
beside them (the last column says where), and ``tests/test_error_tree.py`` checks that
this tree names every one, under its parent, with its builtin base::

    VsqsError
    ├── QueueFull            (TimeoutError)        publish() waited for room and gave up
    ├── LockTimeout          (TimeoutError)        one of the queue's locks stayed held too long
    ├── QueueClosed                                publish() to a queue that was shut down
    │   └── QueueDrained     (EOFError)            receive() on a shut-down queue with nothing left
    ├── InvalidId            (ValueError)          an id or receipt that is not one of ours
    ├── InvalidName          (ValueError)          a queue name that could escape its root
    ├── InvalidAttributes    (ValueError)          attributes that break the documented limits
    ├── InvalidPayload       (TypeError)           a message body that is not bytes-like
    ├── InvalidSettings      (ValueError)          a stored settings file that cannot be trusted
    ├── LeaseLost            (LookupError)         the visibility lease of a receipt has ended
    ├── QueueNotFound        (LookupError)         a named queue that does not exist
    ├── NotAQueue            (NotADirectoryError)  a queue path that exists but is not a directory
    ├── DurabilityError      (OSError)             a flush failed after messages became visible
    ├── UnsafeEntry          (OSError)             a symlink or file planted where vsqs keeps a
    │                                              directory; never followed
    ├── SqsError             (ValueError)          a request the SQS API refuses (vsqs.serve)
    ├── CredentialsError     (ValueError)          an unusable credentials file (vsqs.serve)
    ├── UnsafeAddress        (PermissionError)     serving beyond loopback without credentials
    │                                              (vsqs.serve)
    ├── MessageGone          (LookupError)         a planned message was deleted before Spark read
    │                                              it (vsqs.spark)
    └── StateMismatch        (RuntimeError)        a checkpoint that does not match the stream's
                                                   recorded state (vsqs.spark)

Any other :class:`OSError` (a full disk, a read-only filesystem, permission denied)
passes through unchanged, with its ``errno`` and ``filename`` intact.

All errors keep their data as attributes and pickle cleanly, because they cross
process boundaries (multiprocessing, Spark executors).

Not errors a caller sees, so not in the tree: the command line's ``Stopped`` (a signal,
ended as an exit status) and ``CliError`` (click's one line on stderr), the dashboard's
``Refused`` (answered as an HTTP status), the kombu transport's ``NotKombu`` (a body
that is not kombu's, handled where it is read), and the server's ``Parked`` (a long poll
that found nothing, resumed by the event loop) and ``Offload`` (a request the event loop
may not run, run again in the thread pool).
"""

from __future__ import annotations

import errno
from typing import Any, ClassVar


class VsqsError(Exception):
    """Base class of every error vsqs raises deliberately."""

    def __init__(self, *args: Any, message: str | None = None) -> None:
        super().__init__(*(args or ((message,) if message is not None else ())))

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take keyword data; rebuild through __init__ so attributes survive.
        return (_rebuild, (type(self), self._pickle_args()))

    def _pickle_args(self) -> dict[str, Any]:
        return {"message": str(self)} if self.args else {}


def _rebuild(cls: type[VsqsError], kwargs: dict[str, Any]) -> VsqsError:
    return cls(**kwargs)


class QueueFull(VsqsError, TimeoutError):
    """The queue stayed at its capacity for the whole publish timeout."""

    def __init__(self, path: str, capacity: int, message: str | None = None) -> None:
        self.path = path
        self.capacity = capacity
        super().__init__(message or f"queue {path!r} is full (capacity {capacity})")

    def _pickle_args(self) -> dict[str, Any]:
        return {"path": self.path, "capacity": self.capacity, "message": str(self)}


class LockTimeout(VsqsError, TimeoutError):
    """One of a queue's cross-process locks (``path``, a file in ``.vsqs``) stayed held by
    another process for the whole *timeout*: that process is stopped, or slow."""

    def __init__(self, path: str, timeout: float, message: str | None = None) -> None:
        self.path = path
        self.timeout = timeout
        super().__init__(
            message
            or f"the lock {path!r} stayed held by another process for {timeout:g} s"
            " (stopped or slow; it is released when that process ends)"
        )

    def _pickle_args(self) -> dict[str, Any]:
        return {"path": self.path, "timeout": self.timeout, "message": str(self)}


class QueueClosed(VsqsError):
    """The queue was shut down (:meth:`vsqs.Queue.shutdown`): no more messages may be
    published."""

    def __init__(self, path: str, message: str | None = None) -> None:
        self.path = path
        super().__init__(message or f"queue {path!r} was shut down")

    def _pickle_args(self) -> dict[str, Any]:
        return {"path": self.path, "message": str(self)}


class QueueDrained(QueueClosed, EOFError):
    """The queue was shut down and every message in it has been deleted: the stream
    ended."""

    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(path, message or f"queue {path!r} was shut down and is drained")


class InvalidId(VsqsError, ValueError):
    """A message id or receipt that vsqs could not have issued."""

    def __init__(self, value: object, reason: str = "not a message id or receipt") -> None:
        self.value = value
        self.reason = reason
        super().__init__(f"invalid message id or receipt {value!r}: {reason}")

    def _pickle_args(self) -> dict[str, Any]:
        return {"value": self.value, "reason": self.reason}


class InvalidName(VsqsError, ValueError):
    """A queue name that is empty, too long, hidden, or could reach outside its root."""

    def __init__(self, name: object, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"invalid queue name {name!r}: {reason}")

    def _pickle_args(self) -> dict[str, Any]:
        return {"name": self.name, "reason": self.reason}


class InvalidAttributes(VsqsError, ValueError):
    """Message attributes that are not a small ``str`` to ``str`` mapping."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid message attributes: {reason}")

    def _pickle_args(self) -> dict[str, Any]:
        return {"reason": self.reason}


class InvalidPayload(VsqsError, TypeError):
    """A message body that is not bytes-like (``bytes``, ``bytearray``, ``memoryview``)."""

    def __init__(self, value_type: str) -> None:
        self.value_type = value_type
        super().__init__(
            f"message body must be bytes-like (bytes, bytearray, memoryview), not {value_type};"
            " encode text first, e.g. text.encode()"
        )

    def _pickle_args(self) -> dict[str, Any]:
        return {"value_type": self.value_type}


class InvalidSettings(VsqsError, ValueError):
    """A queue's stored settings file (``.vsqs/settings.json``) that cannot be used: not
    JSON, not an object, an unknown key, a value of the wrong type, a symlink, or a
    dead-letter queue outside the queue's root. :attr:`path` names the file and
    :attr:`key` the offending setting (``""`` when the whole file is at fault).
    """

    def __init__(self, path: str, key: str, reason: str) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        where = f"setting {key!r} in {path}" if key else f"settings file {path}"
        super().__init__(f"invalid {where}: {reason}")

    def _pickle_args(self) -> dict[str, Any]:
        return {"path": self.path, "key": self.key, "reason": self.reason}


class LeaseLost(VsqsError, LookupError):
    """The receipt no longer names a held message: the lease it stood for has ended.

    :attr:`reason` says how: ``"deleted"`` (deleted, or moved to the dead-letter queue),
    ``"expired"`` (its visibility timeout ran out, or it was released, and it went back
    to the queue; another consumer may hold it now), ``"superseded"`` (the lease lives
    on under a newer receipt that another handle got by extending it; :attr:`current`
    names it), or ``""`` when unknown.
    """

    _REASONS: ClassVar[dict[str, str]] = {
        "deleted": "the message was deleted (or dead-lettered)",
        "expired": "its visibility timeout expired (or it was released) and it went back "
        "to the queue",
        "superseded": "the lease was extended through another handle and now has a newer receipt",
    }

    def __init__(
        self, receipt: str, message: str | None = None, *, reason: str = "", current: str = ""
    ) -> None:
        self.receipt = receipt
        self.reason = reason
        self.current = current
        if message is None:
            why = self._REASONS.get(
                reason,
                "the message was deleted, or its visibility timeout expired and it went "
                "back to the queue",
            )
            message = f"lease {receipt!r} is lost: {why}"
            if current:
                message += f" ({current!r})"
        super().__init__(message)

    def _pickle_args(self) -> dict[str, Any]:
        return {
            "receipt": self.receipt,
            "message": str(self),
            "reason": self.reason,
            "current": self.current,
        }


class QueueNotFound(VsqsError, LookupError):
    """A named queue does not exist under its root."""

    def __init__(self, name: str, root: str) -> None:
        self.name = name
        self.root = root
        super().__init__(f"no queue named {name!r} under {root!r}")

    def _pickle_args(self) -> dict[str, Any]:
        return {"name": self.name, "root": self.root}


class NotAQueue(VsqsError, NotADirectoryError):
    """The queue path exists but is not a directory."""

    def __init__(self, path: str) -> None:
        # Keep errno/filename like the builtin, so OSError handlers see the usual fields.
        super().__init__(errno.ENOTDIR, f"queue path {path!r} exists and is not a directory", path)
        self.path = path

    def __str__(self) -> str:
        return f"queue path {self.path!r} exists and is not a directory"

    def _pickle_args(self) -> dict[str, Any]:
        return {"path": self.path}


class DurabilityError(VsqsError, OSError):
    """A publish failed after some of its messages became visible: flushing them (the
    directory after the commit rename, a batch's final sync) or publishing the rest of a
    batch failed. :attr:`ids` lists exactly the messages that may be visible, and that
    may not survive a power loss; the others of the call are not published. A retry
    with the same dedup ids adds nothing; without dedup ids, publish only the bodies
    whose ids are not listed. ``errno`` and ``strerror`` are those of the failure.
    """

    def __init__(self, ids: list[str], code: int = 0, reason: str = "") -> None:
        super().__init__(code, reason)
        self.ids = list(ids)

    def __str__(self) -> str:
        why = f": {self.strerror}" if self.strerror else ""
        return (
            f"publish failed after {len(self.ids)} message(s) became visible, which may not"
            f" survive a power loss{why} (ids {self.ids})"
        )

    def _pickle_args(self) -> dict[str, Any]:
        return {"ids": self.ids, "code": self.errno or 0, "reason": self.strerror or ""}


class UnsafeEntry(VsqsError, OSError):
    """A ``.vsqs`` entry of the wrong type (a symlink, a file where a directory belongs).

    vsqs never follows it: reads treat what it would hold as absent, writes raise this.
    ``errno`` is the one opening it gave (``ELOOP``, ``ENOTDIR``), ``filename`` the entry.
    """

    def __init__(self, code: int, reason: str, filename: str) -> None:
        super().__init__(code, reason, filename)

    def _pickle_args(self) -> dict[str, Any]:
        return {"code": self.errno, "reason": self.strerror, "filename": self.filename}
