"""The SQS API on a :class:`~vsqs.QueueRoot`: one object, the 23 actions, no HTTP.

:class:`Service` answers a parsed request (:class:`~vsqs.serve._wire.Request`) with
the result dict of the JSON protocol. It holds no state that matters: each queue's
handle is cached (reopened when its stored settings change, dropped when the queue
disappears), and so is the answer of a FIFO ``ReceiveMessage`` by its
``ReceiveRequestAttemptId`` (five minutes, in this process only). Everything else is
in the root's directories, so any number of servers, on any hosts, serve one root.

The queue-level actions are here; the message actions are in
:mod:`vsqs.serve._messages`, and the queue attributes in :mod:`vsqs.serve._queue_attrs`.
"""

from __future__ import annotations

import base64
import binascii
import re
import stat
import threading
from collections.abc import Callable
from typing import Any, Final

from .. import (
    AnyQueue,
    InvalidName,
    NotAQueue,
    QueueNotFound,
    QueueRoot,
    _userfiles,
    settings_stamp,
    validate_name,
)
from . import _inline, _messages, _moves, _queue_attrs, _sidecar
from ._context import AttemptCache, Caller
from ._errors import SqsError, invalid, missing, no_queue, unknown_attribute
from ._wire import Request

__all__ = ["ACCOUNT", "Service"]

ACCOUNT: Final = "000000000000"
"""The account id in the queue URLs and ARNs the server makes (any is accepted)."""
DEFAULT_REGION: Final = "us-east-1"
_SQS_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_URL_PATH: Final = re.compile(r"(?:[a-z]+://[^/]*)?/([0-9A-Za-z_-]{1,64})/([^/?#]+)/?")
_ARN: Final = re.compile(r"arn:[a-z-]*:sqs:[^:]*:[^:]*:([^:]+)")
_TAG_KEY: Final = re.compile(r"[\w.:/=+@ -]{1,128}", re.UNICODE)
_LABEL: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
MAX_TAGS: Final = 50
MAX_PERMISSION_ACTIONS: Final = 7
_OWNER_ONLY: Final = frozenset({
    "AddPermission", "RemovePermission", "CreateQueue", "DeleteQueue", "SetQueueAttributes",
    "TagQueue", "UntagQueue", "ListQueueTags", "ListQueues", "StartMessageMoveTask",
    "ListMessageMoveTasks", "CancelMessageMoveTask",
})  # fmt: skip
_BAD_NAME: Final = (
    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
)
_TOKEN: Final = "after:"  # noqa: S105 - not a secret: a NextToken is the base64 of this and the last name given


