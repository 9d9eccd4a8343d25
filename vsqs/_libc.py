"""The C library's calls that :mod:`os` lacks, bound through ctypes on first use.

``renameat2`` (Linux) and ``renamex_np`` (macOS) for a rename that never replaces,
``syncfs`` for one flush of a whole filesystem, ``inotify_*`` for waiting. Only the
binding lives here: :mod:`vsqs._fs`, :mod:`vsqs._flush` and :mod:`vsqs._inotify` make the
calls. ctypes is imported by the first of them (3 ms that ``import vsqs`` no longer
pays), and the library is the one already loaded in the process (``dlopen(NULL)``),
never a path found by ``ctypes.util.find_library``, which runs ``ldconfig`` in a
subprocess. Each function binds once and is thread-safe (a race binds twice, alike).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import ctypes

__all__ = ["errno", "inotify", "renameat2", "renamex_np", "syncfs"]

_LINUX: Final = sys.platform.startswith("linux")


@functools.cache
def _library() -> ctypes.CDLL:
    import ctypes  # noqa: PLC0415 -- the point of this module: only when a call needs it

    return ctypes.CDLL(None, use_errno=True)


def _bind(name: str, *types: str) -> Any:
    # RACE: two threads binding at once set the same types on the one function object.
    """The C function *name* (``None`` if the library lacks it), given the C types of
    its result then its arguments (``"int"``, ``"char_p"``...), or unchecked if none."""
    function = getattr(_library(), name, None)
    if function is not None and types:
        import ctypes  # noqa: PLC0415 -- loaded by _library already

        function.restype = getattr(ctypes, f"c_{types[0]}")
        function.argtypes = [getattr(ctypes, f"c_{kind}") for kind in types[1:]]
    return function


def errno() -> int:
    """The ``errno`` the last call through this module set, in this thread."""
    import ctypes  # noqa: PLC0415 -- loaded by the call that failed

    return ctypes.get_errno()


@functools.cache
def renameat2() -> Any:
    """``renameat2(olddirfd, oldpath, newdirfd, newpath, flags)``; ``None`` off Linux.

    No argument types: ctypes passes ints and bytes as they are, a quarter faster."""
    return _bind("renameat2") if _LINUX else None


@functools.cache
def renamex_np() -> Any:  # pragma: no cover - macOS only
    """``renamex_np(from, to, flags)``; ``None`` off macOS."""
    return (
        _bind("renamex_np", "int", "char_p", "char_p", "uint") if sys.platform == "darwin" else None
    )


@functools.cache
def syncfs() -> Any:
    """``syncfs(fd)``; ``None`` off Linux."""
    return _bind("syncfs", "int", "int") if _LINUX else None


@functools.cache
def inotify() -> tuple[Any, Any, Any] | None:
    """``inotify_init1``, ``inotify_add_watch`` and ``inotify_rm_watch``; ``None`` off
    Linux or where the library lacks the first two."""
    if not _LINUX:
        return None
    init1 = _bind("inotify_init1")
    add_watch = _bind("inotify_add_watch", "int", "int", "char_p", "uint32")
    rm_watch = _bind("inotify_rm_watch", "int", "int", "int")
    if init1 is None or add_watch is None:
        return None
    return init1, add_watch, rm_watch
