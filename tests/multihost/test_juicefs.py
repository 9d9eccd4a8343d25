"""Three hosts on JuiceFS: one volume (Redis metadata, a local object store) mounted three
times, each mount its own client with its own caches and session.

First what vsqs relies on, checked on the volume itself: ``flock`` is shared between
clients (unlike sshfs), ``renameat2(RENAME_NOREPLACE)`` and ``O_EXCL`` decide on the
metadata server (no link-then-unlink fallback), and inotify sees no other client's
change (so ``wait="auto"`` polls). Then real publisher and consumer processes on every
host: exactly once, consumers killed while they hold messages, and ``fifo=True``
consumed from all three hosts with one message in flight per group.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import os
import select
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import vsqs
from vsqs import _fs, _host, _inotify, _mountinfo
from vsqs.testing import assert_consistent

from ._runs import check_exactly_once, run_hosts
from ._workers import read_report, spawn
from .test_exclusive_create import race_for_names

PER_HOST = 200
LEASE = 3.0
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _renameat2_noreplace(src: Path, dst: Path) -> int:
    """The system call itself (no fallback): 0, or the errno it failed with."""
    if _libc.renameat2(-100, bytes(src), -100, bytes(dst), 1) == 0:  # RENAME_NOREPLACE
        return 0
    return ctypes.get_errno()


def test_what_vsqs_relies_on_holds_across_juicefs_clients(
    juicefs_hosts: tuple[Path, Path, Path],
) -> None:
    """flock is exclusive across clients; a no-replace rename is atomic and refuses a name
    another client made; listings are fresh; inotify sees only its own client's changes,
    so vsqs polls."""
    a, b, c = juicefs_hosts
    a.mkdir()
    assert _host.filesystem_type(str(b)) == "fuse.juicefs"
    assert _mountinfo.polls("fuse.juicefs")  # wait="auto" polls here
    lock_a, lock_b = (os.open(p / "lock", os.O_RDWR | os.O_CREAT) for p in (a, b))
    try:
        assert _fs.try_lock(lock_a)
        assert not _fs.try_lock(lock_b)  # held by another client: refused
        _fs.unlock(lock_a)
        assert _fs.try_lock(lock_b)
        assert not _fs.try_lock(lock_a)
    finally:
        os.close(lock_a)
        os.close(lock_b)
    for name in ("x", "taken"):
        (c / name).write_bytes(name.encode())
    assert _renameat2_noreplace(b / "x", b / "taken") == errno.EEXIST
    assert (a / "taken").read_bytes() == b"taken"
    assert _renameat2_noreplace(b / "x", b / "moved") == 0
    assert (c / "moved").read_bytes() == b"x"
    # Listings are asked of the server; C may still find "x" by name for up to the entry
    # cache (1 s), but decides nothing by it: renames and unlinks are the server's.
    assert sorted(os.listdir(c)) == ["lock", "moved", "taken"]
    watch = _inotify.init()
    try:
        _inotify.add_watch(watch, str(a))
        os.rename(b / "moved", b / "1")  # another client: no event
        assert select.select([watch], [], [], 0.5)[0] == []
        os.rename(a / "1", a / "2")  # this client: an event
        assert select.select([watch], [], [], 5)[0] == [watch]
    finally:
        os.close(watch)


def test_names_raced_for_by_two_clients_go_to_one(juicefs_hosts: tuple[Path, Path, Path]) -> None:
    """600 exclusive creates, then 600 no-replace renames, of the same names from two
    clients at once: each name made once, the loser told ``FileExistsError``, nothing else."""
    a, b, c = juicefs_hosts
    a.mkdir()
    for mode in ("create", "move"):
        (a / mode).mkdir()
        race_for_names(b / mode, c / mode, mode)


def test_three_juicefs_hosts_exactly_once_fifo(
    juicefs_hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A publisher and two consumers per host: 0 errors, 0 lost, 0 twice, FIFO per producer."""
    published, consumed = run_hosts(juicefs_hosts, tmp_path, PER_HOST)
    check_exactly_once(published, consumed, PER_HOST)
    owner = juicefs_hosts[0]
    assert_consistent(vsqs.Queue(owner))
    assert sorted(p.name for p in owner.iterdir() if p.name != ".vsqs") == []
    for h in range(3):  # every host claimed some of what the others published
        assert len(consumed[f"h{h}c0"]) + len(consumed[f"h{h}c1"]) > 0


