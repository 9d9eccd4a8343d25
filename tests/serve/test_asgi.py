"""The ASGI application: the same answers as the HTTP server, without one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import vsqs
from vsqs.serve import asgi_app
from vsqs.serve._server import MAX_BODY


def _call(
    app: Any,
    method: str,
    target: str,
    body: bytes,
    headers: dict[str, str],
    *,
    raw_path: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "http_version": "1.1",
        "client": ("127.0.0.1", 5000),
        "method": method,
        "path": path,
        "raw_path": path.encode() if raw_path is None else raw_path,
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("sqs.test", 9324),
    }
    chunks = [body[: len(body) // 2], body[len(body) // 2 :]]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start, end = sent
    headers_out = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers_out, end["body"]


def _json(app: Any, action: str, params: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    status, headers, body = _call(
        app,
        "POST",
        "/",
        json.dumps(params).encode(),
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"},
    )
    return status, headers, json.loads(body)


def test_the_asgi_app_answers_like_the_server(tmp_path: Path) -> None:
    app = asgi_app(tmp_path)
    status, _, answer = _json(app, "CreateQueue", {"QueueName": "q"})
    assert status == 200 and answer["QueueUrl"] == "http://sqs.test:9324/000000000000/q"
    assert (
        _json(app, "SendMessage", {"QueueUrl": answer["QueueUrl"], "MessageBody": "hi"})[0] == 200
    )
    message = vsqs.QueueRoot(tmp_path).get("q").receive(timeout=0)
    assert message is not None and message.body == b"hi"
    status, headers, answer = _json(app, "GetQueueUrl", {"QueueName": "none"})
    assert status == 400
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    status, _, body = _call(app, "GET", "/?Action=ListQueues", b"", {})
    assert status == 200 and b"/000000000000/q</QueueUrl>" in body
    status, _, _ = _call(app, "POST", "/", b"x" * (MAX_BODY + 2), {})
    assert status == 413


def test_the_log_escapes_control_characters(tmp_path: Path) -> None:
    """Whatever an ASGI server lets through (uvicorn's llhttp refuses them in a target),
    control characters reach the log escaped, tracebacks' line ends kept."""
    lines: list[str] = []
    app = asgi_app(tmp_path, log=lines.append)
    target = "/\x1b[2J\x1b]0;owned\x07\\\x9b?Action=ListQueues"
    scope_path = target.partition("?")[0]
    status, _, _ = _call(
        app, "GET", target, b"", {"Host": "localhost"}, raw_path=scope_path.encode("latin-1")
    )
    assert status == 200
    assert (
        lines
        and '"GET /\\x1b[2J\\x1b]0;owned\\x07\\x5c\\x9b?Action=ListQueues HTTP/1.1" 200' in lines[0]
    )
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in lines[0])


def test_a_lifespan_shutdown_stops_the_service(tmp_path: Path) -> None:
    app = asgi_app(vsqs.QueueRoot(tmp_path))
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return messages.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app({"type": "lifespan"}, receive, send))
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert app.service.stopping.is_set()
