"""Print issue 31's table: each writing path, its acknowledged messages, and what a
power failure left of them. ``python -m tests.powerloss.table [--roll-back-directories] [CODE]``
runs the producers on the vsqs in the checkout *CODE* (default: this one), as root.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ._mount import REPO
from ._power import cut_power

KINDS = ("publish", "batch", "batch_keys", "batch_dedup", "file", "stream", "aio", "cli",
         "attributes", "consume", "kombu", "spark", "configure", "dead_letter",
         "redrive")  # fmt: skip


def main(argv: list[str]) -> None:
    strict = "--roll-back-directories" in argv
    argv = [arg for arg in argv if not arg.startswith("--")]
    code = Path(argv[0]).resolve() if argv else REPO
    print(f"vsqs under test: {code}" + (", directory operations rolled back" * strict) + "\n")
    print("| path (durable, the default) | acknowledged | after the power loss |")
    print("|---|---|---|")
    for kind in KINDS:
        with tempfile.TemporaryDirectory() as where:
            outcome = cut_power(kind, Path(where), code=code, seed=31, roll_back_directories=strict)
        print(f"| {kind} | {outcome.row()} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
