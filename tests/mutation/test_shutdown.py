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
