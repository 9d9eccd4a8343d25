"""vsqs.Storage: an integration's own directory in a queue's .vsqs (issue 40.4)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import vsqs


def test_a_storage_takes_no_name_of_the_core_and_never_climbs_out(tmp_path: Path) -> None:
    for bad in ("", "..", "a/../b", "meta", "settings.json/x", "a//b", ".tmp-x"):
        with pytest.raises(ValueError, match="name"):
            vsqs.Storage(str(tmp_path), bad)
    with vsqs.Storage(str(tmp_path), "mine") as storage, pytest.raises(ValueError):
        storage.write("../meta", b"x")


def test_reads_are_bounded_writes_atomic_and_leftovers_swept(tmp_path: Path) -> None:
    queue = vsqs.Queue(str(tmp_path / "q"))
    with vsqs.Storage(queue.path, "tool/state") as storage:
        assert storage.read("r.json", limit=10) is None  # nothing made by a read
        assert not Path(storage.path).exists()
        storage.write("r.json", b"0123456789")
        assert storage.read("r.json", limit=10) == b"0123456789"
        with pytest.raises(OSError, match=r"r\.json") as refused:
            storage.read("r.json", limit=9)
        assert refused.value.errno == errno.EFBIG
        Path(storage.path, ".tmp-r.json-1-dead").write_bytes(b"a dead writer's")
        assert storage.names() == ["r.json"]
        assert storage.sweep() == 1
        assert sorted(p.name for p in Path(storage.path).iterdir()) == ["r.json"]
        assert storage.remove("r.json") and not storage.remove("r.json")
    assert Path(queue.path, ".vsqs", "tool", "state").is_dir()


def test_a_planted_link_is_refused_never_followed(tmp_path: Path) -> None:
    queue = vsqs.Queue(str(tmp_path / "q"))
    outside = tmp_path / "outside"
    outside.mkdir()
    Path(queue.path, ".vsqs").mkdir(exist_ok=True)
    Path(queue.path, ".vsqs", "tool").symlink_to(outside)
    with vsqs.Storage(queue.path, "tool") as storage, pytest.raises(vsqs.UnsafeEntry):
        storage.write("r.json", b"x")
    assert list(outside.iterdir()) == []


def test_the_lock_excludes_another_holder(tmp_path: Path) -> None:
    queue = vsqs.Queue(str(tmp_path / "q"))
    first, second = vsqs.Storage(queue.path, "tool"), vsqs.Storage(queue.path, "tool")
    with first.lock("lock"):
        assert not second.lock("lock").acquire(0)
        with pytest.raises(vsqs.LockTimeout), second.lock("lock", timeout=0.01):
            pass  # pragma: no cover - never entered
    assert second.lock("lock").acquire(0)
