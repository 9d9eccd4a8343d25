"""The adapter protocol, the raw syscall floor, the vsqs adapters and the backend registry.

Every backend is reduced to four calls so that one runner can time them all alike:
``publish``, ``publish_batch``, ``consume`` (receive + delete one) and ``consume_batch``.
Peers live in ``benchmarks.peers``; this module only knows them through ``SPECS``.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final, Protocol

BODY_SIZE: Final = 100
BATCH: Final = 100
PREFILL_BASE_US: Final = 1_500_000_000_000_000
"""Backlog ids start here (2017): older than anything published live, so FIFO drains them first."""


def body(n: int = 0) -> bytes:
    """A payload of ``BODY_SIZE`` bytes that starts with the send time (for latency runs)."""
    head = f"{time.time():.6f} {n} ".encode()
    return head + b"x" * (BODY_SIZE - len(head))


class Adapter(Protocol):
    """One open queue of one backend, used by a single thread."""

    def publish(self, data: bytes) -> None: ...
    def publish_batch(self, bodies: Sequence[bytes]) -> None: ...
    def consume(self) -> bytes | None:
        """Receive and delete the oldest message; ``None`` when the queue looks empty."""
        ...

    def consume_batch(self, n: int) -> int:
        """Receive and delete up to *n* messages; return how many."""
        ...

    def close(self) -> None: ...


Prefill = Callable[[Path, int], None]


@dataclass(frozen=True)
class Spec:
    """How to open a backend, and what it can be asked to do."""

    name: str
    open: Callable[[Path], Adapter]
    prefill: Prefill | None = None
    """A fast way to build a backlog in the backend's own on-disk format; else its API is used."""
    multiprocess: bool = True
    """False for queues that document themselves as single-process (skipped in the 2P+2C run)."""
    native_batch: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


def prefill_ready_files(path: Path, n: int) -> None:
    """Create *n* ready messages named ``<16-digit µs id>``: the seed's format (vsqs, vsqs 0.3)."""
    path.mkdir(parents=True, exist_ok=True)
    data = body()
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    base = PREFILL_BASE_US
    for i in range(n):
        fd = os.open(os.path.join(path, str(base + i)), flags, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


class RawNames:
    """The floor's knowledge of the directory: the ready names in order and the next id."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        names = sorted(int(n) for n in os.listdir(path) if n.isdigit())
        self.ready: collections.deque[int] = collections.deque(names)
        self.next_id = max(int(time.time() * 1e6), names[-1] + 1 if names else 0)


class RawFloor:
    """The bare syscalls of the state machine, with every name known in advance.

    publish: ``open(<id>.new, O_CREAT|O_EXCL|O_WRONLY)`` + write + [fsync] + close + rename
    to ``<id>`` [+ fsync of the directory]. consume: rename ``<id>`` to ``<id>.<expiry>`` +
    open/read/close + unlink. The names of a prefilled backlog are learnt by one listing when
    the queue is opened (untimed); after that nothing is listed.
    """

    def __init__(self, path: Path, *, fsync: bool = False, names: RawNames | None = None) -> None:
        self.names = names if names is not None else RawNames(path)
        self.dir = str(path)
        self.fsync = fsync
        self.dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def durable(self) -> RawFloor:
        """A view of the same directory and names that fsyncs on publish."""
        return RawFloor(Path(self.dir), fsync=True, names=self.names)

    def _write(self, data: bytes) -> None:
        names = self.names
        mid = names.next_id
        names.next_id += 1
        tmp = f"{self.dir}/{mid}.new"
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, f"{self.dir}/{mid}")
        names.ready.append(mid)

    def publish(self, data: bytes) -> None:
        self._write(data)
        if self.fsync:
            os.fsync(self.dir_fd)

    def publish_batch(self, bodies: Sequence[bytes]) -> None:
        for data in bodies:
            self._write(data)
        if self.fsync:
            os.fsync(self.dir_fd)  # one directory fsync makes the whole batch durable

    def consume(self) -> bytes | None:
        ready = self.names.ready
        if not ready:
            return None
        mid = ready.popleft()
        held = f"{self.dir}/{mid}.{int(time.time() * 1e6) + 30_000_000}"
        os.rename(f"{self.dir}/{mid}", held)
        fd = os.open(held, os.O_RDONLY)
        try:
            data = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        os.unlink(held)
        return data

    def consume_batch(self, n: int) -> int:
        got = 0
        while got < n and self.consume() is not None:
            got += 1
        return got

    def close(self) -> None:
        os.close(self.dir_fd)


class VsqsAdapter:
    """vsqs 1.x from this repository."""

    def __init__(self, path: Path, *, durable: bool) -> None:
        import vsqs

        self.q = vsqs.Queue(path, durable=durable, visibility_timeout=60.0)

    def publish(self, data: bytes) -> None:
        self.q.publish(data)

    def publish_batch(self, bodies: Sequence[bytes]) -> None:
        self.q.publish_batch(bodies)

    def consume(self) -> bytes | None:
        m = self.q.receive(timeout=0)
        if m is None:
            return None
        self.q.delete(m)
        return m.body

    def consume_batch(self, n: int) -> int:
        ms = self.q.receive_batch(n, timeout=0)
        if ms:
            self.q.delete_batch(ms)
        return len(ms)

    def claim_misses(self) -> int | None:
        return claim_misses(self.q)

    def close(self) -> None:
        self.q.detach()


def claim_misses(q: object) -> int | None:
    """Failed claims (renames that lost a race) so far, where the queue counts them."""
    for owner, attr in ((q, "claim_misses"), (getattr(q, "_consumer", None), "claim_misses")):
        value = getattr(owner, attr, None)
        if isinstance(value, int):
            return value
    return None


def vsqs_available() -> bool:
    try:
        import vsqs
    except ImportError:
        return False
    return hasattr(vsqs, "Queue")


FLOOR: Final = "raw"
FLOOR_FSYNC: Final = "raw+fsync"
VSQS: Final = "vsqs"
VSQS_DURABLE: Final = "vsqs durable"


def core_specs() -> list[Spec]:
    """The backends that need nothing from PyPI: the floor and vsqs itself."""
    specs = [
        Spec(FLOOR, RawFloor, prefill_ready_files, multiprocess=False),
        Spec(FLOOR_FSYNC, partial(RawFloor, fsync=True), prefill_ready_files, multiprocess=False),
    ]
    if vsqs_available():
        fast, durable = partial(VsqsAdapter, durable=False), partial(VsqsAdapter, durable=True)
        specs += [
            Spec(VSQS, fast, prefill_ready_files, native_batch=True),
            Spec(VSQS_DURABLE, durable, prefill_ready_files, native_batch=True),
        ]
    return specs


def all_specs(*, peers: bool) -> list[Spec]:
    """Every backend that can run here; peers that are not installed are left out."""
    specs = core_specs()
    if peers:
        from benchmarks.peers import peer_specs

        specs += peer_specs()
    return specs


def spec_by_name(name: str) -> Spec:
    for spec in all_specs(peers=True):
        if spec.name == name:
            return spec
    raise KeyError(name)
