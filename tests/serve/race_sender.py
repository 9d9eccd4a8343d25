"""A sender process for the deletion race: ``python -m tests.serve.race_sender URL
QUEUE_URL GROUP``. Sends (JSON protocol, one keep-alive connection) until the queue is
gone, then prints what it was answered, as JSON: ``{"sent": n, "after_gone": n,
"other": [[status, body], ...]}``. Exits 0 unless it could not talk to the server."""

from __future__ import annotations

import http.client
import json
import sys
from urllib.parse import urlsplit


def main(url: str, queue_url: str, group: str) -> None:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "AmazonSQS.SendMessage",
    }
    sent = after_gone = 0
    gone = False
    other: list[tuple[int, str]] = []
    for n in range(3_000):
        body = {"QueueUrl": queue_url, "MessageBody": f"{group}-{n}", "MessageGroupId": group}
        connection.request("POST", "/", json.dumps(body).encode(), headers)
        response = connection.getresponse()
        answer = response.read().decode()
        if response.status == 200:
            sent += 1
            after_gone += gone
        elif response.status == 400 and "QueueDoesNotExist" in answer:
            if gone:
                break  # twice: the queue is gone for good
            gone = True
        else:
            other.append((response.status, answer[:300]))
            if len(other) > 5:
                break
    connection.close()
    print(json.dumps({"sent": sent, "after_gone": after_gone, "other": other}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