def test_killed_consumers_messages_come_back_once(
    juicefs_hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A consumer per host is SIGKILLed holding a message: after the visibility timeout
    each of those comes back to a living consumer, once; nothing else is received twice."""
    vsqs.Queue(juicefs_hosts[0])
    stop = tmp_path / "stop"
    doomed_opts = {"durable": False, "visibility_timeout": LEASE, "poll_interval": 0.05}
    live_opts = {**doomed_opts, "visibility_timeout": 60}
    doomed = [
        spawn("consume", queue=str(path), name=f"d{h}", report=str(tmp_path / f"c-d{h}"),
              stop=str(stop), options=doomed_opts, hold=60)
        for h, path in enumerate(juicefs_hosts)
    ]  # fmt: skip
    live = [
        spawn("consume", queue=str(path), name=f"h{h}c{k}", report=str(tmp_path / f"c-h{h}c{k}"),
              stop=str(stop), options=live_opts, idle=LEASE + 3, hold=0.01)
        for h, path in enumerate(juicefs_hosts)
        for k in range(2)
    ]  # fmt: skip
    publishers = [
        spawn("publish", queue=str(path), name=f"h{h}", count=100,
              report=str(tmp_path / f"p-h{h}"), options=live_opts, pause=0.005)
        for h, path in enumerate(juicefs_hosts)
    ]  # fmt: skip
    deadline = time.monotonic() + 60  # kill each once it holds its one message
    while time.monotonic() < deadline and not all(
        read_report(tmp_path / f"c-d{h}") for h in range(3)
    ):
        time.sleep(0.05)
    for proc in doomed:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for proc in publishers:
        assert proc.wait(timeout=120) == 0
    stop.touch()
    for proc in live:
        assert proc.wait(timeout=120) == 0

    published = {f"h{h}": read_report(tmp_path / f"p-h{h}") for h in range(3)}
    assert [r for recs in published.values() for r in recs if str(r[1]).startswith("error")] == []
    dead = sorted(str(r[0]) for h in range(3) for r in read_report(tmp_path / f"c-d{h}"))
    assert len(dead) == 3
    got = [r for h in range(3) for k in range(2) for r in read_report(tmp_path / f"c-h{h}c{k}")]
    counts = Counter(str(r[0]) for r in got)
    assert [body for body, n in counts.items() if n > 1] == []
    assert set(counts) == {f"h{h}:{n}" for h in range(3) for n in range(100)}
    assert sorted(str(r[0]) for r in got if int(r[2]) > 1) == dead  # came back, once each
    assert_consistent(vsqs.Queue(juicefs_hosts[0]))


def test_a_file_another_client_removes_while_it_is_read_reads_as_gone(
    juicefs_hosts: tuple[Path, Path, Path],
) -> None:
    """JuiceFS answers a read of a file that another client removed (or replaced) after
    this one opened it with EBADF, about one read in four; vsqs reads it as gone, as a
    file removed before it was opened, never as a fault (a ``fifo`` claim reads the
    metadata of held messages, which their holders on other hosts delete meanwhile)."""
    a, b, _ = juicefs_hosts
    a.mkdir()
    gone = 0
    for n in range(400):
        name = f"meta-{n}"
        (b / name).write_bytes(b"metadata")
        fd = _fs.open_regular(str(a / name))  # opened by A before B removes it
        try:
            if n % 2:
                (b / "new").write_bytes(b"other")
                os.rename(b / "new", b / name)
            else:
                os.unlink(b / name)
            try:
                body, _ = _fs.read_opened(fd, name)
            except FileNotFoundError:
                gone += 1
            else:
                assert body == b"metadata"  # this client still had its data
        finally:
            os.close(fd)
        if gone >= 20:
            break
    assert gone >= 20  # the race was met, not just the reads that still succeed


def test_fifo_one_in_flight_per_group_across_hosts(
    juicefs_hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """``fifo=True`` consumed from three hosts at once: a group's next message is received
    only after its previous one was deleted, whichever host held it (JuiceFS shares the
    partition's ``flock`` between clients), in publish order; exactly once."""
    per_host, groups = 60, 3
    vsqs.Queue(juicefs_hosts[0], fifo=True, partitions=4).close()
    options = {"durable": False, "visibility_timeout": 60, "poll_interval": 0.05}
    stop = tmp_path / "stop"
    consumers = [
        spawn("consume_in_turn", queue=str(path), report=str(tmp_path / f"c-h{h}c{k}"),
              stop=str(stop), options=options, hold=0.02)
        for h, path in enumerate(juicefs_hosts)
        for k in range(2)
    ]  # fmt: skip
    publishers = [
        spawn("publish", queue=str(path), name=f"h{h}", count=per_host, groups=groups,
              report=str(tmp_path / f"p-h{h}"), options=options)
        for h, path in enumerate(juicefs_hosts)
    ]  # fmt: skip
    for proc in publishers:
        assert proc.wait(timeout=120) == 0
    stop.touch()
    for proc in consumers:
        assert proc.wait(timeout=300) == 0

    records = [
        (rec, f"h{h}")
        for h in range(3)
        for k in range(2)
        for rec in read_report(tmp_path / f"c-h{h}c{k}")
    ]
    bodies = Counter(str(rec[0]) for rec, _ in records)
    assert set(bodies) == {f"h{h}:{n}" for h in range(3) for n in range(per_host)}
    assert [body for body, n in bodies.items() if n > 1] == []
    by_group: dict[str, list[tuple[float, float, int, str]]] = defaultdict(list)
    for (body, group, got, released), host in records:
        producer, _, n = str(body).partition(":")
        assert group == f"{producer}.{int(n) % groups}"
        by_group[str(group)].append((float(got), float(released), int(n), host))
    overlaps, disorder, hosts_seen = [], [], set()
    for group, turns in by_group.items():
        turns.sort()
        hosts_seen |= {host for _, _, _, host in turns}
        for earlier, later in itertools.pairwise(turns):
            if later[0] < earlier[1]:  # received before the previous one was released
                overlaps.append((group, earlier, later))
            if later[2] < earlier[2]:
                disorder.append((group, earlier, later))
    assert (overlaps[:5], disorder[:5]) == ([], [])
    assert hosts_seen == {"h0", "h1", "h2"}
    with vsqs.Queue(juicefs_hosts[0]) as queue:
        assert_consistent(queue)
