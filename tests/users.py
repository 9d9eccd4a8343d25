"""Running part of a test as another user (root bypasses permission checks).

A child process that gives up root must leave with :func:`os._exit`: its exit handlers
include coverage's (``make test`` measures child processes), which would write a data
file into the checkout, a directory the other user may not write. Its own results go
to the files or exit status the test reads, so nothing is lost by skipping them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import NoReturn

import vsqs


def _use_a_queue_once() -> None:
    """Publish, receive and delete in a scratch queue: vsqs imports some modules on first
    use (ctypes, json, socket...), and once it has given up root this process can no
    longer read this Python's installation (under /root, mode 0700). A real service
    that drops its privileges after starting has used its queues by then, or runs a
    Python every user can read."""
    scratch = tempfile.mkdtemp(prefix="vsqs-warm-")
    try:
        queue = vsqs.Queue(scratch, durable=True)
        queue.publish(b"x", dedup_id="warm")
        queue.publish_batch([b"a", b"b"])
        while (message := queue.receive(timeout=0)) is not None:
            queue.delete(message)
        queue.close()
    finally:
        shutil.rmtree(scratch)


def run_as(uid: int, gid: int, body: Callable[[], int | None]) -> NoReturn:
    """Become *uid*/*gid* (no other group), run *body*, exit with its status (0 if None)."""
    _use_a_queue_once()
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    try:
        code = body() or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 (a child reports any failure by its exit status)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
