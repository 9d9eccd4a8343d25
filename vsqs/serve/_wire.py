"""The two wire protocols of SQS, both ways: requests in, responses and errors out.

* **AWS JSON 1.0**: ``POST`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON
  object body; the answer is JSON (``application/x-amz-json-1.0``), an error
  ``{"__type": "com.amazonaws.sqs#<Type>", "message": ...}`` (the type SQS sends:
  :data:`~vsqs.serve._errors.JSON_TYPES`, else the code) with the
  ``x-amzn-query-error: <query code>;Sender`` header (current boto3, aws cli v2, the
  SDKs v3).
* **Query**: ``Action=<Action>&...`` form-encoded in a ``POST`` body or in a ``GET``
  query; lists and maps spelled ``AttributeName.1``, ``Attribute.1.Name`` /
  ``Attribute.1.Value``, ``SendMessageBatchRequestEntry.1.Id`` and so on; the answer
  is XML ``<ActionResponse><ActionResult>...`` and an error ``<ErrorResponse>`` (boto3
  before 1.34.90, the Java SDK v1).

Both are turned into one shape, the JSON protocol's (a dict of parameters named as in
botocore's service model), so each action is written once. Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote
from xml.sax.saxutils import escape

from ._errors import JSON_TYPES, SqsError, invalid
from ._shapes import TO_ESCAPE, XML_ESCAPES, Plans, rows

__all__ = ["ACTIONS", "Request", "error_body", "parse", "render"]

ACTIONS: Final = frozenset({
    "CreateQueue", "DeleteQueue", "GetQueueUrl", "ListQueues", "GetQueueAttributes",
    "SetQueueAttributes", "PurgeQueue", "SendMessage", "SendMessageBatch", "ReceiveMessage",
    "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch", "ListDeadLetterSourceQueues", "TagQueue", "UntagQueue",
    "ListQueueTags", "AddPermission", "RemovePermission", "StartMessageMoveTask",
    "ListMessageMoveTasks", "CancelMessageMoveTask",
})  # fmt: skip
"""The 23 actions of the SQS API (2012-11-05)."""

JSON_TYPE: Final = "application/x-amz-json-1.0"
XML_TYPE: Final = "text/xml"
_NAMESPACE: Final = "http://queue.amazonaws.com/doc/2012-11-05/"
_TARGET: Final = re.compile(r"AmazonSQS\.([A-Za-z]+)")
_INDEX: Final = re.compile(r"[1-9][0-9]{0,5}")
_DOT: Final = re.compile(r"\.")  # parameters' names are split with it, never messages'
_MAX_DEPTH: Final = 8  # SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue: 6
_MAX_FIELDS: Final = 10_000  # ten entries of ten attributes need a few hundred

# A query list or map (its query name) -> (its JSON name, "list" | "map" | "entries",
# the key's and the value's names in a map's entries).
_QUERY_FIELDS: Final[dict[str, tuple[str, str, str, str]]] = {
    "Attribute": ("Attributes", "map", "Name", "Value"),
    "AttributeName": ("AttributeNames", "list", "", ""),
    "MessageSystemAttributeName": ("MessageSystemAttributeNames", "list", "", ""),
    "MessageAttributeName": ("MessageAttributeNames", "list", "", ""),
    "MessageAttribute": ("MessageAttributes", "map", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "map", "Name", "Value"),
    "Tag": ("Tags", "map", "Key", "Value"),
    "TagKey": ("TagKeys", "list", "", ""),
    "AWSAccountId": ("AWSAccountIds", "list", "", ""),
    "ActionName": ("Actions", "list", "", ""),
    "SendMessageBatchRequestEntry": ("Entries", "entries", "", ""),
    "DeleteMessageBatchRequestEntry": ("Entries", "entries", "", ""),
    "ChangeMessageVisibilityBatchRequestEntry": ("Entries", "entries", "", ""),
    "StringListValue": ("StringListValues", "list", "", ""),
    "BinaryListValue": ("BinaryListValues", "list", "", ""),
}
# The query protocol's own fields (and its signature's): no action's parameters.
_SKIP: Final = frozenset({
    "Action", "Version", "AWSAccessKeyId", "Signature", "SignatureMethod", "SignatureVersion",
    "Timestamp", "Expires",
})  # fmt: skip
_INTEGERS: Final = frozenset({
    "DelaySeconds", "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds",
    "MaxResults", "MaxNumberOfMessagesPerSecond",
})  # fmt: skip
# A JSON list or map of a result -> the element name each item gets in XML.
_XML_ITEMS: Final = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
    "StringListValues": "StringListValue",
    "BinaryListValues": "BinaryListValue",
}
_XML_MAPS: Final = {
    "Attributes": ("Attribute", "Name", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
}
# What the query protocol says instead, where it says something else (as SQS does).
_QUERY_MESSAGES: Final = {
    "QueueDoesNotExist": "The specified queue does not exist for this wsdl version.",
}


class Request:
    """One request in the JSON protocol's shape: the action, its parameters, and which
    protocol to answer in."""

    __slots__ = ("action", "json", "params")

    def __init__(self, action: str, params: dict[str, Any], *, json: bool) -> None:
        self.action = action
        self.params = params
        self.json = json


def _tree(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """``A.1.B=v`` pairs as nested dicts ``{"A": {"1": {"B": "v"}}}``, the query
    protocol's own fields (:data:`_SKIP`, ``X-Amz-*``) left out."""
    root: dict[str, Any] = {}
    for key, value in pairs:
        if "." not in key:  # a plain parameter (QueueUrl, MessageBody...): no nesting
            if key in _SKIP or key.startswith("X-Amz-"):
                continue
            if key in root:
                raise SqsError("MalformedQueryString", f"parameter {key!r} is given twice")
            root[key] = value
            continue
        if key.startswith("X-Amz-"):
            continue
        node = root
        path, last = _name_parts(key)
        for part in path:
            child = node.get(part)
            if child is None:  # not setdefault: it would make a dict each time
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise SqsError("MalformedQueryString", f"parameter {key!r} is given twice")
            node = child
        if last in node:
            raise SqsError("MalformedQueryString", f"parameter {key!r} is given twice")
        node[last] = value
    return root


