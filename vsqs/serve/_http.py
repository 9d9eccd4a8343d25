"""The HTTP/1.1 layer under ``vsqs serve``: the standard library's request handler with
a stricter, cheaper reading of a request's header fields and a one-write answer.

:class:`Handler` is :class:`http.server.BaseHTTPRequestHandler` (its request line, its
limits and its status codes) but for two things, which together took a fifth of the
server's CPU time a request:

* **header fields** are read by :meth:`Handler.parse_request` itself, not through
  :mod:`email.parser`: each line must be ``name: value`` (RFC 9112), the name a token,
  the value without NUL or a bare CR; a folded line (obs-fold), a name followed by a
  space, a line without a colon, or the end of the stream among the fields is a ``400``
  (the standard library took the rest as a body, or the fields read so far). Up to 100
  fields of up to 64 KiB each, or a ``431`` (the standard library's limits, but that it
  counts the blank line among its 100). The fields are in
  :attr:`Handler.fields`: names in lower case, repeated ones joined with ``,``;
* **the answer** (:meth:`Handler.reply`): the status line, ``Server``, ``Date``
  (formatted once a second), ``Content-Length``, the given fields and the body in one
  write.

The benchmark's do-nothing server (``benchmarks/bench_serve.py``) is built on this same
class, so that what it measures is the floor of this stack.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Final

__all__ = ["Handler"]

MAX_LINE: Final = 65536
"""The longest request line or header field line (bytes), as in the standard library."""
MAX_FIELDS: Final = 100
"""The most header fields a request may have (the standard library: 99, and the blank line)."""
# RFC 9110's token for the name; the value: no NUL, CR or LF (CR LF or LF ends the line),
# the optional whitespace on both sides stripped (a greedy match: a lazy one was slow).
_FIELD: Final = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+):([^\x00\r\n]*)\r?\n")
_VERSION: Final = re.compile(r"HTTP/([0-9]{1,10})\.([0-9]{1,10})")  # leading zeros allowed
_END: Final = frozenset({b"\r\n", b"\n"})
_REASONS: Final = {status.value: status.phrase for status in HTTPStatus}


class _Date:
    """The ``Date`` field's value, formatted at most once a second."""

    __slots__ = ("stamp",)

    def __init__(self) -> None:
        self.stamp = (0, "")  # (second, text): one reference, replaced whole

    def now(self) -> str:
        second = int(time.time())
        when, text = self.stamp
        if second != when:
            # Threads that race here each format the same second and store equal pairs.
            text = formatdate(second, usegmt=True)
            self.stamp = (second, text)
        return text


_DATE: Final = _Date()


class Handler(BaseHTTPRequestHandler):
    """A keep-alive HTTP/1.1 request handler with ``TCP_NODELAY`` (see the module's
    docstring). Subclasses answer with :meth:`reply` and read :attr:`fields`."""

    protocol_version = "HTTP/1.1"
    raw_requestline: bytes  # read by handle_one_request
    fields: dict[str, str]
    """The request's header fields: names in lower case, repeated ones joined with ``,``."""

    def setup(self) -> None:
        super().setup()
        # Without it, Nagle's algorithm and the client's delayed ACK stall each answer ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def parse_request(self) -> bool:
        """The request line (as the standard library reads it) and the header fields
        (see the module's docstring); ``False`` after answering an error."""
        self.fields = {}
        if not self._request_line():
            return False
        fields = self.fields
        readline = self.rfile.readline
        count = 0
        while True:
            line = readline(MAX_LINE + 1)
            if line in _END:
                break
            if len(line) > MAX_LINE:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
                return False
            count += 1
            if count > MAX_FIELDS:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
                return False
            match = _FIELD.fullmatch(line.decode("iso-8859-1"))
            if match is None:
                # A folded line, "name :", no colon, a stray CR or NUL, or the end of the
                # stream before the blank line: refused rather than guessed at.
                self.send_error(HTTPStatus.BAD_REQUEST, "Bad header field")
                return False
            name, value = match.groups()
            name, value = name.lower(), value.strip(" \t")
            fields[name] = f"{fields[name]},{value}" if name in fields else value
        connection = fields.get("connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive":
            self.close_connection = False
        if (
            fields.get("expect", "").lower() == "100-continue"
            and self.request_version >= "HTTP/1.1"
        ):
            return self.handle_expect_100()
        return True

    def _request_line(self) -> bool:
        """The standard library's reading of the request line (its version checks, its
        HTTP/0.9 ``GET``, its ``//`` folding)."""
        self.command = None  # type: ignore[assignment] # as the standard library: no command yet
        self.request_version = version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if not words:
            return False
        if len(words) >= 3:
            version = words[-1]
            if version == "HTTP/1.1":
                self.close_connection = False
            else:
                number = _VERSION.fullmatch(version)
                if number is None:
                    self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
                    return False
                major, minor = int(number.group(1)), int(number.group(2))
                if (major, minor) >= (1, 1):
                    self.close_connection = False
                if major >= 2:
                    self.send_error(
                        HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                        f"Invalid HTTP version ({version[5:]})",
                    )
                    return False
            self.request_version = version
        if not 2 <= len(words) <= 3:
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({requestline!r})")
            return False
        command, path = words[:2]
        if len(words) == 2:
            self.close_connection = True
            if command != "GET":
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({command!r})")
                return False
        self.command, self.path = command, path
        if path.startswith("//"):
            self.path = "/" + path.lstrip("/")  # as the standard library (gh-87389)
        return True

    def reply(
        self, status: int, fields: Iterable[tuple[str, str]], body: bytes, *, send_body: bool = True
    ) -> None:
        """Answer with *status*, the header *fields* (``Server``, ``Date`` and
        ``Content-Length`` are added; ``Connection: close`` too when the connection is
        to close) and *body* (not sent when *send_body* is false: a ``HEAD``), in one
        write."""
        self.log_request(status, len(body))
        if self.request_version == "HTTP/0.9":
            if send_body:
                self.wfile.write(body)
            return
        head = [
            f"{self.protocol_version} {status} {_REASONS.get(status, '')}\r\n"
            f"Server: {self.version_string()}\r\nDate: {_DATE.now()}\r\n"
            f"Content-Length: {len(body)}\r\n"
        ]
        said = False
        for name, value in fields:
            lowered = name.lower()
            if lowered == "content-length":
                continue  # the body's own length is sent
            if lowered == "connection":  # as the standard library's send_header
                said = True
                if value.lower() == "close":
                    self.close_connection = True
                elif value.lower() == "keep-alive":
                    self.close_connection = False
            head.append(f"{name}: {value}\r\n")
        if self.close_connection and not said:
            head.append("Connection: close\r\n")
        head.append("\r\n")
        data = "".join(head).encode("latin-1")
        self.wfile.write(data + body if send_body else data)
