"""``vsqs serve`` next to the HTTP floor and moto's server, with boto3 clients.

Method: each server runs in its own process on 127.0.0.1; the clients are C = 1, 4 and
16 processes, each with one boto3 client (the JSON protocol, one keep-alive connection,
no retries), all released together by a barrier. Per server and per C, two phases on a
fresh standard queue:

* ``send``: every client loops ``SendMessageBatch`` of 10 bodies of 100 bytes for
  *seconds*; the figure is messages sent (answered with success) over the time from the
  release to the last answer;
* ``receive``: every client loops ``ReceiveMessage(MaxNumberOfMessages=10)`` and
  ``DeleteMessageBatch`` of what came until a receive comes back empty: it drains what
  the send phase left; the figure is messages deleted over the time from the release to
  the last delete.

Each figure is the best of *rounds* rounds (interference on a shared machine only ever
adds time); within a round the servers take turns. The servers, side by side in one
run on the same machine:

* ``floor``: a do-nothing server on the same stack as ``vsqs serve`` (the standard
  library's ``ThreadingHTTPServer`` with the request handler of ``vsqs serve``,
  ``vsqs.serve._http.Handler``: HTTP/1.1 keep-alive, ``TCP_NODELAY``, its header
  parsing and its one-write answers), which parses each request as JSON and answers it
  with canned data (the MD5 digests botocore checks included); its receive phase runs
  for *seconds* (it never drains);
* ``moto``: moto's server (``moto[server]``, in memory; ``ThreadedMotoServer``);
* ``vsqs shm`` and ``vsqs disk``: ``vsqs serve`` on a root on ``/dev/shm`` and on
  ``/var/tmp``, durable writes on (every send answered after its data is flushed).

``--cpu`` measures instead the server's CPU time a request, read from ``/proc`` (its
``utime`` + ``stime``) around *requests* requests of one client after a warm-up:
``SendMessageBatch`` of 10, then ``ReceiveMessage(10)`` with its ``DeleteMessageBatch``
(one request of the table: the pair), on a queue created 3 s before; the least of
*rounds* rounds, each on a fresh server. Steadier than throughput on a shared machine:
it counts the server's work, not its share of the cores. In either mode, ``--baseline
DIR`` adds ``vsqs serve`` run from the source tree *DIR* on ``/dev/shm`` (``baseline
shm``), e.g. a ``git worktree`` of an older commit, so that old and new code are
measured side by side.

Usage::

    python -m benchmarks.bench_serve [--seconds 3] [--rounds 3] [--clients 1,4,16] [--servers ...]
    python -m benchmarks.bench_serve --cpu [--requests 2000] [--baseline DIR] [--servers ...]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any, Final

from benchmarks.report import table
from vsqs.serve._http import Handler

SERVERS: Final = ("floor", "moto", "vsqs shm", "vsqs disk")
BASELINE: Final = "baseline shm"
ROOTS: Final = {"vsqs shm": "/dev/shm", "vsqs disk": "/var/tmp", BASELINE: "/dev/shm"}
BODY: Final = "x" * 100
ACCOUNT: Final = "000000000000"
_BARRIER_WAIT: Final = 120.0
# The floors of issue 28: vsqs serve >= 0.6x the floor's messages/s and >= 20x moto's.
FLOOR_AT_LEAST: Final = 0.6
MOTO_AT_LEAST: Final = 20.0


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


# The floor: canned answers over the same HTTP stack -----------------------------------


class _FloorHandler(Handler):
    """Answers the JSON protocol's actions the benchmark uses with canned data, on the
    request handler of ``vsqs serve`` (its parsing, its answers)."""

    _RECEIVED: Final = json.dumps(
        {
            "Messages": [
                {
                    "MessageId": str(uuid.UUID(int=n)),
                    "ReceiptHandle": f"canned-{n}",
                    "MD5OfBody": _md5(BODY),
                    "Body": BODY,
                }
                for n in range(10)
            ]
        }
    ).encode()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name for POST
        length = int(self.fields.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        action = self.fields.get("x-amz-target", "").rpartition(".")[2]
        host = self.fields.get("host", "localhost")
        answer: bytes
        if action in ("CreateQueue", "GetQueueUrl"):
            url = f"http://{host}/{ACCOUNT}/{request['QueueName']}"
            answer = json.dumps({"QueueUrl": url}).encode()
        elif action == "SendMessageBatch":
            entries = request["Entries"]
            answer = json.dumps(
                {
                    "Successful": [
                        {
                            "Id": e["Id"],
                            "MessageId": str(uuid.uuid4()),
                            "MD5OfMessageBody": _md5(e["MessageBody"]),
                        }
                        for e in entries
                    ],
                    "Failed": [],
                }
            ).encode()
        elif action == "ReceiveMessage":
            answer = self._RECEIVED
        elif action == "DeleteMessageBatch":
            done = [{"Id": e["Id"]} for e in request["Entries"]]
            answer = json.dumps({"Successful": done, "Failed": []}).encode()
        else:
            answer = b"{}"
        self.reply(200, _FLOOR_FIELDS, answer)


_FLOOR_FIELDS: Final = (("Content-Type", "application/x-amz-json-1.0"),)


class _FloorServer(ThreadingHTTPServer):
    daemon_threads = True


def floor_main(port: int) -> None:
    """Serve the floor on 127.0.0.1:*port* until killed."""
    _FloorServer(("127.0.0.1", port), _FloorHandler).serve_forever()


def moto_main(port: int) -> None:
    """Serve moto (in memory) on 127.0.0.1:*port* until killed."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    while True:
        time.sleep(3600)


