"""One client process of ``benchmarks/bench_serve.py``: boto3 clients driven by JSON
lines on stdin, answering on stdout. The standard library and boto3 only, so that it
runs under any interpreter with boto3 (``.venv-query``: boto3 1.28, the query protocol
every server of the benchmark speaks, sqslite only that one).

Commands (one JSON object a line): ``{"phase": ..., "endpoint": ..., "url": ...,
"seconds": s, "limit": n, "threads": t}``; the client warms its connections, prints
``"ready"``, waits for ``"go"``, runs, prints its result: ``{"count": n, "end": t}``
(wall-clock time of its last answer) or, for ``latency``, ``{"latencies": [ms...]}``.
An empty line ends it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

BODY = "x" * 100


def _client(endpoint: str) -> Any:
    # Only here: the parent process never needs boto3.
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",  # noqa: S106 (dummy: the servers check no signature)
        config=Config(retries={"total_max_attempts": 1}, read_timeout=120, connect_timeout=30),
    )


def _send(sqs: Any, url: str, seconds: float, limit: int | None) -> int:
    """Batches of 10 for *seconds* or up to *limit* messages; to a FIFO queue (``.fifo``),
    each entry of a batch in a group of its own (10 groups) with a unique dedup id."""
    sent = batches = 0
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]
    fifo = url.endswith(".fifo")
    began = time.monotonic()
    while time.monotonic() - began < seconds and (limit is None or sent < limit):
        if fifo:
            for i, entry in enumerate(entries):
                entry["MessageGroupId"] = f"g{i}"
                entry["MessageDeduplicationId"] = f"{os.getpid()}-{batches}-{i}"
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        sent += len(answer.get("Successful", []))
        batches += 1
    return sent


def _receive(sqs: Any, url: str, seconds: float) -> int:
    """Receive and delete until a receive is empty, or for *seconds*."""
    deleted = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            break
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        answer = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        deleted += len(answer.get("Successful", []))
    return deleted


def _latency(clients: list[Any], url: str, seconds: float) -> list[float]:
    """Each client in a thread loops ``SendMessage`` for *seconds*: every latency (ms)."""
    latencies: list[float] = []
    lock = threading.Lock()

    def loop(sqs: Any) -> None:
        mine = []
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            start = time.perf_counter()
            sqs.send_message(QueueUrl=url, MessageBody=BODY)
            mine.append((time.perf_counter() - start) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=loop, args=(sqs,)) for sqs in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def main() -> None:
    clients: dict[tuple[str, int], list[Any]] = {}
    for line in sys.stdin:
        if not line.strip():
            return
        command = json.loads(line)
        endpoint, url = command["endpoint"], command["url"]
        count = command.get("threads", 1)
        pool = clients.get((endpoint, count))
        if pool is None:
            pool = clients[(endpoint, count)] = [_client(endpoint) for _ in range(count)]
        for sqs in pool:  # a connection each, before the release
            sqs.get_queue_url(QueueName=url.rpartition("/")[2])
        print('"ready"', flush=True)
        if json.loads(sys.stdin.readline()) != "go":
            return
        phase, seconds = command["phase"], command["seconds"]
        result: dict[str, Any]
        if phase == "latency":
            result = {"latencies": _latency(pool, url, seconds)}
        elif phase == "send":
            result = {"count": _send(pool[0], url, seconds, command.get("limit"))}
        else:
            result = {"count": _receive(pool[0], url, seconds)}
        result["end"] = time.time()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
