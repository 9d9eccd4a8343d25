"""A host dies mid-run: every process of it is killed with SIGKILL and its mount dropped.

The dying host publishes, consumes (each consumer holds the message it got) and streams a large
body that never ends; then all its processes get SIGKILL and its sshfs view is unmounted
lazily (``fusermount -uz``), as when a machine loses power. The other two hosts go on
publishing and consuming throughout.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import vsqs
from vsqs.testing import assert_consistent

from ._rig import Rig
from ._runs import (
    check_after_death,
    finish_survivors,
    start_dying_host,
    start_survivors,
    wait_until_dying_host_holds,
)
from ._workers import read_report, spawn

LEASE = 3.0


def test_a_dying_host_loses_nothing_and_stalls_no_one(
    sshfs_rig: Rig, hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Its held messages come back once; its `.new` is never seen and clean() removes it."""
    owner, _, c = hosts
    name = owner.name
    dying = sshfs_rig.mount(f"dying-{name}")
    vsqs.Queue(owner)
    doomed = start_dying_host(dying / name, tmp_path, LEASE)
    doomed.insert(1, spawn("stream", queue=str(dying / name), report=str(tmp_path / "s-d"),
                           stdin=subprocess.PIPE))  # fmt: skip
    streamer = doomed[1]
    assert streamer.stdin is not None
    streamer.stdin.write(b"x" * 1000)
    streamer.stdin.flush()
    stop = tmp_path / "stop"
    publishers, consumers = start_survivors([("a", owner), ("c", c)], tmp_path, stop, LEASE)
    wait_until_dying_host_holds(tmp_path)
    # And until its streamer has begun the body (said so, and its `.new` is there): killed
    # before that, there would be nothing half-written to find.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        read_report(tmp_path / "s-d") and any(p.name.endswith(".new") for p in owner.iterdir())
    ):
        time.sleep(0.05)
    for proc in doomed:  # the host dies: every process at once, then its view of the files
        proc.send_signal(signal.SIGKILL)
    for proc in doomed:
        proc.wait()
    streamer.stdin.close()
    sshfs_rig.unmount(dying, lazy=True)
    finish_survivors(publishers, consumers, stop)

    told, dead = check_after_death(tmp_path, "ac")
    assert told == read_report(tmp_path / "p-d")  # its mount never failed it
    assert 1 <= len(dead) <= 2
    # The body streamed when the host died was never visible, and clean() removes it.
    assert read_report(tmp_path / "s-d") == [["streaming"]]
    queue = vsqs.Queue(owner)
    assert any(p.name.endswith(".new") for p in owner.iterdir())
    assert queue.clean(older_than=0) >= 1
    assert_consistent(queue)
    assert sorted(p.name for p in owner.iterdir() if p.name != ".vsqs") == []
