"""One SQS request in, one answer out: what every front end (the threading HTTP
server, the ASGI app) calls, so both answer alike.

:func:`answer` checks the ``Host`` (:class:`~vsqs.serve._origin.BrowserPolicy`), the
signature (with credentials), parses the request in either wire protocol, refuses a
change made by GET or from another origin's web page, runs the action, and renders
the result or the error (with CORS headers for an allowed origin). It never raises:
an unexpected failure is a 500 ``InternalFailure`` (its traceback goes to the *log*
callable, never to the client).
"""

from __future__ import annotations

import errno
import os
import random
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

from .. import DurabilityError, InvalidSettings, QueueNotFound
from . import _inline, _sigv4, _wire
from ._context import Caller
from ._credentials import Credentials
from ._errors import ENVIRONMENT, SqsError, storage_error
from ._origin import READ_ONLY, BrowserPolicy
from ._service import DEFAULT_REGION, Service

__all__ = ["Answer", "answer", "is_page"]

_SCOPE: Final = re.compile(r"Credential=[^/]*/[0-9]{8}/([^/]+)/")
_RANDOM_BITS: Final = ~(0xF000 << 64 | 0xC000 << 48)  # all but the version and variant
_VERSION_4: Final = 0x4000 << 64 | 0x8000 << 48
_LOOPBACK_ONLY: Final = BrowserPolicy()
_HOST: Final = re.compile(
    r"[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](?::[0-9]{1,5})?"
)


class Answer(NamedTuple):
    """An HTTP answer: status, headers, body, and the action (for the access log)."""

    status: int
    headers: dict[str, str]
    body: bytes
    action: str = "-"


def is_page(method: str, path: str, query: str) -> bool:
    """Whether a request is the dashboard's: ``/ui`` and under it, and ``GET``/``HEAD /``
    without an ``Action``."""
    if path == "/ui" or path.startswith("/ui/"):
        return True
    return method in ("GET", "HEAD") and path == "/" and "Action=" not in query


def request_id() -> str:
    """A random (version 4) UUID, as ``str(uuid.uuid4())`` spells it, one a request.

    An id to match a log line with an answer, never a secret: from :mod:`random` (no
    system call, unlike ``os.urandom``; reseeded in a forked child by the standard library).
    """
    # The version (4) and the RFC 4122 variant (binary 10), as uuid4 sets them.
    text = f"{random.getrandbits(128) & _RANDOM_BITS | _VERSION_4:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def error_answer(error: SqsError, *, json_protocol: bool, action: str = "-") -> Answer:
    """The answer for *error*, in the request's protocol."""
    request_id_ = request_id()
    content_type, body, extra = _wire.error_body(
        error, json_protocol=json_protocol, request_id=request_id_
    )
    headers = {"Content-Type": content_type, **extra, "x-amzn-RequestId": request_id_}
    return Answer(error.status, headers, body, action)


def _caller(
    credentials: Credentials | None,
    method: str,
    target: tuple[str, str],
    *,
    headers: Mapping[str, str],
    body: bytes,
    default_host: str,
) -> Caller:
    host = headers.get("host", "")
    if not _HOST.fullmatch(host):  # reflected in queue URLs: only a host[:port]
        host = default_host
    if credentials is None:
        match = _SCOPE.search(headers.get("authorization", ""))
        return Caller(None, match.group(1) if match else DEFAULT_REGION, host)
    key, region = _sigv4.verify(credentials, method, target[0], target[1], headers, body)
    return Caller(key, region, host)


def answer(  # noqa: PLR0917 - the parts of one request, as a front end has them
    service: Service,
    credentials: Credentials | None,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    default_host: str,
    log: Callable[[str], None],
    policy: BrowserPolicy = _LOOPBACK_ONLY,
) -> Answer:
    """The answer to one SQS request (see the module's docstring).

    :param target: the path and query, as received.
    :param headers: names in lower case (repeated ones joined with ``,``).
    :param default_host: ``host:port`` for queue URLs when the Host header is unusable.
    :param policy: the Host names and browser origins accepted (default: loopback
        names only, no other origin).
    """
    done = _answer(service, credentials, method, target, headers, body, default_host, log, policy)
    cors = policy.cors(headers)
    if cors:
        done.headers.update(cors)
    return done


