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
from collections import Counter
from pathlib import Path

import vsqs
from vsqs.testing import assert_consistent

from ._rig import Rig
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
    doomed_opts = {"durable": False, "visibility_timeout": LEASE, "poll_interval": 0.05}
    doomed = [
        spawn("publish", queue=str(dying / name), name="d", count=100_000,
              report=str(tmp_path / "p-d"), options=doomed_opts, pause=0.02),
        spawn("stream", queue=str(dying / name), report=str(tmp_path / "s-d"),
              stdin=subprocess.PIPE),
        *(spawn("consume", queue=str(dying / name), name=f"d{k}", report=str(tmp_path / f"c-d{k}"),
                stop=str(tmp_path / "never"), options=doomed_opts, hold=60) for k in range(2)),
    ]  # fmt: skip
    streamer = doomed[1]
    assert streamer.stdin is not None
    streamer.stdin.write(b"x" * 1000)
    streamer.stdin.flush()
    stop = tmp_path / "stop"
    live_opts = {"durable": False, "visibility_timeout": 30, "poll_interval": 0.05}
    survivors = [("a", owner), ("c", c)]
    publishers = [
        spawn("publish", queue=str(path), name=h, count=200, report=str(tmp_path / f"p-{h}"),
              options=live_opts, pause=0.01)
        for h, path in survivors
    ]  # fmt: skip
    consumers = [
        spawn("consume", queue=str(path), name=f"{h}{k}", report=str(tmp_path / f"c-{h}{k}"),
              stop=str(stop), options=live_opts, idle=LEASE + 2, hold=0.02)
        for h, path in survivors
        for k in range(2)
    ]  # fmt: skip
    time.sleep(1.0)
    deadline = time.monotonic() + 10  # die once each of its consumers holds a message
    while time.monotonic() < deadline and not all(
        read_report(tmp_path / f"c-d{k}") for k in range(2)
    ):
        time.sleep(0.1)
    for proc in doomed:  # the host dies: every process at once, then its view of the files
        proc.send_signal(signal.SIGKILL)
    for proc in doomed:
        proc.wait()
    streamer.stdin.close()
    sshfs_rig.unmount(dying, lazy=True)
    for proc in publishers:
        assert proc.wait(timeout=120) == 0  # the others never stall
    stop.touch()
    for proc in consumers:
        assert proc.wait(timeout=120) == 0

    published = {h: read_report(tmp_path / f"p-{h}") for h in ("a", "c", "d")}
    assert [
        rec for recs in published.values() for rec in recs if str(rec[1]).startswith("error")
    ] == []
    live = [
        rec for h, _ in survivors for k in range(2) for rec in read_report(tmp_path / f"c-{h}{k}")
    ]
    dead = [rec for k in range(2) for rec in read_report(tmp_path / f"c-d{k}")]
    got = Counter(str(rec[0]) for rec in live)
    assert [body for body, n in got.items() if n > 1] == []  # delivered once to the living
    expected = {f"{h}:{n}" for h in ("a", "c") for n in range(200)}
    expected |= {f"d:{rec[0]}" for rec in published["d"]}  # what the dead host was told
    seen = set(got) | {str(rec[0]) for rec in dead}
    assert expected <= seen, f"lost: {sorted(expected - seen)[:10]}"
    # What the dead consumers held when killed came back, to a living consumer, once.
    # Each dead consumer held its one message when killed: it came back, to one living
    # consumer, once, and is the only message received twice.
    assert 1 <= len(dead) <= 2
    came_back = sorted(str(rec[0]) for rec in live if int(rec[2]) > 1)
    assert came_back == sorted(str(rec[0]) for rec in dead)
    # The body streamed when the host died was never visible, and clean() removes it.
    assert read_report(tmp_path / "s-d") == [["streaming"]]
    queue = vsqs.Queue(owner)
    assert any(p.name.endswith(".new") for p in owner.iterdir())
    assert queue.clean(older_than=0) >= 1
    assert_consistent(queue)
    assert sorted(p.name for p in owner.iterdir() if p.name != ".vsqs") == []