_PARTS: Final[dict[str, tuple[tuple[str, ...], str]]] = {}
_MAX_PARTS: Final = 4096  # a client's names repeat (Entry.1.Id...); more are split each time
_MAX_KEPT_NAME: Final = 128  # SQS's longest is 60-odd; a longer one is split, never kept


def _name_parts(key: str) -> tuple[tuple[str, ...], str]:
    """A dotted parameter name's parts (at most :data:`_MAX_DEPTH` before the last) and
    its last part, split once per name: one client's names repeat from request to
    request (``SendMessageBatchRequestEntry.1.Id``...), so the parts are kept for them."""
    parts = _PARTS.get(key)
    if parts is None:
        *path, last = _DOT.split(key, _MAX_DEPTH)  # a parameter's name, not a message's
        if len(path) >= _MAX_DEPTH:
            raise SqsError("MalformedQueryString", f"parameter {key[:80]!r} is nested too deep")
        parts = (tuple(path), last)
        if len(_PARTS) < _MAX_PARTS and len(key) <= _MAX_KEPT_NAME:
            # RACE: a pool thread may store the same name's parts at once: equal tuples.
            _PARTS[key] = parts
    return parts


_IN_ORDER: Final = [str(index) for index in range(1, 11)]  # a batch's entries


def _indexed(node: object, name: str) -> list[Any]:
    """The items of a query list ``{"1": a, "2": b}``, in index order."""
    if not isinstance(node, dict):
        raise SqsError("MalformedQueryString", f"{name} must be numbered {name}.1, {name}.2...")
    if list(node) == _IN_ORDER[: len(node)]:  # as clients number them: 1, 2, 3... in order
        return list(node.values())
    if not all(_INDEX.fullmatch(k) for k in node):
        raise SqsError("MalformedQueryString", f"{name} must be numbered {name}.1, {name}.2...")
    return [node[k] for k in sorted(node, key=int)]


