"""Random SIGKILLs of real publishers and consumers lose nothing and tear nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import _harness

DOCS_FIGURES = (
    Path(__file__).resolve().parents[2] / "docs" / "_static" / "reliability-last-run.json"
)


def _report(summary: _harness.Summary, capsys: pytest.CaptureFixture[str], out: Path) -> None:
    summary.save(out)
    with capsys.disabled():
        print(f"\n{summary.line()} -> {out}")
    assert not summary.problems, "\n".join(summary.problems)
    assert summary.losses == 0
    assert summary.corrupt == 0
    assert summary.unexplained_duplicates == 0
    assert summary.acknowledged > 0 and summary.deliveries > 0  # the run did real work


def test_random_kills(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """About 100 SIGKILLs at random moments: no loss, no torn body, no debris left."""
    summary = _harness.run(tmp_path / "run", kills=100, seed=7)
    _report(summary, capsys, tmp_path / "reliability-run.json")


def test_random_kills_on_a_partitioned_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same on a queue of three partitions: each partition keeps every invariant."""
    summary = _harness.run(tmp_path / "run", kills=60, seed=11, partitions=3)
    assert [p.name for p in sorted((tmp_path / "run" / "queue").glob("partition-*"))] == [
        "partition-0", "partition-1", "partition-2",
    ]  # fmt: skip
    _report(summary, capsys, tmp_path / "reliability-run.json")


@pytest.mark.stress
def test_random_kills_long(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stress_long: bool
) -> None:
    """The long mode: at least 1,000 kills; writes the figures shown in the docs."""
    if not stress_long:
        pytest.skip("long mode is off: run make stress (or set VSQS_STRESS_LONG=1)")
    summary = _harness.run(tmp_path / "run", kills=1000, publishers=3, consumers=3, seed=1)
    summary.faults = [
        "SIGKILL of publishers and consumers at random moments",
        "SIGKILL before and after every filesystem call of every transition",
        "ENOSPC (full tmpfs)",
        "EROFS (read-only remount)",
        "EACCES and EPERM (unprivileged user, immutable directory)",
        "ENOENT (queue directory deleted under a consumer)",
        "EMFILE (descriptor limit)",
    ]
    _report(summary, capsys, DOCS_FIGURES)
