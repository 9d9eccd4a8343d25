"""Raw HTTP to a server (for what an SDK would never send)."""

from __future__ import annotations

import http.client
import json
import socket
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlencode, urlsplit

NS = {"sqs": "http://queue.amazonaws.com/doc/2012-11-05/"}


def request(
    url: str, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers in lower case, body) of one request on a new connection."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def json_call(url: str, action: str, params: Any) -> tuple[int, dict[str, str], Any]:
    status, headers, body = request(
        url,
        "POST",
        "/",
        json.dumps(params).encode(),
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"},
    )
    return status, headers, json.loads(body) if body else None


def query_call(
    url: str, params: dict[str, str] | list[tuple[str, str]], path: str = "/"
) -> tuple[int, dict[str, str], ET.Element]:
    """A query-protocol POST; the XML answer parsed."""
    status, headers, body = request(
        url,
        "POST",
        path,
        urlencode(params).encode(),
        {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    return status, headers, ET.fromstring(body)  # noqa: S314 - our own server's answer


def raw(url: str, data: bytes) -> bytes:
    """Send *data* as is on a new connection; what comes back before it closes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)