def _from_query(node: dict[str, Any]) -> dict[str, Any]:
    """A query tree as JSON-protocol parameters (lists, maps and batch entries)."""
    params: dict[str, Any] = {}
    for name, value in node.items():
        field = _QUERY_FIELDS.get(name)
        if field is None:
            if isinstance(value, dict):
                params[name] = _from_query(value)
            else:
                params[name] = _integer(name, value) if name in _INTEGERS else value
            continue
        target, kind, key_name, value_name = field
        items = _indexed(value, name)
        if kind == "list":
            if not all(isinstance(item, str) for item in items):
                raise SqsError("MalformedQueryString", f"{name}.N must be a value")
            params[target] = items
        elif kind == "entries":
            if not all(isinstance(item, dict) for item in items):
                raise SqsError("MalformedQueryString", f"{name}.N must have fields")
            params[target] = [_entry(item) for item in items]
        else:
            mapping: dict[str, Any] = {}
            for item in items:
                if not isinstance(item, dict) or key_name not in item or value_name not in item:
                    raise SqsError(
                        "MalformedQueryString", f"{name}.N needs .{key_name} and .{value_name}"
                    )
                inner = item[value_name]
                mapping[item[key_name]] = _from_query(inner) if isinstance(inner, dict) else inner
            params[target] = mapping
    return params


_NOT_PLAIN: Final = frozenset(_QUERY_FIELDS) | _INTEGERS


def _entry(node: dict[str, Any]) -> dict[str, Any]:
    """A batch entry's tree as parameters: itself when it holds texts alone, none of
    them a list, a map or a number (``Id``, ``MessageBody``, ``ReceiptHandle``: what
    :func:`_from_query` would copy as they are); else :func:`_from_query`'s."""
    if node.keys().isdisjoint(_NOT_PLAIN) and dict not in map(type, node.values()):
        return node  # a fresh tree of this request's: nobody else holds it
    return _from_query(node)


_PLANS: Final = Plans(
    _SKIP,
    _NOT_PLAIN,
    {name: target for name, (target, kind, _, _) in _QUERY_FIELDS.items() if kind == "entries"},
)


def _integer(name: str, value: str) -> int:
    try:
        return int(value, 10)
    except ValueError:
        raise invalid(name, value, "must be an integer.") from None


def _form(text: str) -> list[tuple[str, str]]:
    """The fields of form data or a query string, as ``parse_qsl(text,
    keep_blank_values=True, strict_parsing=True, max_num_fields=_MAX_FIELDS)`` reads a
    non-empty one (``[]`` for an empty one), without its cost per field: a field without
    ``=`` or too many fields is a ValueError; ``+`` is a space; ``%XX`` is UTF-8, an
    invalid sequence U+FFFD."""
    if not text:
        return []
    fields = text.replace("+", " ").split("&")  # "+" is never "&" or "=": once for all
    if len(fields) > _MAX_FIELDS:
        raise ValueError("too many fields")
    pairs = []
    for field in fields:
        name, equals, value = field.partition("=")
        if not equals:
            raise ValueError(f"bad query field: {field[:80]!r}")
        if "%" in name:
            name = _unquote(name)
        if "%" in value:  # only a queue's URL is kept, never a message's text
            value = _unquote(value) if name == "QueueUrl" else unquote(value)
        pairs.append((name, value))
    return pairs


@functools.lru_cache(maxsize=1024)
def _unquote_short(text: str) -> str:
    return unquote(text)


def _unquote(text: str) -> str:
    """``unquote(text)``; a short text's answer is kept: field names and a client's
    ``QueueUrl`` repeat from request to request, and ``unquote`` costs more than the rest
    of a field's parsing. Never called for other values (a message's body, which the
    server must not keep after answering)."""
    return _unquote_short(text) if len(text) <= _MAX_KEPT_NAME * 2 else unquote(text)


