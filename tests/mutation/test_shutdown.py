"""Guarantees of vsqs._shutdown that ``make mutate`` found unguarded (docs/reliability.rst,
"Mutation testing"): each test fails on the mutant named in its docstring."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs


def _trace_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``fsync:<file>`` and ``fsync_dir:<directory>`` for every flush from now on."""
    calls: list[str] = []
    real_fsync: Callable[[int], None] = _fs.fsync
    real_fsync_dir: Callable[[str], None] = _fs.fsync_dir

    def fsync(fd: int) -> None:
        calls.append("fsync:" + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def fsync_dir(path: str, *args: Any) -> None:
        calls.append(f"fsync_dir:{path}")
        real_fsync_dir(path, *args)

    patch_fs(monkeypatch, "fsync", fsync)
    patch_fs(monkeypatch, "fsync_dir", fsync_dir)
    return calls


def test_a_durable_shutdown_flushes_its_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a durable queue, ``shutdown()`` flushes ``.vsqs/closed`` (its content, the time
    of the shutdown) before it returns (mutant: the marker created with ``durable=None``)."""
    queue = vsqs.Queue(tmp_path / "q", clock=ManualClock())
    calls = _trace_syncs(monkeypatch)
    queue.shutdown()
    marker = str(Path(queue.path, ".vsqs", "closed"))
    assert f"fsync:{marker}" in calls


def test_a_non_durable_shutdown_flushes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable=False`` makes no sync call at all, a shutdown included."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    calls = _trace_syncs(monkeypatch)
    queue.shutdown()
    assert calls == []


def test_a_shutdown_is_seen_at_once_by_every_handle_of_the_process(tmp_path: Path) -> None:
    """A handle that just published trusts, for ``CLOSE_GRACE``, that the queue is open;
    a shutdown through another handle of the same process (same clock) ends that trust
    at once: its next publish raises (mutant: the trust of another path dropped)."""
    clock = ManualClock()
    publisher = vsqs.Queue(tmp_path / "q", durable=False, clock=clock)
    publisher.publish(b"trusted open")
    vsqs.Queue(tmp_path / "q", durable=False, clock=clock).shutdown()
    with pytest.raises(vsqs.QueueClosed):
        publisher.publish(b"after the shutdown")
    assert publisher.counts().ready == 1


def test_shutting_down_again_refuses_publishes_on_that_handle_at_once(tmp_path: Path) -> None:
    """``shutdown()`` on a handle whose queue another handle shut down already: it
    returns, and that handle refuses the next publish, even within the time it trusted
    the queue open (mutants: ``seen`` left unset when the marker existed)."""
    publisher = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    publisher.publish(b"trusted open")
    vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock()).shutdown()  # other clock
    publisher.shutdown()
    with pytest.raises(vsqs.QueueClosed):
        publisher.publish(b"after the shutdown")


def test_shutting_down_again_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idempotent: a second ``shutdown()`` makes no file event (no wake-up poke) and
    changes nothing (mutant: ``mark`` saying it shut the queue down when it was already)."""
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=ManualClock())
    queue.shutdown()
    made: list[str] = []
    real: Callable[..., int] = _fs.create_exclusive

    def create_exclusive(path: str, *args: Any) -> int:
        made.append(path)
        return real(path, *args)

    patch_fs(monkeypatch, "create_exclusive", create_exclusive)
    queue.shutdown()
    assert made == []
