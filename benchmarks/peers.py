"""Adapters for the peers: vsqs 0.3, dirq 1.8, persist-queue and litequeue.

vsqs 0.3 has the same import name as this project, so it is never installed: its sdist is
downloaded once into a cache directory and ``vsqs/queue.py`` is loaded as ``vsqs03_queue``.
Every other peer is an ordinary install from ``benchmarks/requirements-peers.txt``; a peer
that is missing is left out of the run (and the report says so).
"""

from __future__ import annotations

import abc
import functools
import importlib.util
import os
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from benchmarks.backends import Spec, prefill_ready_files

VSQS03: Final = "vsqs 0.3"
CACHE: Final = Path(os.environ.get("VSQS_BENCH_CACHE", Path(__file__).parent / ".cache"))


@functools.cache
def load_vsqs03() -> ModuleType:
    """Download (once) and import vsqs 0.3's ``queue.py`` under the name ``vsqs03_queue``."""
    src = CACHE / "vsqs-0.3" / "vsqs" / "queue.py"
    if not src.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        # A self-ignoring cache, as pytest's: nothing downloaded is ever committed or linted.
        (CACHE / ".gitignore").write_text("*\n")
        sdist = CACHE / "vsqs-0.3.tar.gz"
        if not sdist.exists():
            subprocess.run(
                [
                    *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
                    *("--no-binary", ":all:", "vsqs==0.3", "-d", str(CACHE)),
                ],
                check=True,
            )
        with tarfile.open(sdist) as tar:
            tar.extractall(CACHE, filter="data")
    spec = importlib.util.spec_from_file_location("vsqs03_queue", src)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {src}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["vsqs03_queue"] = module
    spec.loader.exec_module(module)
    return module


class _OneByOne(abc.ABC):
    """Batches for peers that have no batch API: one operation at a time."""

    @abc.abstractmethod
    def publish(self, data: bytes) -> None:
        """Publish one message."""

    @abc.abstractmethod
    def consume(self) -> bytes | None:
        """Receive and delete one message; ``None`` when none is ready."""

    def publish_batch(self, bodies: Sequence[bytes]) -> None:
        for data in bodies:
            self.publish(data)

    def consume_batch(self, n: int) -> int:
        got = 0
        while got < n and self.consume() is not None:
            got += 1
        return got


class Vsqs03Adapter(_OneByOne):
    """vsqs 0.3: lists and sorts the whole directory on every publish and receive."""

    def __init__(self, path: Path, *, capacity: int | None = None) -> None:
        mod = load_vsqs03()
        self.manager: Any = mod.QueueManager(str(path.parent))  # starts a watchdog observer
        self.q: Any = self.manager.get_queue(path.name, capacity=capacity)

    def publish(self, data: bytes) -> None:
        self.q.publish(data)

    def receive(self, timeout: float) -> tuple[str, bytes] | None:
        # Its visibility_timeout must be an int: a float expiry strands the message.
        mid, data = self.q.receive(visibility_timeout=60, timeout=timeout)
        return None if mid is None else (mid, data)

    def consume(self) -> bytes | None:
        # timeout=0 would return at once without looking; a short one looks exactly once.
        got = self.receive(0.001)
        if got is None:
            return None
        self.q.delete(got[0])
        return got[1]

    def close(self) -> None:
        self.q.close()
        self.manager.close()
        self.manager.observer.join(5)


class _DirqBase(_OneByOne):
    """dirq's consumer idiom: walk a cached listing, lock, get, remove; re-list when it runs dry."""

    q: Any

    @abc.abstractmethod
    def _read(self, name: str) -> bytes:
        """The body of the locked element *name* (the two dirq classes differ here)."""

    def consume(self) -> bytes | None:
        for attempt in range(2):  # the cached listing first, then one fresh listing
            name = self.q.next() if attempt == 0 else self.q.first()
            while name:
                if self.q.lock(name):
                    data = self._read(name)
                    self.q.remove(name)
                    return data
                name = self.q.next()
        return None

    def close(self) -> None:
        pass


class DirqSimpleAdapter(_DirqBase):
    def __init__(self, path: Path) -> None:
        from dirq.QueueSimple import QueueSimple

        self.q = QueueSimple(str(path))

    def publish(self, data: bytes) -> None:
        self.q.add(data)

    def _read(self, name: str) -> bytes:
        data: bytes = self.q.get(name)
        return data


class DirqQueueAdapter(_DirqBase):
    def __init__(self, path: Path) -> None:
        from dirq.queue import Queue

        self.q = Queue(str(path), schema={"body": "binary"})

    def publish(self, data: bytes) -> None:
        self.q.add({"body": data})

    def _read(self, name: str) -> bytes:
        data: bytes = self.q.get(name)["body"]
        return data


class PersistFileAdapter(_OneByOne):
    """persist-queue's file ``Queue``: chunk files; one process only (documented)."""

    def __init__(self, path: Path) -> None:
        import persistqueue

        self.q: Any = persistqueue.Queue(str(path), tempdir=str(path))

    def publish(self, data: bytes) -> None:
        self.q.put(data)

    def consume(self) -> bytes | None:
        import persistqueue

        try:
            data: bytes = self.q.get(block=False)
        except persistqueue.Empty:
            return None
        self.q.task_done()  # persists the new head
        return data

    def close(self) -> None:
        pass


class PersistAckAdapter(_OneByOne):
    """persist-queue's ``SQLiteAckQueue``: get, then ack."""

    def __init__(self, path: Path) -> None:
        import persistqueue

        path.mkdir(parents=True, exist_ok=True)
        self.q: Any = persistqueue.SQLiteAckQueue(str(path), auto_commit=True)

    def publish(self, data: bytes) -> None:
        self.q.put(data)

    def consume(self) -> bytes | None:
        import persistqueue

        try:
            data: bytes = self.q.get(block=False)
        except persistqueue.Empty:
            return None
        self.q.ack(data)
        return data

    def close(self) -> None:
        self.q.close()


class LiteQueueAdapter(_OneByOne):
    """litequeue: SQLite in WAL mode; text payloads only."""

    def __init__(self, path: Path) -> None:
        from litequeue import LiteQueue

        path.mkdir(parents=True, exist_ok=True)
        self.q: Any = LiteQueue(str(path / "queue.sqlite3"))

    def publish(self, data: bytes) -> None:
        self.q.put(data.decode())

    def consume(self) -> bytes | None:
        m = self.q.pop()
        if m is None:
            return None
        self.q.done(m.message_id)
        data: str = m.data
        return data.encode()

    def close(self) -> None:
        self.q.close()


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def peer_specs() -> list[Spec]:
    """The peers that can run here."""
    specs: list[Spec] = []
    if _installed("watchdog"):
        specs.append(
            Spec(
                VSQS03,
                Vsqs03Adapter,
                prefill_ready_files,
                notes=("backlog written as files in its own format; it fsyncs every publish",),
            )
        )
    if _installed("dirq"):
        specs += [
            Spec("dirq QueueSimple", DirqSimpleAdapter),
            Spec("dirq Queue", DirqQueueAdapter),
        ]
    if _installed("persistqueue"):
        specs += [
            Spec("persist-queue file", PersistFileAdapter, multiprocess=False),
            Spec("persist-queue sqlite-ack", PersistAckAdapter, multiprocess=False),
        ]
    if _installed("litequeue"):
        specs.append(Spec("litequeue", LiteQueueAdapter))
    return specs
