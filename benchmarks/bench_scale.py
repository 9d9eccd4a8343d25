"""Scaling out: does a second consumer (or producer) on a 2-partition queue gain what a
second bare process on a second directory gains, trial by trial?

Method (issue 38). A *configuration* is a role (consumers or producers) and a way of
publishing: ``publish`` one message at a time, or ``publish_batch`` of 10, 100 or 1,000
messages (``--batches``). Each configuration is run in ``--rounds`` trials (default 10);
the rounds are the outer loop, so each configuration's trials are spread over the whole
run. One trial is five runs back to back, in an order that rotates from trial to trial:

* ``bare, 1 dir``: one bare strict-FIFO rename consumer on one directory: it lists the
  directory once, then for each name, oldest first, ``rename`` ``<id>`` to
  ``<id>.<expiry>`` (a lost race, ``ENOENT``, moves it to the next name), ``open``,
  ``read``, ``close``, ``unlink``. The bare producer: ``open(<id>.new, O_CREAT|O_EXCL)``,
  ``write``, ``close``, ``rename`` to ``<id>``, one message at a time whatever the
  configuration (the bare loop has no batch), with ids known in advance;
* ``bare, 2 dirs``: two of them, process i on directory i (the backlog split evenly, or
  N/2 published each);
* ``vsqs, 1 on p=2`` and ``vsqs, 2 on p=2``: one and two processes on
  ``vsqs.Queue(path, partitions=2)``: consumers ``receive(timeout=0)`` and ``delete``
  until ``receive`` returns ``None``, finding their home partitions themselves;
  producers publish without a group, N (or N/2 each) by ``publish`` or ``publish_batch``
  of the configuration's size, and spread their messages themselves;
* ``vsqs, 1 on p=1``: one process on the plain ``vsqs.Queue(path)``, the same calls.

The consumers' backlog is N messages of 100 bytes, made before each run (untimed): for
the bare runs, ready files written straight into the directories, ids dealt round them;
for vsqs, published the configuration's way (``publish`` or ``publish_batch``) by one
handle, which closes before the run, so the queue spreads it as it spreads any producer's.
Before each run the filesystem's dirty data is written back (``syncfs``). Every process
of a run is spawned, imports ``vsqs`` and opens its queue, then all are released
together by one barrier (consumers take their home partitions on their first receive,
after it, as consumers started together do); a run's figure is N divided by the wall
time from the earliest release to the last process's end. Each run checks itself: every
message delivered exactly once (the counts add up to N, no message file left) or, for
producers, N ready files. vsqs handles are ``durable=False``, as the bare loops never
``fsync``.

From each trial, three ratios:

* ``vsqs 2 / 1``: ``2 on p=2`` over ``1 on p=2``, vsqs's own speed-up (floor: 1.5x in the
  median trial);
* ``vsqs ÷ bare``: that speed-up divided by the bare one of the same trial
  (``2 dirs`` over ``1 dir``): on a shared 2-core machine the bare speed-up itself
  varies from 1.1x to 1.7x between trials, so the floor is relative to it (0.9x in the
  median trial, 0.75x in the worst);
* ``p=2 ÷ p=1``: what one process pays per message on a 2-partition queue over what it
  pays on a plain one (``1 on p=1`` over ``1 on p=2`` in messages per second; ceiling
  1.1x in the median trial).

A table per role and filesystem gives, per configuration, each ratio's median over the
trials and its worst trial (the lowest speed-up, the highest cost), with a column per
floor saying whether it is met; for consumers, ``apart`` counts the trials whose two
consumers on p=2 each took most of their messages (one in 64 sampled) from a different
partition, their own homes. A second table gives each run's median msg/s.

``--sweep`` runs issue 27's sweep instead (K = 1, 2, 4, ... processes, four columns; its
method is in ``benchmarks/scale_sweep.py``).

Run it with::

    python -m benchmarks.bench_scale [--rounds 10] [--messages 30000] [--fs shm|disk|both]
                                     [--roles consumers|producers|both] [--batches 1,10,100,1000]
    python -m benchmarks.bench_scale --sweep [--max-k 8] [--rounds 3] [--messages 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from benchmarks import scale_sweep
from benchmarks.scale_runs import Job, rst, run_outcomes

ROOTS: Final = {"shm": "/dev/shm", "disk": "/var/tmp"}
FS_NAMES: Final = {"shm": "tmpfs, /dev/shm", "disk": "ext4, /var/tmp"}
RUNS: Final = ("bare, 1 dir", "bare, 2 dirs", "vsqs, 1 on p=2", "vsqs, 2 on p=2", "vsqs, 1 on p=1")
BATCHES: Final = (1, 10, 100, 1000)
MESSAGES: Final = 30_000
DISK_MESSAGES: Final = 20_000
ROUNDS: Final = 10
GAIN_FLOOR: Final = 1.5  # vsqs 2 / 1, median
RELATIVE_FLOOR: Final = 0.9  # vsqs ÷ bare, median
RELATIVE_WORST_FLOOR: Final = 0.75  # vsqs ÷ bare, worst trial
COST_CEILING: Final = 1.1  # p=2 ÷ p=1, median

APART: Final = "apart"
"""In a consumers' trial: 1.0 if the two consumers on p=2 took most of their messages
from different partitions (each from its own home), else 0.0."""

Trial = dict[str, float]  # run -> msg/s (and APART)


def published(batch: int) -> str:
    return "publish" if batch == 1 else f"publish_batch({batch})"


def trial_job(role: str, run: str, path: Path, *, batch: int, messages: int) -> Job:
    """The :class:`Job` of *run* in one trial of (*role*, *batch*), in *path*."""
    if run == "bare, 1 dir":
        return Job(role, "bare", (str(path),), 1, 1, messages)
    if run == "bare, 2 dirs":
        return Job(role, "bare", (f"{path}/0", f"{path}/1"), 2, 1, messages)
    processes, partitions = {"vsqs, 1 on p=2": (1, 2), "vsqs, 2 on p=2": (2, 2)}.get(run, (1, 1))
    return Job(role, "vsqs", (str(path),), processes, partitions, messages, batch)


# ---------------------------------------------------------------- the ratios of a trial


def bare_gain(t: Trial) -> float:
    return t["bare, 2 dirs"] / t["bare, 1 dir"]


def vsqs_gain(t: Trial) -> float:
    return t["vsqs, 2 on p=2"] / t["vsqs, 1 on p=2"]


def relative_gain(t: Trial) -> float:
    return vsqs_gain(t) / bare_gain(t)


def cost(t: Trial) -> float:
    return t["vsqs, 1 on p=1"] / t["vsqs, 1 on p=2"]


def _summary(
    trials: Sequence[Trial], ratio: Callable[[Trial], float], *, high_is_worse: bool = False
) -> tuple[float, float]:
    """(median, worst) of *ratio* over *trials*."""
    values = [ratio(t) for t in trials]
    return statistics.median(values), max(values) if high_is_worse else min(values)


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def ratio_row(batch: int, trials: Sequence[Trial]) -> tuple[list[str], list[bool]]:
    """One configuration's row of the ratio table, and whether each floor is met."""
    bare = _summary(trials, bare_gain)
    gain = _summary(trials, vsqs_gain)
    rel = _summary(trials, relative_gain)
    per = _summary(trials, cost, high_is_worse=True)
    checks = [
        gain[0] >= GAIN_FLOOR,
        rel[0] >= RELATIVE_FLOOR,
        rel[1] >= RELATIVE_WORST_FLOOR,
        per[0] <= COST_CEILING,
    ]
    cells = [f"{m:.2f} / {w:.2f}" for m, w in (bare, gain, rel, per)]
    row = [
        published(batch),
        str(len(trials)),
        *([f"{sum(t[APART] for t in trials):.0f}"] if APART in trials[0] else []),
        cells[0],
        cells[1],
        _met(checks[0]),
        cells[2],
        _met(checks[1]),
        _met(checks[2]),
        cells[3],
        _met(checks[3]),
    ]
    return row, checks


