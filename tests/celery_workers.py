"""Real Celery workers in subprocesses, for the Celery tests and the Celery benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def celery_env(broker: str, root: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker (and of the test process's own app)."""
    env = dict(os.environ)
    env.update(
        CELERY_TEST_BROKER=broker,
        CELERY_TEST_ROOT=str(root),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        **extra,
    )
    (root / "results").mkdir(parents=True, exist_ok=True)
    return env


class Worker:
    """One ``celery worker`` process group; its log goes to a file."""

    def __init__(self, env: dict[str, str], log: Path, name: str, *args: str) -> None:
        self.name = name
        self.log = log
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.celery_app",
            "worker",
            "-n",
            f"{name}@%h",
            "--loglevel",
            "INFO",
            *args,
        ]
        with open(log, "wb") as out:
            # A session of its own: SIGKILL to the group kills the pool's children too.
            self.process = subprocess.Popen(
                command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the worker logs ``ready.`` (its consumers are declared and bound)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b" ready." in self.log.read_bytes():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"worker {self.name} not ready:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole worker: main process and pool children, no cleanup at all."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, *, signalled: bool = False) -> None:
        """A warm shutdown (SIGTERM, unless *signalled* already), killing it if it takes
        more than 20 s."""
        if self.process.poll() is not None:
            return
        if not signalled:
            self.process.send_signal(signal.SIGTERM)  # the main process: it stops its pool
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()


@contextmanager
def workers(
    env: dict[str, str], logs: Path, *names: str, args: tuple[str, ...] = ()
) -> Iterator[list[Worker]]:
    """Start one worker per name, wait until all are ready, stop them all on exit."""
    started = [Worker(env, logs / f"{name}.log", name, *args) for name in names]
    try:
        for worker in started:
            worker.wait_ready()
        yield started
    finally:
        for worker in started:  # all at once: their shutdowns overlap
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in started:
            worker.stop(signalled=True)