class Service:
    """The SQS API on *root* (see the module's docstring).

    :param root: the root of the queues.
    :param stopping: set when the server shuts down: long polls return at once, move
        tasks stop.
    """

    def __init__(self, root: QueueRoot, stopping: threading.Event | None = None) -> None:
        self.root = root
        self.stopping = stopping or threading.Event()
        self._handles: dict[str, tuple[AnyQueue, object, bool]] = {}  # (.., stamp, in memory)
        self._lock = threading.Lock()
        self.attempts = AttemptCache()
        self._actions: dict[str, Callable[[Caller, dict[str, Any]], dict[str, Any]]] = {
            "CreateQueue": self.create_queue,
            "DeleteQueue": self.delete_queue,
            "GetQueueUrl": self.get_queue_url,
            "ListQueues": self.list_queues,
            "GetQueueAttributes": self.get_queue_attributes,
            "SetQueueAttributes": self.set_queue_attributes,
            "PurgeQueue": self.purge_queue,
            "ListDeadLetterSourceQueues": self.list_dead_letter_source_queues,
            "TagQueue": self.tag_queue,
            "UntagQueue": self.untag_queue,
            "ListQueueTags": self.list_queue_tags,
            "AddPermission": self.add_permission,
            "RemovePermission": self.remove_permission,
            "StartMessageMoveTask": self.start_message_move_task,
            "ListMessageMoveTasks": self.list_message_move_tasks,
            "CancelMessageMoveTask": self.cancel_message_move_task,
        }
        for action in _messages.ACTIONS:
            self._actions[action] = self._message_action(action)

    # -- the request path ------------------------------------------------------------

    def handle(self, caller: Caller, request: Request) -> dict[str, Any]:
        """The result of *request*, or :class:`SqsError`."""
        return self._actions[request.action](caller, request.params)

    def _message_action(self, action: str) -> Callable[[Caller, dict[str, Any]], dict[str, Any]]:
        function = _messages.ACTIONS[action]

        def run(caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
            name, queue = self.queue_of(caller, params)
            return function(self, caller, name, queue, params)

        return run

    # -- names, URLs, ARNs, handles --------------------------------------------------

    def url(self, caller: Caller, name: str) -> str:
        return f"http://{caller.host}/{ACCOUNT}/{name}"

    def arn(self, caller: Caller, name: str) -> str:
        return f"arn:aws:sqs:{caller.region}:{ACCOUNT}:{name}"

    def name_of_arn(self, value: object, parameter: str) -> str:
        match = _ARN.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise invalid(parameter, value, "It is not an SQS queue ARN.")
        return match.group(1)

    def allow(self, caller: Caller, name: str) -> None:
        """Refuse a key that may not use the queue *name* (``AccessDenied``)."""
        if caller.key is not None and not caller.key.allows(name):
            raise SqsError(
                "AccessDenied",
                f"Access to the resource {name} is denied for {caller.key.access_key}.",
            )

    def queue_name(self, params: dict[str, Any]) -> str:
        """The queue a ``QueueUrl`` names: its URL's last part, or a bare queue name (as
        SQS takes one); one that names no queue is ``QueueDoesNotExist``, as in SQS."""
        url = params.get("QueueUrl")
        if url is None:
            raise missing("QueueUrl")
        if not isinstance(url, str):
            raise no_queue()
        match = _URL_PATH.fullmatch(url)
        name = match.group(2) if match is not None else url
        try:
            return validate_name(name)
        except InvalidName:
            raise no_queue() from None

    def queue_of(self, caller: Caller, params: dict[str, Any]) -> tuple[str, AnyQueue]:
        """The queue a request's ``QueueUrl`` names (checked, allowed, open)."""
        name = self.queue_name(params)
        self.allow(caller, name)
        return name, self.open(name)

    def open(self, name: str) -> AnyQueue:
        """A handle on the existing queue *name*: the cached one, unless the queue's
        directory was replaced (deleted and made again) or its stored settings changed:
        two ``stat`` calls (on the event loop, see :mod:`vsqs.serve._inline`).

        :raises SqsError: ``QueueDoesNotExist``.
        """
        with self._lock:
            cached = self._handles.get(name)
        _inline.check_handle(in_memory=cached is not None and cached[2])
        try:
            path = f"{self.root.path}/{validate_name(name)}"
            info = _userfiles.lstatus(path)
        except (InvalidName, FileNotFoundError, NotADirectoryError):
            self.forget(name)
            raise no_queue() from None
        if not stat.S_ISDIR(info.st_mode):
            raise no_queue()  # a symlink or a file under a queue's name is not a queue
        try:
            settings = settings_stamp(path)
        except OSError:
            settings = None  # RACE: deleted meanwhile; root.get below says so
        stamp = (info.st_dev, info.st_ino, settings)
        if cached is not None and cached[1] == stamp:
            return cached[0]
        _inline.check_handle(in_memory=False)  # opening reads (and may lock) its settings
        try:
            queue = self.root.get(name)
        except (QueueNotFound, NotAQueue, InvalidName):
            self.forget(name)
            raise no_queue() from None
        with self._lock:
            self._handles[name] = (queue, stamp, _inline.memory_backed(info.st_dev, path))
        return queue

    def forget(self, name: str) -> None:
        with self._lock:
            self._handles.pop(name, None)

    def names(self, caller: Caller) -> list[str]:
        """The queues of the root this caller may use, sorted."""
        return [n for n in self.root.list() if caller.key is None or caller.key.allows(n)]

    # -- the queue-level actions --------------------------------------------------------

    def create_queue(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("QueueName")
        if name is None:
            raise missing("QueueName")
        fifo_name = isinstance(name, str) and name.endswith(".fifo")
        stem = name[: -len(".fifo")] if fifo_name else name
        if not isinstance(stem, str) or not _SQS_NAME.fullmatch(stem) or len(name) > 80:
            raise SqsError("InvalidParameterValue", _BAD_NAME)
        self.allow(caller, name)
        attributes = _queue_attrs.parse_set(params.get("Attributes"), creating=True)
        tags = _check_tags(params.get("tags") or params.get("Tags"), name)
        fifo = attributes.get("FifoQueue")
        if fifo == "true" and not fifo_name:
            raise invalid("QueueName", name, "The name of a FIFO queue must end with .fifo.")
        if fifo == "false" or (fifo is None and fifo_name):
            # As SQS: a standard queue is made without the attribute, and a .fifo name
            # needs FifoQueue=true.
            raise (
                SqsError("InvalidParameterValue", _BAD_NAME)
                if fifo_name
                else unknown_attribute("FifoQueue")
            )
        if name in self.root:
            queue = self.open(name)
            _queue_attrs.check_same(self, caller, name, queue, attributes)
            return {"QueueUrl": self.url(caller, name)}
        _queue_attrs.create(self, caller, name, attributes, tags)
        return {"QueueUrl": self.url(caller, name)}

    def delete_queue(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        name = self.queue_name(params)
        self.allow(caller, name)
        try:
            self.root.delete(name)
        except (QueueNotFound, FileNotFoundError):
            raise no_queue() from None  # RACE: another server deleted it first
        finally:
            self.forget(name)
        return {}

    def get_queue_url(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("QueueName")
        if name is None:
            raise missing("QueueName")
        if not isinstance(name, str):
            raise invalid("QueueName", name, "must be a string.")
        try:
            validate_name(name)
        except InvalidName:
            raise no_queue() from None
        self.allow(caller, name)
        if name not in self.root:
            raise no_queue()
        return {"QueueUrl": self.url(caller, name)}

    def list_queues(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        prefix = params.get("QueueNamePrefix") or ""
        if not isinstance(prefix, str):
            raise invalid("QueueNamePrefix", prefix, "must be a string.")
        names = [n for n in self.names(caller) if n.startswith(prefix)]
        page, token = _page(names, params, default=1000)
        result: dict[str, Any] = {"QueueUrls": [self.url(caller, n) for n in page]}
        if token:
            result["NextToken"] = token
        if not page and "MaxResults" not in params:
            del result["QueueUrls"]  # SQS leaves the list out when it is empty
        return result

    def get_queue_attributes(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        name, queue = self.queue_of(caller, params)
        wanted = params.get("AttributeNames") or []
        values = _queue_attrs.get(self, caller, name, queue, wanted)
        return {"Attributes": values} if values else {}

    def set_queue_attributes(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        name, queue = self.queue_of(caller, params)
        if "Attributes" not in params:
            raise missing("Attributes")
        attributes = _queue_attrs.parse_set(params.get("Attributes"), creating=False)
        _queue_attrs.apply(self, caller, name, queue, attributes)
        self.forget(name)
        return {}

    def purge_queue(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        _name, queue = self.queue_of(caller, params)
        queue.purge()
        return {}

    def list_dead_letter_source_queues(
        self, caller: Caller, params: dict[str, Any]
    ) -> dict[str, Any]:
        name, _queue = self.queue_of(caller, params)
        sources = [n for n in self.names(caller) if _queue_attrs.dead_letter_of(self, n) == name]
        page, token = _page(sources, params, default=1000)
        result: dict[str, Any] = {"queueUrls": [self.url(caller, n) for n in page]}
        if token:
            result["NextToken"] = token
        return result

    def tag_queue(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        name, queue = self.queue_of(caller, params)
        if not params.get("Tags"):
            raise missing("Tags")
        tags = _check_tags(params["Tags"], name)

        def change(record: dict[str, Any]) -> None:
            merged = {**record.get("tags", {}), **tags}
            if len(merged) > MAX_TAGS:
                raise _too_many_tags(name)
            record["tags"] = merged

        _sidecar.update(queue.path, change)
        return {}

    def untag_queue(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        _name, queue = self.queue_of(caller, params)
        keys = params.get("TagKeys")
        if keys is None:
            raise missing("TagKeys")
        if (
            not isinstance(keys, list)
            or not keys
            or not all(isinstance(k, str) and 1 <= len(k) <= 128 for k in keys)
        ):
            raise SqsError(
                "InvalidParameterValue", "Tag keys must be between 1 and 128 characters in length."
            )

        def change(record: dict[str, Any]) -> None:
            record["tags"] = {k: v for k, v in record.get("tags", {}).items() if k not in keys}

        _sidecar.update(queue.path, change)
        return {}

    def list_queue_tags(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        _name, queue = self.queue_of(caller, params)
        tags = _sidecar.read(queue.path).get("tags") or {}
        return {"Tags": tags} if tags else {}

    def add_permission(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        """Record a permission (shown in the ``Policy`` attribute; vsqs enforces only
        its own access keys). Atomic: one update of the queue's SQS record."""
        _name, queue = self.queue_of(caller, params)
        label = params.get("Label")
        if label is None:
            raise missing("Label")
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise invalid("Label", label, "1 to 80 letters, digits, hyphens or underscores.")
        accounts, actions = params.get("AWSAccountIds"), params.get("Actions")
        if not actions:
            raise missing("Actions")
        if not accounts:
            raise invalid("PrincipalId", accounts or [], "Unable to verify.")
        for field, value in (("AWSAccountIds", accounts), ("Actions", actions)):
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise invalid(field, value, "must be a non-empty list of strings.")
        assert isinstance(actions, list)
        if len(actions) > MAX_PERMISSION_ACTIONS:
            raise SqsError(
                "OverLimit",
                f"{len(actions)} Actions were found, maximum allowed is {MAX_PERMISSION_ACTIONS}.",
            )
        from ._wire import ACTIONS  # noqa: PLC0415 - the one list of action names

        for action in actions:
            if action in _OWNER_ONLY:
                raise invalid(
                    "ActionName",
                    f"SQS:{action}",
                    "Only the queue owner is allowed to invoke this action.",
                )
            if action != "*" and action not in ACTIONS:
                raise invalid("ActionName", f"SQS:{action}", "It is not an SQS action.")

        def change(record: dict[str, Any]) -> None:
            permissions = record.setdefault("permissions", {})
            if label in permissions:
                raise invalid("Label", label, "Already exists.")
            permissions[label] = {"accounts": accounts, "actions": actions}

        _sidecar.update(queue.path, change)
        return {}

    def remove_permission(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        _name, queue = self.queue_of(caller, params)
        label = params.get("Label")
        if label is None:
            raise missing("Label")
        if not isinstance(label, str):
            raise invalid("Label", label, "must be a string.")

        def change(record: dict[str, Any]) -> None:
            permissions = record.get("permissions", {})
            if label not in permissions:
                raise invalid("Label", label, "can't find label.")
            del permissions[label]

        _sidecar.update(queue.path, change)
        return {}

    def start_message_move_task(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        return _moves.start(self, caller, params)

    def list_message_move_tasks(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        return _moves.list_tasks(self, caller, params)

    def cancel_message_move_task(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        return _moves.cancel(self, caller, params)


def _too_many_tags(name: str) -> SqsError:
    return SqsError("InvalidParameterValue", f"Too many tags added for queue {name}.")


def _check_tags(raw: object, name: str = "") -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid("Tags", raw, "must be a map of key to value.")
    if len(raw) > MAX_TAGS:
        raise _too_many_tags(name)
    for key, value in raw.items():
        if not isinstance(key, str) or not _TAG_KEY.fullmatch(key) or key.startswith("aws:"):
            raise invalid("Tags", key, "A tag key is 1 to 128 characters, not starting aws:.")
        if not isinstance(value, str) or len(value) > 256:
            raise invalid("Tags", key, "A tag value is a string of at most 256 characters.")
    return dict(raw)


def _page(names: list[str], params: dict[str, Any], *, default: int) -> tuple[list[str], str]:
    """One page of *names* after ``NextToken`` (the last name of the previous page,
    base64), and the token of the next page (``""`` for the last)."""
    limit = params.get("MaxResults")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000
    ):
        raise invalid("MaxResults", limit, "must be between 1 and 1000.")
    token = params.get("NextToken")
    if token:
        try:
            decoded = base64.b64decode(str(token), altchars=b"-_", validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            decoded = ""
        if not decoded.startswith(_TOKEN):
            raise invalid("NextToken", token, "It is not a token this server gave.")
        after = decoded[len(_TOKEN) :]
        names = [n for n in names if n > after]
    size = limit or default
    page = names[:size]
    more = limit is not None and len(names) > size
    return page, base64.urlsafe_b64encode(f"{_TOKEN}{page[-1]}".encode()).decode() if more else ""
