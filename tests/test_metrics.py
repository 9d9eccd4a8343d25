"""vsqs.metrics: the Prometheus text (parsed back with prometheus_client's own parser),
the collector over a queue, a root and a set, ``vsqs metrics serve``, and the
OpenTelemetry instruments (read back through the SDK's in-memory reader)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vsqs
from vsqs.cli import cli
from vsqs.metrics import QueueCollector, observe
from vsqs.testing import ManualClock


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _busy_root(tmp_path: Path, clock: ManualClock) -> vsqs.QueueRoot:
    """jobs: 3 ready (the oldest received once before), 1 held, 1 delayed, 1 dead letter."""
    root = vsqs.QueueRoot(tmp_path / "root", durable=False, clock=clock)
    dead = root.create("jobs.dlq")
    jobs = root.create("jobs", dead_letter=dead.path, max_receives=1)
    jobs.publish(b"poison")
    assert jobs.receive(timeout=0) is not None
    clock.advance(31)  # its only receive ran out: dead-lettered at the next look
    assert jobs.receive(timeout=0) is None
    for body in (b"a", b"bb", b"ccc", b"dddd"):
        clock.advance(1)
        jobs.publish(body)
    jobs.publish(b"later", delay=60)
    held = jobs.receive(timeout=0)
    assert held is not None and held.body == b"a"
    clock.advance(2)
    jobs.close()  # its counters are on disk for every reader
    return root


def test_the_collector_over_a_root_exports_every_documented_metric(tmp_path: Path) -> None:
    clock = ManualClock()
    root = _busy_root(tmp_path, clock)
    # The reader opens its own handles, configured as the producers' (dead letter known).
    reader = vsqs.QueueRoot(root.path, durable=False, clock=clock)
    dead = reader.get("jobs.dlq")
    jobs = reader.get("jobs", dead_letter=dead.path, max_receives=1)
    registry = CollectorRegistry()
    registry.register(QueueCollector(("jobs", jobs), ("jobs.dlq", dead)))
    values = _values(generate_latest(registry).decode())
    q = (("queue", "jobs"),)
    state = {
        s: values["vsqs_messages", (("queue", "jobs"), ("state", s))] for s in vsqs.metrics.STATES
    }
    assert state == {"ready": 3, "held": 1, "delayed": 1, "new": 0}
    assert values["vsqs_oldest_ready_age_seconds", q] == 4.0  # "bb", published 4 s ago
    assert values["vsqs_dead_letter_messages", q] == 1
    assert ("vsqs_dead_letter_messages", (("queue", "jobs.dlq"),)) not in values  # has none
    assert values["vsqs_oldest_receive_count", q] == 0
    assert values["vsqs_produced_messages_total", q] == 6
    assert values["vsqs_produced_bytes_total", q] == len(b"poisonabbcccddddlater")
    assert values["vsqs_consumed_messages_total", q] == 0
    assert values["vsqs_consumed_bytes_total", q] == 0
    assert values["vsqs_shutdown", q] == 0
    assert values["vsqs_messages", (("queue", "jobs.dlq"), ("state", "ready"))] == 1


def test_a_root_source_is_labelled_by_name_and_finds_new_queues(tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root", durable=False)
    root.create("a").publish(b"x")
    registry = CollectorRegistry()
    registry.register(QueueCollector(root))
    first = _values(generate_latest(registry).decode())
    assert first["vsqs_messages", (("queue", "a"), ("state", "ready"))] == 1
    root.create("b")
    second = _values(generate_latest(registry).decode())
    assert second["vsqs_messages", (("queue", "b"), ("state", "ready"))] == 0


def test_the_oldest_receive_count_and_a_set(tmp_path: Path) -> None:
    one = vsqs.Queue(tmp_path / "one", durable=False)
    two = vsqs.Queue(tmp_path / "two", durable=False)
    one.publish(b"x")
    for _ in range(2):
        message = one.receive(timeout=0)
        assert message is not None
        one.change_visibility(message, 0)  # back, its receive counted
    registry = CollectorRegistry()
    registry.register(QueueCollector(vsqs.QueueSet(one, two)))
    values = _values(generate_latest(registry).decode())
    assert values["vsqs_oldest_receive_count", (("queue", one.path),)] == 2
    assert values["vsqs_oldest_receive_count", (("queue", two.path),)] == 0
    assert values["vsqs_oldest_ready_age_seconds", (("queue", two.path),)] == 0


def test_vsqs_stats_format_prometheus_parses(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    queue.publish_batch([b"a", b"b"])
    queue.close()
    result = CliRunner().invoke(
        cli, ["stats", str(queue.path), "--format", "prometheus"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    values = _values(result.output)
    label = (("queue", str(queue.path)),)
    assert values["vsqs_messages", (*label, ("state", "ready"))] == 2
    assert values["vsqs_produced_messages_total", label] == 2
    assert {name for name, _ in values} == {  # no dead-letter depth: none is configured
        "vsqs_queue_up",
        "vsqs_messages",
        "vsqs_oldest_ready_age_seconds",
        "vsqs_oldest_receive_count",
        "vsqs_shutdown",
        "vsqs_held_back_messages",
        *(
            f"vsqs_{kind}_{unit}_total"
            for kind in ("produced", "consumed")
            for unit in ("messages", "bytes")
        ),
    }


def test_vsqs_stats_of_a_missing_queue_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["stats", str(tmp_path / "nope"), "--format", "prometheus"])
    assert result.exit_code != 0
    assert "no queue at" in result.output
    assert not (tmp_path / "nope").exists()


def test_vsqs_metrics_serve_answers_a_scrape(tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root", durable=False)
    root.create("jobs").publish(b"x")
    alone = vsqs.Queue(tmp_path / "alone", durable=False)
    command = [sys.executable, "-m", "vsqs", "metrics", "serve", str(alone.path),
               "--root", root.path, "--port", "0"]  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as server:
        try:
            text = _scrape(server)
        finally:
            _stop(server, signal.SIGTERM)  # as a service manager: exits through the handler
    values = _values(text)
    assert values["vsqs_messages", (("queue", "jobs"), ("state", "ready"))] == 1
    assert values["vsqs_messages", (("queue", str(alone.path)), ("state", "ready"))] == 0


def _scrape(server: subprocess.Popen[str]) -> str:
    """One scrape of the server that printed its address on stderr."""
    assert server.stderr is not None
    line = server.stderr.readline()
    match = re.search(r"http://\S+/metrics", line)
    assert match, line
    with urllib.request.urlopen(match.group(0), timeout=30) as response:  # noqa: S310
        return str(response.read().decode())


def _stop(server: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    """Send *signum*; the exit status and the rest of stderr. A server still running
    after 30 s is killed (never leaked into the rest of the run) and the test fails."""
    server.send_signal(signum)
    try:
        _, err = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.communicate()
        raise AssertionError(f"the server ignored {signal.Signals(signum).name}") from None
    return server.returncode, err


@pytest.mark.parametrize(
    ("signum", "line"),
    [(signal.SIGINT, "vsqs: interrupted"), (signal.SIGTERM, "vsqs: stopped by SIGTERM")],
)
def test_metrics_serve_stops_on_sigint_even_inherited_ignored_and_on_sigterm(
    tmp_path: Path, signum: signal.Signals, line: str
) -> None:
    """A background job (`nohup make test &`, `cmd &` in a script) starts with SIGINT
    ignored: the server must still stop on SIGINT (and on SIGTERM), at once, with one
    line and 128 + the signal number."""
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    serve = f"{sys.executable} -m vsqs metrics serve {queue.path} --port 0"
    command = ["/bin/sh", "-c", f"trap '' INT; exec {serve}"]  # as `cmd &` without job control
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert "vsqs_messages" in _scrape(server)
        finally:
            status, err = _stop(server, signum)
    assert (status, err) == (128 + signum, line + "\n")


def test_metrics_serve_names_the_address_it_cannot_listen_on(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["metrics", "serve", queue.path, "--port", str(port)])
    assert result.exit_code == 1
    assert f"127.0.0.1:{port}" in result.output, result.output


def test_metrics_serve_needs_a_queue_or_a_root(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["metrics", "serve", "--port", "0"])
    assert result.exit_code == 2 and "QUEUE or --root" in result.output
    missing = CliRunner().invoke(cli, ["metrics", "serve", "--root", str(tmp_path / "x")])
    assert missing.exit_code != 0 and "no queue root" in missing.output


def test_opentelemetry_gauges_read_back(tmp_path: Path) -> None:
    clock = ManualClock()
    root = _busy_root(tmp_path, clock)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handles = vsqs.QueueRoot(root.path, durable=False, clock=clock)
    dead = handles.get("jobs.dlq")
    observe(provider.get_meter("vsqs-test"), ("jobs", handles.get("jobs", dead_letter=dead.path)))
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        (metric.name, tuple(sorted(point.attributes.items()))): point.value  # type: ignore[union-attr]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    base = (("messaging.destination.name", "jobs"), ("messaging.system", "vsqs"))
    states = {
        dict(attrs)["messaging.vsqs.state"]: value
        for (name, attrs), value in points.items()
        if name == "messaging.vsqs.queue.messages"
    }
    assert states == {"ready": 3, "held": 1, "delayed": 1, "new": 0}
    assert points["messaging.client.sent.messages", base] == 6
    assert points["messaging.client.consumed.messages", base] == 0
    assert points["messaging.vsqs.queue.oldest_ready.age", base] == 4.0
    assert points["messaging.vsqs.queue.dead_letter.messages", base] == 1
    assert points["messaging.vsqs.queue.oldest_ready.receives", base] == 0
    assert points["messaging.vsqs.sent.bytes", base] == len(b"poisonabbcccddddlater")
    provider.shutdown()


def test_a_plain_queue_a_ms_queue_and_a_removed_queue(tmp_path: Path) -> None:
    """A Queue source is labelled by its path; a ms-precision queue's oldest message is
    found by its ms id; a queue removed from a root drops out of the next scrape."""
    ms = vsqs.Queue(tmp_path / "ms", durable=False, precision="ms")
    ms.publish(b"x")
    message = ms.receive(timeout=0)
    assert message is not None
    ms.change_visibility(message, 0)
    root = vsqs.QueueRoot(tmp_path / "root", durable=False)
    root.create("gone").publish(b"y")
    registry = CollectorRegistry()
    collector = QueueCollector(ms, root)
    registry.register(collector)
    values = _values(generate_latest(registry).decode())
    assert values["vsqs_oldest_receive_count", (("queue", ms.path),)] == 1
    assert values["vsqs_messages", (("queue", "gone"), ("state", "ready"))] == 1
    root.delete("gone")
    values = _values(generate_latest(registry).decode())
    assert not any(dict(labels).get("queue") == "gone" for _, labels in values)


def test_a_queue_removed_under_a_collector_is_left_out(tmp_path: Path) -> None:
    kept = vsqs.Queue(tmp_path / "kept", durable=False)
    doomed = vsqs.Queue(tmp_path / "doomed", durable=False)
    vsqs.QueueRoot(tmp_path).delete("doomed")
    got = list(vsqs.metrics.samples([("kept", kept), ("doomed", doomed)]))
    assert [one.queue for one in got] == ["kept"]


def test_vsqs_stats_format_json_and_a_prometheus_watch(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    queue.publish(b"a")
    queue.close()
    runner = CliRunner()
    as_json = runner.invoke(cli, ["stats", str(queue.path), "--format", "json"])
    assert as_json.exit_code == 0 and '"ready": 1' in as_json.output
    watched = runner.invoke(
        cli,
        ["stats", str(queue.path), "--format", "prometheus", "--watch", "--count", "2",
         "--interval", "0.05"],
    )  # fmt: skip
    assert watched.exit_code == 0, watched.output
    assert watched.output.count("# TYPE vsqs_messages gauge") == 2  # one exposition per refresh
