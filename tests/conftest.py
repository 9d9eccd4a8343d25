"""Shared fixtures of the vsqs test suite (the public ones live in vsqs.pytest_plugin)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from tests.java import find_java
from vsqs.testing import ManualClock


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress-long",
        action="store_true",
        default=False,
        help="run the long modes of the stress and crash-injection tests (make stress)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a Java runtime for the Spark tests, stop with one line (which says how to
    get one) instead of a wall of Spark errors."""
    if any(item.get_closest_marker("spark") for item in items):
        try:
            find_java(os.environ)
        except RuntimeError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def stress_long(request: pytest.FixtureRequest) -> bool:
    """Whether the long stress modes were asked for (``--stress-long`` or VSQS_STRESS_LONG=1)."""
    return (
        bool(request.config.getoption("--stress-long")) or os.environ.get("VSQS_STRESS_LONG") == "1"
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def qdir(tmp_path: Path) -> Path:
    return tmp_path / "q"


@pytest.fixture
def q(qdir: Path, clock: ManualClock) -> vsqs.PlainQueue:
    """A durable queue on the manual clock, 30 s visibility timeout."""
    return vsqs.PlainQueue(qdir, visibility_timeout=30, clock=clock)


def names(path: Path) -> list[str]:
    """The entries of a queue directory, sorted, metadata excluded."""
    return sorted(p.name for p in path.iterdir() if p.name != ".vsqs")


@pytest.fixture
def fast_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory on tmpfs (``/dev/shm``) where there is one, else *tmp_path*:
    for tests that flush often and must not wait on whatever else dirtied the disk (a
    ``syncfs`` flushes the whole filesystem, other tests' loop images included)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    where = Path(tempfile.mkdtemp(prefix="vsqs-test-", dir=shm))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)
