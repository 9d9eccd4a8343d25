"""The score of ``make mutate``, per core module, as a reStructuredText table.

mutmut keeps each mutated file's verdicts in ``mutants/<path>.meta`` (JSON: mutant name to
the exit code of its test run). This reads them back, counts per module and prints the table
that docs/reliability.rst "Mutation testing" quotes, then the names of the survivors
(``mutmut show NAME`` prints one as a diff). Run as ``python -m tests.mutation.report``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
MUTANTS: Final = ROOT / "mutants"

# mutmut's exit codes (mutmut/stats.py): a failing test run, a timeout (SIGXCPU or the
# mutant's own hang) or a crash of the worker all mean that a test noticed the mutant.
KILLED: Final = frozenset({1, 3, 24, -24, 36, 37, 152, 255, -9, -11})
SURVIVED: Final = 0
NO_TESTS: Final = frozenset({5, 33})


def verdicts(module: str | None) -> dict[str, dict[str, int | None]]:
    """Each mutated file of ``vsqs/`` (``_sets/_spread`` style names) to its verdicts."""
    found: dict[str, dict[str, int | None]] = {}
    for meta in sorted((MUTANTS / "vsqs").rglob("*.py.meta")):
        name = str(meta.relative_to(MUTANTS / "vsqs")).removesuffix(".py.meta")
        dotted = name.replace("/", ".")
        if module is not None and not dotted.startswith(module):
            continue
        data = json.loads(meta.read_text(encoding="utf-8"))
        found[name] = data["exit_code_by_key"]
    return found


def tally(codes: dict[str, int | None]) -> Counter[str]:
    """How many mutants were killed, survived, had no test, or were not run yet."""
    counts: Counter[str] = Counter()
    for code in codes.values():
        if code is None:
            counts["not run"] += 1
        elif code in KILLED:
            counts["killed"] += 1
        elif code == SURVIVED:
            counts["survived"] += 1
        elif code in NO_TESTS:
            counts["no test"] += 1
        else:
            counts["suspicious"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", help="only this module, e.g. _capacity or _sets")
    args = parser.parse_args()
    found = verdicts(args.module)
    if not found:
        raise SystemExit("no mutants/ results: run `make mutate` first")
    header = ("module", "mutants", "run", "killed", "survived", "no test", "score")
    rows = []
    for name, codes in found.items():
        counts = tally(codes)
        run = len(codes) - counts["not run"]
        judged = counts["killed"] + counts["survived"] + counts["no test"] + counts["suspicious"]
        score = f"{100 * counts['killed'] / judged:.1f} %" if judged else "-"
        rows.append(
            (name, str(len(codes)), str(run), str(counts["killed"]), str(counts["survived"]),
             str(counts["no test"]), score)
        )  # fmt: skip
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * width for width in widths)
    print(rule)
    print("  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True)))
    print(rule)
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print(rule)
    for codes in found.values():
        for mutant, code in sorted(codes.items()):
            if code == SURVIVED or code in NO_TESTS:
                print(f"{'survived' if code == SURVIVED else 'no test '}  {mutant}")


if __name__ == "__main__":
    main()