def _answer(  # noqa: PLR0917 - answer's parameters
    service: Service,
    credentials: Credentials | None,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    default_host: str,
    log: Callable[[str], None],
    policy: BrowserPolicy,
) -> Answer:
    path, _, query = target.partition("?")
    json_protocol = "x-amz-target" in headers
    action = "-"
    try:
        if method == "OPTIONS":
            allowed = policy.preflight(headers)
            if allowed is not None:
                return Answer(200, allowed, b"", "preflight")
        policy.check_host(headers)
        caller = _caller(
            credentials,
            method,
            (path, query),
            headers=headers,
            body=body,
            default_host=default_host,
        )
        request = _wire.parse(method, headers, query, body)
        action, json_protocol = request.action, request.json
        _inline.check_action(action)
        policy.check(method, headers, changes=action not in READ_ONLY)
        if not request.json and "QueueUrl" not in request.params and path.count("/") >= 2:
            request.params["QueueUrl"] = path  # the query protocol posts to the queue's URL
        result = service.handle(caller, request)
        answered_as = request_id()
        content_type, payload = _wire.render(request, result, answered_as)
    except (SqsError, InvalidSettings, QueueNotFound, OSError) as exc:
        error = _as_sqs_error(exc, service.root.path)
        if error is None:
            return _failure(log, json_protocol, action)
        if error.code == "QueueUnusable":
            log(f"vsqs serve: {action}: {exc}")  # the operator's to repair: said once
        return error_answer(error, json_protocol=json_protocol, action=action)
    except Exception:  # noqa: BLE001 - the one place a failure becomes an answer
        return _failure(log, json_protocol, action)
    headers_out = {"Content-Type": content_type, "x-amzn-RequestId": answered_as}
    return Answer(200, headers_out, payload, action)


def _as_sqs_error(exc: Exception, root: str) -> SqsError | None:
    """The SQS error a failure of a request is answered with (``None``: a 500)."""
    if isinstance(exc, SqsError):
        return exc
    if isinstance(exc, InvalidSettings):
        return _unusable(exc)
    if isinstance(exc, DurabilityError) and exc.errno != errno.ENOENT:
        return None
    if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, DurabilityError)):
        return storage_error(exc, root)
    # RACE: another server (or the library) deleted the queue during the request (a
    # message written before went with the queue: its directory is gone).
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.")


def _unusable(exc: InvalidSettings) -> SqsError:
    """The answer for a queue whose stored settings cannot be read: names the queue and
    the repair; a 4xx, which no SDK retries (a retry would find the same file)."""
    name = os.path.basename(os.path.dirname(os.path.dirname(exc.path)))  # .vsqs/settings.json
    what = f"setting {exc.key!r}" if exc.key else "file"
    return SqsError(
        "InvalidSettings",
        f"Queue {name} cannot be used: its stored settings {what} is "
        f"invalid: {exc.reason}. On the server, fix the file, or move it aside (back to "
        f"the defaults) with: vsqs config ROOT/{name} --reset",
        status=409,
    )


def _failure(log: Callable[[str], None], json_protocol: bool, action: str) -> Answer:
    """A 500 ``InternalFailure`` for the exception being handled (logged, never sent):
    its traceback, unless it is the environment's (a full disk: one line says it)."""
    exc = sys.exc_info()[1]
    if isinstance(exc, OSError) and exc.errno in ENVIRONMENT:
        log(f"vsqs serve: {action} failed: {exc}")
    else:
        log(traceback.format_exc().rstrip())
    failure = SqsError("InternalFailure", "The request failed on the server.", sender=False)
    return error_answer(failure, json_protocol=json_protocol, action=action)
