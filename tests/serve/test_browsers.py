"""What a web page in the user's browser may do to a server on loopback: nothing that
changes a queue (issue 36). Each attack of the issue, sent as a browser sends it, over
a real socket to a real server; the queue is checked intact after each."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import vsqs
from vsqs.dashboard import Dashboard
from vsqs.serve import BrowserPolicy, Server, asgi_app, make_server

from .clients import SERVE
from .conftest import Start
from .http import request
from .test_asgi import _call
from .test_server import REPO, serve_command

JSON_TYPE = "application/x-amz-json-1.0"
FORM_TYPE = "application/x-www-form-urlencoded"
FORM = {"Content-Type": FORM_TYPE}
EVIL = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}


def _orders(server: Server, count: int = 3) -> vsqs.AnyQueue:
    queue = server.service.root.create("orders")
    queue.publish_batch([b"m%d" % i for i in range(count)])
    return queue


def _json(
    server: Server, action: str, params: dict[str, Any], headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    return request(
        server.url,
        "POST",
        "/",
        json.dumps(params).encode(),
        {"Content-Type": JSON_TYPE, "X-Amz-Target": f"AmazonSQS.{action}", **headers},
    )


def _form(
    server: Server, fields: dict[str, str], headers: dict[str, str], path: str = "/"
) -> tuple[int, dict[str, str], bytes]:
    # What an HTML form on any site posts: no header a page could not set.
    return request(
        server.url, "POST", path, urlencode(fields).encode(), {"Content-Type": FORM_TYPE, **headers}
    )


def _intact(server: Server, count: int = 3) -> None:
    root = vsqs.QueueRoot(server.service.root.path)
    assert "orders" in root
    assert root.get("orders").counts().ready == count


def test_a_page_on_another_origin_cannot_purge_delete_or_send(server: Server) -> None:
    """Cross-origin form POSTs, GETs and fetches, both protocols: 403, the queue intact."""
    _orders(server)
    url = "/000000000000/orders"
    for headers in (
        EVIL,
        {"Origin": "http://evil.example"},  # a browser without Sec-Fetch-*
        {"Sec-Fetch-Site": "cross-site"},  # a no-cors request without an Origin
        {"Sec-Fetch-Site": "same-site", "Origin": f"{server.url.rsplit(':', 1)[0]}:1"},
        {"Origin": "null"},  # a sandboxed frame, a file:// page
    ):
        for action in ("PurgeQueue", "DeleteQueue", "SendMessage", "ReceiveMessage"):
            fields = {"Action": action, "QueueUrl": url, "MessageBody": "forged"}
            status, answer_headers, body = _form(server, fields, headers)
            assert status == 403, (headers, action, body)
            assert b"<Code>AccessDenied</Code>" in body and b"another origin" in body
            assert "access-control-allow-origin" not in answer_headers
            status, _, body = _form(server, {"Action": action}, headers, path=url)
            assert status == 403, body
            status, _, body = _json(
                server, action, {"QueueUrl": url, "MessageBody": "forged"}, headers
            )
            assert status == 403 and json.loads(body)["__type"].endswith("AccessDenied")
        _intact(server)
        # Reading is harmless (no CORS: the page cannot read the answer anyway).
        status, _, _ = _form(server, {"Action": "GetQueueUrl", "QueueName": "orders"}, headers)
        assert status == 200


def test_no_change_is_made_by_get(server: Server) -> None:
    """An <img src> or a link: a GET without any Origin. Reading stays allowed."""
    _orders(server)
    for target in (
        "/000000000000/orders?Action=PurgeQueue",
        "/?Action=DeleteQueue&QueueUrl=/000000000000/orders",
        "/?Action=SendMessage&QueueUrl=/000000000000/orders&MessageBody=x",
        "/?Action=ReceiveMessage&QueueUrl=/000000000000/orders",
        "/?Action=CreateQueue&QueueName=planted",
    ):
        status, _, body = request(server.url, "GET", target)
        assert status == 403 and b"must be a POST" in body, (target, body)
    _intact(server)
    assert "planted" not in server.service.root
    status, _, body = request(server.url, "GET", "/?Action=ListQueues")
    assert status == 200 and b"/000000000000/orders" in body


def test_a_rebound_host_is_refused(server: Server) -> None:
    """DNS rebinding: the page's own name (rebound to 127.0.0.1) is the Host; it may
    neither read nor change, on either protocol."""
    _orders(server)
    rebound = {"Host": f"evil.example:{server.server_address[1]}"}
    url = "/000000000000/orders"
    status, _, body = _json(server, "PurgeQueue", {"QueueUrl": url}, rebound)
    assert status == 403
    assert "evil.example" in json.loads(body)["message"]
    assert "--allow-host evil.example" in json.loads(body)["message"]
    assert _json(server, "ListQueues", {}, rebound)[0] == 403
    assert _form(server, {"Action": "PurgeQueue", "QueueUrl": url}, rebound)[0] == 403
    assert request(server.url, "GET", "/?Action=ListQueues", headers=rebound)[0] == 403
    _intact(server)
    # Loopback names, any port, and the answer's own URLs keep them.
    for host in ("localhost", "LOCALHOST:1", "127.0.0.2:80", "[::1]:9324"):
        status, _, body = _json(server, "GetQueueUrl", {"QueueName": "orders"}, {"Host": host})
        assert status == 200, (host, body)
        assert json.loads(body)["QueueUrl"] == f"http://{host}/000000000000/orders"


def test_a_host_the_operator_allows_is_served(start: Start) -> None:
    server = start(allow_hosts=["queues.internal", "10.0.0.5", "fd00::1"])
    _orders(server)
    for host in ("queues.internal:9324", "Queues.Internal", "10.0.0.5", "[fd00::1]:80"):
        assert _json(server, "ListQueues", {}, {"Host": host})[0] == 200, host
    assert _json(server, "ListQueues", {}, {"Host": "queues.internal.evil.example"})[0] == 403
    assert _json(server, "ListQueues", {}, {"Host": "10.0.0.6"})[0] == 403


def test_the_servers_own_pages_may_change_queues(server: Server) -> None:
    """A page served from the server's own origin (the Origin names its Host)."""
    _orders(server)
    own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
    status, _, body = _form(
        server, {"Action": "PurgeQueue", "QueueUrl": "/000000000000/orders"}, own
    )
    assert status == 200, body
    _intact(server, 0)


