"""One power failure under a writing process, and what it left (issue 31's table).

:func:`cut_power` mounts the power-loss filesystem, starts a producer
(:mod:`tests.powerloss._producers`) on it, lets the power fail at a random point while
the producer runs (the producer dies with it), unmounts, and reads what survived in the
backing directory: an :class:`Outcome`. The producer may run another vsqs (``code``: a
checkout's directory), to show the behaviour before a fix.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import vsqs
from vsqs._ids import State, parse_name

from ._mount import REPO, LazyMount, lazy_mount
from ._producers import BATCH, PRELOADED, body, intact

PRODUCER: Final = Path(__file__).with_name("_producers.py")


@dataclass
class Outcome:
    """What a power failure left of one producer's work."""

    kind: str
    acknowledged: int = 0
    visible: int = 0
    broken: list[str] = field(default_factory=list)  # visible, not intact (empty, torn)
    lost: list[int] = field(default_factory=list)  # acknowledged, not there intact
    duplicated: list[int] = field(default_factory=list)  # intact more than once
    problems: list[str] = field(default_factory=list)  # settings, attributes, usability

    @property
    def ok(self) -> bool:
        return not (self.broken or self.lost or self.duplicated or self.problems)

    def row(self) -> str:
        """``acknowledged | after the power loss``, as in the issue's table."""
        if self.kind == "configure":
            return f"{self.acknowledged} | " + ("intact" if self.ok else "; ".join(self.problems))
        parts = [f"{self.visible - len(self.broken)} intact"]
        if self.broken:
            parts.append(f"**{len(self.broken)} visible and empty or torn**")
        if self.lost:
            parts.append(f"**{len(self.lost)} acknowledged lost**")
        if self.duplicated:
            parts.append(f"**{len(self.duplicated)} duplicated**")
        parts.extend(f"**{problem}**" for problem in self.problems)
        return f"{self.acknowledged} | " + ", ".join(parts)


def _acks(path: Path) -> tuple[dict[int, str], list[int], set[str]]:
    """The log: acknowledged messages (number -> id), settings, deleted ids."""
    messages: dict[int, str] = {}
    settings: list[int] = []
    deleted: set[str] = set()
    if path.exists():
        for line in path.read_text().splitlines():
            first, _, second = line.partition(" ")
            if first == "setting":
                settings.append(int(second))
            elif first == "deleted":
                deleted.add(second)
            elif first.isdigit():
                messages[int(first)] = second
    return messages, settings, deleted


def _kombu_body(raw: bytes) -> bytes:
    """The body inside a kombu envelope (JSON, the body in base64); *raw* if it is not
    one (torn, empty), which then reads as broken."""
    try:
        return base64.b64decode(json.loads(raw)["body"], validate=True)
    except (ValueError, KeyError, TypeError):
        return raw


def _visible(queue: Path) -> dict[str, bytes]:
    """Every visible message file (ready, held, delayed) of *queue*: id -> body."""
    if not queue.is_dir():
        return {}
    found = {}
    for name in os.listdir(queue):
        entry = parse_name(name)
        if entry is not None and entry.state is not State.NEW:
            found[entry.id] = (queue / name).read_bytes()
    return found


def _preload(queue: Path, kind: str) -> None:
    """The dead-letter kinds move messages published (durably) before the power fails."""
    dead = queue.parent / "dlq"
    if kind == "dead_letter":
        vsqs.Queue(queue).publish_batch([body(n) for n in range(PRELOADED)])
    elif kind == "redrive":
        vsqs.Queue(dead).publish_batch([body(n) for n in range(PRELOADED)])


