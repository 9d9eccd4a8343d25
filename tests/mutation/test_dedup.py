"""Guarantees of vsqs._dedup that ``make mutate`` found unguarded in its sample
(docs/reliability.rst, "Mutation testing"): each test fails on the mutant named in its
docstring."""

from __future__ import annotations

from pathlib import Path

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock

from ..fixtures_core import patch_fs

START = 1_700_000_000.0
WINDOW = 60.0


def test_a_batch_recorded_exactly_a_window_ago_meanwhile_is_still_a_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publisher A looks for the batch id (none), writes its bodies; meanwhile B, on a
    host whose clock is exactly ``dedup_window`` behind A's, publishes the same batch
    id. When A records its batch, B's record is exactly a window old by A's clock:
    still within the window, as the look before found it would be, so A publishes
    nothing and returns B's ids (mutant: ``claim_chunk`` 56, ``>=`` for ``>``, which
    expires B's record and publishes the batch twice)."""
    path = tmp_path / "q"
    a_clock = ManualClock(START)
    b_clock = ManualClock(START - WINDOW)
    a = vsqs.PlainQueue(path, clock=a_clock, durable=True, dedup_window=WINDOW)
    b = vsqs.PlainQueue(path, clock=b_clock, durable=True, dedup_window=WINDOW)
    real_sync_files = _fs.sync_files
    b_ids: list[str] = []
    calls: list[str] = []

    def sync_files(directory: str, names: list[str]) -> None:
        calls.append(directory)
        real_sync_files(directory, names)
        if len(calls) == 1:  # A's bodies are written: B publishes the same batch now
            b_ids.extend(b.publish_batch([b"b1", b"b2"], batch_dedup_id="job-1"))

    patch_fs(monkeypatch, "sync_files", sync_files)
    assert a.publish_batch([b"a1", b"a2"], batch_dedup_id="job-1") == b_ids
    monkeypatch.undo()
    assert len(b_ids) == 2
    assert sorted(m.body for m in a.receive_batch(10)) == [b"b1", b"b2"]
    assert not [name for name in path.iterdir() if name.name.endswith(".new")]
    a.close()
    b.close()
