"""SQS ``SendMessageBatch`` without ``MessageGroupId`` spreads over a partitioned queue's
partitions (issue 38, item 1): the message files are counted in each partition directory."""

from __future__ import annotations

import os
from typing import Any

import vsqs


def test_send_message_batch_spreads_over_the_partitions(root: vsqs.QueueRoot, sqs: Any) -> None:
    """100 ``SendMessageBatch`` calls of 10 entries through a real ``vsqs serve`` and
    boto3, each one ``publish_batch``: the 1,000 messages land in every partition of a
    4-partition queue, none holding half of them."""
    root.create("q", partitions=4)
    url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
    for call in range(100):
        entries = [{"Id": str(i), "MessageBody": f"{call}/{i}"} for i in range(10)]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert len(answer["Successful"]) == 10 and not answer.get("Failed")
    queue = root.get("q")
    assert isinstance(queue, vsqs.PartitionedQueue) and queue.partitions == 4
    counts = [sum(name.isdigit() for name in os.listdir(p.path)) for p in queue.partition_queues]
    assert sum(counts) == 1000 and min(counts) > 0 and max(counts) < 500, counts
