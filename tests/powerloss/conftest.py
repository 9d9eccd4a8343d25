"""The power-loss filesystem for a test; skipped, with the reason, where it cannot mount."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._mount import LazyMount, lazy_mount, why_not


def require_lazyfs() -> None:
    """Skip, with the reason in the report, where the power-loss filesystem cannot mount."""
    reason = why_not()
    if reason is not None:
        pytest.skip(f"cannot test power loss: {reason}")


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyMount]:
    """A fresh power-loss filesystem (unmounted at teardown)."""
    require_lazyfs()
    with lazy_mount(tmp_path) as mount:
        yield mount