def test_an_allowed_origin_gets_cors_for_it_alone(start: Start) -> None:
    """A web app at an allowed origin uses the JSON protocol from the browser: its
    preflight is answered, its requests act and carry its CORS headers; any other
    origin gets neither."""
    app = "http://app.example:3000"
    server = start(allow_origins=[app + "/"])
    _orders(server)
    asked = "authorization,content-type,x-amz-date,x-amz-target,x-amz-user-agent"
    preflight = {
        "Origin": app,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": asked,
        "Sec-Fetch-Site": "cross-site",
    }
    status, headers, _ = request(server.url, "OPTIONS", "/", headers=preflight)
    assert status == 200
    assert headers["access-control-allow-origin"] == app
    assert headers["access-control-allow-headers"] == asked
    assert "POST" in headers["access-control-allow-methods"]
    status, headers, body = _json(
        server,
        "SendMessage",
        {"QueueUrl": "/000000000000/orders", "MessageBody": "from the app"},
        {"Origin": app, "Sec-Fetch-Site": "cross-site"},
    )
    assert status == 200, body
    assert headers["access-control-allow-origin"] == app
    assert "x-amzn-RequestId" in headers["access-control-expose-headers"]
    _intact(server, 4)
    # An error answer carries them too (the app can read why).
    status, headers, _ = _json(server, "GetQueueUrl", {"QueueName": "none"}, {"Origin": app})
    assert status == 400 and headers["access-control-allow-origin"] == app
    # Another origin: no preflight, no CORS, no change.
    other = {**preflight, "Origin": "http://app.example:3001"}
    status, headers, _ = request(server.url, "OPTIONS", "/", headers=other)
    assert status == 403 and "access-control-allow-origin" not in headers
    status, headers, _ = _json(
        server, "PurgeQueue", {"QueueUrl": "/000000000000/orders"}, {"Origin": other["Origin"]}
    )
    assert status == 403 and "access-control-allow-origin" not in headers
    _intact(server, 4)


