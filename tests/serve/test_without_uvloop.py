"""``vsqs serve`` on asyncio's event loop, as wherever uvloop is not installed (Windows,
PyPy, an install without it).

``make test`` installs the ``serve`` extra, uvloop included, so every other server test
runs on uvloop's loop (uvicorn's ``loop="auto"``). This runs the server's own tests, the
hardening tests (deadlines, limits, framing) and the HTTP layer's (the head's bound,
which counts what the loop reads) again, in a child pytest in which
``import uvloop`` fails: a package of that name first on the path raises ImportError,
and uvicorn falls back to asyncio's loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
FILES: Final = (
    "tests/serve/test_server.py",
    "tests/serve/test_hardening.py",
    "tests/serve/test_http.py",
)


def test_the_server_and_its_hardening_on_asyncios_event_loop(tmp_path: Path) -> None:
    blocker = tmp_path / "no-uvloop" / "uvloop"
    blocker.mkdir(parents=True)
    tried = tmp_path / "uvloop-was-tried"
    (blocker / "__init__.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(tried)!r}).touch()\n"
        "raise ImportError('uvloop is blocked here: the asyncio path is under test')\n",
        encoding="utf-8",
    )
    path = [str(blocker.parent), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *FILES],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert tried.exists(), "uvicorn never tried uvloop: the fallback was not exercised"
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
