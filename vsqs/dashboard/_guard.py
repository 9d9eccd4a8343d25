"""What guards the dashboard: its response headers, HTTP Basic authentication, the
forms' CSRF token, and form parsing (the Host and Origin checks are the SQS API's,
:class:`vsqs.serve.BrowserPolicy`). No I/O."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qs

from ..serve import Credential, Credentials

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The Content-Security-Policy of every response: only the package's own script, style
and images run or load; no inline script or style, no framing, forms post only here."""
MAX_FORM: Final = 64 << 10
HTML: Final = "text/html; charset=utf-8"
JSON: Final = "application/json"


class Refused(Exception):
    """A request answered with an error page (status, text, extra headers)."""

    def __init__(self, status: int, text: str, headers: list[tuple[str, str]] | None = None):
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or []


def response_headers(content_type: str, *extra: tuple[str, str]) -> list[tuple[str, str]]:
    return [
        ("Content-Type", content_type),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "same-origin"),  # no-referrer would make a form's Origin "null"
        ("Cache-Control", "no-store"),
        *extra,
    ]


def authenticate(credentials: Credentials | None, headers: Mapping[str, str]) -> Credential | None:
    """The key of the request (``None`` without credentials); 401 if none is valid."""
    if credentials is None:
        return None
    challenge = [("WWW-Authenticate", 'Basic realm="vsqs dashboard", charset="UTF-8"')]
    scheme, _, encoded = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        raise Refused(401, "sign in with an access key and its secret key", challenge)
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise Refused(401, "malformed credentials", challenge) from None
    access_key, _, secret = decoded.partition(":")
    key = credentials.lookup(access_key)
    expected = key.secret_key if key is not None else "\0"  # compare anyway: same time
    matches = hmac.compare_digest(secret.encode(), expected.encode())
    if key is None or not matches:
        raise Refused(401, "unknown access key or wrong secret key", challenge)
    return key


def token(secret: bytes, user: Credential | None) -> str:
    """The CSRF token of *user*'s forms: an HMAC of the access key with *secret*."""
    who = b"" if user is None else user.access_key.encode()
    return hmac.new(secret, b"csrf\0" + who, hashlib.sha256).hexdigest()


def parse_form(headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    kind = headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "an action is a form (application/x-www-form-urlencoded)")
    if len(body) > MAX_FORM:
        raise Refused(413, "form too large")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "malformed form") from None
    return {key: values[-1] for key, values in fields.items()}
