"""Queue metrics for Prometheus and OpenTelemetry, from a root of queues.

Run it (after ``pip install '.[metrics]' opentelemetry-sdk`` in a clone of vsqs)::

    python examples/metrics.py

It fills two queues, serves their metrics over HTTP as ``vsqs metrics serve`` does,
scrapes them once, prints a few lines, then reads the same numbers through
OpenTelemetry's in-memory reader, and removes its directory.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.request

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

import vsqs
from vsqs.metrics import QueueCollector, observe


def main() -> None:
    path = tempfile.mkdtemp(prefix="vsqs-metrics-")
    try:
        root = vsqs.QueueRoot(path, durable=False)
        root.create("orders").publish_batch([b"o1", b"o2", b"o3"])
        emails = root.create("emails")
        emails.publish(b"hello")
        assert emails.receive(timeout=0) is not None  # one held message

        # Prometheus: a collector over the whole root (new queues are found at each scrape).
        registry = CollectorRegistry()
        registry.register(QueueCollector(root))
        server, thread = start_http_server(0, "127.0.0.1", registry)
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
        server.shutdown()
        thread.join()
        for family in text_string_to_metric_families(text):
            if family.name == "vsqs_messages":
                for sample in family.samples:
                    labels = sample.labels
                    if sample.value:
                        print(f"{labels['queue']} {labels['state']}: {sample.value:g}")

        # OpenTelemetry: observable instruments, read back by an in-memory reader.
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        observe(provider.get_meter("example"), root)
        data = reader.get_metrics_data()
        assert data is not None
        for metric in data.resource_metrics[0].scope_metrics[0].metrics:
            if metric.name == "messaging.client.sent.messages":
                for point in metric.data.data_points:
                    queue = point.attributes["messaging.destination.name"]  # type: ignore[index]
                    print(f"{metric.name} {queue}: {point.value}")  # type: ignore[union-attr]
        provider.shutdown()
    finally:
        shutil.rmtree(path)


if __name__ == "__main__":
    main()
