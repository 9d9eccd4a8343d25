"""The CPU time ``vsqs serve`` spends a request, this tree beside another (issue 36).

Method: ``vsqs serve`` runs in a process of its own on a root on ``/dev/shm`` (durable
writes, the default), started from this source tree and from the tree *baseline* (a
``git worktree`` or ``git archive`` of the code before a change) in turn, a fresh
server each round. One client in this process sends, over one keep-alive connection,
the bytes boto3 1.28 sends for the query protocol (captured once: the same header
fields, an unchecked signature), each request after the previous answer; after a
warm-up of *warmup* requests, the server's CPU time (``utime`` + ``stime`` from
``/proc``) over *requests* requests, divided by their number. The requests:
``SendMessageBatch`` of 10 bodies of 100 bytes and ``SendMessage`` of one, to a
standard queue created before the warm-up. CPU time is what a loaded machine
inflates least (the wall clock is shown beside it); each cell is the least and the
median of *rounds* rounds.

Usage::

    python -m benchmarks.bench_serve_cpu --baseline DIR [--requests 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from benchmarks.report import table

REPO: Final = Path(__file__).resolve().parents[1]
TICK: Final = os.sysconf("SC_CLK_TCK")
_BODY: Final = "x" * 100
_HEAD: Final = (
    "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept-Encoding: identity\r\n"
    "Content-Type: application/x-www-form-urlencoded; charset=utf-8\r\n"
    "User-Agent: Boto3/1.28.0 md/Botocore#1.31.0 ua/2.0 os/linux#6.1 md/arch#x86_64 "
    "lang/python#3.11.7 md/pyimpl#CPython cfg/retry-mode#legacy Botocore/1.31.0\r\n"
    "X-Amz-Date: 20261128T110335Z\r\n"
    "Authorization: AWS4-HMAC-SHA256 Credential=x/20261128/us-east-1/sqs/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date, "
    "Signature=53eb6b472761ffa0a631d444cad8e86aa7c86e07cd9fdd8d1ddc77c2073663e7\r\n"
    "amz-sdk-invocation-id: e9a33c68-6974-424c-9ae2-bcbd36c7a752\r\n"
    "amz-sdk-request: attempt=1\r\nContent-Length: {length}\r\n\r\n"
)


def _request(port: int, form: str) -> bytes:
    body = f"{form}&Version=2012-11-05".encode()
    return _HEAD.format(path="/", port=port, length=len(body)).encode() + body


def requests(port: int, queue_url: str) -> dict[str, bytes]:
    """The requests measured, by name, as boto3 sends them to *queue_url*."""
    quoted = queue_url.replace(":", "%3A").replace("/", "%2F")
    entries = "".join(
        f"&SendMessageBatchRequestEntry.{i + 1}.Id={i}"
        f"&SendMessageBatchRequestEntry.{i + 1}.MessageBody={_BODY}"
        for i in range(10)
    )
    return {
        "SendMessageBatch of 10": _request(
            port, f"Action=SendMessageBatch&QueueUrl={quoted}{entries}"
        ),
        "SendMessage": _request(port, f"Action=SendMessage&QueueUrl={quoted}&MessageBody={_BODY}"),
    }


class Client:
    """One keep-alive connection, one request at a time."""

    def __init__(self, port: int) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port))
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def call(self, request: bytes) -> bytes:
        """Send *request*; its answer's body (an answer other than 200 raises)."""
        self.socket.sendall(request)
        while b"\r\n\r\n" not in self._buffer:
            self._read()
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(self._buffer) < length:
            self._read()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        if not head.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(f"answered {head[:40]!r}: {body[:300]!r}")
        return body

    def _read(self) -> None:
        data = self.socket.recv(1 << 16)
        if not data:
            raise RuntimeError("the server closed the connection")
        self._buffer += data

    def close(self) -> None:
        self.socket.close()


def _cpu(pid: int) -> float:
    """Seconds of CPU time (user and system) process *pid* has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: fields 14 and 15


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server(tree: Path) -> Iterator[tuple[int, int]]:
    """``vsqs serve`` from source tree *tree* on a fresh root on /dev/shm: (pid, port)."""
    port = _free_port()
    root = tempfile.mkdtemp(prefix="vsqs-bench-cpu-", dir="/dev/shm")
    # This tree first; then the caller's path (an extra package under test).
    paths = [str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    args = [sys.executable, "-m", "vsqs", "serve", root, "--port", str(port), "--quiet"]
    process = subprocess.Popen(args, cwd=tree, env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server from {tree} did not start")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.05)
        yield process.pid, port
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def measure(tree: Path, count: int, warmup: int) -> dict[str, tuple[float, float]]:
    """Per request name: (CPU ms a request, wall ms a request) on a fresh server."""
    figures = {}
    with server(tree) as (pid, port):
        client = Client(port)
        try:
            create = _request(port, "Action=CreateQueue&QueueName=bench")
            queue_url = f"http://127.0.0.1:{port}/000000000000/bench"
            client.call(create)
            time.sleep(0.2)  # the queue's record is trusted once it is not brand new
            for name, request in requests(port, queue_url).items():
                for _ in range(warmup):
                    client.call(request)
                cpu, began = _cpu(pid), time.perf_counter()
                for _ in range(count):
                    client.call(request)
                wall = time.perf_counter() - began
                figures[name] = ((_cpu(pid) - cpu) / count * 1000, wall / count * 1000)
        finally:
            client.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the source tree to compare with")
    parser.add_argument("--requests", type=int, default=2000, help="measured, each kind")
    parser.add_argument("--warmup", type=int, default=300, help="requests before measuring")
    parser.add_argument("--rounds", type=int, default=5, help="fresh servers, each tree")
    args = parser.parse_args(argv)
    trees = {"before": Path(args.baseline).resolve(), "after": REPO}
    rounds: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in trees}
    for index in range(args.rounds):
        # Alternate which tree goes first: a load that drifts falls on both.
        for name in sorted(trees, reverse=index % 2 == 1):
            rounds[name].append(measure(trees[name], args.requests, args.warmup))
    rows = []
    for request in rounds["after"][0]:
        cells = []
        medians = {}
        for name in trees:
            cpu = [figures[request][0] for figures in rounds[name]]
            wall = [figures[request][1] for figures in rounds[name]]
            medians[name] = statistics.median(cpu)
            cells += [f"{min(cpu):.3f}", f"{medians[name]:.3f}", f"{statistics.median(wall):.3f}"]
        rows.append([request, *cells, f"{medians['after'] / medians['before']:.2f}x"])
    headers = [
        "request",
        "before CPU min",
        "before CPU median",
        "before wall median",
        "after CPU min",
        "after CPU median",
        "after wall median",
        "after / before",
    ]
    print(f"ms a request, {args.rounds} rounds of {args.requests} requests each")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
