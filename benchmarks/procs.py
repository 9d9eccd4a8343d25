"""Benchmarks that need real processes: RSS, 2 producers + 2 consumers, wake-up, idle, bound.

The parent starts children as ``python -m benchmarks.procs ROLE JSON`` and reads one JSON
line from each child's stdout. A child that fails shows it in its exit status.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

from benchmarks.backends import body, claim_misses, prefill_ready_files, spec_by_name
from benchmarks.peers import VSQS03, Vsqs03Adapter

ROOT: Final = Path(__file__).resolve().parent.parent
READY: Final = "ready"
STOP: Final = "STOP"  # a file the parent creates when producers are done (never a message name)


# ---------------------------------------------------------------- children


def _receiver(backend: str, path: Path, *, capacity: int | None = None) -> Any:
    """A blocking receive for vsqs or vsqs 0.3: (timeout) -> (body, delete) or None."""
    if backend == VSQS03:
        a = Vsqs03Adapter(path, capacity=capacity)

        def recv03(timeout: float) -> tuple[bytes, Callable[[], None]] | None:
            got = a.receive(timeout)
            if got is None:
                return None
            mid, data = got
            return data, lambda: a.q.delete(mid)

        return a, recv03
    import vsqs

    q = vsqs.Queue(path, durable=False, capacity=capacity)

    def recv(timeout: float) -> tuple[bytes, Callable[[], None]] | None:
        m = q.receive(timeout=timeout)
        return None if m is None else (m.body, partial(_drop, q.delete, m))

    return q, recv


def _drop(delete: Callable[[Any], object], message: Any) -> None:
    delete(message)


def child_rss(args: dict[str, Any]) -> dict[str, Any]:
    """Receive+delete ``ops`` messages from a deep backlog; report peak RSS."""
    backend, ops = args["backend"], args["ops"]
    if backend == "python":
        import vsqs  # noqa: F401  # the interpreter plus the package, doing nothing
    else:
        adapter = spec_by_name(backend).open(Path(args["path"]))
        start = time.perf_counter()
        for _ in range(ops):
            adapter.consume()
        args["elapsed_s"] = time.perf_counter() - start
        adapter.close()
    return {**args, "maxrss_kb": _peak_rss_kb()}


def _peak_rss_kb() -> int:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries the parent's peak across
    fork and exec into ru_maxrss, so a child of a big parent would report the parent's."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child_producer(args: dict[str, Any]) -> dict[str, Any]:
    adapter = spec_by_name(args["backend"]).open(Path(args["path"]))
    data = body()
    _announce()
    for _ in range(args["n"]):
        adapter.publish(data)
    adapter.close()
    return {"published": args["n"]}


def child_consumer(args: dict[str, Any]) -> dict[str, Any]:
    path = Path(args["path"])
    adapter = spec_by_name(args["backend"]).open(path)
    stop = path.parent / STOP
    got, last = 0, time.time()
    _announce()
    while True:
        if adapter.consume() is not None:
            got += 1
            last = time.time()
        elif stop.exists() and adapter.consume() is None:
            break
        else:
            time.sleep(0.0005)  # two cores, four processes: an idle spin would steal the producers'
    misses = claim_misses(getattr(adapter, "q", None))
    adapter.close()
    return {"delivered": got, "last": last, "claim_misses": misses}


def child_latency(args: dict[str, Any]) -> dict[str, Any]:
    _, recv = _receiver(args["backend"], Path(args["path"]))
    lat: list[float] = []
    _announce()
    while len(lat) < args["n"]:
        got = recv(2.0)
        now = time.time()
        if got is None:
            continue
        data, delete = got
        lat.append(now - float(data.split()[0]))
        delete()
    return {"latency_s": lat}


def child_raw_publisher(args: dict[str, Any]) -> dict[str, Any]:
    """Publish with bare syscalls every ``interval`` seconds; the body starts with the send time."""
    path, n, interval = args["path"], args["n"], args["interval"]
    for i in range(n):
        time.sleep(interval)
        data = body(i)
        mid = int(time.time() * 1e6)
        fd = os.open(f"{path}/{mid}.new", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.close(fd)
        os.rename(f"{path}/{mid}.new", f"{path}/{mid}")
    return {"published": n}


def child_idle(args: dict[str, Any]) -> dict[str, Any]:
    _, recv = _receiver(args["backend"], Path(args["path"]))
    _announce()
    recv(args["seconds"])
    return {}


def child_bounded_producer(args: dict[str, Any]) -> dict[str, Any]:
    path, n = Path(args["path"]), args["n"]
    data = body()
    if args["backend"] == VSQS03:
        a = Vsqs03Adapter(path, capacity=args["capacity"])
        _announce()
        for _ in range(n):
            a.q.publish(data, timeout=None)
        a.close()
    else:
        import vsqs

        q = vsqs.Queue(path, durable=False, capacity=args["capacity"])
        _announce()
        for _ in range(n):
            q.publish(data, timeout=None)
        q.detach()
    return {"published": n}


def child_slow_consumer(args: dict[str, Any]) -> dict[str, Any]:
    _, recv = _receiver(args["backend"], Path(args["path"]))
    _announce()
    got, start = 0, time.perf_counter()
    while got < args["n"]:
        item = recv(5.0)
        if item is None:
            break
        time.sleep(args["work_s"])
        item[1]()
        got += 1
    return {"delivered": got, "elapsed_s": time.perf_counter() - start}


CHILDREN: Final[dict[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "rss": child_rss,
    "producer": child_producer,
    "consumer": child_consumer,
    "latency": child_latency,
    "raw-publisher": child_raw_publisher,
    "idle": child_idle,
    "bounded-producer": child_bounded_producer,
    "slow-consumer": child_slow_consumer,
}


def _announce() -> None:
    print(READY, flush=True)


def main() -> None:
    role, raw = sys.argv[1], sys.argv[2]
    result = CHILDREN[role](json.loads(raw))
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- parent side


class Child:
    """A benchmark child process and its one JSON result line."""

    def __init__(self, role: str, **args: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.procs", role, json.dumps(args)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != READY:
            raise RuntimeError(f"child did not start: {line!r}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()

    def result(self, timeout: float = 600) -> dict[str, Any]:
        out, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(f"child failed with status {self.proc.returncode}")
        parsed: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return parsed


def peak_rss(backends: Sequence[str], root: Path, depth: int, ops: int) -> list[dict[str, Any]]:
    """Peak RSS of a consumer process that receives ``ops`` messages at ``depth``."""
    rows = [Child("rss", backend="python", ops=0).result()]
    path = root / "rss"
    prefill_ready_files(path, depth)  # vsqs and vsqs 0.3 share the seed's format
    try:
        for backend in backends:
            n = ops if backend != VSQS03 else 2
            rows.append(Child("rss", backend=backend, path=str(path), ops=n, depth=depth).result())
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return rows


def producers_consumers(backend: str, root: Path, total: int) -> dict[str, Any]:
    """2 producer and 2 consumer processes on one queue; aggregate messages per second."""
    path = root / "mp" / "q"
    path.mkdir(parents=True)
    children: list[Child] = []
    try:
        consumers = [Child("consumer", backend=backend, path=str(path)) for _ in range(2)]
        children += consumers
        for c in consumers:
            c.wait_ready()
        start = time.time()
        producers = [
            Child("producer", backend=backend, path=str(path), n=total // 2) for _ in range(2)
        ]
        children += producers
        for p in producers:
            p.result()
        (root / "mp" / STOP).touch()
        results = [c.result() for c in consumers]
    finally:
        for child in children:
            child.kill()
        shutil.rmtree(root / "mp", ignore_errors=True)
    delivered = sum(r["delivered"] for r in results)
    elapsed = max(r["last"] for r in results) - start
    misses = [r["claim_misses"] for r in results]
    return {
        "backend": backend,
        "delivered": delivered,
        "expected": total // 2 * 2,
        "elapsed_s": elapsed,
        "msgs_per_s": delivered / elapsed,
        "claim_misses": None if None in misses else sum(misses),
    }


def wake_latency(backends: list[str], root: Path, n: int, rounds: int = 2) -> dict[str, Any]:
    """Publish → receive latency with a raw publisher every 50 ms; rounds alternate backends."""
    lat: dict[str, list[float]] = {b: [] for b in backends}
    for _ in range(rounds):
        for backend in backends:
            path = root / "lat" / "q"
            path.mkdir(parents=True)
            consumer = Child("latency", backend=backend, path=str(path), n=n + 1)
            pub: Child | None = None
            try:
                consumer.wait_ready()
                time.sleep(0.2)  # let vsqs 0.3's observer thread schedule its watch
                pub = Child("raw-publisher", path=str(path), n=n + 1, interval=0.05)
                lat[backend] += consumer.result()["latency_s"][1:]  # the first one warms up
                pub.result()
            finally:
                consumer.kill()
                if pub is not None:
                    pub.kill()
                shutil.rmtree(root / "lat", ignore_errors=True)
    return {b: _percentiles(v) for b, v in lat.items()}


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "n": len(ordered),
        "p50_ms": q[49] * 1e3,
        "p99_ms": q[98] * 1e3,
        "max_ms": ordered[-1] * 1e3,
    }


def idle_cpu(backends: list[str], root: Path, seconds: float) -> dict[str, float]:
    """CPU seconds per wall second of a consumer blocked on an empty queue."""
    import psutil

    out: dict[str, float] = {}
    for backend in backends:
        path = root / "idle" / "q"
        path.mkdir(parents=True)
        child = Child("idle", backend=backend, path=str(path), seconds=seconds + 5)
        try:
            child.wait_ready()
            time.sleep(0.5)
            proc = psutil.Process(child.proc.pid)
            before = proc.cpu_times()
            time.sleep(seconds)
            after = proc.cpu_times()
            used = (after.user - before.user) + (after.system - before.system)
            out[backend] = used / seconds
        finally:
            child.kill()
            shutil.rmtree(root / "idle", ignore_errors=True)
    return out


def bounded(backends: list[str], root: Path, n: int, work_s: float) -> list[dict[str, Any]]:
    """A fast producer and a slow consumer on a queue of capacity 100.

    The ceiling is the same slow consumer alone on a backlog of ``n`` (no producer, no bound).
    """
    rows = []
    for backend in backends:
        path = root / "bounded" / "q"
        try:
            prefill_ready_files(path, n)
            alone = Child("slow-consumer", backend=backend, path=str(path), n=n, work_s=work_s)
            alone.wait_ready()
            ceiling = alone.result()
            shutil.rmtree(path)
            path.mkdir(parents=True)
            result = _bounded_run(backend, path, n, work_s)
        finally:
            shutil.rmtree(root / "bounded", ignore_errors=True)
        rows.append(
            {
                "backend": backend,
                "capacity": 100,
                "work_ms": work_s * 1e3,
                "delivered": result["delivered"],
                "msgs_per_s": result["delivered"] / result["elapsed_s"],
                "ceiling_per_s": ceiling["delivered"] / ceiling["elapsed_s"],
            }
        )
    return rows


def _bounded_run(backend: str, path: Path, n: int, work_s: float) -> dict[str, Any]:
    consumer = Child("slow-consumer", backend=backend, path=str(path), n=n, work_s=work_s)
    producer: Child | None = None
    try:
        consumer.wait_ready()
        producer = Child("bounded-producer", backend=backend, path=str(path), n=n, capacity=100)
        result = consumer.result()
        producer.result()
    finally:
        consumer.kill()
        if producer is not None:
            producer.kill()
    return result


if __name__ == "__main__":
    main()
