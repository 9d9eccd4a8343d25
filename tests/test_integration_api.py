"""The public names an integration uses instead of the core's private modules (issue 40.4):
each does what its docstring promises, on a real directory."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs

from .fixtures_core import patch_fs

# -- whether a directory someone named is a queue ---------------------------------------


def test_foreign_entry_names_a_users_file_and_nothing_of_a_queue(tmp_path: Path) -> None:
    """Message names (any state) and ``.wake-`` names are a queue's; anything else in a
    directory without ``.vsqs`` is not, and a ``.vsqs`` makes any directory a queue."""
    home = tmp_path / "home"
    home.mkdir()
    assert vsqs.foreign_entry(home) is None  # empty: a queue yet to be used
    for name in ("1700000000000000", "1700000000000001.1700000030000000", "17.new"):
        (home / name).write_bytes(b"m")
    (home / ".wake-12-0123abcd").write_bytes(b"")
    assert vsqs.foreign_entry(home) is None  # a queue of vsqs 0.3, or made by hand
    (home / "notes.txt").write_text("mine")
    assert vsqs.foreign_entry(home) == "notes.txt"
    (home / ".vsqs").mkdir()
    assert vsqs.foreign_entry(str(home)) is None  # vsqs's: whatever else it holds
    assert vsqs.foreign_entry(tmp_path / "absent") is None  # opening it says why
    assert vsqs.foreign_entry(home / "notes.txt") is None  # not a directory: the same


def test_foreign_entry_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "123").write_bytes(b"a user's file named like a message")
    (tmp_path / "report.pdf").write_bytes(b"%PDF")
    before = sorted(os.listdir(tmp_path))
    assert vsqs.foreign_entry(tmp_path) == "report.pdf"
    assert sorted(os.listdir(tmp_path)) == before


# -- reading what another process claimed -----------------------------------------------


def test_read_bodies_follows_a_renamed_lease_and_says_none_for_a_deleted_message(
    q: vsqs.PlainQueue,
) -> None:
    q.publish_batch([b"kept", b"renewed", b"deleted"])
    kept, renewed, deleted = q.receive_batch(3, timeout=0)
    q.change_visibility(renewed, 60)  # a heartbeat: the receipt handed over is gone
    q.delete(deleted)
    receipts = [kept.receipt, renewed.receipt, deleted.receipt]
    assert list(vsqs.read_bodies(q.path, receipts)) == [b"kept", b"renewed", None]
    q.change_visibility(kept, 0)  # ready again: its name is its id
    assert list(vsqs.read_bodies(q.path, [kept.receipt, kept.id])) == [b"kept", b"kept"]


def test_read_bodies_lists_the_directory_once_for_all_moved_receipts(
    q: vsqs.PlainQueue, monkeypatch: Any
) -> None:
    """Many renewed leases cost one listing, not one each (a Spark partition reads a
    thousand messages whose leases a heartbeat renewed)."""
    q.publish_batch([str(n).encode() for n in range(20)])
    held = q.receive_batch(20, timeout=0)
    for message in held:
        q.change_visibility(message, 60)
    listings = []
    scandir = _fs.scandir

    def counted(path: str) -> Any:
        listings.append(path)
        return scandir(path)

    patch_fs(monkeypatch, "scandir", counted)
    bodies = list(vsqs.read_bodies(q.path, [m.receipt for m in held]))
    assert bodies == [str(n).encode() for n in range(20)]
    assert listings == [q.path]


def test_read_bodies_refuses_what_is_not_a_receipt(q: vsqs.PlainQueue) -> None:
    with pytest.raises(vsqs.InvalidId):
        list(vsqs.read_bodies(q.path, ["../etc/passwd"]))


# -- the checks an integration applies to what it is given -------------------------------


def test_validate_receipt_takes_ids_and_receipts_only() -> None:
    for good in ("1700000000000000", "1700000000000000.1700000030000000", "17.30.0"):
        assert vsqs.validate_receipt(good) == good
    for bad in ("17.new", "", "x", "../17", "17.", 17):
        with pytest.raises(vsqs.InvalidId):
            vsqs.validate_receipt(bad)


def test_validate_group_is_the_check_publish_applies(q: vsqs.PlainQueue) -> None:
    assert vsqs.validate_group("customer-42") == "customer-42"
    for bad in ("", "a b", "x" * 129, "é"):
        with pytest.raises(ValueError, match="group must be"):
            vsqs.validate_group(bad)
        with pytest.raises(ValueError, match="group must be"):
            q.publish(b"m", group=bad)
    with pytest.raises(TypeError):
        vsqs.validate_group(42)


def test_validate_seconds_and_max_duration_are_the_bounds_of_every_duration(
    q: vsqs.PlainQueue,
) -> None:
    assert vsqs.validate_seconds(vsqs.MAX_DURATION, "timeout") == float(vsqs.MAX_DURATION)
    for bad in (vsqs.MAX_DURATION * 10, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="visibility_timeout"):
            vsqs.validate_seconds(bad, "visibility_timeout")
        with pytest.raises(ValueError, match="visibility_timeout"):
            vsqs.PlainQueue(q.path, visibility_timeout=bad)
    with pytest.raises(ValueError, match="> 0"):
        vsqs.validate_seconds(0, "poll_interval", positive=True)
    with pytest.raises(TypeError):
        vsqs.validate_seconds(True, "timeout")


def test_the_default_poll_interval_is_a_waiters_default() -> None:
    with vsqs.MultiWaiter() as waiter:
        assert waiter.poll_interval == vsqs.MultiWaiter.DEFAULT_POLL_INTERVAL > 0


# -- stored settings seen and repaired without a handle ---------------------------------


def test_settings_stamp_changes_with_each_change_of_the_settings(q: vsqs.PlainQueue) -> None:
    assert vsqs.settings_stamp(q.path) is None
    seen = set()
    for timeout in (10, 20, 30):
        q.configure(visibility_timeout=timeout)
        stamp = vsqs.settings_stamp(q.path)
        assert stamp is not None and stamp not in seen
        seen.add(stamp)
    assert vsqs.reset_settings(q.path) is not None
    assert vsqs.settings_stamp(q.path) is None
    assert vsqs.settings_stamp(Path(q.path) / "absent") is None


def test_reset_settings_moves_a_bad_file_aside_and_the_queue_opens_again(
    qdir: Path, clock: Any
) -> None:
    vsqs.PlainQueue(qdir).configure(visibility_timeout=90)
    settings = qdir / ".vsqs" / "settings.json"
    settings.write_text("{broken")
    with pytest.raises(vsqs.InvalidSettings):
        vsqs.PlainQueue(qdir)
    aside = vsqs.reset_settings(qdir, clock=clock)
    assert aside is not None and Path(aside).read_text() == "{broken"
    assert Path(aside).name.startswith("settings.json.bad-2023")  # the clock's time
    assert not settings.exists()
    assert vsqs.PlainQueue(qdir).settings() == {}
    assert vsqs.reset_settings(qdir) is None  # nothing left to repair
    with pytest.raises(FileNotFoundError):
        vsqs.reset_settings(qdir / "absent")


# -- the consistency checker ------------------------------------------------------------


def test_check_names_each_problem_after_its_directory(tmp_path: Path) -> None:
    queue = vsqs.PartitionedQueue(tmp_path / "q", partitions=2)
    assert queue.check() == []
    part = queue.partition_queues[1].path
    Path(part, "1700000000000000.new").write_bytes(b"half")
    (Path(queue.path) / "1700000000000001").mkdir()
    problems = queue.check()
    assert problems == [
        f"{part}: orphaned 1700000000000000.new (a publish that never finished)",
        f"{queue.path}: 1700000000000001 is not a regular file",
    ]
    assert queue.check(allow_new=True) == problems[1:]
