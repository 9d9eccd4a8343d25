"""AWS Signature Version 4, checked on the server side (``--credentials``).

The same computation as botocore's signer (``botocore.auth.SigV4Auth``), from the
request as received: the canonical request (method, normalised path, sorted query,
the signed headers, the SHA-256 of the body as received), the string to sign, the
key derived from the secret for the signature's date, region and service. A request
signed in its ``Authorization`` header and a presigned URL (``X-Amz-Signature`` in the
query) are both accepted. Pure computation: no I/O, no state.

Refusals, with SQS's codes: no signature (``MissingAuthenticationToken``), an
unreadable one (``IncompleteSignature``), an unknown access key
(``InvalidClientTokenId``), a signature more than 15 minutes away from the server's
clock or a presigned URL used after its ``X-Amz-Expires`` (``RequestExpired``), any
other mismatch (``SignatureDoesNotMatch``).
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import posixpath
import re
import time
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qsl, quote, unquote

from ._credentials import Credential, Credentials
from ._errors import SqsError

__all__ = ["MAX_EXPIRES", "MAX_SKEW", "verify"]

MAX_SKEW: Final = 15 * 60
"""Seconds a signature's time may be away from the server's clock (SigV4's rule)."""
MAX_EXPIRES: Final = 7 * 24 * 3600
"""The longest a presigned URL may be valid (seconds; SigV4's limit)."""
_ALGORITHM: Final = "AWS4-HMAC-SHA256"
_SECONDS: Final = re.compile(r"[0-9]{1,7}")
_AUTH_FIELD: Final = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,\s]*)\s*")
_AMZ_DATE: Final = re.compile(r"(\d{8})T(\d{6})Z")
_SCOPE: Final = re.compile(r"([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request")


def _incomplete(what: str) -> SqsError:
    return SqsError("IncompleteSignature", f"The request signature is incomplete: {what}.")


def _parse_authorization(header: str) -> tuple[str, str, str]:
    """(credential scope, signed headers, signature) of an ``Authorization`` header."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != _ALGORITHM:
        raise _incomplete(f"the algorithm must be {_ALGORITHM}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        match = _AUTH_FIELD.fullmatch(part)
        if match is None:
            raise _incomplete(f"cannot read {part.strip()!r}")
        fields[match.group(1)] = match.group(2)
    try:
        return fields["Credential"], fields["SignedHeaders"], fields["Signature"]
    except KeyError as exc:
        raise _incomplete(f"{exc.args[0]} is missing") from None


def _canonical_path(raw_path: str) -> str:
    path = unquote(raw_path) or "/"
    normal = posixpath.normpath(path)
    if path.endswith("/") and normal != "/":
        normal += "/"
    normal = normal.replace("//", "/")  # normpath keeps a leading "//"
    return quote(normal, safe="/~")


def _canonical_query(raw_query: str) -> str:
    pairs = [
        (quote(key, safe="-_.~"), quote(value, safe="-_.~"))
        for key, value in parse_qsl(raw_query, keep_blank_values=True)
        if key != "X-Amz-Signature"
    ]
    return "&".join(f"{key}={value}" for key, value in sorted(pairs))


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _expires(value: str | None) -> int:
    """The ``X-Amz-Expires`` of a presigned URL: seconds, 1 to 7 days (SigV4's bounds)."""
    if value is None:
        raise _incomplete("a presigned URL needs X-Amz-Expires")
    if not _SECONDS.fullmatch(value) or not 1 <= int(value) <= MAX_EXPIRES:
        raise SqsError(
            "AuthorizationQueryParametersError",
            f"X-Amz-Expires must be a whole number of seconds from 1 to {MAX_EXPIRES}.",
        )
    return int(value)


def _check_time(stamp: str, date: str, expires: int | None, current: float) -> None:
    """Refuse a signature whose time is unreadable, too far from *current*, or (a
    presigned URL valid for *expires* seconds) expired."""
    stamp_match = _AMZ_DATE.fullmatch(stamp)
    if stamp_match is None or stamp_match.group(1) != date:
        raise _incomplete("X-Amz-Date is missing or does not match the credential's date")
    try:
        signed_at = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        raise _incomplete(f"X-Amz-Date {stamp!r} is not a time") from None
    shown_now = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(current))
    if expires is not None and current > signed_at + expires:
        raise SqsError(
            "RequestExpired",
            f"Request has expired: presigned at {stamp} for {expires} seconds; the "
            f"server's time is {shown_now}.",
        )
    # A presigned URL may be used until it expires; no request may come from the future.
    too_old = expires is None and current - signed_at > MAX_SKEW
    if too_old or signed_at - current > MAX_SKEW:
        raise SqsError(
            "RequestExpired",
            f"Signature expired: {stamp} is more than {MAX_SKEW // 60} minutes away from "
            f"the server's time {shown_now}.",
        )


