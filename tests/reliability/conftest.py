"""Fixtures of the reliability suite: sentinels and mounted filesystems.

The long modes are switched on by ``--stress-long`` or ``VSQS_STRESS_LONG=1``, through the
``stress_long`` fixture of ``tests/conftest.py`` (pytest reads ``pytest_addoption`` only in
the rootdir conftest and in plugins).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._mounts import mounted, why_not_mountable


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under *root*: kind bits, size, mtime (ns) and content of files."""
    found: dict[str, tuple[int, int, int, bytes]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns, content)
    return found


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[Path]:
    """A directory beside the queue with files in it; asserted untouched at teardown."""
    root = tmp_path / "sentinel"
    (root / "sub").mkdir(parents=True)
    (root / "x").write_bytes(b"outside x")
    (root / "1").write_bytes(b"outside 1")
    (root / "sub" / "passwd").write_bytes(b"root:x:0:0")
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, "something outside the queue directory was touched"


def require_mount(fstype: str) -> None:
    """Skip, with the reason in the report, where *fstype* cannot be mounted."""
    reason = why_not_mountable(fstype)
    if reason is not None:
        pytest.skip(f"cannot test on {fstype}: {reason}")


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, to fill up (unmounted at teardown)."""
    require_mount("tmpfs")
    with mounted("tmpfs", tmp_path, size_kb=256) as mountpoint:
        yield mountpoint


@pytest.fixture
def scratch_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of our own, to remount read-only (unmounted at teardown)."""
    require_mount("tmpfs")
    with mounted("tmpfs", tmp_path, size_kb=8192) as mountpoint:
        yield mountpoint
