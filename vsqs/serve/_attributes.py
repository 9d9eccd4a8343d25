"""SQS message attributes: their checks, their MD5 digest, and how vsqs stores them.

**The stored encoding.** A message attribute of SQS type ``T`` (``String``,
``Number``, ``Binary``, or one of these with a custom label, ``String.json``) named
``N`` is stored as the vsqs attribute ``N`` whose value is ``T:payload``: the string
itself for ``String``/``Number`` types, the standard base64 of the bytes for
``Binary`` ones. So ``{"color": "String:red", "n": "Number:42", "raw":
"Binary:AAEC"}``. A vsqs attribute published by the library whose value does not start
with a type and a colon is served as a ``String`` holding the whole value. Names that
start with ``AWS.`` (a prefix SQS refuses for message attributes) hold what the server
keeps for SQS itself: ``AWS.MessageDeduplicationId`` (an explicit deduplication id) and
``AWS.AWSTraceHeader`` (the one system attribute a sender may set).

**Limits.** vsqs keeps at most 10 attributes of at most 8 KiB in all (names and values
as stored) per message: an SQS message with 10 attributes *and* an explicit
``MessageDeduplicationId`` or an ``AWSTraceHeader`` (each one more stored attribute), or
with larger attributes, is refused with ``InvalidParameterValue``; SQS would take it.

**The digest.** ``MD5OfMessageAttributes`` is computed as SQS does (and as the SDKs
that check it recompute it): attributes sorted by name; for each, the name, the data
type, one transport byte (1 for strings and numbers, 2 for binary) and the value, each
of the three strings preceded by its length as a 4-byte big-endian integer.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import importlib
import re
import struct
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final, cast

from ._errors import SqsError, invalid


def _fast_md5() -> Callable[[bytes], Any]:
    """CPython's own MD5, when built in: the digest hashlib's (OpenSSL's) gives, in half
    its time for a message's size (OpenSSL looks the algorithm up at each call)."""
    try:
        return cast("Callable[[bytes], Any]", importlib.import_module("_md5").md5)
    except ImportError:  # pragma: no cover - an interpreter built without it
        return functools.partial(hashlib.md5, usedforsecurity=False)


_md5: Final = _fast_md5()

__all__ = [
    "DEDUP_KEY",
    "TRACE_KEY",
    "Attribute",
    "allowed",
    "check_body",
    "decode",
    "encode",
    "md5_of_attributes",
    "md5_of_body",
    "md5_of_data",
    "parse_attributes",
    "select",
]

DEDUP_KEY: Final = "AWS.MessageDeduplicationId"
TRACE_KEY: Final = "AWS.AWSTraceHeader"
MAX_ATTRIBUTES: Final = 10
_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_TYPE: Final = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?")
_STORED: Final = re.compile(r"((?:String|Number|Binary)(?:\.[A-Za-z0-9_.-]+)?):", re.DOTALL)
# XML 1.0's characters, as SQS allows in a body and in string attribute values.
BAD_CHAR: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

Attribute = tuple[str, "str | bytes"]
"""A message attribute: its data type and its value (bytes for binary types)."""


def allowed(text: str) -> bool:
    """Whether every character of *text* is one SQS allows (XML 1.0's)."""
    # " " to "~" only, the common case, is allowed without running the pattern.
    return (text.isascii() and text.isprintable()) or BAD_CHAR.search(text) is None


def check_body(body: str, where: str = "MessageBody") -> None:
    """Refuse a body SQS would refuse: empty, or with characters outside XML 1.0's."""
    if not body:
        raise invalid(where, "", "The message body must be non-empty.")
    if allowed(body):
        return
    bad = BAD_CHAR.search(body)
    if bad is not None:
        raise SqsError(
            "InvalidMessageContents",
            f"Invalid characters found. Deleted message body character {ord(bad.group()):#x}",
        )


def _binary(value: object, name: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise invalid(f"MessageAttribute.{name}", value, "BinaryValue must be base64 text.")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"MessageAttribute.{name}", value, "BinaryValue is not base64.") from None


def parse_attributes(  # noqa: PLR0912 - one check per SQS rule, in SQS order
    raw: object, *, system: bool = False
) -> dict[str, Attribute]:
    """Check a request's ``MessageAttributes`` (the JSON shape: name -> {DataType,
    StringValue | BinaryValue}) and return name -> (type, value).

    :param system: check ``MessageSystemAttributes`` instead (``AWSTraceHeader`` only).
    :raises SqsError: as SQS, naming the attribute.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise invalid("MessageAttributes", raw, "must be a map of name to value.")
    if len(raw) > MAX_ATTRIBUTES:
        raise invalid(
            "MessageAttributes", len(raw), f"Number of message attributes exceeds {MAX_ATTRIBUTES}."
        )
    result: dict[str, Attribute] = {}
    for name, value in raw.items():
        if system:
            if name != "AWSTraceHeader":
                raise invalid("MessageSystemAttributes", name, "Only AWSTraceHeader may be sent.")
        elif (
            not isinstance(name, str)
            or not _NAME.fullmatch(name)
            or ".." in name
            or name.startswith(".")
            or name.endswith(".")
            or name.lower().startswith(("aws.", "amazon."))
        ):
            raise SqsError(
                "InvalidParameterValue",
                f"The message attribute name '{name}' is invalid. Attribute name can contain "
                "A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters.",
            )
        if not isinstance(value, Mapping):
            raise invalid(f"MessageAttribute.{name}", value, "must be a map.")
        data_type = value.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise invalid(
                f"MessageAttribute.{name}.DataType",
                data_type,
                "The message attribute must have a type.",
            )
        if not _TYPE.fullmatch(data_type) or len(data_type) > 256:
            raise SqsError(
                "InvalidParameterValue",
                f"The message attribute '{name}' has an invalid message attribute type, the "
                "set of supported type prefixes is Binary, Number, and String.",
            )
        if value.get("StringListValues") or value.get("BinaryListValues"):
            raise SqsError(
                "UnsupportedOperation", "Message attribute list values are not supported."
            )
        if data_type.startswith("Binary"):
            payload: str | bytes = _binary(value.get("BinaryValue"), name)
            if not payload:
                raise invalid(f"MessageAttribute.{name}", "", "The binary value must be non-empty.")
        else:
            text = value.get("StringValue")
            if not isinstance(text, str) or not text:
                raise SqsError(
                    "InvalidParameterValue",
                    f"Message (user) attribute '{name}' must contain a non-empty value of type "
                    f"'{data_type}'.",
                )
            check_body(text, f"MessageAttribute.{name}")
            if data_type.startswith("Number"):
                _check_number(name, text)
            payload = text
        if system and data_type != "String":
            raise invalid("MessageSystemAttributes.AWSTraceHeader", data_type, "must be a String.")
        result[name] = (data_type, payload)
    return result


def _check_number(name: str, text: str) -> None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or len(number.as_tuple().digits) > 38:
        raise invalid(
            f"MessageAttribute.{name}", text, "A Number must be a number of at most 38 digits."
        )
    if number != 0 and not Decimal("1e-128") <= abs(number) <= Decimal("1e126"):
        raise invalid(f"MessageAttribute.{name}", text, "The Number is out of range.")


def size(attributes: Mapping[str, Attribute]) -> int:
    """The bytes SQS counts for the attributes in the message size: name, type, value."""
    return sum(
        len(name.encode())
        + len(kind.encode())
        + len(value if isinstance(value, bytes) else value.encode())
        for name, (kind, value) in attributes.items()
    )


def encode(attributes: Mapping[str, Attribute]) -> dict[str, str]:
    """The vsqs attributes storing *attributes* (see the module's docstring)."""
    stored: dict[str, str] = {}
    for name, (kind, value) in attributes.items():
        text = base64.b64encode(value).decode() if isinstance(value, bytes) else value
        stored[name] = f"{kind}:{text}"
    return stored


def decode(stored: Mapping[str, str]) -> dict[str, Attribute]:
    """The SQS message attributes of a vsqs message (the ``AWS.`` keys left out)."""
    result: dict[str, Attribute] = {}
    for name, value in stored.items():
        if name.startswith("AWS."):
            continue
        match = _STORED.match(value)
        if match is None:
            result[name] = ("String", value)  # published by the library, untyped
            continue
        kind, text = match.group(1), value[match.end() :]
        if kind.startswith("Binary"):
            try:
                result[name] = (kind, base64.b64decode(text, validate=True))
            except (binascii.Error, ValueError):
                result[name] = ("String", value)  # not ours after all
        else:
            result[name] = (kind, text)
    return result


def select(attributes: Mapping[str, Attribute], names: list[str]) -> dict[str, Attribute]:
    """The attributes a ReceiveMessage asked for: ``All``/``.*``, names, ``prefix.*``
    (every name that starts with the prefix: ``Custom.*`` gives ``Custom1`` and
    ``Custom.a``)."""
    if not names:
        return {}
    if "All" in names or ".*" in names:
        return dict(attributes)
    prefixes = tuple(name[:-2] for name in names if name.endswith(".*"))
    wanted = set(names)
    return {
        name: value
        for name, value in attributes.items()
        if name in wanted or (prefixes and name.startswith(prefixes))
    }


def md5_of_body(body: str) -> str:
    """``MD5OfMessageBody``: the MD5 of the body's UTF-8, in hex."""
    return md5_of_data(body.encode())


def md5_of_data(data: bytes) -> str:
    """:func:`md5_of_body` of a body already in UTF-8."""
    digest: str = _md5(data).hexdigest()
    return digest


def md5_of_attributes(attributes: Mapping[str, Attribute]) -> str | None:
    """``MD5OfMessageAttributes`` as SQS computes it (``None`` without attributes)."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        kind, value = attributes[name]
        raw = value if isinstance(value, bytes) else value.encode()
        for part in (name.encode(), kind.encode()):
            digest.update(struct.pack("!I", len(part)) + part)
        digest.update(b"\x02" if isinstance(value, bytes) else b"\x01")
        digest.update(struct.pack("!I", len(raw)) + raw)
    return digest.hexdigest()