def verify(  # noqa: PLR0917 - one check per rule; the parts of one request
    credentials: Credentials,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
) -> tuple[Credential, str]:
    """Check the SigV4 signature of a request; return its key and the signed region.

    :param headers: the request's headers, names in lower case (repeated ones joined
        with ``,``).
    :param now: the server's unix time (the clock of the caller; default the system's).
    :raises SqsError: the request is not signed, or not signed by a known key.
    """
    query = dict(parse_qsl(raw_query, keep_blank_values=True))
    authorization = headers.get("authorization")
    expires: int | None = None  # seconds a presigned URL is valid for
    if authorization is not None:
        scope, signed, signature = _parse_authorization(authorization)
        stamp = headers.get("x-amz-date", "")
    elif "X-Amz-Signature" in query:
        expires = _expires(query.get("X-Amz-Expires"))
        if query.get("X-Amz-Algorithm") != _ALGORITHM:
            raise _incomplete(f"X-Amz-Algorithm must be {_ALGORITHM}")
        scope = query.get("X-Amz-Credential", "")
        signed = query.get("X-Amz-SignedHeaders", "")
        signature = query["X-Amz-Signature"]
        stamp = query.get("X-Amz-Date", "")
    else:
        raise SqsError(
            "MissingAuthenticationToken", "Request is missing Authentication Token (unsigned)."
        )
    scope_match = _SCOPE.fullmatch(scope)
    if scope_match is None:
        raise _incomplete("the Credential is not access_key/date/region/service/aws4_request")
    access_key, date, region, service = scope_match.groups()
    key = credentials.lookup(access_key)
    if key is None:
        raise SqsError(
            "InvalidClientTokenId", "The security token included in the request is invalid."
        )
    _check_time(stamp, date, expires, time.time() if now is None else now)
    names = signed.split(";")
    if "host" not in names or names != sorted(names):
        raise _incomplete("SignedHeaders must be sorted and include host")
    missing = [name for name in names if name not in headers]
    if missing:
        raise _incomplete(f"signed header(s) {', '.join(missing)} absent")
    canonical_headers = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in names)
    payload = hashlib.sha256(body).hexdigest()  # presigned too (only S3 leaves it out)
    declared = headers.get("x-amz-content-sha256")
    if declared is not None and declared != payload:
        raise SqsError("SignatureDoesNotMatch", "The body does not match x-amz-content-sha256.")
    canonical = "\n".join(
        [
            method,
            _canonical_path(raw_path),
            _canonical_query(raw_query),
            canonical_headers,
            signed,
            declared or payload,
        ]
    )
    to_sign = "\n".join(
        [
            _ALGORITHM,
            stamp,
            f"{date}/{region}/{service}/aws4_request",
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    expected = hmac.new(
        _signing_key(key.secret_key, date, region, service), to_sign.encode(), hashlib.sha256
    ).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise SqsError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )
    return key, region