def _run_until_cut(
    mount: LazyMount, kind: str, *, queue: Path, acks: Path, code: Path, rng: random.Random
) -> None:
    """Start the producer, fail the power at a random point of its work, kill it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), *sys.path])}
    producer = subprocess.Popen(
        [sys.executable, str(PRODUCER), kind, str(queue), str(acks)],
        env=env,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the power kills all of it
        cwd="/",  # `python -m` children (vsqs, Spark's workers) put it first on sys.path
    )
    try:
        if kind in {"dead_letter", "redrive"}:
            time.sleep(rng.uniform(0.05, 1.0))  # a random point of the moves
        else:
            wanted = rng.randint(2, 12) * BATCH
            deadline = time.monotonic() + (200 if kind == "spark" else 60)  # a JVM starts
            while len(_acks(acks)[0]) + len(_acks(acks)[1]) < wanted:
                if producer.poll() is not None:
                    assert producer.stderr is not None
                    raise RuntimeError(f"{kind} producer died: {producer.stderr.read()!r}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} producer made too little progress")
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.01))  # anywhere within the next publish
    finally:
        # The producers stop first: nothing they do can cross the power failure (an
        # fsync the filesystem answered after it, then acknowledged, would count as a
        # message that a real power cut could never have let them acknowledge).
        _stop(producer.pid)
        mount.crash()  # the power fails: unsynced data is gone
        os.killpg(producer.pid, signal.SIGKILL)  # and the producers die with it
        producer.communicate()


def _stop(pid: int) -> None:
    """SIGSTOP the process group of *pid* and wait until its leader is stopped (a
    signal is delivered asynchronously; bounded: a zombie stops nothing)."""
    os.killpg(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, IndexError):
            return
        if state in {"T", "t", "Z", "X"}:
            return
        time.sleep(0.001)


def cut_power(
    kind: str,
    where: Path,
    *,
    code: Path = REPO,
    seed: int = 0,
    roll_back_directories: bool = False,
) -> Outcome:
    """Run producer *kind* on a fresh power-loss filesystem in *where*, fail the power
    while it runs, and say what survived (read from the backing directory after).
    *roll_back_directories*: the power failure also undoes directory operations whose
    directories were not fsynced after them (see :mod:`tests.powerloss.lazyfs`)."""
    rng = random.Random(seed)
    acks = where / f"acks-{kind}"
    with lazy_mount(where, roll_back_directories=roll_back_directories) as mount:
        queue = mount.mountpoint / "data" / "q"  # vsqs makes both (the first process)
        _preload(queue, kind)
        _run_until_cut(mount, kind, queue=queue, acks=acks, code=code, rng=rng)
        backing = mount.backing
    return _inspect(kind, backing / "data" / "q", acks)


def _inspect(kind: str, queue: Path, acks_path: Path) -> Outcome:
    acked, settings, deleted = _acks(acks_path)
    outcome = Outcome(kind, acknowledged=len(settings) if kind == "configure" else len(acked))
    if kind == "kombu":
        queue = queue.parent / "kombu" / "tasks"
    visible = _visible(queue)
    if kind == "kombu":
        visible = {key: _kombu_body(raw) for key, raw in visible.items()}
    if kind in {"dead_letter", "redrive"}:
        visible |= {f"dlq:{k}": v for k, v in _visible(queue.parent / "dlq").items()}
        acked = dict.fromkeys(range(PRELOADED), "")  # every one was published before
        outcome.acknowledged = PRELOADED
    outcome.visible = len(visible)
    seen: dict[int, list[str]] = {}
    for message_id, data in visible.items():
        n = intact(data)
        if n is None:
            outcome.broken.append(message_id)
        else:
            seen.setdefault(n, []).append(message_id)
    for n, message_id in acked.items():
        if message_id in deleted:
            continue  # consumed, or about to be (it may be back: at least once)
        if n not in seen or (message_id and message_id not in seen[n]):
            outcome.lost.append(n)
    outcome.duplicated = [n for n, ids in seen.items() if len(ids) > 1]
    try:
        _check_usable(kind, queue, settings, outcome)
    except Exception as exc:  # noqa: BLE001 - reported as a problem of this outcome
        outcome.problems.append(f"queue unusable: {exc!r}")
    return outcome


def _check_usable(kind: str, path: Path, settings: list[int], outcome: Outcome) -> None:
    """The next process opens the queue without a manual repair and gets its messages."""
    queue = vsqs.Queue(path)
    stored = queue.settings()
    if kind == "configure":
        last = settings[-1] if settings else 0
        got = stored.get("visibility_timeout")
        if got not in {float(last), float(last + 1)} or stored.get("max_receives") != got:
            outcome.problems.append(f"settings {stored} after acknowledging {last}")
    if kind == "attributes":
        wrong = [
            message.id
            for message in vsqs.Queue(path).browse()
            if intact(message.body) is not None
            and message.attributes != {"n": str(intact(message.body))}
        ]
        if wrong:
            outcome.problems.append(f"{len(wrong)} without their attributes")
    queue.publish(b"after")
    counts = queue.counts()
    if counts.ready + counts.held + counts.delayed < 1:
        outcome.problems.append(f"counts after the power loss: {counts}")
