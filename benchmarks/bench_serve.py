"""``vsqs serve`` beside sqslite and moto, with boto3 clients (issue 36).

Method: each server runs in a process of its own on 127.0.0.1; the clients are
processes of ``benchmarks/serve_client.py``, each with its own boto3 clients (one
keep-alive connection each, no retries), all released together. They run under
``--client-python`` (by default ``.venv-query``'s: boto3 1.28, the query protocol, the
only one sqslite speaks; every server answers it). The servers:

* ``sqslite``: the npm package (in memory; ``benchmarks/setup-sqslite.sh`` installs it);
* ``moto``: moto's server (``moto[server]``, in memory; ``ThreadedMotoServer``);
* ``vsqs shm`` and ``vsqs disk``: ``vsqs serve`` on a root on ``/dev/shm`` and on
  ``/var/tmp``, durable writes (a send is answered after its batch is flushed).

Per server, on fresh standard queues:

* ``send`` (C = 1 and 4 client processes): each loops ``SendMessageBatch`` of 10 bodies
  of 100 bytes for *seconds*: messages sent over the time from the release to the last
  answer; and the CPU time the server process and the client processes spent in that
  phase, per batch (from ``/proc/PID/stat``: where two cores go when four clients and a
  server share them); ``receive``: each loops ``ReceiveMessage(10)`` and ``DeleteMessageBatch``
  until a receive is empty, draining what the send left (a shallow queue);
* ``depth``: a queue filled with *depth* messages (by 4 clients' batches), then one
  client receives and deletes for *seconds*: is receiving flat with depth? (moto is
  left out: it would take minutes to fill); ``fifo shallow`` and ``fifo depth``: the
  same on a FIFO queue filled with 1,000 and with *depth* messages, each batch spread
  over 10 message groups (vsqs only: sqslite answers FIFO batches with errors);
* ``latency``: 64 clients (4 processes of 16 threads) loop ``SendMessage`` for
  *seconds*: the median and 99th percentile of their latencies;
* ``library``: the durable ``Queue.publish_batch`` of 10 in one thread of this process
  on the ``vsqs disk`` filesystem, measured just before that server's ``send 1`` (the
  filesystem in the same state): what the disk's flushes allow one sender; and in a
  second table, from *library-threads* threads at once into one queue, on ``/var/tmp``
  and ``/dev/shm``: how far concurrent batches share their flushes (group commit);
* ``bound``: what one synchronous client can get from any durable server on that disk,
  each round ``1 / (1 / sqslite's send 1 + 1 / library)``: a batch costs at least the
  client's round trip to a server that does nothing durable (sqslite, in memory) plus
  the disk's flush, one after the other, since one client waits for each answer;
* ``library C threads``: the same library rate from C threads at once, measured just
  before ``vsqs disk``'s ``send C`` (C > 1); the **bound of C durable clients**, the
  same sum as for one: each of the C clients waits for each answer, so its batch costs
  at least its round trip to a server that stores nothing durably while C clients use
  it (sqslite's ``send C``) plus the flush of the disk while C writers share it (the
  library's C-thread rate), ``1 / (1 / sqslite's send C + 1 / library C threads)``;
  and ``vsqs disk`` ``send C`` against that bound and against the lesser of the two
  rates (what C clients could get only if each client's round trip overlapped its own
  flush, which a client that waits for its answer cannot do).

Each figure is the median (and the least, or for latencies the greatest) of *rounds*
rounds; within a round the servers take turns.

Usage::

    python -m benchmarks.bench_serve [--seconds 2] [--rounds 3] [--clients 1,4]
        [--depth 25000] [--servers sqslite,moto,vsqs shm,vsqs disk] [--client-python PY]
        [--library-threads 1,2,4] [--library-only] [--sends-only] [--base CHECKOUT]

``--sends-only`` measures the send figures alone; ``--base CHECKOUT`` adds a server,
``vsqs disk base``, that is ``vsqs disk`` run with the ``vsqs`` of another checkout:
before and after a change, side by side in the same rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from benchmarks.report import table

REPO: Final = Path(__file__).resolve().parents[1]
SERVERS: Final = ("sqslite", "moto", "vsqs shm", "vsqs disk")
BASE: Final = "vsqs disk base"
"""``vsqs disk`` served by another checkout's ``vsqs`` (``--base``): before and after."""
ROOTS: Final = {"vsqs shm": "/dev/shm", "vsqs disk": "/var/tmp"}
SQSLITE: Final = REPO / "benchmarks" / "sqslite" / "node_modules" / "sqslite" / "bin" / "cli.js"
QUERY_PYTHON: Final = REPO / ".venv-query" / "bin" / "python"
FIFO_SHALLOW: Final = 1000
LATENCY_PROCESSES: Final = 4
LATENCY_THREADS: Final = 16
BODY: Final = b"x" * 100
LIBRARY: Final = "library durable publish_batch (1 thread, same disk, just before)"
BOUND: Final = "bound for 1 durable client: 1 / (1 / sqslite send 1 + 1 / library)"


