"""``python -m vsqs``: the same command line as the ``vsqs`` script (needs the cli extra)."""

from __future__ import annotations

from ._cli_entry import main

if __name__ == "__main__":
    main(prog_name="python -m vsqs")
