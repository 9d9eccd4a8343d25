"""Helpers of the core test modules: child processes, descriptor counts, bounded waits.

Children are started with the ``spawn`` method (a fresh interpreter, as on macOS and as
Python 3.14 defaults to), so what they prove does not depend on memory inherited by fork.
Every wait here is bounded: a child that never wakes fails the test instead of hanging it.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final

SPAWN: Final = multiprocessing.get_context("spawn")
CHILD_TIMEOUT: Final = 60.0
"""Seconds a child may take; a generous bound against hangs, not a speed assertion."""


def fd_targets(pid: int | str = "self") -> list[str]:
    """What every open descriptor of a process points to (``/proc/<pid>/fd``)."""
    directory = f"/proc/{pid}/fd"
    targets = []
    for name in os.listdir(directory):
        try:
            targets.append(os.readlink(f"{directory}/{name}"))
        except FileNotFoundError:
            continue  # RACE: closed between the listing and the readlink (by another thread)
    return targets


def inotify_fds(pid: int | str = "self") -> int:
    """How many inotify descriptors a process holds."""
    return sum(1 for target in fd_targets(pid) if target == "anon_inode:inotify")


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = CHILD_TIMEOUT) -> None:
    """Poll *predicate* until it holds; fail the test after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def _sleeping(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        state = handle.read().rpartition(")")[2].split()[0]
    return state == "S"


def wait_blocked_in_inotify(process: BaseProcess) -> None:
    """Wait until a child has its inotify descriptor and sleeps (blocked in the kernel).

    The queue creates the descriptor inside its first wait, so its presence means the
    child got as far as waiting; a sleeping state means it is waiting now. A child that
    finds its message earlier is not a failure of the test: it only waited less.
    """
    pid = process.pid
    assert pid is not None
    wait_until(lambda: not process.is_alive() or inotify_fds(pid) > 0, "the child's inotify fd")
    wait_until(lambda: not process.is_alive() or _sleeping(pid), "the child to block")


class Children:
    """Start spawned children; on exit, kill any still running (so no test leaves one)."""

    def __init__(self, method: str = "spawn") -> None:
        self.context: Any = multiprocessing.get_context(method)
        self.processes: list[BaseProcess] = []

    def start(self, target: Callable[..., object], *args: Any) -> BaseProcess:
        process: BaseProcess = self.context.Process(target=target, args=args, daemon=True)
        process.start()
        self.processes.append(process)
        return process

    def join(self, process: BaseProcess, timeout: float = CHILD_TIMEOUT) -> None:
        """Wait for *process* and fail unless it exited with status 0."""
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise AssertionError(f"child {process.name} still running after {timeout} s")
        assert process.exitcode == 0, f"child {process.name} exited with {process.exitcode}"

    def join_all(self, timeout: float = CHILD_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        for process in self.processes:
            self.join(process, max(0.1, deadline - time.monotonic()))

    def kill_all(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join()


@contextmanager
def children(method: str = "spawn") -> Iterator[Children]:
    """``with children() as kids: kids.start(fn, ...)``; stragglers are killed at exit."""
    kids = Children(method)
    try:
        yield kids
    finally:
        kids.kill_all()


def count_listings(monkeypatch: Any) -> list[str]:
    """Record every directory listing (``vsqs._scan.scan``, observed, not replaced) made
    from now on: the list of the paths listed, which grows as they are listed."""
    from vsqs import _scan

    listings: list[str] = []
    real_scan = _scan.scan

    def counted(path: str) -> _scan.Listing:
        listings.append(path)
        return real_scan(path)

    monkeypatch.setattr(_scan, "scan", counted)
    return listings


def patch_fs(monkeypatch: Any, name: str, value: Callable[..., Any]) -> None:
    """Stand *value* in for ``vsqs._fs.<name>``, and for the same function in
    ``vsqs._flush`` when it is one of the flushes ``_fs`` re-exports (so that calls made
    inside ``_flush``, such as ``sync_files`` calling ``sync_filesystem``, see it too)."""
    from vsqs import _flush, _fs

    monkeypatch.setattr(_fs, name, value)
    if name in _flush.__all__:
        monkeypatch.setattr(_flush, name, value)


def run_benchmark(
    module: str, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m benchmarks.<module> *args`` from the checkout; assert it exited 0
    (a benchmark checks its own runs and exits 1 on a lost or doubled message)."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done
