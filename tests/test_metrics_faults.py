"""One bad queue never takes down the monitoring of the others (issue 26, item 5): its
series become ``vsqs_queue_up 0`` with one log line; a queue deleted while served leaves
with one log line."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vsqs
from vsqs.metrics import QueueCollector, observe


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _root_with_a_bad_queue(tmp_path: Path) -> vsqs.QueueRoot:
    root = vsqs.QueueRoot(tmp_path / "root", durable=False)
    root.create("good").publish(b"x")
    root.create("bad").close()
    (Path(root.path) / "bad" / ".vsqs").mkdir(exist_ok=True)
    (Path(root.path) / "bad" / ".vsqs" / "settings.json").write_text("{not json")
    return root


def test_a_queue_with_corrupt_settings_is_down_and_the_others_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _root_with_a_bad_queue(tmp_path)
    registry = CollectorRegistry()
    registry.register(QueueCollector(vsqs.QueueRoot(root.path, durable=False)))
    with caplog.at_level(logging.WARNING, logger="vsqs.metrics"):
        for _ in range(3):  # every scrape answers; the fault is logged once
            values = _values(generate_latest(registry).decode())
    assert values["vsqs_queue_up", (("queue", "good"),)] == 1
    assert values["vsqs_queue_up", (("queue", "bad"),)] == 0
    assert values["vsqs_messages", (("queue", "good"), ("state", "ready"))] == 1
    assert not any(dict(labels).get("queue") == "bad" and name != "vsqs_queue_up"
                   for name, labels in values)  # fmt: skip
    down = [r for r in caplog.records if "bad is down" in r.getMessage()]
    assert len(down) == 1 and "settings.json" in down[0].getMessage()
    (Path(root.path) / "bad" / ".vsqs" / "settings.json").write_text("{}")  # repaired
    with caplog.at_level(logging.WARNING, logger="vsqs.metrics"):
        values = _values(generate_latest(registry).decode())
    assert values["vsqs_queue_up", (("queue", "bad"),)] == 1
    assert "bad is up again" in caplog.text


def test_a_queue_deleted_while_served_vanishes_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = vsqs.QueueRoot(tmp_path / "root", durable=False)
    root.create("kept").publish(b"x")
    root.create("doomed").publish(b"y")
    alone = vsqs.Queue(tmp_path / "alone", durable=False)
    registry = CollectorRegistry()
    registry.register(QueueCollector(vsqs.QueueRoot(root.path, durable=False), alone))
    values = _values(generate_latest(registry).decode())
    assert values["vsqs_queue_up", (("queue", "doomed"),)] == 1
    root.delete("doomed")
    vsqs.QueueRoot(tmp_path).delete("alone")
    with caplog.at_level(logging.WARNING, logger="vsqs.metrics"):
        values = _values(generate_latest(registry).decode())
        generate_latest(registry)
    labels = {dict(labels).get("queue") for _, labels in values}
    assert labels == {"kept"}
    gone = [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()]
    assert len(gone) == 2
    assert any("doomed" in line for line in gone) and any(alone.path in line for line in gone)


def test_vsqs_metrics_serve_answers_with_a_bad_queue_in_its_root(tmp_path: Path) -> None:
    root = _root_with_a_bad_queue(tmp_path)
    command = [sys.executable, "-m", "vsqs", "metrics", "serve", "--root", root.path,
               "--port", "0"]  # fmt: skip
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as server:
        try:
            assert server.stderr is not None
            line = server.stderr.readline()
            match = re.search(r"http://\S+/metrics", line)
            assert match, line
            for _ in range(2):
                with urllib.request.urlopen(match.group(0), timeout=30) as response:  # noqa: S310
                    assert response.status == 200
                    text = response.read().decode()
        finally:
            server.terminate()  # SIGTERM: stops it even where SIGINT is ignored
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log = server.stderr.read() if server.stderr else ""
    values = _values(text)
    assert values["vsqs_queue_up", (("queue", "bad"),)] == 0
    assert values["vsqs_messages", (("queue", "good"), ("state", "ready"))] == 1
    assert log.count("bad is down") == 1
    assert "Traceback" not in log


def test_opentelemetry_reports_a_bad_queue_as_down(tmp_path: Path) -> None:
    root = _root_with_a_bad_queue(tmp_path)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    observe(provider.get_meter("vsqs-test"), vsqs.QueueRoot(root.path, durable=False))
    data = reader.get_metrics_data()
    assert data is not None
    up = {
        point.attributes["messaging.destination.name"]: point.value  # type: ignore[index, union-attr]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "messaging.vsqs.queue.up"
        for point in metric.data.data_points
    }
    assert up == {"good": 1, "bad": 0}
    provider.shutdown()