def parse(method: str, headers: Mapping[str, str], query: str, body: bytes) -> Request:
    """The request in one shape.

    :param headers: names in lower case.
    :raises SqsError: not an SQS request (``InvalidAction``, ``MissingAction``),
        malformed JSON or form data (``MalformedQueryString``, ``SerializationException``).
    """
    target = headers.get("x-amz-target")
    if target is not None:
        match = _TARGET.fullmatch(target.strip())
        if match is None or match.group(1) not in ACTIONS:
            raise SqsError(
                "InvalidAction", f"The action {target!r} is not valid for this endpoint."
            )
        if method != "POST":
            raise SqsError("InvalidAction", "The JSON protocol needs a POST.")
        try:
            params = json.loads(body) if body.strip() else {}
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: [[[[...
            raise SqsError("SerializationException", "The body is not valid JSON.") from None
        if not isinstance(params, dict):
            raise SqsError("SerializationException", "The body must be a JSON object.")
        return Request(match.group(1), params, json=True)
    try:
        pairs = _form(query)
        content_type = headers.get("content-type", "")
        if method == "POST" and body and "json" not in content_type:
            pairs += _form(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise SqsError("MalformedQueryString", "The form data cannot be read.") from None
    fields = dict(pairs)
    action = fields.get("Action")
    if action is None:
        raise SqsError("MissingAction", "The request must contain the parameter Action.")
    if action not in ACTIONS:
        raise SqsError("InvalidAction", f"The action {action[:80]} is not valid for this endpoint.")
    params = _PLANS.params(pairs)
    if params is None:  # a shape without a plan: field by field
        params = _from_query(_tree(pairs))
    return Request(action, params, json=False)


def _text(value: object) -> str:
    """*value* as XML character data (most are ids and digests: nothing to escape)."""
    text = str(value)
    return escape(text, XML_ESCAPES) if TO_ESCAPE.search(text) else text


def _xml(name: str, value: object, out: list[str], action: str) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        out.append(f"<{name}>{'true' if value else 'false'}</{name}>")
    elif isinstance(value, list):
        _xml_list(name, value, out, action)
    elif isinstance(value, dict) and name in _XML_MAPS:
        item, key_name, value_name = _XML_MAPS[name]
        for key, inner in value.items():
            out.append(f"<{item}><{key_name}>{_text(key)}</{key_name}>")
            _xml(value_name, inner, out, action)
            out.append(f"</{item}>")
    elif isinstance(value, dict):
        out.append(f"<{name}>")
        for key, inner in value.items():
            if type(inner) is str:  # most are (ids, digests): the last branch and _text, inline
                text = escape(inner, XML_ESCAPES) if TO_ESCAPE.search(inner) else inner
                out.append(f"<{key}>{text}</{key}>")
            else:
                _xml(key, inner, out, action)
        out.append(f"</{name}>")
    else:
        out.append(f"<{name}>{_text(value)}</{name}>")


def _xml_list(name: str, value: list[Any], out: list[str], action: str) -> None:
    item = _XML_ITEMS.get(name)
    if item is None and name == "Successful":
        item = f"{action}ResultEntry"
    item = item or name
    text = rows(item, value)
    if text is not None:
        out.append(text)
        return
    for element in value:
        _xml(item, element, out, action)


# One encoder, not one a request; a result is made of fresh dicts and lists, never a
# cycle, so the encoder keeps no record of the containers it is inside (a quarter faster).
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def render(request: Request, result: dict[str, Any], request_id: str) -> tuple[str, bytes]:
    """(content type, body) of a successful answer."""
    if request.json:
        return JSON_TYPE, _COMPACT.encode(result).encode()
    action = request.action
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{_NAMESPACE}">']
    if result or action not in _NO_RESULT:
        out.append(f"<{action}Result>")
        for key, value in result.items():
            _xml(key, value, out, action)
        out.append(f"</{action}Result>")
    out.append(f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>")
    out.append(f"</{action}Response>")
    return XML_TYPE, "".join(out).encode()


_NO_RESULT: Final = frozenset({
    "DeleteQueue", "SetQueueAttributes", "PurgeQueue", "DeleteMessage",
    "ChangeMessageVisibility", "TagQueue", "UntagQueue", "AddPermission", "RemovePermission",
})  # fmt: skip


def error_body(
    error: SqsError, *, json_protocol: bool, request_id: str
) -> tuple[str, bytes, dict[str, str]]:
    """(content type, body, extra headers) of an error answer, in the request's protocol."""
    fault = "Sender" if error.sender else "Receiver"
    headers = {"x-amzn-query-error": f"{error.query_code};{fault}"}
    if json_protocol:
        kind = JSON_TYPES.get(error.code, error.code)
        body = {"__type": f"com.amazonaws.sqs#{kind}", "message": error.text}
        return JSON_TYPE, json.dumps(body).encode(), headers
    message = _QUERY_MESSAGES.get(error.code, error.text)
    text = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{_NAMESPACE}"><Error>'
        f"<Type>{fault}</Type><Code>{escape(error.query_code)}</Code>"
        f"<Message>{escape(message, XML_ESCAPES)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return XML_TYPE, text.encode(), headers
