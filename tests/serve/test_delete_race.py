"""DeleteQueue racing SendMessage (issue 36): 4 sender processes on a FIFO queue, one
DeleteQueue in the middle, repeated. A queue is deleted all at once or not at all:
the delete succeeds, nothing of the queue is left (no directory turned into a standard
queue, no partition, no message written after), each send either landed before or was
answered NonExistentQueue, and no request was answered 500."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import vsqs
from vsqs.serve import _sidecar

from .conftest import Start
from .http import json_call
from .test_server import REPO

SENDERS = 4
TRIALS = 6


def test_delete_queue_racing_senders_is_all_or_nothing(start: Start, tmp_path: Path) -> None:
    server = start(tmp_path / "root")
    root = vsqs.QueueRoot(tmp_path / "root")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the queue's")
    for trial in range(TRIALS):
        name = f"race{trial}.fifo"
        status, _, answer = json_call(
            server.url,
            "CreateQueue",
            {
                "QueueName": name,
                "Attributes": {"FifoQueue": "true", "ContentBasedDeduplication": "true"},
            },
        )
        assert status == 200, answer
        queue_url = answer["QueueUrl"]
        senders = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.serve.race_sender", server.url, queue_url, f"g{i}"],
                stdout=subprocess.PIPE,
                env=env,
                cwd=REPO,
                text=True,
            )
            for i in range(SENDERS)
        ]
        deadline = time.monotonic() + 30
        while root.get(name).counts().ready < 20 * (trial % 3 + 1) and time.monotonic() < deadline:
            time.sleep(0.005)  # the senders are sending
        status, _, answer = json_call(server.url, "DeleteQueue", {"QueueUrl": queue_url})
        results = [json.loads(child.communicate(timeout=120)[0]) for child in senders]
        assert all(child.returncode == 0 for child in senders)
        assert status == 200, (trial, answer)
        for result in results:
            assert result["other"] == [], (trial, result)  # no 500, no other error
            assert result["after_gone"] == 0, (trial, result)
        assert sum(result["sent"] for result in results) >= 20  # the delete raced sends
        assert name not in root, f"trial {trial}: {name} survived: {os.listdir(root.path)}"
        # Nothing left over; at most a hidden directory a late write kept from removal.
        left = [n for n in os.listdir(root.path) if n != ".names.lock"]
        assert all(n.startswith(".deleted-") for n in left), (trial, left)
    root.create("last")
    root.delete("last")  # removes what an earlier delete could not
    assert os.listdir(root.path) in ([], [".names.lock"])
    assert (outside / "keep").read_text() == "not the queue's"


_OPENER = """
import sys, vsqs
root = vsqs.QueueRoot(sys.argv[1])
opened = 0
while True:
    try:
        root.get(sys.argv[2]).close()
    except vsqs.QueueNotFound:
        break
    opened += 1
    if opened == 1:
        print("opening", flush=True)
print(opened)
"""


def test_opening_a_queue_never_makes_a_deleted_one_again(tmp_path: Path) -> None:
    """QueueRoot.get racing QueueRoot.delete, in 4 processes: once deleted, the queue
    stays deleted (``Queue(path)`` would make an empty standard queue under its name)."""
    root = vsqs.QueueRoot(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for trial in range(TRIALS):
        name = f"q{trial}.fifo"
        root.create(name, partitions=4, fifo=True).publish(b"x", group="g")
        openers = [
            subprocess.Popen(
                [sys.executable, "-c", _OPENER, root.path, name], stdout=subprocess.PIPE, env=env
            )
            for _ in range(SENDERS)
        ]
        for child in openers:
            assert child.stdout is not None
            assert child.stdout.readline() == b"opening\n"  # each is opening it
        root.delete(name)
        for child in openers:
            assert int(child.communicate(timeout=60)[0]) > 0
            assert child.returncode == 0
        assert name not in root and os.listdir(root.path) in ([], [".names.lock"]), (
            trial,
            os.listdir(root.path),
        )


def test_the_record_of_a_queue_deleted_during_its_read_reads_as_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send racing DeleteQueue: its read of the SQS record opened the directory, then
    the queue was renamed aside and removed. That is ``QueueDoesNotExist``
    (FileNotFoundError), never a queue without a record (a FIFO queue's
    ContentBasedDeduplication lost: the send was answered 400 InvalidParameterValue)."""
    root = vsqs.QueueRoot(tmp_path / "root")
    root.create("q")
    path = f"{root.path}/q"
    _sidecar.update(path, lambda record: record.update(attributes={"DelaySeconds": "1"}))
    assert _sidecar.read(path)["attributes"] == {"DelaySeconds": "1"}
    read_at = vsqs._fs.read_at

    def deleted_first(name: str, fd: int, limit: int) -> bytes:
        root.delete("q")  # between the directory's opening and the file's
        return read_at(name, fd, limit)

    monkeypatch.setattr(vsqs._fs, "read_at", deleted_first)
    with pytest.raises(FileNotFoundError):
        _sidecar.read(path)
