"""Which browsers may talk to the server: the Host and Origin checks, and CORS.

A server on loopback is still reachable by every web page its user opens: a page can
make the browser send a form POST, an ``<img>`` GET or a ``fetch`` to
``http://127.0.0.1:9324``, and, by rebinding its own DNS name to ``127.0.0.1``, even
read the answers. :class:`BrowserPolicy` decides, from the request's method and
headers alone (pure: no I/O, no state), what such a page may not do:

* **DNS rebinding**: a ``Host`` that is not a loopback name (``localhost``,
  ``127.0.0.0/8``, ``[::1]``, any port) nor one the operator allowed is refused, for
  every request. A rebound page's requests carry its own name as their ``Host``.
* **Cross-origin requests** that change anything are refused: a browser names the
  page that caused a request in ``Origin`` (every POST, every ``fetch``) and
  ``Sec-Fetch-Site``; a request from a page of another origin is refused unless the
  operator allowed that origin (then CORS is answered for it alone, preflight
  included, so a web app may use an SDK from the browser).
* **No change by GET**: a request that changes something must be a POST (a GET is what
  ``<img>``, links and prefetches send, with no ``Origin``).

Clients that are not browsers (SDKs, curl) send no ``Origin`` or ``Sec-Fetch-Site``
and a ``Host`` naming the address they connect to: they are not affected.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ._errors import SqsError

__all__ = ["READ_ONLY", "BrowserPolicy"]

READ_ONLY: Final = frozenset({
    "GetQueueUrl", "ListQueues", "GetQueueAttributes", "ListDeadLetterSourceQueues",
    "ListQueueTags", "ListMessageMoveTasks",
})  # fmt: skip
"""The SQS actions that change nothing (``ReceiveMessage`` changes what others see)."""

_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|\[[0-9a-f:.]{2,45}\]")
_HOST: Final = re.compile(r"(?P<name>[a-z0-9._-]{1,253}|\[[0-9a-f:.]{2,45}\])(?::[0-9]{1,5})?")
_ORIGIN: Final = re.compile(r"(https?)://([^/?#@]+)")
_FOREIGN_SITES: Final = frozenset({"cross-site", "same-site"})
_EXPOSED: Final = "x-amzn-RequestId, x-amzn-query-error"
_PREFLIGHT_AGE: Final = "600"


def _hostname(value: str) -> str | None:
    """The name part of a ``Host`` value, lower case (``[::1]`` keeps its brackets).

    Asked twice a request, with the few values a server's clients send: the answer for
    a value no longer than a host and port can be is kept (256 values at most, so a
    client sending ever new ones costs the server no memory)."""
    if len(value) <= _LONGEST_HOST:
        return _kept_hostname(value)
    return _parse_hostname(value)


def _parse_hostname(value: str) -> str | None:
    match = _HOST.fullmatch(value.strip().lower())
    return None if match is None else match.group("name")


_LONGEST_HOST: Final = 270  # a bracketed address or a name of 253, a port, some blanks
_kept_hostname: Final = functools.lru_cache(maxsize=256)(_parse_hostname)


@functools.lru_cache(maxsize=256)  # asked on every request, with a few names
def _loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_entry(value: str) -> str:
    """An ``--allow-host`` value, as :func:`_hostname` spells it; ValueError if it is
    not a host name or address."""
    name = value.strip().lower()
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"  # a bare IPv6 address
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"allowed host {value!r} is not a host name or address (give the name alone, "
            "without a scheme or port: any port is allowed)"
        )
    return name


def _origin_entry(value: str) -> str:
    """An ``--allow-origin`` value as browsers send it (``scheme://host[:port]``)."""
    parts = urlsplit(value.strip())
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ValueError(
            f"allowed origin {value!r} is not an origin: give scheme://host[:port], as a "
            "browser sends it in Origin (e.g. http://localhost:3000)"
        )
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


@dataclass(frozen=True)
class BrowserPolicy:
    """The Host names and browser origins a server accepts (see the module).

    :param allow_hosts: host names (or addresses) accepted in ``Host`` beside the
        loopback ones, any port.
    :param allow_origins: origins (``scheme://host[:port]``) of web pages that may
        change queues from a browser; CORS is answered for them alone.
    :raises ValueError: an entry that is not a host name, or not an origin.

    >>> from vsqs.serve import BrowserPolicy, SqsError
    >>> policy = BrowserPolicy.of(allow_hosts=["queues.internal"])
    >>> policy.check("POST", {"host": "queues.internal:9324"}, changes=True)
    >>> try:
    ...     policy.check("POST", {"host": "evil.example"}, changes=False)
    ... except SqsError as refused:
    ...     print(refused.status, refused.code)
    403 AccessDenied
    """

    hosts: frozenset[str] = frozenset()
    origins: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, allow_hosts: Iterable[str] = (), allow_origins: Iterable[str] = ()
    ) -> BrowserPolicy:
        """The policy allowing *allow_hosts* and *allow_origins* (checked)."""
        if isinstance(allow_hosts, str) or isinstance(allow_origins, str):
            raise TypeError("allow_hosts and allow_origins are lists of strings, not a string")
        return cls(
            frozenset(_host_entry(h) for h in allow_hosts),
            frozenset(_origin_entry(o) for o in allow_origins),
        )

    def check_host(self, headers: Mapping[str, str]) -> None:
        """Refuse a request whose ``Host`` is neither loopback nor allowed.

        :param headers: names in lower case.
        :raises SqsError: ``AccessDenied`` (403), naming the host and the fix.
        """
        value = headers.get("host", "")
        if not value.strip():
            return  # HTTP/1.0 without a Host: not a browser (every browser sends one)
        name = _hostname(value)
        if name is not None and (_loopback(name) or name in self.hosts):
            return
        if name is None:  # never reflected: it could be anything
            raise SqsError("AccessDenied", "The Host header is not a host[:port].")
        raise SqsError(
            "AccessDenied",
            f"Host {name!r} is not a name this server answers to (a guard against DNS "
            f"rebinding). If clients reach it by that name, start vsqs serve with "
            f"--allow-host {name}.",
        )

    def allowed_origin(self, headers: Mapping[str, str]) -> str | None:
        """The request's ``Origin`` if the operator allowed it (then CORS is answered)."""
        origin = headers.get("origin", "").strip().lower().rstrip("/")
        return origin if origin in self.origins else None

    def foreign(self, headers: Mapping[str, str]) -> str | None:
        """Why a browser says another page caused this request, or ``None`` (the
        server's own pages, the address bar, or not a browser at all).

        The server's own origin is the one whose host is the request's ``Host`` (or the
        ``X-Forwarded-Host`` of a reverse proxy in front: a page on another origin
        cannot set either header on a request without a preflight this server refuses).
        """
        site = headers.get("sec-fetch-site", "").strip().lower()
        if site in _FOREIGN_SITES:
            return f"Sec-Fetch-Site: {site}"
        origin = headers.get("origin")
        if origin is None:
            return None
        match = _ORIGIN.fullmatch(origin.strip().lower())
        own = {headers.get("host", ""), headers.get("x-forwarded-host", "").partition(",")[0]}
        if match is None or match.group(2) not in {h.strip().lower() for h in own} - {""}:
            return f"Origin: {origin[:100]}"
        return None

    def check(self, method: str, headers: Mapping[str, str], *, changes: bool) -> None:
        """Refuse what a web page could use to harm a queue: a ``Host`` neither loopback
        nor allowed; then, if the request *changes* something, a GET, or a request from
        a page of another origin that the operator did not allow.

        :param headers: names in lower case.
        :raises SqsError: ``AccessDenied`` (403), the message naming the problem.
        """
        self.check_host(headers)
        if not changes:
            return
        if method.upper() != "POST":
            raise SqsError(
                "AccessDenied",
                f"A request that changes queues must be a POST, not a {method[:10]} "
                "(a link or an <img> on any web page sends a GET).",
            )
        why = self.foreign(headers)
        if why is not None and self.allowed_origin(headers) is None:
            raise SqsError(
                "AccessDenied",
                f"A request from a web page of another origin ({why}) may not change "
                "queues. To let a web app do so from a browser, start vsqs serve with "
                "--allow-origin SCHEME://HOST:PORT (its origin).",
            )

    def cors(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The CORS headers to add to an answer (none unless its origin is allowed)."""
        origin = self.allowed_origin(headers)
        if origin is None:
            return {}
        return {
            "Access-Control-Allow-Origin": headers["origin"].strip(),
            "Access-Control-Expose-Headers": _EXPOSED,
            "Vary": "Origin",
        }

    def preflight(self, headers: Mapping[str, str]) -> dict[str, str] | None:
        """The answer's headers for a CORS preflight (``OPTIONS`` with
        ``Access-Control-Request-Method``), ``None`` if it is not one.

        :raises SqsError: ``AccessDenied`` (403) for an origin not allowed.
        """
        method = headers.get("access-control-request-method")
        if method is None or "origin" not in headers:
            return None
        self.check_host(headers)
        allowed = self.cors(headers)
        if not allowed:
            raise SqsError(
                "AccessDenied",
                f"Origin {headers['origin'][:100]!r} may not call this server from a browser "
                "(start vsqs serve with --allow-origin for it).",
            )
        requested = headers.get("access-control-request-headers", "")
        return {
            **allowed,
            "Access-Control-Allow-Methods": "POST, GET",
            "Access-Control-Allow-Headers": ",".join(
                h.strip() for h in requested.split(",") if re.fullmatch(r"[A-Za-z0-9-]+", h.strip())
            ),
            "Access-Control-Max-Age": _PREFLIGHT_AGE,
        }
