"""The dashboard over plain HTTP: its JSON, its pages, its headers, its guards.

A real server on loopback (``tests/dashboard_http.py``) and real queues on disk; the
browser tests (``test_dashboard_browser.py``) check what a user sees.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

import vsqs
from vsqs.dashboard import CSP, Dashboard
from vsqs.dashboard._receives import Receives, count_redelivered
from vsqs.dashboard._sampler import Sampler
from vsqs.serve import Credential, Credentials

from .dashboard_http import request, serving

XSS = b"<script>alert(1)</script>"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _dead_letters(root: vsqs.QueueRoot, count: int) -> tuple[vsqs.AnyQueue, vsqs.AnyQueue]:
    """``orders`` whose *count* messages were each received once and dead-lettered
    (``max_receives=1``) to ``orders.dlq``."""
    dlq = root.create("orders.dlq")
    orders = root.create("orders", dead_letter="orders.dlq", max_receives=1)
    orders.publish_batch([b"m%d" % i for i in range(count)])
    for message in orders.receive_batch(count, timeout=0):
        orders.change_visibility(message, 0)  # released: its receive ends without a delete
    orders.requeue_expired()
    assert dlq.counts().ready == count
    return orders, dlq


@pytest.fixture
def admin_url(root: vsqs.QueueRoot) -> Iterator[tuple[str, Dashboard]]:
    with Dashboard(root, admin=True, sample_every=3600) as dashboard, serving(dashboard) as url:
        # The thread's first round is over before a test creates its queues: a round
        # run while a queue is being created would keep that row for the hour.
        dashboard.sampler.wait_first(30)
        yield url, dashboard


def _token(page: bytes) -> str:
    found = re.search(rb'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, "no form token on the page"
    return found.group(1).decode()


def _post(url: str, fields: dict[str, str], **headers: str) -> tuple[int, bytes]:
    status, _, body = request(
        url, method="POST", data=urlencode(fields).encode(), headers={**FORM, **headers}
    )
    return status, body


def test_overview_json_gives_the_numbers_of_stats(root: vsqs.QueueRoot) -> None:
    """Each queue's row holds what its stats() says; a dead-letter queue's depth and
    sources are joined in."""
    orders, dlq = _dead_letters(root, 3)
    orders.publish_batch([b"a", b"b"])
    orders.publish(b"later", delay=600)
    held = orders.receive(timeout=0)
    assert held is not None
    empty = root.create("empty")
    expected = {"orders": orders.stats(), "orders.dlq": dlq.stats(), "empty": empty.stats()}
    with Dashboard(root, sample_every=3600) as dashboard, serving(dashboard) as url:
        status, headers, body = request(url + "/ui/api/overview")
        details = {name: json.loads(request(url + f"/ui/api/queue/{name}")[2]) for name in expected}
    assert status == 200
    assert headers["content-type"] == "application/json"
    rows = {row["name"]: row for row in json.loads(body)["queues"]}
    assert set(rows) == {"orders", "orders.dlq", "empty"}
    for name, stats in expected.items():
        row = rows[name]
        assert (row["ready"], row["held"], row["delayed"], row["new"]) == (
            stats.ready, stats.held, stats.delayed, stats.new
        )  # fmt: skip
        assert row["shutdown"] is False
        detail = details[name]  # a queue page's numbers: the same, and more
        assert detail["ready"] == row["ready"] and detail["held"] == row["held"]
        assert detail["produced"] == stats.produced_messages
        assert detail["consumed"] == stats.consumed_messages
        assert detail["produced_bytes"] == stats.produced_bytes
        assert row["partitions"] == 1
    assert rows["orders"]["ready"] == 1 and rows["orders"]["held"] == 1
    assert rows["orders"]["delayed"] == 1
    assert rows["orders"]["dead_letter"] == "orders.dlq"
    assert rows["orders"]["dead_letter_depth"] == 3
    assert rows["orders.dlq"]["sources"] == ["orders"]
    assert rows["orders.dlq"]["redelivered"] == 3  # each was received once before
    assert rows["empty"]["oldest_age"] is None
    assert rows["orders"]["oldest_age"] >= 0


def test_every_response_carries_the_security_headers(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    dashboard.root.create("q").publish(b"x")
    for path in (
        "/", "/ui", "/ui/", "/ui/queue/q", "/ui/api/overview", "/ui/api/queue/q",
        "/ui/queue/q/depth.svg", "/ui/queue/q/throughput.svg", "/ui/static/dashboard.js",
        "/ui/static/dashboard.css", "/ui/no-such-page", "/ui/queue/nope",
    ):  # fmt: skip
        status, headers, _ = request(url + path)
        assert status in (200, 404), path
        assert headers["content-security-policy"] == CSP, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert "default-src 'none'" in CSP


def test_pages_have_no_inline_script_style_or_handler(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    _dead_letters(dashboard.root, 2)
    dashboard.sampler.sample_round()
    for path in ("/", "/ui/queue/orders", "/ui/queue/orders.dlq"):
        _, _, page = request(url + path)
        text = page.decode()
        assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", text) == [], path
        assert re.findall(r"\son[a-z]+\s*=", text) == [], path
        assert " style=" not in text and "<style" not in text, path
        assert "javascript:" not in text, path


def test_a_script_body_and_attributes_render_as_text(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    queue = dashboard.root.create("xss")
    queue.publish(XSS, attributes={'"><img src=x>': "<b>bold</b>"})
    _, _, page = request(url + "/ui/queue/xss")
    assert XSS not in page
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert b"<img src=x>" not in page and b"<b>bold</b>" not in page
    assert b"&lt;b&gt;bold&lt;/b&gt;" in page


def test_the_queue_page_peeks_without_claiming(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    queue = dashboard.root.create("peek")
    queue.publish_batch([b"first", b"second"])
    queue.publish(b"x" * 1000)
    status, _, page = request(url + "/ui/queue/peek")
    assert status == 200
    assert page.index(b"<pre>first</pre>") < page.index(b"<pre>second</pre>")
    # A long body is cut at 256 bytes, and says so.
    assert b"x" * 256 in page and b"x" * 257 not in page and b"(1000 B in all)" in page
    assert queue.counts().ready == 3  # nothing was claimed


def test_a_dead_letter_queue_shows_each_message_source(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    orders, _ = _dead_letters(dashboard.root, 2)
    dashboard.sampler.sample_round()
    _, _, page = request(url + "/ui/queue/orders.dlq")
    assert page.count(b'<a href="/ui/queue/orders">orders</a> <code>') == 2
    assert page.count(b"<td>max_receives</td>") == 2
    assert b"Dead-letter queue of" in page
    assert "2 received 1×".encode() in page  # the receive-count histogram
    _, _, source_page = request(url + "/ui/queue/orders")
    assert b'Dead letters go to <a href="/ui/queue/orders.dlq">' in source_page
    del orders


def test_read_only_by_default(root: vsqs.QueueRoot) -> None:
    """Without admin there is no form on any page, and every POST is refused."""
    queue = root.create("q")
    queue.publish(b"keep me")
    with Dashboard(root, sample_every=3600) as dashboard, serving(dashboard) as url:
        _, _, page = request(url + "/ui/queue/q")
        assert b"<form" not in page and b"csrf" not in page
        for action in ("purge", "shutdown", "redrive", "configure"):
            fields = {"action": action, "csrf": "0" * 64, "confirm": "yes"}
            status, body = _post(url + "/ui/action/q", fields)
            assert status == 403, action
            assert b"read-only" in body
    assert queue.counts().ready == 1 and not queue.is_shutdown


def test_a_post_without_the_token_is_refused(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    queue = dashboard.root.create("q")
    queue.publish(b"keep me")
    _, _, page = request(url + "/ui/queue/q")
    token = _token(page)
    forged = token[:-1] + ("0" if token[-1] != "0" else "1")
    for fields in (
        {"action": "purge", "confirm": "yes"},
        {"action": "purge", "confirm": "yes", "csrf": ""},
        {"action": "purge", "confirm": "yes", "csrf": forged},
    ):
        status, body = _post(url + "/ui/action/q", fields)
        assert status == 403 and b"token" in body
    # The right token from another site: refused by the origin checks.
    good = {"action": "purge", "confirm": "yes", "csrf": token}
    assert _post(url + "/ui/action/q", good, Origin="http://evil.example")[0] == 403
    assert _post(url + "/ui/action/q", good, Origin="null")[0] == 403
    assert _post(url + "/ui/action/q", good, **{"Sec-Fetch-Site": "cross-site"})[0] == 403
    status, _, _ = request(
        url + "/ui/action/q", method="POST", data=json.dumps(good).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 415
    assert queue.counts().ready == 1


def test_an_action_asks_for_confirmation_then_acts(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    queue = dashboard.root.create("q")
    queue.publish_batch([b"a", b"b", b"c"])
    _, _, page = request(url + "/ui/queue/q")
    token = _token(page)
    host = url.removeprefix("http://")
    status, confirm = _post(url + "/ui/action/q", {"action": "purge", "csrf": token})
    assert status == 200 and b"Confirm" in confirm and b"(now 3)" in confirm
    assert queue.counts().ready == 3  # asked, not done
    fields = {"action": "purge", "csrf": _token(confirm), "confirm": "yes"}
    # Behind a reverse proxy that names the public host in X-Forwarded-Host.
    proxied = {"Origin": "https://queues.example", "X-Forwarded-Host": "queues.example"}
    assert _post(url + "/ui/action/q", {**fields, "action": "nope"}, **proxied)[0] == 400
    status, done = _post(url + "/ui/action/q", fields, Origin=f"http://{host}")
    assert status == 200
    assert b"Purged 3 messages" in done
    assert queue.counts().ready == 0


def test_redrive_shutdown_and_a_setting(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    orders, dlq = _dead_letters(dashboard.root, 4)
    _, _, page = request(url + "/ui/queue/orders.dlq")
    token = _token(page)
    confirm = {"csrf": token, "confirm": "yes"}
    status, body = _post(url + "/ui/action/orders.dlq", {"action": "redrive", **confirm})
    assert status == 200 and b"Moved 4 messages" in body
    assert dlq.counts().ready == 0 and orders.counts().ready == 4

    fields = {"action": "configure", "key": "visibility_timeout", "value": "90", **confirm}
    status, body = _post(url + "/ui/action/orders", fields)
    assert status == 200 and b"visibility_timeout is now 90.0" in body
    assert orders.settings()["visibility_timeout"] == 90.0
    fields = {"action": "configure", "key": "visibility_timeout", "value": "", **confirm}
    assert _post(url + "/ui/action/orders", fields)[0] == 200
    assert "visibility_timeout" not in orders.settings()
    (Path(dashboard.root.path) / "a-file").write_text("not a queue")
    for key, value in (
        ("capacity", "many"),
        ("no_such", "1"),
        ("delay", "-5"),
        ("dead_letter", "a-file"),  # not a queue: stored, it would make orders unusable
        ("dead_letter", "nowhere"),
    ):
        fields = {"action": "configure", "key": key, "value": value, **confirm}
        status, body = _post(url + "/ui/action/orders", fields)
        assert status == 400, key
        assert b"Traceback" not in body
    assert orders.settings()["dead_letter"] == "orders.dlq"

    status, body = _post(url + "/ui/action/orders", {"action": "shutdown", **confirm})
    assert status == 200 and b"shut down" in body
    assert orders.is_shutdown
    dashboard.sampler.sample_round()
    _, _, data = request(url + "/ui/api/queue/orders")
    assert json.loads(data)["shutdown"] is True


def test_the_overview_refresh_is_cached_and_conditional(admin_url: tuple[str, Dashboard]) -> None:
    """A refresh sends the bytes of the last round (304 when the page has them)."""
    url, dashboard = admin_url
    dashboard.root.create("q")
    dashboard.sampler.sample_round()
    status, headers, first = request(url + "/ui/api/overview")
    assert status == 200
    status, _, again = request(url + "/ui/api/overview", headers={"If-None-Match": headers["etag"]})
    assert status == 304 and again == b""
    dashboard.root.create("r").publish(b"x")
    dashboard.sampler.sample_round()
    status, _, fresh = request(url + "/ui/api/overview", headers={"If-None-Match": headers["etag"]})
    assert status == 200 and fresh != first
    assert {row["name"] for row in json.loads(fresh)["queues"]} == {"q", "r"}


def test_paths_outside_the_dashboard_and_odd_names(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    dashboard.root.create("q")
    assert dashboard.handle("GET", "/000000000000/q", {}, b"") is None  # the SQS API's
    assert dashboard.handle("GET", "/?Action=ListQueues", {}, b"") is not None
    for path in (
        "/ui/queue/..%2F..%2Fetc", "/ui/queue/%2Fetc%2Fpasswd", "/ui/queue/.vsqs",
        "/ui/api/queue/nope", "/ui/static/../__init__.py", "/ui/static/x.js",
    ):  # fmt: skip
        status, _, body = request(url + path)
        assert status == 404, path
        assert b"Traceback" not in body
    assert request(url + "/ui/", method="PUT")[0] == 405
    status, headers, body = request(url + "/ui/queue/q", method="HEAD")
    assert status == 200 and body == b""
    assert int(headers["content-length"]) == len(request(url + "/ui/queue/q")[2])


def _basic(key: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{key}:{secret}".encode()).decode()}


def test_credentials_sign_in_and_limit_what_a_key_sees(root: vsqs.QueueRoot) -> None:
    keys = Credentials([
        Credential("READER", "r-secret", ("app-*",)),
        Credential("ADMIN", "a-secret", ("*",), admin=True),
    ])  # fmt: skip
    app = root.create("app-1")
    app.publish(b"x")
    root.create("other").publish(XSS)
    with (
        Dashboard(root, admin=True, credentials=keys, sample_every=3600) as dashboard,
        serving(dashboard) as url,
    ):
        status, headers, _ = request(url + "/")
        assert status == 401 and headers["www-authenticate"].startswith("Basic")
        assert request(url + "/", headers=_basic("READER", "wrong"))[0] == 401
        assert request(url + "/", headers=_basic("NOBODY", "r-secret"))[0] == 401
        assert request(url + "/", headers={"Authorization": "Basic !!!"})[0] == 401
        reader = _basic("READER", "r-secret")
        _, _, data = request(url + "/ui/api/overview", headers=reader)
        assert [row["name"] for row in json.loads(data)["queues"]] == ["app-1"]
        assert request(url + "/ui/queue/other", headers=reader)[0] == 404
        _, _, page = request(url + "/ui/queue/app-1", headers=reader)
        assert b"<form" not in page  # not an admin key
        status, _ = _post(url + "/ui/action/app-1", {"action": "purge", "confirm": "yes"}, **reader)
        assert status == 403
        admin = _basic("ADMIN", "a-secret")
        _, _, page = request(url + "/ui/queue/app-1", headers=admin)
        fields = {"action": "purge", "csrf": _token(page), "confirm": "yes"}
        # A token is bound to its key: the reader cannot replay the admin's.
        assert _post(url + "/ui/action/app-1", fields, **reader)[0] == 403
        status, body = _post(url + "/ui/action/app-1", fields, **admin)
        assert status == 200 and b"Purged 1 messages" in body
    assert app.counts().ready == 0


def test_an_admin_key_acts_only_within_its_queues(root: vsqs.QueueRoot) -> None:
    """The issue's tenant case: a key limited to ``orders-*`` (admin) may not make
    another tenant's queue its dead-letter queue, nor redrive into it, through the
    dashboard, as through the SQS API (AccessDenied)."""
    keys = Credentials([Credential("ORDERS", "o-secret", ("orders-*",), admin=True)])
    root.create("orders-1")
    root.create("orders-dlq")
    secret = root.create("secret")
    with (
        Dashboard(root, admin=True, credentials=keys, sample_every=3600) as dashboard,
        serving(dashboard) as url,
    ):
        tenant = _basic("ORDERS", "o-secret")
        _, _, page = request(url + "/ui/queue/orders-1", headers=tenant)
        token = _token(page)
        configure = {"action": "configure", "key": "dead_letter", "csrf": token, "confirm": "yes"}
        to_secret = {**configure, "value": "secret"}
        status, body = _post(url + "/ui/action/orders-1", to_secret, **tenant)
        assert status == 403 and b"secret" in body
        assert "dead_letter" not in root.get("orders-1").settings()
        status, body = _post(
            url + "/ui/action/orders-dlq",
            {"action": "redrive", "to": "secret", "csrf": token, "confirm": "yes"},
            **tenant,
        )
        assert status in (403, 404)
        # Within its own queues it acts.
        status, body = _post(
            url + "/ui/action/orders-1", {**configure, "value": "orders-dlq"}, **tenant
        )
        assert status == 200, body
    assert root.get("orders-1").settings()["dead_letter"] == "orders-dlq"
    assert secret.counts().ready == 0


def test_the_sampler_keeps_an_hour_of_depth_and_rates(root: vsqs.QueueRoot) -> None:
    """Rates come from the counters between two samples; chart points are kept no
    closer than the step and no longer than an hour."""
    now = [1_000_000.0]
    sampler = Sampler(root, 5.0, clock=lambda: now[0])
    queue = root.create("q")
    sampler.sample_round()
    queue.publish_batch([b"x"] * 100)
    queue.close()  # its counters are written (another process's are within a second)
    now[0] += sampler.step
    snapshot = sampler.sample_round()
    row = snapshot.rows["q"]
    assert row.ready == 100 and row.produced == 100
    assert row.in_rate == pytest.approx(100 / sampler.step)
    for _ in range(300):  # more than an hour of points
        now[0] += sampler.step
        sampler.sample_round()
    points = sampler.chart("q")
    assert len(points) == 240
    assert points[-1][0] - points[0][0] <= 3600
    assert points[-1][1] == 100 and points[-1][2] == 0.0
    assert sampler.chart("nope") == []
    root.delete("q")
    assert "q" not in sampler.sample_round().rows
    assert sampler.chart("q") == []
    sampler.close()


def test_redelivered_counts_stop_at_the_budget(root: vsqs.QueueRoot) -> None:
    _, dlq = _dead_letters(root, 5)
    assert count_redelivered(dlq) == Receives(5, False, (5, 0, 0, 0, 0))
    capped = count_redelivered(dlq, budget=3)
    assert (capped.redelivered, capped.capped) == (3, True)
    plain = root.create("plain")
    plain.publish(b"x", attributes={"a": "b"})  # metadata, but never received
    assert count_redelivered(plain) == Receives(0, False, (0, 0, 0, 0, 0))
    # A histogram: one message received twice before, one once.
    again = root.create("again")
    again.publish_batch([b"a", b"b"])
    for message in again.receive_batch(2, timeout=0):
        again.change_visibility(message, 0)  # released: a receive that ended, counted
    first = again.receive(timeout=0)
    assert first is not None and first.body == b"a"
    again.change_visibility(first, 0)
    assert count_redelivered(again) == Receives(2, False, (1, 1, 0, 0, 0))


def test_close_stops_the_sampler_thread(root: vsqs.QueueRoot) -> None:
    before = {t for t in threading.enumerate() if t.name == "vsqs-dashboard"}
    dashboard = Dashboard(root, sample_every=0.05)
    time.sleep(0.01)  # let it run (the thread's loop, not a timing assertion)
    dashboard.close()
    assert {t for t in threading.enumerate() if t.name == "vsqs-dashboard"} == before
    with pytest.raises(ValueError, match="sample_every"):
        Dashboard(root, sample_every=0)


@pytest.mark.parametrize("admin", [False, True])
def test_vsqs_serve_shows_the_dashboard(root: vsqs.QueueRoot, admin: bool) -> None:
    """``vsqs serve ROOT`` serves the dashboard at /; its actions only with --admin."""
    root.create("q").publish(b"x")
    args = [sys.executable, "-m", "vsqs", "serve", root.path, "--port", "0", "--quiet"]
    child = subprocess.Popen(
        [*args, "--admin"] if admin else args,
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd="/",
    )  # fmt: skip
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
        url = line.rpartition(" at ")[2].strip()
        assert url.startswith("http://127.0.0.1:"), line
        status, headers, page = request(url + "/")
        assert status == 200 and headers["content-security-policy"] == CSP
        assert b'<tr data-name="q">' in page
        _, _, page = request(url + "/ui/queue/q")
        assert (b"<form" in page) is admin
        status, _ = _post(url + "/ui/action/q", {"action": "purge", "confirm": "yes"})
        assert status == 403  # without --admin, read-only; with it, no token
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
    assert child.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def test_a_partitioned_queue_shows_each_partition(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    queue = dashboard.root.create("orders", partitions=3, fifo=True)
    assert isinstance(queue, vsqs.PartitionedQueue)
    for group in ("a", "b", "c", "d"):
        queue.publish_batch([f"{group}{i}".encode() for i in range(3)], group=group)
    held = queue.receive(timeout=0)
    assert held is not None
    expected = queue.stats()
    dashboard.sampler.sample_round()
    _, _, data = request(url + "/ui/api/queue/orders")
    row = json.loads(data)
    assert row["partitions"] == 3 and row["fifo"] is True
    assert (row["ready"], row["held"]) == (expected.ready, expected.held) == (11, 1)
    assert [(p["ready"], p["held"]) for p in row["parts"]] == [
        (p.ready, p.held) for p in expected.partitions
    ]
    _, _, page = request(url + "/ui/queue/orders")
    assert b"<h2>Partitions</h2>" in page
    assert page.count(b"<tr><td>") >= 3
    assert b'<span class="badge">3 partitions</span>' in page
    assert b'<span class="badge">FIFO</span>' in page
    assert page.count(b"<pre>") == 11  # the peek reads every partition, claims nothing
    assert queue.counts().ready == 11


def test_a_round_keeps_no_descriptor_open(root: vsqs.QueueRoot) -> None:
    """A root of thousands of queues must not hold thousands of descriptors between
    rounds (the default limit is often 1,024)."""
    for i in range(50):
        root.create(f"q{i}").publish(b"x", attributes={"a": "b"})
    gc.collect()  # the handles of the publishes above, and their descriptors
    sampler = Sampler(root, 5.0)
    before = len(os.listdir("/proc/self/fd"))
    sampler.sample_round()
    assert len(os.listdir("/proc/self/fd")) <= before + 5  # not one (or three) per queue
    assert len(sampler.snapshot.rows if sampler.snapshot else ()) == 50
    sampler.close()


def test_a_broken_queue_is_shown_broken_and_the_others_still(
    admin_url: tuple[str, Dashboard],
) -> None:
    url, dashboard = admin_url
    dashboard.root.create("good").publish(b"x")
    bad = dashboard.root.create("bad", visibility_timeout=10)  # a settings file
    (Path(bad.path) / ".vsqs" / "settings.json").write_text("{not json", encoding="utf-8")
    dashboard.sampler.refresh_soon()
    dashboard.sampler.sample_round()
    status, _, data = request(url + "/ui/api/overview")
    assert status == 200
    rows = {row["name"]: row for row in json.loads(data)["queues"]}
    assert rows["good"]["ready"] == 1 and rows["good"]["error"] is None
    assert rows["bad"]["error"].startswith("InvalidSettings")
    for key in ("ready", "held", "depth", "partitions", "shutdown"):
        assert rows["bad"][key] is None, key  # unknown, not a 0 that reads as real
    status, _, page = request(url + "/")
    assert status == 200
    assert b'<span class="error" title="InvalidSettings: invalid settings file' in page
    assert b">cannot be read (InvalidSettings)</span>" in page
    bad_row = re.search(rb'<tr data-name="bad">(.*?)</tr>', page)
    assert bad_row is not None
    cells = re.findall(rb"<td[^>]*>(.*?)</td>", bad_row.group(1))
    unknown = b'<span class="unknown" title="Unknown: InvalidSettings'
    assert all(cell.startswith(unknown) for cell in cells[1:9]), cells  # ready ... out
    assert "\u2014".encode() in cells[1] and b">0<" not in bad_row.group(1)
    # Its page is served (not a 500): the numbers, settings and messages say unknown.
    status, _, page = request(url + "/ui/queue/bad")
    assert status == 200 and b"Traceback" not in page
    assert b'data-field="ready" class="unknown" title="Unknown: InvalidSettings' in page
    assert b'title="Unknown: InvalidSettings' in page.split(b"Oldest messages")[1]
    assert b"The messages cannot be read." in page
    assert b"No ready messages" not in page


def test_settings_show_in_human_units(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    dashboard.root.create("dlq")
    dashboard.root.create(
        "units",
        retention=345600.0,
        visibility_timeout=90,
        delay=0.5,
        dedup_window=300,
        capacity=10000,
        max_receives=5,
        dead_letter="dlq",
    )
    _, _, page = request(url + "/ui/queue/units")
    settings = page[page.index(b"<h2>Settings</h2>") :]
    settings = settings[: settings.index(b"</table>")]
    for key, shown in [
        ("retention", "4 days"),
        ("visibility_timeout", "1.5 min"),
        ("delay", "0.5 s"),
        ("dedup_window", "5 min"),
        ("capacity", "10,000 messages"),
        ("max_receives", "5 receives"),
    ]:
        assert re.search(f"<th>{key}</th><td><span title=[^>]*>{shown}</span>".encode(), settings)
    assert b'<a href="/ui/queue/dlq">dlq</a>' in settings
    assert b">345600.0<" not in settings  # the stored number is on hover only
    assert b'title="retention = 345600.0"' in settings


def test_a_dead_letter_queue_holding_messages_is_flagged(
    admin_url: tuple[str, Dashboard],
) -> None:
    """Where a dead-letter queue is listed (its own row and page, the source's column
    and page), it is flagged while it holds messages, and not once it is empty."""
    url, dashboard = admin_url
    _, dlq = _dead_letters(dashboard.root, 3)
    dashboard.sampler.sample_round()
    _, _, overview = request(url + "/")
    rows = dict(re.findall(rb'<tr data-name="([^"]+)">(.*?)</tr>', overview))
    assert (
        b'<span class="flag" title="Dead-letter queue of orders: 3 messages'
        in (rows[b"orders.dlq"])
    )
    assert (
        b'<span class="flag" title="3 messages in the dead-letter queue">3</span>'
        in (rows[b"orders"])
    )
    _, _, dlq_page = request(url + "/ui/queue/orders.dlq")
    assert b'class="flag"' in dlq_page and b"3 dead letters" in dlq_page
    _, _, source_page = request(url + "/ui/queue/orders")
    assert (
        b'Dead letters go to <a href="/ui/queue/orders.dlq">orders.dlq</a>: <span class="flag"'
        in source_page
    )
    assert b">3 dead letters in orders.dlq</span>" in source_page  # at the top too
    dlq.purge()
    dashboard.sampler.refresh_soon()
    dashboard.sampler.sample_round()
    for path in ("/", "/ui/queue/orders.dlq", "/ui/queue/orders"):
        assert b'class="flag"' not in request(url + path)[2], path
    assert b"(none there now)" in request(url + "/ui/queue/orders")[2]


def test_an_empty_queue_says_no_ready_messages(admin_url: tuple[str, Dashboard]) -> None:
    url, dashboard = admin_url
    queue = dashboard.root.create("empty")
    _, _, page = request(url + "/ui/queue/empty")
    assert b"No ready messages." in page and b"The 0 oldest" not in page
    queue.publish(b"one")
    _, _, page = request(url + "/ui/queue/empty")
    assert b"The oldest ready message, read without" in page