def library_key(count: int) -> str:
    """The figure of the library's durable rate from *count* threads beside ``vsqs disk``."""
    return f"library durable publish_batch ({count} threads, same disk, just before send {count})"


def moto_main(port: int) -> None:
    """Serve moto (in memory) on 127.0.0.1:*port* until killed."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    while True:
        time.sleep(3600)


# The servers as processes -------------------------------------------------------------


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


def cpu_seconds(pids: list[int]) -> float:
    """The CPU time (user and system, every thread) the processes *pids* have used."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def server(name: str, base: str | None = None) -> Iterator[tuple[str, int]]:
    """Start server *name* in a process of its own; yield its endpoint URL and pid.
    ``vsqs disk base`` is ``vsqs disk`` with the ``vsqs`` of checkout *base*."""
    port = _free_port()
    root = None
    env = dict(os.environ)
    if name == "sqslite":
        if not SQSLITE.exists():
            raise RuntimeError("sqslite is not installed: sh benchmarks/setup-sqslite.sh")
        args = ["node", str(SQSLITE), "--host", "127.0.0.1", "--port", str(port)]
    elif name == "moto":
        args = [sys.executable, "-m", "benchmarks.bench_serve", "--serve-moto", str(port)]
    else:
        root = tempfile.mkdtemp(prefix="vsqs-bench-serve-", dir=ROOTS[name.removesuffix(" base")])
        args = [sys.executable, "-m", "vsqs", "serve", root, "--port", str(port), "--quiet"]
        if name == BASE:
            env["PYTHONPATH"] = str(base)
    # The servers' own lines (moto logs every request) go to a file, shown on failure.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO, env=env)
        try:
            _wait_listening(process, port)
            yield f"http://127.0.0.1:{port}", process.pid
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


# The clients --------------------------------------------------------------------------


