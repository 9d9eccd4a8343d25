"""No flush system call on a memory filesystem, every flush elsewhere (issue 36).

On tmpfs and ramfs nothing reaches stable storage whatever is flushed (their ``fsync``
is the kernel's ``noop_fsync``; ``syncfs`` writes nothing back), so vsqs makes none
there; on a disk each durable step still flushes. Observed from outside: a child
process runs every durable operation that flushes, each in a phase of its own, under
``strace``, which records each ``fsync``, ``fdatasync`` and ``syncfs`` the kernel is
asked for (the child's threads included) and a ``chdir`` to a path that does not exist,
the mark of each phase's start. ``strace`` comes from Debian's package
(``tests/reliability/setup-filesystems.sh``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from vsqs import _mountinfo

from ..fixtures_core import CHILD_TIMEOUT
from ._mounts import SETUP_HINT, filesystem_of, mounted, why_not_mountable

FLUSHES: Final = ("fsync", "fdatasync", "syncfs")
PHASE: Final = "/nonexistent-vsqs-phase-"

# Every durable operation that flushes, one phase each (the queue's creation included).
CHILD: Final = f"""
import os, sys
import vsqs
from vsqs.testing import ManualClock

def phase(name):
    try:
        os.chdir({PHASE!r} + name)  # fails: only its trace matters
    except FileNotFoundError:
        pass

where = sys.argv[1]
phase("create")
clock = ManualClock()
dlq = vsqs.Queue(where + "/dlq", clock=clock)
q = vsqs.Queue(where + "/q", clock=clock, visibility_timeout=1, dead_letter=dlq, max_receives=1)
phase("publish")
q.publish(b"one")
phase("publish-attributes")
q.publish(b"two", attributes={{"kind": "x"}})
phase("publish-dedup")
q.publish(b"three", dedup_id="three")
phase("publish_batch")
q.publish_batch([b"b"] * 10)
phase("publish_batch-dedup_ids")
q.publish_batch([b"d"] * 10, dedup_ids=[f"d{{i}}" for i in range(10)])
phase("publish_batch-batch_dedup_id")
q.publish_batch([b"c"] * 10, batch_dedup_id="job")
phase("publish_file")
with open(where + "/body", "wb") as body:
    body.write(b"file")
q.publish_file(where + "/body")
phase("dead-letter")
received = q.receive(timeout=0)
assert received is not None
clock.advance(2)
while q.receive(timeout=0) is not None:  # the poisoned message moves to the dead-letter queue
    clock.advance(2)
assert dlq.counts().ready >= 1, dlq.counts()
phase("redrive")
assert dlq.redrive(to=where + "/q") >= 1
phase("end")
"""
PHASES: Final = re.findall(r'phase\("([^"]+)"\)', CHILD)


def _flushes_by_phase(directory: Path) -> dict[str, list[str]]:
    """Run :data:`CHILD` on *directory* under strace: the flush system calls of each
    phase (the child failing fails the test)."""
    if shutil.which("strace") is None:
        pytest.skip(f"strace is not installed; {SETUP_HINT}")
    trace = directory / "trace"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-e", "signal=none", "-e", f"trace=chdir,{','.join(FLUSHES)}",
         "-o", str(trace), sys.executable, "-c", CHILD, str(directory)],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    by_phase: dict[str, list[str]] = {}
    current: list[str] = []
    for line in trace.read_text().splitlines():
        marked = re.search(r'chdir\("' + re.escape(PHASE) + r'([^"]+)"', line)
        if marked:
            current = by_phase.setdefault(marked[1], [])
            continue
        call = re.match(r"\d+\s+(\w+)\(", line)  # not "<... fsync resumed>": counted once
        if call and call[1] in FLUSHES:
            current.append(line)
    assert list(by_phase) == PHASES, by_phase
    return by_phase


@pytest.fixture
def dev_shm() -> Iterator[Path]:
    """A fresh directory in ``/dev/shm`` (tmpfs)."""
    if filesystem_of(Path("/dev/shm")) != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    where = Path(tempfile.mkdtemp(prefix="vsqs-memflush-", dir="/dev/shm"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


def test_no_flush_system_call_on_tmpfs(dev_shm: Path) -> None:
    """A durable queue on tmpfs: creating it, every kind of publish, a dead-letter move
    and a redrive make no fsync, fdatasync nor syncfs at all."""
    assert _flushes_by_phase(dev_shm) == {name: [] for name in PHASES}


@pytest.mark.root
def test_no_flush_system_call_on_ramfs(tmp_path: Path) -> None:
    """The same on ramfs (memory without a size limit)."""
    reason = why_not_mountable("ramfs")
    if reason is not None:
        pytest.skip(f"cannot test on ramfs: {reason}")
    with mounted("ramfs", tmp_path) as mountpoint:
        assert filesystem_of(mountpoint) == "ramfs"
        flushes = _flushes_by_phase(mountpoint)
    assert flushes == {name: [] for name in PHASES}


def test_every_durable_step_still_flushes_on_a_disk(disk_tmp_path: Path) -> None:
    """A durable queue on a disk (the temporary directory's ext4 or xfs...): each phase
    makes at least one flush system call (the end mark excepted)."""
    flushes = _flushes_by_phase(disk_tmp_path)
    assert [name for name in PHASES[:-1] if not flushes[name]] == [], flushes
    assert flushes["end"] == []


@pytest.mark.parametrize(
    ("fstype", "memory"),
    [("tmpfs", True), ("ramfs", True), ("ext4", False), ("xfs", False), ("btrfs", False),
     ("fuse", False), ("fuse.sshfs", False), ("fuse.juicefs", False), ("fuseblk", False),
     ("nfs", False), ("nfs4", False), ("overlay", False), ("", False)],
)  # fmt: skip
def test_only_tmpfs_and_ramfs_skip_their_flushes(fstype: str, memory: bool) -> None:
    """Disks, every FUSE filesystem (the power-loss one of ``tests/powerloss`` included),
    network filesystems, overlays and a type that cannot be told keep every flush."""
    assert _mountinfo.in_memory(fstype) is memory
