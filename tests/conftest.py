"""Shared fixtures of the vsqs test suite (the public ones live in vsqs.pytest_plugin)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Final

import pytest

import vsqs
from tests.java import find_java
from vsqs.testing import ManualClock
from vsqs.testing import fresh_ids as _fresh_ids

# The integration tier: tests that need more than Python and a local filesystem (a
# server and its clients, Spark, Celery, a browser, mounts, FUSE, other hosts, the docs
# build) or that run a benchmark. Everything else is the quick tier, `make check`.
#
# PARALLEL is the part of it that runs on every core, beside itself (`make test` runs it
# first, then the rest one test at a time): each of these tests owns its temporary
# directories, takes free ports, and neither mounts, fills a system-wide table (inotify
# instances) nor times the machine. Mounts, other hosts, power-loss runs and benchmarks
# stay sequential.
PARALLEL: Final = (
    "tests/serve/",
    "tests/outside/",
    "tests/test_spark",
    "tests/test_celery",
    "tests/test_kombu",
    "tests/test_dashboard",
    "tests/test_metrics",
    "tests/test_java",
    "tests/test_install",
    "tests/test_docs",
    "tests/test_examples",
    "tests/test_pytest_plugin",
    "tests/reliability/test_kill_points",
    "tests/reliability/test_crash",
)
INTEGRATION: Final = (
    *PARALLEL,
    "tests/multihost/",
    "tests/reliability/",
    "tests/powerloss/",
    "tests/test_bench_",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress-long",
        action="store_true",
        default=False,
        help="run the long modes of the stress and crash-injection tests (make stress)",
    )
    parser.addoption(
        "--slow-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fail a quick-tier test whose call takes longer (make check): mark it or speed it up",
    )


def _where(item: pytest.Item) -> str:
    return Path(str(item.path)).relative_to(Path(__file__).parent.parent).as_posix()


def _is_integration(item: pytest.Item) -> bool:
    return _where(item).startswith(INTEGRATION) or any(
        item.get_closest_marker(name) for name in ("spark", "root", "stress")
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the integration tier (``-m "not integration"`` is the quick one) and its
    part that may run in parallel (:data:`PARALLEL`). Without a Java runtime for the
    Spark tests, stop with one line (which says how to get one) instead of a wall of
    Spark errors."""
    for item in items:
        if _is_integration(item):
            item.add_marker(pytest.mark.integration)
            if _where(item).startswith(PARALLEL):
                item.add_marker(pytest.mark.parallel)
    if any(item.get_closest_marker("spark") for item in items):
        try:
            find_java(os.environ)
        except RuntimeError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """With ``--slow-budget``: a quick-tier test slower than the budget fails, saying so,
    so that the quick tier stays quick (the test belongs in the integration tier, or
    should be made faster). Not judged while the machine is overloaded (a load average
    over twice its cores): then every test is slow, and none is to blame."""
    report = yield
    budget = item.config.getoption("--slow-budget")
    if (
        budget is not None
        and report.when == "call"
        and report.passed
        and report.duration > budget
        and item.get_closest_marker("integration") is None
        and os.getloadavg()[0] <= 2 * (os.cpu_count() or 1)
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {report.duration:.1f} s, over the quick tier's budget of "
            f"{budget:g} s: make it faster, or list its file in tests/conftest.py INTEGRATION"
        )
    return report


@pytest.fixture(scope="session")
def stress_long(request: pytest.FixtureRequest) -> bool:
    """Whether the long stress modes were asked for (``--stress-long`` or VSQS_STRESS_LONG=1)."""
    return (
        bool(request.config.getoption("--stress-long")) or os.environ.get("VSQS_STRESS_LONG") == "1"
    )


@pytest.fixture(name="fresh_ids")
def fresh_ids_fixture() -> Iterator[None]:
    """Ids drawn as in a new process during the test (``pytestmark =
    pytest.mark.usefixtures("fresh_ids")`` in a module whose tests compare ids)."""
    with _fresh_ids():
        yield


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


@pytest.fixture
def qpath(qdir: Path) -> str:
    """The path of a queue made there (not durable), for tests that open their own
    handles (in other processes too)."""
    vsqs.PlainQueue(qdir, durable=False)
    return str(qdir)


@pytest.fixture
def root(tmp_path: Path) -> vsqs.QueueRoot:
    """A root of named queues, empty (``tests/serve`` has its own: its server's root)."""
    return vsqs.QueueRoot(tmp_path / "root")


def names(path: Path) -> list[str]:
    """The entries of a queue directory, sorted, metadata excluded."""
    return sorted(p.name for p in path.iterdir() if p.name != ".vsqs")


@pytest.fixture
def disk_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory on a filesystem that vsqs flushes (not tmpfs nor ramfs, where
    it makes no flush system call): *tmp_path*, else one in ``/var/tmp``; skipped, saying
    why, where neither is. For tests that watch or fail real flushes. Told by the
    filesystem's type, not by vsqs's own decision, which some of those tests break."""
    from vsqs import _host

    def on_disk(path: str) -> bool:
        return _host.filesystem_type(path) not in {"tmpfs", "ramfs", ""}

    if on_disk(str(tmp_path)):
        yield tmp_path
        return
    if on_disk("/var/tmp") and os.access("/var/tmp", os.W_OK):
        where = Path(tempfile.mkdtemp(prefix="vsqs-test-", dir="/var/tmp"))
        try:
            yield where
        finally:
            shutil.rmtree(where, ignore_errors=True)
        return
    pytest.skip("no disk directory: the temporary directory and /var/tmp are in memory")


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
