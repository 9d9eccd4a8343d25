"""The partitioned-queue picture of the concepts page is what vsqs does today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_partitions_picture_is_drawn_from_a_real_queue() -> None:
    """docs/_static/partitions.svg is what docs/partitions.py draws from a queue made now:
    its stored settings, its partition directories, the partition of each group shown."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "partitions.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