class Clients:
    """Client processes (``benchmarks/serve_client.py``), kept across servers."""

    def __init__(self, count: int, python: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.processes = [
            subprocess.Popen(
                [python, "-m", "benchmarks.serve_client"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=env,
            )
            for _ in range(count)
        ]

    def run(self, count: int, command: dict[str, Any]) -> tuple[list[dict[str, Any]], float]:
        """The results of *command* on the first *count* clients, released together;
        and the wall-clock time of the release."""
        chosen = self.processes[:count]
        for process in chosen:
            assert process.stdin is not None
            process.stdin.write(json.dumps(command) + "\n")
            process.stdin.flush()
        for process in chosen:
            assert process.stdout is not None
            if json.loads(process.stdout.readline() or "null") != "ready":
                raise RuntimeError(f"a client failed before {command['phase']}")
        began = time.time()
        for process in chosen:
            assert process.stdin is not None
            process.stdin.write('"go"\n')
            process.stdin.flush()
        results = []
        for process in chosen:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"a client failed during {command['phase']}")
            results.append(json.loads(line))
        return results, began

    def rate(self, count: int, command: dict[str, Any]) -> float:
        """Messages a second of one phase, all *count* clients together."""
        return self.phase(count, command)[0]

    def phase(self, count: int, command: dict[str, Any]) -> tuple[float, int]:
        """Messages a second of one phase, all *count* clients together, and how many."""
        results, began = self.run(count, command)
        elapsed = max(r["end"] for r in results) - began
        messages = sum(r["count"] for r in results)
        return (messages / elapsed if elapsed > 0 else 0.0), messages

    def close(self) -> None:
        for process in self.processes:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # a client that failed is gone
                process.stdin.write("\n")
                process.stdin.close()
        for process in self.processes:
            process.wait(timeout=30)


def _queue(endpoint: str, python: str, *, fifo: bool = False) -> str:
    """A new queue's URL (a FIFO queue if *fifo*), made through the query protocol."""
    name = f"bench-{uuid.uuid4().hex[:12]}" + (".fifo" if fifo else "")
    attributes = "{'FifoQueue': 'true'}" if fifo else "{}"
    code = (
        "import boto3, sys; print(boto3.client('sqs', endpoint_url=sys.argv[1], "
        "region_name='us-east-1', aws_access_key_id='b', aws_secret_access_key='b')"
        f".create_queue(QueueName=sys.argv[2], Attributes={attributes})['QueueUrl'])"
    )
    done = subprocess.run(
        [python, "-c", code, endpoint, name], capture_output=True, text=True, check=True
    )
    # sqslite finds a queue by its URL only as http://localhost:PORT/queues/NAME.
    return done.stdout.strip().replace("://127.0.0.1:", "://localhost:")


def library_rate(seconds: float, threads: int = 1, root: str = ROOTS["vsqs disk"]) -> float:
    """Durable ``publish_batch`` of 10 from *threads* threads at once into one queue on
    *root*'s filesystem: messages a second, all threads together."""
    import vsqs

    path = tempfile.mkdtemp(prefix="vsqs-bench-library-", dir=root)
    try:
        queue = vsqs.Queue(path, durable=True)
        batch = [BODY] * 10
        sent = [0] * threads
        go = threading.Barrier(threads + 1)

        def publish(index: int) -> None:
            go.wait()
            while time.perf_counter() - began < seconds:
                queue.publish_batch(batch)
                sent[index] += 10

        workers = [threading.Thread(target=publish, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        began = time.perf_counter()
        go.wait()
        for worker in workers:
            worker.join()
        rate = sum(sent) / (time.perf_counter() - began)
        queue.close()
        return rate
    finally:
        shutil.rmtree(path, ignore_errors=True)


def measure_library(seconds: float, threads: list[int]) -> dict[str, float]:
    """One round of the library's durable rates: {"T ROOT": messages a second}."""
    return {
        f"{count} {root}": library_rate(seconds, count, root)
        for root in (ROOTS["vsqs disk"], ROOTS["vsqs shm"])
        for count in threads
    }


def measure_server(
    name: str, pool: Clients, python: str, args: argparse.Namespace
) -> dict[str, float]:
    """One round's figures of server *name*: {"send C", "receive C", "depth",
    "median ms", "p99 ms"}."""
    figures: dict[str, float] = {}
    with server(name, args.base) as (endpoint, pid):
        base = {"endpoint": endpoint, "seconds": args.seconds}
        if name == "vsqs disk":
            # The library beside the server, on the same filesystem in the same state.
            figures[LIBRARY] = library_rate(args.seconds, 1, ROOTS[name])
        for count in args.clients:
            if name == "vsqs disk" and count > 1:
                figures[library_key(count)] = library_rate(args.seconds, count, ROOTS[name])
            url = _queue(endpoint, python)
            clients = [p.pid for p in pool.processes[:count]]
            cpu = cpu_seconds([pid]), cpu_seconds(clients)
            rate, sent = pool.phase(count, {**base, "url": url, "phase": "send"})
            batches = max(sent // 10, 1)
            figures[f"send {count}"] = rate
            server_cpu, clients_cpu = cpu_seconds([pid]) - cpu[0], cpu_seconds(clients) - cpu[1]
            figures[f"send {count}: server CPU µs a batch"] = server_cpu / batches * 1e6
            figures[f"send {count}: clients' CPU µs a batch"] = clients_cpu / batches * 1e6
            if args.sends_only:
                continue
            figures[f"receive {count}"] = pool.rate(count, {**base, "url": url, "phase": "receive"})
        if args.sends_only:
            return figures
        phases = []  # (figure, fifo, messages)
        if name != "moto" and args.depth:
            phases.append(("depth", False, args.depth))
        if name.startswith("vsqs") and args.depth:  # sqslite answers FIFO batches 500
            phases += [("fifo shallow", True, FIFO_SHALLOW), ("fifo depth", True, args.depth)]
        for figure, fifo, messages in phases:
            url = _queue(endpoint, python, fifo=fifo)
            fill = {"endpoint": endpoint, "url": url, "phase": "send", "seconds": 600.0}
            fillers = min(4, len(pool.processes))
            pool.run(fillers, {**fill, "limit": -(-messages // fillers)})
            figures[figure] = pool.rate(1, {**base, "url": url, "phase": "receive"})
        url = _queue(endpoint, python)
        latency = {**base, "url": url, "phase": "latency", "threads": LATENCY_THREADS}
        results, _ = pool.run(LATENCY_PROCESSES, latency)
        latencies = sorted(ms for r in results for ms in r["latencies"])
        figures["median ms"] = statistics.median(latencies)
        figures["p99 ms"] = latencies[int(len(latencies) * 0.99)]
    return figures


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """{server: [one dict of figures a round]}; the library's durable rate as the
    server "library"."""
    library = [] if args.sends_only else ["library"]
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in [*args.servers, *library]}
    pool = Clients(max(*args.clients, LATENCY_PROCESSES, 4) if args.servers else 0,
                   args.client_python)  # fmt: skip
    try:
        for round_ in range(args.rounds):
            for name in [*args.servers, *library]:
                if name == "library":
                    figures = measure_library(args.seconds, args.library_threads)
                else:
                    figures = measure_server(name, pool, args.client_python, args)
                rounds[name].append(figures)
                shown = "  ".join(f"{k} {v:,.0f}" for k, v in figures.items())
                print(f"  {name:9} round {round_ + 1}: {shown}", file=sys.stderr, flush=True)
    finally:
        pool.close()
    return rounds


def _low_is_good(key: str) -> bool:
    """Latencies and CPU times: the less the better."""
    return key.endswith(("ms", "a batch"))


def _cell(values: list[float], *, low_is_good: bool = False) -> str:
    """The median, and the worst of the rounds in brackets."""
    worst = max(values) if low_is_good else min(values)
    return f"{statistics.median(values):,.0f} ({worst:,.0f})"


def report(rounds: dict[str, list[dict[str, float]]], servers: list[str]) -> str:
    """The reST table: a row per figure, a column per server; vsqs's ratios to sqslite."""
    # Every server's figures, each once, in the order they were first measured.
    keys = list(dict.fromkeys(k for s in servers for k in rounds[s][0]))
    latency: list[str] = [k for k in ("median ms", "p99 ms") if k in keys]
    libraries = {LIBRARY, *(k for k in keys if k.startswith("library durable"))}
    hidden = {*latency, *libraries} if "sqslite" in servers else set(latency)
    keys = [k for k in keys if k not in hidden] + latency
    vsqs_names = [n for n in servers if n.startswith("vsqs")]
    headers = ["figure", *servers]
    if "sqslite" in servers:
        headers += [f"{n} / sqslite" for n in vsqs_names]
    against_base = BASE in servers and "vsqs disk" in servers
    if against_base:
        headers.append(f"vsqs disk / {BASE}")
    rows = []
    for key in keys:
        row = [key]
        medians = {}
        for name in servers:
            values = [r[key] for r in rounds[name] if key in r]
            row.append(_cell(values, low_is_good=_low_is_good(key)) if values else "-")
            if values:
                medians[name] = statistics.median(values)
        if "sqslite" in servers:
            for name in vsqs_names:
                if name in medians and medians.get("sqslite"):
                    ratio = medians[name] / medians["sqslite"]
                    row.append(f"{1 / ratio if _low_is_good(key) else ratio:.2f}x")
                else:
                    row.append("-")
        if against_base:
            after, before = medians.get("vsqs disk"), medians.get(BASE)
            if after and before:
                row.append(f"{before / after if _low_is_good(key) else after / before:.2f}x")
            else:
                row.append("-")
        rows.append(row)
    if "sqslite" in servers and "vsqs disk" in servers:
        rows += _bound_rows(rounds, servers, len(headers))
    return table(headers, rows)


def bound_key(count: int) -> str:
    """The figure of the closed-loop bound of *count* durable clients (C > 1)."""
    return (
        f"bound for {count} durable clients: 1 / (1 / sqslite send {count} "
        f"+ 1 / library {count} threads)"
    )


def _bound_rows(
    rounds: dict[str, list[dict[str, float]]], servers: list[str], width: int
) -> list[list[str]]:
    """Below the figures, in ``vsqs disk``'s column, for each client count C that has
    the library's rate beside it: that rate, the bound of C durable clients made of it
    and sqslite's ``send C`` (each round's own figures), ``send C`` against the bound
    and, for C > 1, against the lesser of the two rates."""
    column = servers.index("vsqs disk") + 1
    disks, peers = rounds["vsqs disk"], rounds["sqslite"]

    def add(label: str, cell: str) -> None:
        row = [label] + [""] * (width - 1)
        row[column] = cell
        rows.append(row)

    def ratio(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}x ({min(values):.2f}x)"

    rows: list[list[str]] = []
    counts = sorted(int(k.split()[1]) for k in disks[0] if k.startswith("send ") and ":" not in k)
    for count in counts:
        send = f"send {count}"
        key = LIBRARY if count == 1 else library_key(count)
        if key not in disks[0] or send not in peers[0]:
            continue
        pairs = list(zip(disks, peers, strict=True))
        # Each client waits for each answer: its batch's round trip and the disk's flush
        # add up, whatever the number of clients (both rates are of C at once).
        bound = [1 / (1 / peer[send] + 1 / disk[key]) for disk, peer in pairs]
        add(key, _cell([disk[key] for disk in disks]))
        add(BOUND if count == 1 else bound_key(count), _cell(bound))
        add(f"vsqs disk {send} / bound (median, least)",
            ratio([disk[send] / b for (disk, _), b in zip(pairs, bound, strict=True)]))  # fmt: skip
        if count > 1:
            lesser = [disk[send] / min(peer[send], disk[key]) for disk, peer in pairs]
            add(f"vsqs disk {send} / lesser of sqslite {send} and library (median, least)",
                ratio(lesser))  # fmt: skip
    return rows


def report_library(rounds: list[dict[str, float]], threads: list[int]) -> str:
    """The reST table of the library's durable rates: a row per thread count, a column
    per filesystem, and each one's rate against its one thread's."""
    roots = [ROOTS["vsqs disk"], ROOTS["vsqs shm"]]
    headers = ["durable publish_batch of 10", *roots, *(f"{root} / 1 thread" for root in roots)]
    rows = []
    for count in threads:
        medians = [statistics.median(r[f"{count} {root}"] for r in rounds) for root in roots]
        singles = [statistics.median(r[f"{threads[0]} {root}"] for r in rounds) for root in roots]
        rows.append(
            [f"{count} thread{'s' if count > 1 else ''}, one queue"]
            + [_cell([r[f"{count} {root}"] for r in rounds]) for root in roots]
            + [f"{m / one:.2f}x" if one else "-" for m, one in zip(medians, singles, strict=True)]
        )
    return table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of a timed phase")
    parser.add_argument("--clients", default="1,4", help="client processes, comma-separated")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="repeat this many times")
    parser.add_argument("--depth", type=int, default=25_000, help="messages before 'depth'")
    parser.add_argument(
        "--client-python",
        default=str(QUERY_PYTHON) if QUERY_PYTHON.exists() else sys.executable,
        help="the clients' interpreter (with boto3; default .venv-query's, the query protocol)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--library-threads",
        default="1,2,4",
        help="the library's publishing threads, comma-separated",
    )
    parser.add_argument(
        "--library-only", action="store_true", help="only the library's durable rates, no server"
    )
    parser.add_argument(
        "--sends-only",
        action="store_true",
        help="only the send figures (and the library's rate beside vsqs disk)",
    )
    parser.add_argument(
        "--disk",
        default=ROOTS["vsqs disk"],
        help="the directory on a disk under the 'vsqs disk' roots (default %(default)s)",
    )
    parser.add_argument(
        "--base",
        help=f"also serve '{BASE}': vsqs disk with the vsqs of this checkout (before/after)",
    )
    parser.add_argument("--serve-moto", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_moto:
        moto_main(args.serve_moto)
        return
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if args.base:
        args.servers.append(BASE)
    unknown = set(args.servers) - {*SERVERS, BASE}
    if unknown:
        parser.error(f"unknown servers {sorted(unknown)}; choose from {', '.join(SERVERS)}")
    args.clients = [int(c) for c in args.clients.split(",")]
    ROOTS["vsqs disk"] = args.disk
    args.library_threads = [int(t) for t in args.library_threads.split(",")]
    if args.library_only:
        args.servers = []
    cores, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    print(f"bench_serve: {cores} cores, load {load:.1f}, {args.seconds} s phases, "
          f"{args.rounds} rounds, clients {args.client_python}", file=sys.stderr)  # fmt: skip
    rounds = measure(args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rounds, out, indent=1)
    if args.servers:
        print(report(rounds, args.servers))
        print()
    if not args.sends_only:
        print(report_library(rounds["library"], args.library_threads))


if __name__ == "__main__":
    main()