def ratio_table(by_batch: dict[int, list[Trial]]) -> tuple[str, list[bool]]:
    """One role on one filesystem: a row per configuration; and every floor's verdict."""
    consumers = any(APART in t for trials in by_batch.values() for t in trials)
    head = [
        "published by",
        "trials",
        *(["apart"] if consumers else []),
        "bare 2 / 1",
        "vsqs 2 / 1",
        f"≥ {GAIN_FLOOR}x",
        "vsqs ÷ bare",
        f"≥ {RELATIVE_FLOOR}x",
        f"worst ≥ {RELATIVE_WORST_FLOOR}x",
        "p=2 ÷ p=1",
        f"≤ {COST_CEILING}x",
    ]
    rows, verdicts = [], []
    for batch, trials in sorted(by_batch.items()):
        row, checks = ratio_row(batch, trials)
        rows.append(row)
        verdicts.extend(checks)
    return rst(head, rows), verdicts


def rates_table(by_batch: dict[int, list[Trial]]) -> str:
    """One role on one filesystem: each run's median msg/s per configuration."""
    rows = [
        [
            published(batch),
            *(f"{statistics.median(t[run] for t in trials) / 1000:.1f}k" for run in RUNS),
        ]
        for batch, trials in sorted(by_batch.items())
    ]
    return rst(["published by", *RUNS], rows)


# ---------------------------------------------------------------- the run