# The servers as processes -------------------------------------------------------------

PIDS: dict[str, int] = {}
"""The process id of each running server, by its endpoint URL."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


@contextlib.contextmanager
def server(name: str, baseline: str | None = None) -> Iterator[str]:
    """Start server *name* in a process of its own; yield its endpoint URL (and set
    :data:`PIDS` [URL] to its process id). ``baseline shm`` runs ``vsqs`` from the
    source tree *baseline*."""
    port = _free_port()
    env = cwd = None
    if name == BASELINE:
        if baseline is None:
            raise ValueError("the baseline server needs --baseline DIR")
        # In the tree itself too: "python -m" puts the working directory first on the path.
        cwd = os.path.abspath(baseline)
        env = {**os.environ, "PYTHONPATH": cwd}
    root = None
    if name == "floor":
        args = ["-m", "benchmarks.bench_serve", "--serve-floor", str(port)]
    elif name == "moto":
        args = ["-m", "benchmarks.bench_serve", "--serve-moto", str(port)]
    else:
        root = tempfile.mkdtemp(prefix="vsqs-bench-serve-", dir=ROOTS[name])
        args = ["-m", "vsqs", "serve", root, "--port", str(port), "--quiet"]
    # The servers' own lines (moto logs every request) go to a file, shown on failure.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, *args], stdout=log, stderr=log, env=env, cwd=cwd
        )
        endpoint = f"http://127.0.0.1:{port}"
        try:
            _wait_listening(process, port)
            PIDS[endpoint] = process.pid
            yield endpoint
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise
        finally:
            PIDS.pop(endpoint, None)
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


# The clients --------------------------------------------------------------------------


def _client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",  # noqa: S106 (dummy: the server checks no signature)
        config=Config(retries={"total_max_attempts": 1}, read_timeout=120, connect_timeout=30),
    )


def _send(sqs: Any, url: str, seconds: float, start: float) -> int:
    sent = 0
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]
    while time.perf_counter() - start < seconds:
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        sent += len(answer.get("Successful", []))
    return sent


def _receive(sqs: Any, url: str, seconds: float | None, start: float) -> int:
    """Receive and delete until empty (or for *seconds*, when given: the floor)."""
    deleted = 0
    while seconds is None or time.perf_counter() - start < seconds:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            break
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        answer = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        deleted += len(answer.get("Successful", []))
    return deleted


def _warm(sqs: Any, url: str) -> None:
    """One request on the client's connection before the release (a few tries: a
    server just started may drop a connection or two while 16 arrive at once)."""
    for attempt in range(5):
        try:
            sqs.get_queue_url(QueueName=url.rpartition("/")[2])
        except Exception:
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
        else:
            return


def _worker(conn: Connection, barrier: Any) -> None:
    """One client process: runs the phases the parent sends, reports (count, end time),
    or ("error", text) after breaking the barrier so that nobody waits for it."""
    clients: dict[str, Any] = {}
    while True:
        command = conn.recv()
        if command is None:
            return
        phase, endpoint, url, seconds = command
        try:
            sqs = clients.get(endpoint) or clients.setdefault(endpoint, _client(endpoint))
            _warm(sqs, url)
            barrier.wait(timeout=_BARRIER_WAIT)
            start = time.perf_counter()
            if phase == "send":
                count = _send(sqs, url, seconds, start)
            else:
                count = _receive(sqs, url, seconds, start)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which stops
            barrier.abort()
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send((count, time.perf_counter()))


class Clients:
    """C client processes, kept across servers (boto3 takes a while to import)."""

    def __init__(self, count: int) -> None:
        ctx = mp.get_context("spawn")
        self.barrier = ctx.Barrier(count + 1)
        self.conns: list[Connection] = []
        self.processes = []
        for _ in range(count):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_worker, args=(child, self.barrier), daemon=True)
            process.start()
            self.conns.append(parent)
            self.processes.append(process)

    def run(self, phase: str, endpoint: str, url: str, seconds: float | None) -> float:
        """Messages per second of one phase, all clients together."""
        for conn in self.conns:
            conn.send((phase, endpoint, url, seconds))
        try:
            self.barrier.wait(timeout=_BARRIER_WAIT)
        except threading.BrokenBarrierError:
            pass  # a client failed: its error is among the results
        start = time.perf_counter()
        results = [conn.recv() for conn in self.conns]
        self.barrier.reset()
        errors = [text for first, text in results if first == "error"]
        if errors:
            raise RuntimeError(f"{phase} on {endpoint}: {errors[0]}")
        total = sum(count for count, _ in results)
        elapsed = max(end for _, end in results) - start
        return total / elapsed if elapsed > 0 else 0.0

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for process in self.processes:
            process.join(timeout=30)


def measure(
    servers: list[str], clients: list[int], seconds: float, rounds: int, baseline: str | None = None
) -> dict[str, Any]:
    """{server: {C: {"send": msg/s, "receive": msg/s}}}, the best of *rounds* rounds;
    within a round the servers take turns, so that a busy spell of the machine falls on
    all of them alike."""
    results: dict[str, Any] = {name: {} for name in servers}
    for count in clients:
        pool = Clients(count)
        try:
            for round_ in range(rounds):
                for name in servers:
                    with server(name, baseline) as endpoint:
                        queue = f"bench-{count}-{round_}"
                        url = _client(endpoint).create_queue(QueueName=queue)["QueueUrl"]
                        send = pool.run("send", endpoint, url, seconds)
                        receive = pool.run(
                            "receive", endpoint, url, seconds if name == "floor" else None
                        )
                    best = results[name].setdefault(count, {"send": 0.0, "receive": 0.0})
                    best["send"] = max(best["send"], send)
                    best["receive"] = max(best["receive"], receive)
                    print(f"  {name:9} C={count:<2} round {round_ + 1}: send {send:8.0f}/s  "
                          f"receive {receive:8.0f}/s", file=sys.stderr, flush=True)  # fmt: skip
        finally:
            pool.close()
    return results


# The server's CPU time a request ------------------------------------------------------

_WARM_BATCHES: Final = 50
_SETTLED: Final = 3.0  # seconds from CreateQueue to the measure: a queue as in steady state


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process *pid* so far (all its threads, live or ended)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rpartition(")")[2].split()
    # Fields 14 and 15 of proc(5) (utime, stime); the split starts at field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_request(endpoint: str, requests: int) -> dict[str, float]:
    """{"send": ms, "receive": ms}: the server's CPU time a ``SendMessageBatch`` of 10,
    and a ``ReceiveMessage(10)`` with its ``DeleteMessageBatch``, over *requests* of each
    from one client, after a warm-up, on a queue created 3 s before."""
    pid = PIDS[endpoint]
    sqs = _client(endpoint)
    created = time.monotonic()
    url = sqs.create_queue(QueueName=f"cpu-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(10)]

    def receive_and_delete() -> None:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        handles = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        sqs.delete_message_batch(QueueUrl=url, Entries=handles)

    for _ in range(_WARM_BATCHES):
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    for _ in range(_WARM_BATCHES // 2):
        receive_and_delete()
    # vsqs serve reads a queue's SQS record again while it is young (2 s): measure the
    # steady state of a queue that has been there a while.
    time.sleep(max(0.0, created + _SETTLED - time.monotonic()))
    before = _cpu_seconds(pid)
    for _ in range(requests):
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    sent = _cpu_seconds(pid)
    for _ in range(requests):
        receive_and_delete()
    received = _cpu_seconds(pid)
    return {
        "send": (sent - before) * 1000 / requests,
        "receive": (received - sent) * 1000 / requests,
    }


def measure_cpu(
    servers: list[str], requests: int, rounds: int, baseline: str | None
) -> dict[str, dict[str, float]]:
    """{server: {"send": ms, "receive": ms}}, the least of *rounds* rounds (each on a
    fresh server; within a round the servers take turns)."""
    results: dict[str, dict[str, float]] = {}
    for round_ in range(rounds):
        for name in servers:
            with server(name, baseline) as endpoint:
                got = cpu_per_request(endpoint, requests)
            best = results.setdefault(name, dict(got))
            for phase, ms in got.items():
                best[phase] = min(best[phase], ms)
            line = f"send {got['send']:.3f} ms, receive+delete {got['receive']:.3f} ms"
            print(f"  {name:12} round {round_ + 1}: {line}", file=sys.stderr, flush=True)
    return results


def report_cpu(results: dict[str, dict[str, float]], servers: list[str]) -> str:
    """The reST table: the server's CPU ms a request, and each to the floor's."""
    headers = ["request", *(f"{n} (ms)" for n in servers)]
    others = [n for n in servers if n != "floor"] if "floor" in servers else []
    headers += [f"{n} / floor" for n in others]
    rows = []
    labels = {
        "send": "SendMessageBatch (10)",
        "receive": "ReceiveMessage (10) + DeleteMessageBatch",
    }
    for phase, label in labels.items():
        row = [label, *(f"{results[n][phase]:.3f}" for n in servers)]
        floor = results["floor"][phase] if others else 0.0
        # A few requests may take less than one clock tick of the floor's time: no ratio.
        row += [f"{results[n][phase] / floor:.2f}x" if floor else "n/a" for n in others]
        rows.append(row)
    return table(headers, rows)


def report(results: dict[str, Any], servers: list[str], clients: list[int]) -> str:
    """The reST table: messages/s per server, then vsqs's ratios to the floor and moto."""
    headers = ["phase", "C", *servers]
    vsqs_names = [n for n in servers if n.startswith("vsqs") or n == BASELINE]
    for name in vsqs_names:
        if "floor" in servers:
            headers.append(f"{name} / floor")
        if "moto" in servers:
            headers.append(f"{name} / moto")
    rows = []
    for phase in ("send", "receive"):
        for count in clients:
            figures = {n: results[n][count][phase] for n in servers}
            row = [phase, str(count), *(f"{figures[n]:,.0f}" for n in servers)]
            for name in vsqs_names:
                for peer in ("floor", "moto"):
                    if peer in servers:
                        ratio = figures[name] / figures[peer] if figures[peer] else float("inf")
                        row.append(f"{ratio:.2f}x")
            rows.append(row)
    return table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a send phase")
    parser.add_argument("--clients", default="1,4,16", help="client processes, comma-separated")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="the best of this many rounds")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--cpu", action="store_true", help="the server's CPU time a request")
    parser.add_argument("--requests", type=int, default=2000, help="requests a --cpu round")
    parser.add_argument("--baseline", help="add 'baseline shm': vsqs serve from this source tree")
    parser.add_argument("--serve-floor", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-moto", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_floor:
        floor_main(args.serve_floor)
        return
    if args.serve_moto:
        moto_main(args.serve_moto)
        return
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if args.baseline:
        servers.append(BASELINE)
    unknown = set(servers) - {*SERVERS, BASELINE}
    if unknown:
        parser.error(f"unknown servers {sorted(unknown)}; choose from {', '.join(SERVERS)}")
    clients = [int(c) for c in args.clients.split(",")]
    if args.cpu:
        cpu = measure_cpu(servers, args.requests, args.rounds, args.baseline)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(cpu, out, indent=1)
        print(report_cpu(cpu, servers))
        return
    cores, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    print(f"bench_serve: {cores} cores, load {load:.1f}, {args.seconds} s send phases, "
          f"best of {args.rounds} rounds", file=sys.stderr)  # fmt: skip
    results = measure(servers, clients, args.seconds, args.rounds, args.baseline)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    print(report(results, servers, clients))


if __name__ == "__main__":
    main()
