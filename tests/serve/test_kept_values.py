"""What the server keeps from one request for the next, to spend less on each: the
``Host`` names it has checked and the header names it has decoded. Kept within a
bound, and read the same as when they are not kept."""

from __future__ import annotations

from vsqs.serve import BrowserPolicy, Server, SqsError
from vsqs.serve._origin import _hostname, _kept_hostname
from vsqs.serve._shapes import HEADER_NAMES as _NAMES
from vsqs.serve._shapes import MAX_HEADER_NAME as _MAX_KEPT_NAME
from vsqs.serve._shapes import MAX_SHAPES as _MAX_NAMES

from .http import raw


def _refused(policy: BrowserPolicy, host: str) -> bool:
    try:
        policy.check_host({"host": host})
    except SqsError:
        return True
    return False


def test_host_names_read_the_same_kept_or_not_and_stay_within_their_bound() -> None:
    """A checked ``Host`` is kept (256 at most, none longer than a host and port can
    be): asked again, it gets the same answer; a long one is parsed each time."""
    policy = BrowserPolicy.of(allow_hosts=["queues.internal"])
    for _ in range(2):  # the second time from what was kept
        assert not _refused(policy, "127.0.0.1:9324")
        assert not _refused(policy, "Queues.Internal:80")
        assert _refused(policy, "evil.example:9324")
        assert _refused(policy, "bad host")
    padded = " " * 1000 + "localhost:9324"  # no host is a kilobyte long
    assert _hostname(padded) == "localhost"
    assert not _refused(policy, padded)
    for n in range(1000):  # a client sending ever new names
        assert _refused(policy, f"evil{n}.example")
    assert _kept_hostname.cache_info().currsize <= 256
    assert _kept_hostname.cache_info().maxsize == 256
    _kept_hostname.cache_clear()
    _hostname(padded)
    assert _kept_hostname.cache_info().currsize == 0  # too long to be a host: never kept


def _head(server: Server, *fields: str) -> bytes:
    """A ``ListQueues`` in the JSON protocol with header *fields* added."""
    body = b"{}"
    lines = [
        "POST / HTTP/1.1",
        f"Host: {server.host_port}",
        "Content-Type: application/x-amz-json-1.0",
        *fields,
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + body


def test_header_names_read_alike_in_any_case_kept_or_not(server: Server) -> None:
    """A header name is read in any case, the first time and once it is kept: the JSON
    protocol's target in upper case is still the JSON protocol's."""
    for spelling in ("X-AMZ-TARGET", "x-amz-target", "X-Amz-Target") * 2:
        answer = raw(server.url, _head(server, f"{spelling}: AmazonSQS.ListQueues"))
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert b"application/x-amz-json-1.0" in answer, answer[:400]
        assert "X-AMZ-TARGET" not in _NAMES.values()  # kept in lower case only


def test_kept_header_names_stay_within_their_bound(server: Server) -> None:
    """A client sending ever new header names (or long ones) cannot grow what the server
    keeps: at most ``_MAX_NAMES`` names, none longer than ``_MAX_KEPT_NAME`` bytes, and
    every request is still answered."""
    long_name = "X-" + "L" * _MAX_KEPT_NAME
    answer = raw(server.url, _head(server, "X-Amz-Target: AmazonSQS.ListQueues", f"{long_name}: 1"))
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert long_name.lower().encode() not in _NAMES
    for start in range(0, _MAX_NAMES + 100, 50):
        junk = [f"X-Junk-{n}: {n}" for n in range(start, start + 50)]
        answer = raw(server.url, _head(server, "X-Amz-Target: AmazonSQS.ListQueues", *junk))
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert len(_NAMES) <= _MAX_NAMES
    assert all(len(name) <= _MAX_KEPT_NAME for name in _NAMES)
