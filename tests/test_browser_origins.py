"""A web page on another origin, in a real browser (headless Chromium), against
``vsqs serve`` on loopback: whatever it sends (a form, an ``<img>``, ``fetch``, in
either protocol), no queue changes; a page whose origin the operator allowed uses the
JSON protocol through CORS, as a web app with an SDK does."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

import vsqs
from vsqs.serve import Server, make_server

from .browser import chromium_session

QUEUE = "/000000000000/orders"
ATTACK = """<!doctype html><title>running</title>
<iframe name="sink"></iframe>
<form id="form" method="POST" action="API/000000000000/orders" target="sink">
<input name="Action" value="PurgeQueue"></form>
<img src="API/?Action=DeleteQueue&amp;QueueUrl=/000000000000/orders">
<img src="API/000000000000/orders?Action=PurgeQueue">
<script>
const api = "API";
(async () => {
  const form = {"Content-Type": "application/x-www-form-urlencoded"};
  for (const body of ["Action=PurgeQueue&QueueUrl=/000000000000/orders",
                      "Action=SendMessage&QueueUrl=/000000000000/orders&MessageBody=forged",
                      "Action=DeleteQueue&QueueUrl=/000000000000/orders"]) {
    try { await fetch(api + "/", {method: "POST", mode: "no-cors", headers: form, body}); }
    catch (e) {}
  }
  try {  // text/plain needs no preflight: the query protocol reads it as a form
    await fetch(api + "/", {method: "POST", mode: "no-cors",
                            body: "Action=PurgeQueue&QueueUrl=/000000000000/orders"});
  } catch (e) {}
  let json = "sent";
  try {
    await fetch(api + "/", {method: "POST", body: '{"QueueUrl": "/000000000000/orders"}',
      headers: {"X-Amz-Target": "AmazonSQS.PurgeQueue",
                "Content-Type": "application/x-amz-json-1.0"}});
  } catch (e) { json = "blocked"; }
  document.getElementById("form").submit();
  document.title = "done " + json;
})();
</script>"""
APP = """<!doctype html><title>running</title><script>
fetch("API/", {method: "POST",
  headers: {"X-Amz-Target": "AmazonSQS.SendMessage",
            "Content-Type": "application/x-amz-json-1.0"},
  body: JSON.stringify({QueueUrl: "API/000000000000/orders", MessageBody: "from the app"})})
  .then((r) => r.json()).then((d) => { document.title = "sent " + d.MessageId; })
  .catch((e) => { document.title = "failed " + e; });
</script>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium_session() as driver:
        yield driver


@contextlib.contextmanager
def _serving(server: Any) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


@contextlib.contextmanager
def _page(html: str = "") -> Iterator[tuple[str, list[str]]]:
    """A second web server on loopback (another origin: another port): its origin, and
    a one-item list holding the page it serves (*html*, changed at will)."""
    content = [html]

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = content[0].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    with _serving(server):
        yield f"http://127.0.0.1:{server.server_address[1]}", content


def _title(browser: webdriver.Chrome, prefix: tuple[str, ...]) -> str:
    WebDriverWait(browser, 20).until(lambda b: b.title.startswith(prefix))
    return str(browser.title)


@pytest.fixture
def sqs(tmp_path: Path) -> Iterator[Server]:
    server = make_server(tmp_path, port=0, quiet=True)
    server.service.root.create("orders").publish_batch([b"a", b"b", b"c"])
    with _serving(server):
        yield server


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])  # same-site, cross-site
def test_a_page_on_another_origin_changes_no_queue(
    browser: webdriver.Chrome, sqs: Server, name: str
) -> None:
    api = f"http://{name}:{sqs.server_address[1]}"
    with _page(ATTACK.replace("API", api)) as (page, _):
        browser.get(page)
        # The CORS fetch is blocked by the browser (no CORS answered for it).
        assert _title(browser, ("done",)) == "done blocked"
        time.sleep(1.0)  # the form's and the images' requests are answered by now
    root = vsqs.QueueRoot(sqs.service.root.path)
    assert "orders" in root
    assert root.get("orders").counts().ready == 3


def test_an_allowed_origin_uses_the_json_protocol_through_cors(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    with _page() as (app, content), _page() as (other, other_content):
        server = make_server(tmp_path, port=0, quiet=True, allow_origins=[app])
        queue = server.service.root.create("orders")
        content[0] = other_content[0] = APP.replace("API", server.url)
        with _serving(server):
            browser.get(other)  # not allowed: the preflight is refused, nothing sent
            assert _title(browser, ("sent", "failed")).startswith("failed TypeError")
            assert queue.counts().ready == 0
            browser.get(app)
            title = _title(browser, ("sent", "failed"))
    assert title.startswith("sent "), title
    message = queue.receive(timeout=0)
    assert message is not None and message.body == b"from the app"
