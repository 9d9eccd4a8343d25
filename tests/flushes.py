"""Watching ``syncfs`` from tests: every call numbered, the first one held, some failed.

libc's ``syncfs`` is replaced by a wrapper (:class:`Syncfs`) that calls the real one and
records when it started and ended, the way ``tests/mutation/test_flush.py`` replaces it:
the sharing logic of :mod:`vsqs._flush` that runs above it is the real one. Every event
takes a number from one counter (:class:`Events`), so "started after" is exact.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from vsqs import _flush, _libc

from .fixtures_core import CHILD_TIMEOUT, patch_fs, wait_until


@dataclass
class Events:
    """Numbered events of every ``syncfs`` and every caller, from one counter."""

    counter: Iterator[int] = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)
    syncfs: list[tuple[int, int]] = field(default_factory=list)  # (started, ended)
    calls: list[tuple[int, int, bool]] = field(default_factory=list)  # (asked, returned, ok)

    def tick(self) -> int:
        with self.lock:
            return next(self.counter)

    def uncovered(self) -> list[tuple[int, int, bool]]:
        """The calls that returned without a ``syncfs`` that started after they asked and
        ended before they returned."""
        return [
            call
            for call in self.calls
            if not any(call[0] < start and end < call[1] for start, end in self.syncfs)
        ]


class Interrupted(Exception):
    """What a wrapped ``syncfs`` raises when told to: its caller never saw its result."""


class Syncfs:
    """libc's ``syncfs`` wrapped: each call recorded in *events*; the first one held
    until :meth:`release` if *hold*; the calls numbered in *failing* (0: the first) fail
    with EIO after the real flush, as a write-back error would; those in *interrupted*
    raise :class:`Interrupted` after it, as a signal handler's exception could. The
    filesystem (``st_dev``) of each call's descriptor lands in :attr:`devices`."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        events: Events,
        *,
        hold: bool = False,
        failing: frozenset[int] = frozenset(),
        interrupted: frozenset[int] = frozenset(),
    ) -> None:
        self.real: Callable[[int], int] = _libc.syncfs()
        self.events = events
        self.held = threading.Event()  # the first call is inside
        self._release = threading.Event()
        if not hold:
            self._release.set()
        self.failing = failing
        self.interrupted = interrupted
        self.count = 0
        self.devices: list[int] = []
        monkeypatch.setattr(_libc, "syncfs", lambda: self)

    def release(self) -> None:
        self._release.set()

    def __call__(self, fd: int) -> int:
        started = self.events.tick()
        with self.events.lock:
            number, self.count = self.count, self.count + 1
            self.devices.append(os.fstat(fd).st_dev)
        if number == 0:
            self.held.set()
            assert self._release.wait(CHILD_TIMEOUT), "the held syncfs was never released"
        result = self.real(fd)
        if number in self.failing:
            ctypes.set_errno(errno.EIO)
            result = -1
        with self.events.lock:
            self.events.syncfs.append((started, next(self.events.counter)))
        if number in self.interrupted:
            raise Interrupted
        return int(result)


def record_callers(monkeypatch: pytest.MonkeyPatch, events: Events) -> None:
    """Record when each call of ``_fs.sync_filesystem`` asked and returned (around the
    real one; a batch calls it once its bodies are written)."""
    real = _flush.sync_filesystem

    def recorded(path: str) -> bool:
        asked = events.tick()
        ok = False
        try:
            done = real(path)
            ok = True
            return done
        finally:
            events.calls.append((asked, events.tick(), ok))

    patch_fs(monkeypatch, "sync_filesystem", recorded)


def waiting_on_shared_syncfs() -> int:
    """How many threads of this process wait on a shared ``syncfs`` (their innermost
    frame ``Condition.wait``, called from :mod:`vsqs._flush`): the callers a running
    ``syncfs`` cannot answer, whose own round has not started."""
    waiting = 0
    for frame in sys._current_frames().values():
        caller = frame.f_back
        if (
            frame.f_code is threading.Condition.wait.__code__
            and caller is not None
            and caller.f_code.co_filename == _flush.__file__
        ):
            waiting += 1
    return waiting


def run_threads(calls: Sequence[Callable[[], Any]]) -> tuple[list[threading.Thread], list[object]]:
    """Start a thread for each of *calls*; their results (or exceptions) land in the list."""
    results: list[object] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as exc:  # noqa: BLE001 - the test looks at each thread's outcome
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, results


def join_threads(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(CHILD_TIMEOUT)
        assert not thread.is_alive(), "a caller never returned"


def held_then_joined(
    syncfs: Syncfs,
    first: Callable[[], Any],
    others: Sequence[Callable[[], Any]],
    waiting: int | None = None,
) -> list[object]:
    """Run *first* until its ``syncfs`` is held, then *others* until as many threads
    (theirs, or a server's working for them; or *waiting*, if fewer reach it) wait on
    the shared one; release; the results, *first*'s first."""
    leader, led = run_threads([first])
    assert syncfs.held.wait(CHILD_TIMEOUT), "the first caller never reached syncfs"
    threads, results = run_threads(others)
    joining = len(others) if waiting is None else waiting
    wait_until(
        lambda: waiting_on_shared_syncfs() >= joining, "the others to wait on the shared syncfs"
    )
    syncfs.release()
    join_threads(leader + threads)
    return led + results
