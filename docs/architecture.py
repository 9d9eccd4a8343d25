"""Draw the layers of the ``vsqs`` package as an SVG, from the import contract.

Usage (from the repository root)::

    python docs/architecture.py            # writes docs/_static/architecture.svg
    python docs/architecture.py --check    # exit 1 if the committed picture is stale

The layers come from ``[tool.importlinter]`` in ``pyproject.toml``, the same contract
that ``make test`` enforces, so the picture cannot drift from the code. What each module
owns is the first line of its docstring.
"""

from __future__ import annotations

import ast
import re
import sys
from html import escape
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_static" / "architecture.svg"

# The name of each layer of the contract, highest first.
NAMES = (
    "5  integrations (public API only)",
    "5  the dashboard (served by vsqs serve)",
    "5  the SQS server (under the CLI and the dashboard)",
    "4  a root of named queues",
    "4  beside the queue: partitioned, sets, null; vsqs.Queue()",
    "3  the state machine",
    "3  the protocol every queue satisfies",
    "2  helpers: decide or remember one thing",
    "2  helpers (metadata)",
    "1  mechanism: paths, listing, waiting",
    "1  mechanism: the process's inotify descriptor",
    "1  mechanism: system calls on a queue's files; waiting",
    "1  mechanism: flushes (which one each filesystem honours)",
    "1  mechanism: system calls on other files",
    "0  pure values (which filesystem)",
    "0  pure values",
    "0  pure values (time)",
    "0  pure values (names)",
)
WIDTH = 1000
CELL = 120  # horizontal room for one module name
LINE_H = 20
BOX_PAD = 14
GAP = 6
LABEL_W = 270


def layers() -> list[list[str]]:
    """The module names of each layer, highest first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [re.split(r"\s*[|:]\s*", layer) for layer in contract["layers"]]


def summary(module: str) -> str:
    """The first line of a module's docstring."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():  # a subpackage (vsqs/cli/, vsqs/spark/...)
        path = ROOT / module.replace(".", "/") / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.splitlines()[0] if doc else ""


def draw() -> str:
    rows = layers()
    if len(rows) != len(NAMES):
        raise SystemExit(f"{len(rows)} layers in pyproject.toml but {len(NAMES)} names here")
    per_line = int((WIDTH - 30 - LABEL_W) // CELL)
    lines = [-(-len(modules) // per_line) for modules in rows]
    height = 40 + sum(n * LINE_H + BOX_PAD + GAP for n in lines) + 20
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        '<text x="10" y="22" font-size="15" font-weight="bold">vsqs: each layer imports '
        "only the layers below it (checked by lint-imports in make test)</text>",
    ]
    y = 40
    for name, modules, count in zip(NAMES, rows, lines, strict=True):
        box = count * LINE_H + BOX_PAD
        shade = "#eef4fb" if name.startswith(("3", "1")) else "#f7f7f7"
        out.append(
            f'<rect x="10" y="{y}" width="{WIDTH - 20}" height="{box}" rx="4" '
            f'fill="{shade}" stroke="#555"/>'
        )
        out.append(f'<text x="18" y="{y + 21}" font-weight="bold">{escape(name)}</text>')
        for index, module in enumerate(modules):
            x = 10 + LABEL_W + (index % per_line) * CELL
            baseline = y + 21 + (index // per_line) * LINE_H
            short = module.removeprefix("vsqs.")
            out.append(
                f'<text x="{x}" y="{baseline}" font-family="monospace">'
                f"<title>{escape(summary(module))}</title>{escape(short)}</text>"
            )
        y += box + GAP
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    picture = draw()
    if "--check" in sys.argv[1:]:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != picture:
            print(f"{OUT} is stale: run python docs/architecture.py")
            return 1
        return 0
    OUT.write_text(picture, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
