"""The errors the SQS API answers with, as SQS names them in both wire protocols.

Each :class:`SqsError` carries the error's name in the JSON protocol (``code``, the
shape name of botocore's service model, sent as ``__type``), its code in the query
protocol (``query_code``, sent in ``<ErrorResponse>`` and in the ``x-amzn-query-error``
header that makes JSON clients raise the query code), the HTTP status and whose fault
it is. The server maps every other exception of a request to one of these, in
:mod:`vsqs.serve._dispatch`, and never sends a traceback.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Final

from .. import NotAQueue, VsqsError

__all__ = [
    "JSON_TYPES", "QUERY_CODES", "SqsError", "invalid", "missing", "no_queue", "storage_error",
    "unknown_attribute",
]  # fmt: skip

# The JSON name of an error -> (its query-protocol code, HTTP status). Errors absent
# here (InvalidParameterValue, MissingParameter...) have the same name in both.
QUERY_CODES: Final[dict[str, tuple[str, int]]] = {
    "QueueDoesNotExist": ("AWS.SimpleQueueService.NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("AWS.SimpleQueueService.QueueDeletedRecently", 400),
    "PurgeQueueInProgress": ("AWS.SimpleQueueService.PurgeQueueInProgress", 403),
    "MessageNotInflight": ("AWS.SimpleQueueService.MessageNotInflight", 400),
    "TooManyEntriesInBatchRequest": ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400),
    "EmptyBatchRequest": ("AWS.SimpleQueueService.EmptyBatchRequest", 400),
    "BatchEntryIdsNotDistinct": ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400),
    "BatchRequestTooLong": ("AWS.SimpleQueueService.BatchRequestTooLong", 400),
    "InvalidBatchEntryId": ("AWS.SimpleQueueService.InvalidBatchEntryId", 400),
    "UnsupportedOperation": ("AWS.SimpleQueueService.UnsupportedOperation", 400),
    "OverLimit": ("OverLimit", 403),
    "InvalidAddress": ("InvalidAddress", 404),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    "AccessDenied": ("AccessDenied", 403),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "RequestExpired": ("RequestExpired", 400),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "InvalidAction": ("InvalidAction", 400),
    "NotFound": ("NotFound", 404),
    "RequestEntityTooLarge": ("RequestEntityTooLarge", 413),
    "InternalFailure": ("InternalFailure", 500),
}


# The ``__type`` SQS sends in the JSON protocol for the errors its service model has no
# shape for (recorded from SQS itself); the others are sent under their own name. The
# x-amzn-query-error header carries the query code either way, which is what SDKs raise.
JSON_TYPES: Final = {
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
}


class SqsError(VsqsError, ValueError):
    """A request the SQS API refuses: *code* is the JSON name (``QueueDoesNotExist``).

    ``query_code`` and ``status`` follow from the code (see :data:`QUERY_CODES`);
    ``sender`` is false for the server's own faults (never sent on purpose).
    """

    def __init__(
        self, code: str, message: str, *, sender: bool = True, status: int | None = None
    ) -> None:
        self.code = code
        self.query_code, default_status = QUERY_CODES.get(code, (code, 400))
        self.status = default_status if status is None else status
        self.text = message
        self.sender = sender
        super().__init__(f"{code}: {message}")

    def _pickle_args(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.text,
            "sender": self.sender,
            "status": self.status,
        }


def missing(name: str) -> SqsError:
    """The error for a required parameter that is absent."""
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def invalid(name: str, value: object, reason: str) -> SqsError:
    """The error for a parameter whose value SQS would refuse."""
    shown = str(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return SqsError(
        "InvalidParameterValue", f"Value {shown} for parameter {name} is invalid. Reason: {reason}"
    )


def no_queue() -> SqsError:
    """The error for a queue that does not exist (or that the caller may not see)."""
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.")


def unknown_attribute(name: str) -> SqsError:
    """The error for an attribute name SQS does not know (or not on this queue type)."""
    return SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")


# What a queue's files give when something planted there is of the wrong kind or
# forbidden: the queue needs an operator, and asking again changes nothing.
_DAMAGED: Final = frozenset({
    errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EACCES, errno.EPERM, errno.EFBIG,
})  # fmt: skip
# The server's environment, not a bug: a line in the log says it, no traceback.
ENVIRONMENT: Final = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE, errno.ENFILE,
    errno.ENOMEM, errno.ESTALE,
})  # fmt: skip


def storage_error(exc: OSError, root: str) -> SqsError | None:
    """The answer for *exc*, raised by a queue's files under *root* during a request:
    ``409 QueueUnusable`` for an entry an operator must repair (a file where a queue or
    a directory belongs, a directory where a file, a symlink, no permission), naming
    it inside the root (a client never sees the server's paths) and what to do; which
    no SDK retries, as asking again finds the same entry. ``None`` for any other error.
    """
    if exc.errno not in _DAMAGED:
        return None
    if isinstance(exc, NotAQueue):
        what = (
            f"{_inside(exc.path, root)} under the server's root is not a queue directory "
            "(a file or a symlink is there)"
        )
    else:
        names = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
        shown = " -> ".join(_inside(name, root) for name in names)
        what = f"{exc.strerror or os.strerror(exc.errno or 0)}: {shown or '?'}"
    return SqsError(
        "QueueUnusable",
        f"The queue's files on the server cannot be used: {what}. vsqs never follows or "
        "replaces such an entry: an operator must remove or repair it on the server.",
        status=409,
    )


def _inside(path: str, root: str) -> str:
    """*path* relative to *root* (a bare name stays as it is)."""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else os.path.basename(path)
