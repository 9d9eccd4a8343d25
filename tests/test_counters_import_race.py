"""Opening a queue while another thread is importing :mod:`multiprocessing` (issue 36:
a dashboard round failed on it in ``vsqs serve``). A module is in ``sys.modules`` from
the start of its import; the counters' exit hook must not take a half-made
``multiprocessing.util`` for a whole one. The race is staged in a fresh interpreter: a
trace function holds the other thread's import of ``multiprocessing.util`` half done while
the dashboard's sampler opens and samples a queue, and while the process forks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The child: a trace function of the importer thread holds it at the start of
# `multiprocessing.util`'s body: the module is in sys.modules, none of its names yet.
CHILD = """
import os, sys, threading
import vsqs
from vsqs.dashboard._sampler import Sampler

root = vsqs.QueueRoot(sys.argv[1])
root.create("q").publish(b"m")
assert "multiprocessing.util" not in sys.modules, "imported already: nothing staged"
inside, release = threading.Event(), threading.Event()


def importing():
    def trace(frame, event, arg):
        if event == "call" and frame.f_globals.get("__name__") == "multiprocessing.util":
            inside.set()
            release.wait(60)
        return None

    sys.settrace(trace)  # this thread only
    import multiprocessing.util


importer = threading.Thread(target=importing)
importer.start()
try:
    assert inside.wait(60)
    assert not hasattr(sys.modules["multiprocessing.util"], "Finalize"), "not staged"
    row = Sampler(root, 60.0).sample_round().rows["q"]
    print("sampled", row.ready, row.error)
    pid = os.fork()
    if pid == 0:
        os._exit(0)  # the at-fork hook ran in this child, with the half-made module
    assert os.waitpid(pid, 0)[1] == 0
finally:
    release.set()
importer.join()
print("done")
"""


def test_a_queue_opened_while_another_thread_imports_multiprocessing(tmp_path: Path) -> None:
    """A sampler round (which opens each queue) and a fork, each while another thread
    is half way through importing ``multiprocessing.util``: no error, no traceback."""
    # Without coverage's start-up hook (make test's children measure themselves): it
    # imports multiprocessing before the child's first line, and nothing would be staged.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "COV_CORE_"))}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "root")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["sampled 1 None", "done"], done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
