"""Every script in ``examples/`` runs, twice in a row, as a reader would try it: each run
makes its queues in a fresh temporary directory and removes it at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run_twice(tmp_path: Path, script: str, *args: str) -> list[str]:
    outputs = []
    for attempt in ("first", "second"):
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / script), *args],
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, f"{script}, {attempt} run:\n{done.stdout}{done.stderr}"
        outputs.append(done.stdout)
    # Each run cleaned up after itself (coverage's data files of the measured run aside).
    left = [p for p in tmp_path.iterdir() if not p.name.startswith(".coverage")]
    assert left == []
    return outputs


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == [
        "async_worker.py",
        "celery_tasks.py",
        "metrics.py",
        "pipeline.py",
        "shared_queue.py",
        "spark_pipeline.py",
    ]


def test_async_worker_runs_twice(tmp_path: Path) -> None:
    for output in _run_twice(tmp_path, "async_worker.py"):
        assert "done: 19 jobs, each once\n" in output, output
        assert output.endswith("dead letters: [b'job 13']\n"), output


def test_pipeline_runs_twice(tmp_path: Path) -> None:
    for output in _run_twice(tmp_path, "pipeline.py"):
        assert output.endswith("dead letters: [1313]\n"), output


def test_shared_queue_runs_twice(tmp_path: Path) -> None:
    for output in _run_twice(tmp_path, "shared_queue.py", "--host", "a"):
        assert output == "a: waiting by inotify\na: consumed 10 messages\n", output


@pytest.mark.spark
def test_spark_pipeline_runs_twice(tmp_path: Path) -> None:
    for output in _run_twice(tmp_path, "spark_pipeline.py", "--items", "200", "--workers", "2"):
        assert output.splitlines()[-1] == "OK", output


def test_celery_tasks_runs_twice(tmp_path: Path) -> None:
    """A stock Celery worker in a subprocess runs ten tasks through vsqs."""
    for output in _run_twice(tmp_path, "celery_tasks.py"):
        assert "[0, 2, 4, 6, 8, 10, 12, 14, 16, 18]\n" in output, output


def test_metrics_runs_twice(tmp_path: Path) -> None:
    for output in _run_twice(tmp_path, "metrics.py"):
        assert output.splitlines() == [
            "emails held: 1",
            "orders ready: 3",
            "messaging.client.sent.messages emails: 1",
            "messaging.client.sent.messages orders: 3",
        ], output