def test_bad_allow_lists_are_refused_naming_the_entry(tmp_path: Path) -> None:
    for hosts, origins, named in [
        (["http://queues.internal"], [], "http://queues.internal"),
        (["queues.internal:9324"], [], "queues.internal:9324"),
        ([], ["app.example"], "app.example"),
        ([], ["http://app.example/path"], "/path"),
        ([], ["ftp://app.example"], "ftp://app.example"),
    ]:
        with pytest.raises(ValueError, match=re.escape(named)):
            make_server(tmp_path, port=0, allow_hosts=hosts, allow_origins=origins)
    with pytest.raises(TypeError):
        BrowserPolicy.of(allow_hosts="queues.internal")


def test_the_asgi_app_applies_the_same_policy(tmp_path: Path) -> None:
    vsqs.QueueRoot(tmp_path).create("orders").publish(b"keep")
    purge = json.dumps({"QueueUrl": "/000000000000/orders"}).encode()
    headers = {"Content-Type": JSON_TYPE, "X-Amz-Target": "AmazonSQS.PurgeQueue"}
    app = asgi_app(tmp_path)
    assert _call(app, "POST", "/", purge, {**headers, "Host": "evil.example"})[0] == 403
    assert _call(app, "POST", "/", purge, {**headers, "Host": "localhost", **EVIL})[0] == 403
    assert vsqs.QueueRoot(tmp_path).get("orders").counts().ready == 1
    allowed = asgi_app(tmp_path, allow_hosts=["queues.internal"])
    assert _call(allowed, "POST", "/", purge, {**headers, "Host": "queues.internal"})[0] == 200
    assert vsqs.QueueRoot(tmp_path).get("orders").counts().ready == 0


def _token(page: bytes) -> str:
    found = re.search(rb'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page[:500]
    return found.group(1).decode()


def test_the_dashboard_refuses_a_rebound_host(tmp_path: Path) -> None:
    """The issue's attack: a rebound name read the admin dashboard's form token and
    purged. Now the page is refused (no token), and so is the purge even with a token."""
    root = vsqs.QueueRoot(tmp_path)
    root.create("orders").publish_batch([b"m%d" % i for i in range(5)])
    with Dashboard(root, admin=True, sample_every=3600) as dashboard:
        server = make_server(root, port=0, quiet=True, pages=dashboard.handle)
        try:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            rebound = {"Host": f"rebound.example:{server.server_address[1]}"}
            status, _, page = request(server.url, "GET", "/ui/queue/orders", headers=rebound)
            assert status == 403 and b"csrf" not in page and b"rebound.example" in page
            _, _, page = request(server.url, "GET", "/ui/queue/orders")  # the user's own
            fields = {"action": "purge", "csrf": _token(page), "confirm": "yes"}
            form = urlencode(fields).encode()
            status, _, _ = request(
                server.url,
                "POST",
                "/ui/action/orders",
                form,
                {"Content-Type": FORM_TYPE, **rebound, "Origin": "http://" + rebound["Host"]},
            )
            assert status == 403
            assert root.get("orders").counts().ready == 5
            status, _, body = request(
                server.url, "POST", "/ui/action/orders", form, {"Content-Type": FORM_TYPE}
            )
            assert status == 200 and b"Purged 5" in body  # the guard is not all-refusing
        finally:
            server.shutdown()


def test_the_command_takes_allow_host_and_allow_origin(tmp_path: Path) -> None:
    app = "http://app.example:3000"
    child, url = serve_command(
        tmp_path, "--quiet", "--allow-host", "queues.internal", "--allow-origin", app
    )
    try:
        named = {"Host": "queues.internal:9324"}
        status, _, body = request(url, "POST", "/", b"Action=ListQueues", {**named, **FORM})
        assert status == 200, body
        assert request(url, "GET", "/ui/", headers=named)[0] == 200  # the dashboard too
        rebound = {"Host": "rebound.example"}
        assert request(url, "POST", "/", b"Action=ListQueues", {**rebound, **FORM})[0] == 403
        assert request(url, "GET", "/ui/", headers=rebound)[0] == 403
        preflight = {"Origin": app, "Access-Control-Request-Method": "POST"}
        status, headers, _ = request(url, "OPTIONS", "/", headers=preflight)
        assert status == 200 and headers["access-control-allow-origin"] == app
    finally:
        child.terminate()
        child.communicate(timeout=60)
    refused = subprocess.run(
        [*SERVE, str(tmp_path), "--port", "0", "--allow-origin", "app.example"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert refused.returncode != 0 and "'app.example' is not an origin" in refused.stderr
    assert "Traceback" not in refused.stderr
