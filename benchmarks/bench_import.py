"""What starting vsqs costs: ``import vsqs`` and ``vsqs publish``, beside the bare interpreter.

Method: each command runs in a fresh interpreter (``sys.executable``), the three in
turn, ``--runs`` rounds (at least 10), so that a busy moment of the machine falls on all
three alike. ``bare`` is ``python -c pass``; ``import vsqs`` is ``python -c "import vsqs"``;
``vsqs publish`` is the console script's code (``vsqs.__main__.main``) publishing one
message to a queue in a temporary directory. Bytecode is cached first, as after an
install (where ``PYTHONDONTWRITEBYTECODE`` is set, into a private ``PYTHONPYCACHEPREFIX``).
The children run in an empty directory with ``PYTHONPATH`` naming the ``vsqs`` this
script finds (the checkout's, from its root), so ``PYTHONPATH=<other checkout>`` measures
that one.
Two clocks: wall time from ``fork`` to ``wait``, and the CPU time the child used (user +
system, from ``wait4``), which a loaded machine inflates far less than wall time. The
table gives the minimum and the median of each, and each minimum above ``bare``'s.
``--modules N`` adds the N slowest imports of ``import vsqs`` (``-X importtime``,
cumulative, the minimum over the rounds).

Usage::

    python -m benchmarks.bench_import [--runs 20] [--modules 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_PUBLISH = "from vsqs.__main__ import main; main()"


def _commands(queue: str) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "bare": [python, "-c", "pass"],
        "import vsqs": [python, "-c", "import vsqs"],
        "vsqs publish": [python, "-c", _PUBLISH, "publish", queue, "x"],
    }


def _run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall and CPU seconds of one run of *argv* (which must succeed)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{argv} failed with status {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def _slowest_imports(env: dict[str, str], cwd: str, runs: int, count: int) -> list[tuple[int, str]]:
    """The *count* largest cumulative import times of ``import vsqs``, in µs (min of *runs*)."""
    best: dict[str, int] = {}
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import vsqs"],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        for line in done.stderr.splitlines():
            fields = line.removeprefix("import time:").split("|")
            if len(fields) != 3 or not fields[1].strip().isdigit():
                continue  # the header
            name, cumulative = fields[2].strip(), int(fields[1])
            best[name] = min(best.get(name, cumulative), cumulative)
    return sorted(((us, name) for name, us in best.items()), reverse=True)[:count]


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    rule = "  ".join("=" * width for width in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in [*lines, rule])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20, help="rounds (at least 10)")
    parser.add_argument("--modules", type=int, default=0, help="show the N slowest imports")
    args = parser.parse_args()
    runs = max(10, args.runs)
    env = dict(os.environ)
    scratch = tempfile.mkdtemp(prefix="vsqs-bench-import-")
    try:
        spec = importlib.util.find_spec("vsqs")  # found, not imported
        if spec is None or spec.origin is None:
            raise SystemExit("vsqs is not importable")
        package_parent = os.path.dirname(os.path.dirname(spec.origin))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
        cwd = os.path.join(scratch, "cwd")  # not the checkout: PYTHONPATH decides
        os.mkdir(cwd)
        print(f"vsqs from {package_parent}")
        if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
            env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
        commands = _commands(os.path.join(scratch, "queue"))
        for argv in commands.values():
            _run(argv, env, cwd)  # writes the bytecode; not measured
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, argv in commands.items():
                samples[name].append(_run(argv, env, cwd))
        bare_wall = min(wall for wall, _ in samples["bare"])
        bare_cpu = min(cpu for _, cpu in samples["bare"])
        rows = []
        for name, measured in samples.items():
            walls = [wall * 1000 for wall, _ in measured]
            cpus = [cpu * 1000 for _, cpu in measured]
            rows.append(
                [
                    name,
                    f"{min(walls):.1f}",
                    f"{statistics.median(walls):.1f}",
                    f"{min(walls) - bare_wall * 1000:+.1f}",
                    f"{min(cpus):.1f}",
                    f"{statistics.median(cpus):.1f}",
                    f"{min(cpus) - bare_cpu * 1000:+.1f}",
                ]
            )
        header = ["command", "wall min", "wall median", "min - bare", "CPU min", "CPU median"]
        header.append("CPU min - bare")
        version = ".".join(map(str, sys.version_info[:3]))
        print(f"Start-up, ms: {runs} runs each, Python {version}, {os.cpu_count()} cores\n")
        print(_table(header, rows))
        if args.modules:
            slowest = _slowest_imports(env, cwd, runs, args.modules)
            print("\nSlowest imports of ``import vsqs``, cumulative µs (min):\n")
            print(_table(["module", "µs"], [[name, str(us)] for us, name in slowest]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
