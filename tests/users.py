"""Running part of a test as another user (root bypasses permission checks).

A child process that gives up root must leave with :func:`os._exit`: its exit handlers
include coverage's (``make test`` measures child processes), which would write a data
file into the checkout, a directory the other user may not write. Its own results go
to the files or exit status the test reads, so nothing is lost by skipping them.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn


def run_as(uid: int, gid: int, body: Callable[[], int | None]) -> NoReturn:
    """Become *uid*/*gid* (no other group), run *body*, exit with its status (0 if None)."""
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
