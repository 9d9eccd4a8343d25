"""The errors the SQS API answers with, as SQS names them in both wire protocols.

Each :class:`SqsError` carries the error's name in the JSON protocol (``code``, the
shape name of botocore's service model, sent as ``__type``), its code in the query
protocol (``query_code``, sent in ``<ErrorResponse>`` and in the ``x-amzn-query-error``
header that makes JSON clients raise the query code), the HTTP status and whose fault
it is. The server maps every other exception of a request to one of these, in
:mod:`vsqs.serve._server`, and never sends a traceback.
"""

from __future__ import annotations

from typing import Any, Final

from .. import VsqsError

__all__ = [
    "JSON_TYPES", "QUERY_CODES", "SqsError", "invalid", "missing", "no_queue", "unknown_attribute",
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