def measure(
    root: str,
    *,
    roles: Sequence[str],
    batches: Sequence[int],
    messages: int,
    rounds: int,
    log: Callable[[str], None],
) -> dict[str, dict[int, list[Trial]]]:
    """Every trial on the filesystem of *root*: {role: {batch: [trial, ...]}}."""
    found: dict[str, dict[int, list[Trial]]] = {r: {b: [] for b in batches} for r in roles}
    with tempfile.TemporaryDirectory(prefix="vsqs-scale-", dir=root) as tmp:
        for rnd in range(rounds):
            for number, (role, batch) in enumerate((r, b) for r in roles for b in batches):
                turn = (rnd + number) % len(RUNS)
                trial: Trial = {}
                for step, run in enumerate(RUNS[turn:] + RUNS[:turn]):
                    path = Path(tmp) / f"{role}-{batch}-{step}-r{rnd}"
                    job = trial_job(role, run, path, batch=batch, messages=messages)
                    trial[run], outcomes = run_outcomes(job)
                    if role == "consumers" and run == "vsqs, 2 on p=2":
                        trial[APART] = float(len({o.home for o in outcomes}) == 2)
                    shutil.rmtree(path)
                found[role][batch].append(trial)
                log(
                    f"  trial {rnd + 1}, {role}, {published(batch)}: "
                    f"vsqs 2 / 1 {vsqs_gain(trial):.2f}x, bare 2 / 1 {bare_gain(trial):.2f}x, "
                    f"÷ {relative_gain(trial):.2f}, p=2 ÷ p=1 {cost(trial):.2f}"
                    + ("" if APART not in trial else ", apart" if trial[APART] else ", together")
                )
    return found


def report(found: dict[str, dict[str, dict[int, list[Trial]]]], messages: dict[str, int]) -> bool:
    """Print the tables of every filesystem and role; whether every floor is met."""
    verdicts: list[bool] = []
    for fs, by_role in found.items():
        for role, by_batch in by_role.items():
            table, met = ratio_table(by_batch)
            verdicts.extend(met)
            print(
                f".. rubric:: {role.capitalize()}, on {FS_NAMES[fs]}, {messages[fs]:,} "
                f"messages: median / worst trial\n"
            )
            print(table, end="\n\n")
            print(f".. rubric:: {role.capitalize()}, on {FS_NAMES[fs]}: median msg/s\n")
            print(rates_table(by_batch), end="\n\n")
    print(f"Floors met: {sum(verdicts)} of {len(verdicts)}")
    return all(verdicts)


def _batches(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(b) for b in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--batches: sizes separated by commas, not {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--batches: each size is 1 or more, not {text!r}")
    return sizes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"1 or more, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages",
        type=_positive,
        help=f"backlog / published (default {MESSAGES:,}; sweep 100,000)",
    )
    parser.add_argument(
        "--disk-messages", type=_positive, default=DISK_MESSAGES, help="the same, on the disk"
    )
    parser.add_argument(
        "--rounds", type=_positive, help=f"trials per configuration (default {ROUNDS}; sweep 3)"
    )
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 3 rounds")
    parser.add_argument("--fs", choices=("shm", "disk", "both"), default="shm")
    parser.add_argument("--roles", choices=("consumers", "producers", "both"), default="both")
    parser.add_argument(
        "--batches",
        type=_batches,
        default=BATCHES,
        help="messages per call, 1 = publish (default 1,10,100,1000)",
    )
    parser.add_argument("--sweep", action="store_true", help="issue 27's sweep over K instead")
    parser.add_argument(
        "--max-k",
        type=_positive,
        default=max(os.cpu_count() or 1, 8),
        help="--sweep: the largest K",
    )
    parser.add_argument("--bare-only", action="store_true", help="--sweep: only the bare columns")
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.sweep else ROUNDS)
    shm = args.messages or (100_000 if args.sweep else MESSAGES)
    disk = args.disk_messages
    if args.quick:
        shm, disk, rounds = 10_000, 5_000, 3
    messages = {"shm": shm, "disk": disk}
    roles = ("consumers", "producers") if args.roles == "both" else (args.roles,)
    filesystems = ("shm", "disk") if args.fs == "both" else (args.fs,)
    started = time.monotonic()
    if args.sweep:
        found = sweep(args, filesystems, roles, messages, rounds)
    else:
        found = {
            fs: measure(
                ROOTS[fs],
                roles=roles,
                batches=args.batches,
                messages=messages[fs],
                rounds=rounds,
                log=lambda line: print(line, flush=True),
            )
            for fs in filesystems
        }
    print(
        f"\n{rounds} round(s), {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
        f"{time.monotonic() - started:.0f} s\n"
    )
    if args.sweep:
        scale_sweep.report(found, scale_sweep.k_values(args.max_k), FS_NAMES, messages)
        samples = scale_sweep.as_json(found)
    else:
        report(found, messages)
        samples = {
            fs: {
                role: {published(b): t for b, t in by_batch.items()}
                for role, by_batch in by_role.items()
            }
            for fs, by_role in found.items()
        }
    if args.json:
        args.json.write_text(json.dumps(samples, indent=1))
    return 0


def sweep(
    args: argparse.Namespace,
    filesystems: Sequence[str],
    roles: Sequence[str],
    messages: dict[str, int],
    rounds: int,
) -> dict[str, Any]:
    """Issue 27's sweep (``--sweep``), on each filesystem."""
    columns = list(scale_sweep.COLUMNS)
    if args.bare_only or not scale_sweep.partitions_supported():
        columns = columns[:2] if args.bare_only else columns[:3]
    ks = scale_sweep.k_values(args.max_k)
    return {
        fs: scale_sweep.measure(
            fs, ROOTS[fs], roles=roles, ks=ks, columns=columns, messages=messages[fs], rounds=rounds
        )
        for fs in filesystems
    }


if __name__ == "__main__":
    raise SystemExit(main())
