"""Run the side-by-side benchmarks and print reStructuredText tables.

Usage::

    python -m benchmarks.run --quick             # under two minutes (make bench-quick)
    python -m benchmarks.run --full              # every depth up to 1M (make bench)
    python -m benchmarks.run --smoke             # seconds; vsqs and the raw floor only
    python -m benchmarks.run --quick --fs shm --out /tmp/depth.svg --name mine

Results go to ``benchmarks/results/<name>.json`` and ``<name>.rst``; the depth plot to
``--out`` (by default ``docs/_static/bench-depth.svg`` for ``--full`` only, so that quick
runs never overwrite the committed figure).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Final

from benchmarks import procs, report
from benchmarks.backends import BATCH, BODY_SIZE, VSQS, VSQS_DURABLE, Spec, all_specs
from benchmarks.depth import Cell, Plan, measure_depth
from benchmarks.peers import VSQS03

HERE: Final = Path(__file__).resolve().parent
RESULTS: Final = HERE / "results"
DOCS_PLOT: Final = HERE.parent / "docs" / "_static" / "bench-depth.svg"


@dataclass(frozen=True)
class Mode:
    name: str
    plan: Plan
    peers: bool
    rss_depth: int
    rss_ops: int
    mp_total: int
    latency_n: int
    idle_s: float
    bounded_n: int


MODES: Final = {
    "smoke": Mode(
        "smoke",
        Plan(depths=(0, 200), window=50, reps=1, window_cap_s=0.2, build_cap_s=1, op_limit_s=1),
        peers=False,
        rss_depth=200,
        rss_ops=20,
        mp_total=200,
        latency_n=0,
        idle_s=0,
        bounded_n=0,
    ),
    "quick": Mode(
        "quick",
        Plan(
            depths=(0, 10_000), window=200, reps=3, window_cap_s=0.2, build_cap_s=2, op_limit_s=0.5
        ),
        peers=True,
        rss_depth=100_000,
        rss_ops=1000,
        mp_total=1000,
        latency_n=20,
        idle_s=2,
        bounded_n=200,
    ),
    "full": Mode(
        "full",
        Plan(
            depths=(0, 10_000, 100_000, 1_000_000),
            window=2000,
            reps=5,
            window_cap_s=3,
            build_cap_s=60,
            op_limit_s=5,
        ),
        peers=True,
        rss_depth=1_000_000,
        rss_ops=10_000,
        mp_total=20_000,
        latency_n=100,
        idle_s=5,
        bounded_n=2000,
    ),
}


def _fs_type(path: Path) -> str:
    """The filesystem type of the longest mount point that contains *path* (Linux)."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        mnt = fields[1]
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
            best, kind = mnt, fields[2]
    return kind


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _method(mode: Mode, roots: dict[str, Path], specs: list[Spec]) -> dict[str, str]:
    plan = mode.plan
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    fs = "; ".join(f"{n} = {_fs_type(p)} at {p}" for n, p in roots.items())
    peers = ", ".join(
        f"{d} {_version(d)}" for d in ("dirq", "persist-queue", "litequeue", "watchdog")
    )
    return {
        "machine": f"{os.cpu_count()} CPUs ({_cpu()}), {mem:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}, shared and noisy",
        "filesystems": fs,
        "versions": f"vsqs {_version('vsqs')}, vsqs 0.3 (sdist, loaded aside), {peers}",
        "messages": f"{BODY_SIZE} bytes; batches of {BATCH}",
        "windows": f"{plan.window:,} messages per operation per window, stopped after "
        f"{plan.window_cap_s:g} s (at least 2 operations); "
        "publish, receive+delete, batch publish, batch receive+delete in that order",
        "repetitions": f"{plan.reps} windows per backend and depth, each right after a window "
        "of the raw floor on its own backlog of the same depth; tables show the best window "
        "(interference only adds time; medians are in the JSON)",
        "backlogs": "the floor, vsqs and vsqs 0.3 get files written directly in the seed's format "
        f"(same on-disk format); every other peer uses its own publish, stopped after "
        f"{plan.build_cap_s:g} s (flagged 'capped'); a backend whose first receive takes more "
        f"than {plan.op_limit_s:g} s is 'skipped (too slow)'",
        "backends": ", ".join(s.name for s in specs),
        "command": "python -m benchmarks.run " + " ".join(sys.argv[1:]),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    for name in MODES:
        g.add_argument(f"--{name}", dest="mode", action="store_const", const=name)
    p.add_argument("--fs", default=None, help="comma list of shm,disk (default both; smoke: shm)")
    p.add_argument("--shm-dir", default="/dev/shm", type=Path)
    p.add_argument("--disk-dir", default=Path(tempfile.gettempdir()), type=Path)
    p.add_argument("--out", type=Path, default=None, help="where to write the depth plot")
    p.add_argument("--name", default=None, help="results file name (default: the mode)")
    p.add_argument("--results-dir", default=RESULTS, type=Path, help="where the JSON goes")
    p.add_argument("--backends", default=None, help="comma list of backend names to keep")
    p.add_argument("--no-peers", action="store_true", help="only vsqs and the raw floor")
    p.add_argument("--skip-procs", action="store_true", help="only the depth tables")
    p.add_argument("--depths", default=None, help="comma list of backlog depths (default: mode's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    mode = MODES[args.mode]
    if args.depths:
        depths = tuple(int(d) for d in args.depths.split(","))
        mode = replace(mode, plan=replace(mode.plan, depths=depths))
    fss = (args.fs or ("shm" if mode.name == "smoke" else "shm,disk")).split(",")
    bases = {"shm": args.shm_dir, "disk": args.disk_dir}
    specs = all_specs(peers=mode.peers and not args.no_peers)
    if args.backends:
        keep = set(args.backends.split(",")) | {"raw", "raw+fsync"}
        specs = [s for s in specs if s.name in keep]
    names = {s.name for s in specs}
    roots = {fs: Path(tempfile.mkdtemp(prefix="vsqs-bench-", dir=bases[fs])) for fs in fss}
    if "shm" in roots and _fs_type(roots["shm"]) != "tmpfs":
        print(f"warning: {roots['shm']} is not tmpfs", file=sys.stderr)

    started = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    results: dict[str, Any] = {
        "mode": mode.name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "method": _method(mode, roots, specs),
        "plan": asdict(mode.plan),
    }
    cells: list[Cell] = []
    try:
        for depth in mode.plan.depths:
            for fs in fss:
                log(f"depth {depth:,} on {fs}")
                cells += measure_depth(
                    specs, fs=fs, root=roots[fs], depth=depth, plan=mode.plan, log=log
                )
        results["depth"] = report.summary_medians(cells)
        if not args.skip_procs and VSQS in names:
            _procs(mode, fss=fss, roots=roots, names=names, results=results, log=log)
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    results["elapsed_s"] = time.perf_counter() - started

    text = _render(results, cells, fss, mode)
    print(text)
    out_dir: Path = args.results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    name = args.name or mode.name
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / f"{name}.rst").write_text(text + "\n")
    plot_to = args.out or (DOCS_PLOT if mode.name == "full" else out_dir / f"{name}-depth.svg")
    if mode.name != "smoke" and report.plot(cells, fss, mode.plan.depths, plot_to):
        log(f"plot: {plot_to}")
    log(f"results: {out_dir / name}.json ({results['elapsed_s']:.0f} s)")
    return 0


def _attempt(results: dict[str, Any], key: str, log: Any, job: Any) -> None:
    """Run one process benchmark; a failure is reported in the results, not fatal."""
    try:
        results[key] = job()
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
        log(f"{key} failed: {exc!r}")
        results.setdefault("errors", {})[key] = repr(exc)


def _procs(
    mode: Mode,
    *,
    fss: list[str],
    roots: dict[str, Path],
    names: set[str],
    results: dict[str, Any],
    log: Any,
) -> None:
    fs0 = roots[fss[0]]
    waiters = [VSQS, VSQS03] if VSQS03 in names else [VSQS]
    rss_backends = [b for b in (VSQS, VSQS_DURABLE, VSQS03) if b in names]
    log(f"peak RSS at {mode.rss_depth:,}")
    _attempt(
        results, "rss", log, lambda: procs.peak_rss(rss_backends, fs0, mode.rss_depth, mode.rss_ops)
    )
    mp_specs = [s.name for s in all_specs(peers=True) if s.multiprocess and s.name in names]
    mp: dict[str, Any] = {}
    for fs in fss:
        for backend in mp_specs:
            log(f"2P+2C {backend} on {fs}")
            job = partial(procs.producers_consumers, backend, roots[fs], mode.mp_total)
            _attempt(mp, f"{backend} ({fs})", log, job)
    results["mp"] = [
        {**row, "fs": key.rsplit(" (", 1)[1][:-1]} for key, row in mp.items() if key != "errors"
    ]
    if "errors" in mp:
        results.setdefault("errors", {}).update(mp["errors"])
    if mode.latency_n:
        lat: dict[str, Any] = {}
        for fs in fss:
            log(f"wake-up latency on {fs}")
            _attempt(lat, fs, log, partial(procs.wake_latency, waiters, roots[fs], mode.latency_n))
        results["latency"] = {k: v for k, v in lat.items() if k != "errors"}
    if mode.idle_s:
        log("idle CPU")
        _attempt(results, "idle_cpu", log, partial(procs.idle_cpu, waiters, fs0, mode.idle_s))
    if mode.bounded_n:
        log("bounded queue")
        bounded = partial(procs.bounded, waiters, fs0, mode.bounded_n, 0.001)
        _attempt(results, "bounded", log, bounded)


def _render(results: dict[str, Any], cells: list[Cell], fss: list[str], mode: Mode) -> str:
    parts = [
        report.method(results),
        report.heading("Cost per message at depth"),
        report.depth_tables(cells, fss, mode.plan.depths),
        report.heading("Ratios"),
        report.ratio_tables(cells, fss, mode.plan.depths),
    ]
    if any(k in results for k in ("rss", "mp", "latency", "idle_cpu", "bounded")):
        parts += [report.heading("Processes"), report.procs_tables(results)]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
