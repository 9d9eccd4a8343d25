"""The ``vsqs`` command: every command through click's runner, and the console script
itself (``vsqs``, ``python -m vsqs``) in real subprocesses, shells and terminals."""

from __future__ import annotations

import json
import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import vsqs
from vsqs.__main__ import MISSING_EXTRA
from vsqs.cli import cli
from vsqs.testing import drain

BIN = Path(sys.executable).parent
VSQS = str(BIN / "vsqs")
REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "80"}
ENV.pop("VSQS_DEBUG", None)
ENV.pop("VSQS_ROOT", None)


def run(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)


def shell(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=120, check=False)


def wait_blocked(pid: int, timeout: float = 60) -> None:
    """Return once the process *pid* waits for a message: it holds an inotify descriptor
    (opened by its waiter after the imports and the first look) and sleeps. A fixed sleep
    would signal a process still importing on a loaded machine."""
    deadline = time.monotonic() + timeout
    fds = Path(f"/proc/{pid}/fd")
    while time.monotonic() < deadline:
        try:
            waiting = any(os.readlink(fd) == "anon_inode:inotify" for fd in fds.iterdir())
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            waiting, state = False, "?"  # RACE: a descriptor closed between the two looks
        if waiting and state == "S":
            time.sleep(0.2)  # it may still be between its look and the wait itself
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never blocked waiting within {timeout} s")


def finish(child: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """The output of a child told to stop; one still running after *timeout* is killed
    (never leaked into the rest of the run, as one that ignores SIGINT would be) and the
    test fails."""
    try:
        return child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise AssertionError(f"{child.args!r} did not stop within {timeout} s") from None


def bodies(path: Path) -> list[bytes]:
    with vsqs.Queue(path) as queue:
        return [m.body for m in drain(queue)]


# -- help ------------------------------------------------------------------------------

COMMANDS = [
    "clean", "create", "delete", "demo", "peek", "publish", "pump", "purge",
    "queues", "receive", "redrive", "requeue", "shutdown", "sink", "stats",
]  # fmt: skip


def test_help_lists_every_command_with_help_text_and_exit_codes() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for name in COMMANDS:
        line = next(line for line in result.stdout.splitlines() if line.split()[:1] == [name])
        assert len(line.split()) > 3, line  # the command and a sentence
        sub = run(name, "--help")
        assert sub.exit_code == 0, name
        assert "Usage: " in sub.stdout
    for code in ("0", "1", "2", "3", "4", "5", "126", "127", "130", "143"):
        assert re.search(rf"^\s+{code}\s+\w", result.stdout, re.MULTILINE), code
    assert "_VSQS_COMPLETE=bash_source vsqs" in result.stdout
    assert run("--version").stdout.strip() == f"vsqs, version {vsqs.__version__}"


def test_the_guide_and_help_agree_that_exec_renews_the_lease() -> None:
    guide = " ".join((REPO / "docs" / "guides" / "cli.rst").read_text().split())
    help_text = " ".join(run("receive", "--help").stdout.split())
    assert "its lease is renewed" in help_text
    assert "lease is renewed" in guide
    assert "must finish within" not in guide
    for text in (guide, help_text):
        assert "128 + the signal number" in text


def test_a_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    result = run("receive", str(tmp_path), "--wait", "soon")
    assert result.exit_code == 2
    assert "Invalid value for '--wait'" in result.stderr


# -- publish ---------------------------------------------------------------------------


def test_publish_arguments_prints_ids_in_order(tmp_path: Path) -> None:
    path = tmp_path / "new" / "q"
    result = run("publish", str(path), "one", "two", "drei ü")
    assert result.exit_code == 0
    ids = result.stdout.split()
    assert len(ids) == 3
    assert ids == sorted(ids, key=int)
    assert bodies(path) == [b"one", b"two", "drei ü".encode()]


def test_publish_stdin_lines_in_batches_with_attributes_and_delay(tmp_path: Path) -> None:
    result = run(
        "publish", str(tmp_path), "-", "--batch", "2", "--attr", "kind=img", "--attr", "x=",
        input="a\n\nc\nd",
    )  # fmt: skip
    assert result.exit_code == 0
    assert len(result.stdout.split()) == 4
    with vsqs.Queue(tmp_path) as queue:
        got = drain(queue)
    assert [m.body for m in got] == [b"a", b"", b"c", b"d"]
    assert all(dict(m.attributes) == {"kind": "img", "x": ""} for m in got)
    assert run("publish", str(tmp_path), "later", "--delay", "600").exit_code == 0
    assert vsqs.Queue(tmp_path).counts().delayed == 1


def test_publish_files_by_line_and_whole(tmp_path: Path) -> None:
    data = tmp_path / "input.txt"
    data.write_bytes(b"first\nsecond\n")
    queue = tmp_path / "q"
    assert run("publish", str(queue), "--file", str(data), "-q").stdout == ""
    assert bodies(queue) == [b"first", b"second"]
    result = run("publish", str(queue), "--file", str(data), "--file", "-", "--whole", input="x")
    assert result.exit_code == 0
    assert bodies(queue) == [b"first\nsecond\n", b"x"]


def test_publish_deduplicates(tmp_path: Path) -> None:
    first = run("publish", str(tmp_path), "job", "--dedup-id", "k1")
    again = run("publish", str(tmp_path), "job", "--dedup-id", "k1")
    assert first.stdout == again.stdout
    assert run("publish", str(tmp_path), "-", "--content-dedup", input="a\na\nb\n").exit_code == 0
    assert bodies(tmp_path) == [b"job", b"a", b"b"]


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["a", "b", "--dedup-id", "k"],
        ["-", "--dedup-id", "k"],
        ["a", "--attr", "novalue"],
        ["a", "--attr", "=v"],
        ["a", "--batch", "0"],
    ],
)
def test_publish_usage_errors_publish_nothing(tmp_path: Path, args: list[str]) -> None:
    result = run("publish", str(tmp_path / "q"), *args, input="")
    assert result.exit_code == 2
    assert "Error" in result.stderr
    assert not (tmp_path / "q").exists() or bodies(tmp_path / "q") == []


def test_publish_errors_are_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.txt")
    result = run("publish", str(tmp_path / "q"), "--file", missing)
    assert result.exit_code == 1
    assert result.stderr == f"vsqs: No such file or directory: {missing}\n"
    with pytest.raises(FileNotFoundError):
        run("--debug", "publish", str(tmp_path / "q"), "--file", missing)
    result = run("publish", str(tmp_path / "q"), "a", "--attr", "k" * 300 + "=v")
    assert result.exit_code == 2
    assert result.stderr.startswith("vsqs: invalid message attributes")


def test_publish_to_a_closed_queue_exits_4(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path).shutdown()
    result = run("publish", str(tmp_path), "late")
    assert result.exit_code == 4
    assert "shut down" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_publish_to_a_file_is_not_a_queue(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    result = run("publish", str(tmp_path / "f"), "x")
    assert result.exit_code == 1
    assert "is not a directory" in result.stderr


# -- receive ---------------------------------------------------------------------------


def test_receive_prints_and_deletes_until_empty(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a", "b", "c")
    assert run("receive", str(tmp_path), "-n", "2").stdout == "a\nb\n"
    assert run("receive", str(tmp_path)).stdout == "c\n"
    assert vsqs.Queue(tmp_path).counts().total == 0
    empty = run("receive", str(tmp_path), "--wait", "0.1")
    assert (empty.exit_code, empty.stdout, empty.stderr) == (3, "", "")


def test_receive_json_and_keep(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "x", "--attr", "a=1")
    run("publish", str(tmp_path), "--file", "-", "--whole", input="")  # an empty body
    (tmp_path / "1700000000000000").write_bytes(b"\xff\xfe")  # not UTF-8, oldest
    result = run("receive", str(tmp_path), "--json", "--keep", "--visibility-timeout", "100")
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line.get("body") for line in lines] == [None, "x", ""]
    assert lines[0]["body_base64"] == "//4="
    assert lines[1]["attributes"] == {"a": "1"}
    assert lines[1]["receive_count"] == 1
    assert lines[1]["receipt"].startswith(lines[1]["id"] + ".")
    assert lines[1]["expires_at"] > time.time() + 50
    counts = vsqs.Queue(tmp_path).counts()
    assert (counts.ready, counts.held) == (0, 3)  # kept: held until their lease ends


def test_receive_from_a_closed_and_drained_queue_exits_4(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "last")
    run("shutdown", str(tmp_path))
    assert run("receive", str(tmp_path), "--wait", "inf").exit_code == 0
    assert run("receive", str(tmp_path), "--wait", "inf").exit_code == 4


def test_receive_missing_queue_creates_nothing(tmp_path: Path) -> None:
    for command in ("receive", "peek", "stats", "purge", "clean", "requeue", "shutdown", "sink"):
        result = run(command, str(tmp_path / "nope"))
        assert result.exit_code == 1, command
        assert result.stderr == f"vsqs: no queue at {tmp_path / 'nope'}\n"
    assert run("redrive", str(tmp_path / "nope")).exit_code == 1
    assert run("delete", str(tmp_path / "nope"), "1700000000000000").exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_receive_exec_deletes_on_success_with_the_environment(tmp_path: Path) -> None:
    run("publish", str(tmp_path / "q"), "one", "two")
    out = tmp_path / "out"
    fields = '"$(cat)" "$VSQS_RECEIVE_COUNT" "$VSQS_RECEIPT" "$VSQS_QUEUE"'
    command = f'printf "%s %s %s %s\\n" {fields} >> {out}; echo ok'
    result = run("receive", str(tmp_path / "q"), "--exec", command)
    assert (result.exit_code, result.stdout) == (0, "ok\nok\n")
    lines = [line.split() for line in out.read_text().splitlines()]
    assert [(body, count) for body, count, _, _ in lines] == [("one", "1"), ("two", "1")]
    assert all(re.fullmatch(r"\d+\.\d+", receipt) for _, _, receipt, _ in lines)
    assert all(queue == str(tmp_path / "q") for *_, queue in lines)
    assert vsqs.Queue(tmp_path / "q").counts().total == 0


def test_receive_exec_json_on_stdin(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "x", "--attr", "k=v")
    result = run("receive", str(tmp_path), "--json", "--exec", "cat")
    assert json.loads(result.stdout)["attributes"] == {"k": "v"}


def test_receive_exec_failure_releases_at_the_end_and_exits_5(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "good", "bad", "good")
    result = run("receive", str(tmp_path), "--exec", 'test "$(cat)" = good')
    assert result.exit_code == 5
    assert "CMD exited with status 1 for message" in result.stderr
    with vsqs.Queue(tmp_path) as queue:
        left = drain(queue)
    assert [m.body for m in left] == [b"bad"]  # released, not retried in a loop
    assert left[0].receive_count == 2


def test_receive_exec_command_not_found_stops_and_releases(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a", "b")
    result = run("receive", str(tmp_path), "--exec", "vsqs-no-such-command-xyz")
    assert result.exit_code == 127
    assert result.stderr.splitlines()[-1] == (
        "vsqs: command not found (exit status 127): vsqs-no-such-command-xyz"
    )
    counts = vsqs.Queue(tmp_path).counts()
    assert (counts.ready, counts.held) == (2, 0)
    (tmp_path / "script").write_text("echo hi\n")  # not executable
    result = run("receive", str(tmp_path), "--exec", str(tmp_path / "script"))
    assert result.exit_code == 126
    assert vsqs.Queue(tmp_path).counts().ready == 2


def test_receive_exec_that_outlives_its_lease_is_reported(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "slow")
    # The command itself takes the lease away (as an expiry and another consumer would).
    result = run(
        "receive", str(tmp_path),
        "--exec", f"vsqs requeue {tmp_path} >/dev/null; vsqs receive {tmp_path} >/dev/null",
        "--visibility-timeout", "0", env={"PATH": ENV["PATH"]},
    )  # fmt: skip
    assert result.exit_code == 5
    assert "ended while CMD ran" in result.stderr


def test_receive_usage_errors(tmp_path: Path) -> None:
    assert run("receive", str(tmp_path), "--keep", "--exec", "true").exit_code == 2
    assert run("receive", str(tmp_path), "--wait", "-1").exit_code == 2


# -- delete and peek -------------------------------------------------------------------


def test_delete_by_receipt_twice_and_from_stdin(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a", "b", "c")
    lines = run("receive", str(tmp_path), "--keep", "--json").stdout.splitlines()
    receipts = [json.loads(line)["receipt"] for line in lines]
    assert run("delete", str(tmp_path), receipts[0]).exit_code == 0
    again = run("delete", str(tmp_path), receipts[0])
    assert again.exit_code == 1
    assert (
        again.stderr == f"vsqs: not deleted: {receipts[0]} (already deleted, or its lease ended)\n"
    )
    assert run("delete", str(tmp_path), "-", input="\n".join(receipts[1:]) + "\n").exit_code == 0
    assert vsqs.Queue(tmp_path).counts().total == 0


@pytest.mark.parametrize("receipt", ["abc", "1700000000000000.new", "017.5", ""])
def test_delete_a_bad_receipt_is_a_usage_error(tmp_path: Path, receipt: str) -> None:
    run("publish", str(tmp_path), "a")
    result = run("delete", str(tmp_path), "1700000000000000", receipt)
    if not receipt:
        assert result.exit_code == 1  # empty lines are skipped; the id names no message
        return
    assert result.exit_code == 2
    assert "is not a receipt or message id" in result.stderr
    assert vsqs.Queue(tmp_path).counts().ready == 1


def test_peek_claims_nothing(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a", "b", "c")
    assert run("peek", str(tmp_path)).stdout == "a\n"
    assert run("peek", str(tmp_path), "-n", "5").stdout == "a\nb\nc\n"
    first = json.loads(run("peek", str(tmp_path), "--json").stdout)
    assert first["receipt"] == first["id"]
    assert first["receive_count"] == 0
    assert vsqs.Queue(tmp_path).counts().ready == 3
    run("purge", str(tmp_path), "--yes")
    assert run("peek", str(tmp_path)).exit_code == 3


# -- operating -------------------------------------------------------------------------


def test_stats_table_json_and_watch(tmp_path: Path) -> None:
    queue = tmp_path / "a-queue-path-long-enough-to-be-folded-at-80-columns" / "orders"
    run("publish", str(queue), "a", "b", "c")
    run("receive", str(queue), "-n", "1")
    run("receive", str(queue), "-n", "1", "--keep")
    run("publish", str(queue), "d", "--delay", "60")
    table = run("stats", str(queue)).stdout.splitlines()
    assert table[0].split() == [
        "queue", "ready", "held", "delayed", "new", "oldest", "produced", "consumed", "shutdown",
    ]  # fmt: skip
    row = table[2].split()
    assert row[0] == str(queue)
    assert row[1:5] == ["1", "1", "1", "0"]
    assert row[-3:] == ["4", "1", "no"]
    data = json.loads(run("stats", str(queue), "--json").stdout)
    assert data["queue"] == str(queue)
    assert (data["ready"], data["held"], data["delayed"], data["is_shutdown"]) == (1, 1, 1, False)
    assert data["produced_messages"] == 4
    assert data["consumed_bytes"] == 1
    assert data["oldest_ready_age"] >= 0
    watch = run(
        "stats", str(queue), str(queue), "--json", "--watch", "--interval", "0.05", "--count", "3"
    )
    assert len(watch.stdout.splitlines()) == 6
    tables = run("stats", str(queue), "--watch", "--interval", "0.05", "--count", "2").stdout
    assert tables.count("produced") == 2


def test_purge_needs_yes_without_a_terminal(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a", "b")
    refused = run("purge", str(tmp_path))
    assert refused.exit_code == 2
    assert "--yes" in refused.stderr
    assert vsqs.Queue(tmp_path).counts().ready == 2
    assert run("purge", str(tmp_path), "-y").stdout == "purged 2 messages\n"
    assert vsqs.Queue(tmp_path).counts().total == 0


def test_clean_removes_old_debris_only(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a")
    old = tmp_path / "1600000000000000.new"
    old.write_bytes(b"half")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    young = tmp_path / f"{time.time_ns() // 1000}.new"
    young.write_bytes(b"being written")
    assert run("clean", str(tmp_path)).stdout == "removed 1 entry\n"
    assert not old.exists()
    assert young.exists()
    assert run("clean", str(tmp_path), "--older-than", "-1").exit_code == 2


def test_requeue_returns_expired_leases(tmp_path: Path) -> None:
    run("publish", str(tmp_path), "a")
    # --keep prints each message once, even when its lease ends during the run.
    assert run("receive", str(tmp_path), "--keep", "--visibility-timeout", "0").stdout == "a\n"
    assert run("requeue", str(tmp_path)).stdout == "requeued 1 message\n"
    assert vsqs.Queue(tmp_path).counts().ready == 1


def test_redrive_to_the_source_and_to_another_queue(tmp_path: Path) -> None:
    source, dlq, other = tmp_path / "src", tmp_path / "dlq", tmp_path / "other"
    queue = vsqs.Queue(source, dead_letter=dlq, max_receives=1)
    for body in (b"x", b"y", b"z"):
        queue.publish(body)
        assert queue.receive(timeout=0, visibility_timeout=0) is not None
        assert queue.requeue_expired() == 0  # one receive ended undeleted: dead-lettered
    assert vsqs.Queue(dlq).counts().ready == 3
    assert run("redrive", str(dlq), "--limit", "1").stdout == "redrove 1 message\n"
    assert bodies(source) == [b"x"]
    vsqs.Queue(other)
    assert run("redrive", str(dlq), "--to", str(other)).stdout == "redrove 2 messages\n"
    assert bodies(other) == [b"y", b"z"]
    assert run("redrive", str(dlq), "--to", str(tmp_path / "typo")).exit_code == 1


def test_shutdown_twice_is_harmless(tmp_path: Path) -> None:
    assert run("shutdown", str(tmp_path)).stdout == f"shut down {tmp_path}\n"
    assert vsqs.Queue(tmp_path).is_shutdown
    again = run("shutdown", str(tmp_path))
    assert again.exit_code == 0
    assert vsqs.Queue(tmp_path).is_shutdown


def test_queues_under_a_root(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    assert run("queues", "--root", root, "list").exit_code == 1
    assert not (tmp_path / "root").exists()
    created = run("queues", "--root", root, "create", "orders", "orders.dlq")
    assert created.stdout.split() == [f"{root}/orders", f"{root}/orders.dlq"]
    assert run("queues", "list", env={"VSQS_ROOT": root}).stdout == "orders\norders.dlq\n"
    bad = run("queues", "--root", root, "create", "ok", "../escape")
    assert bad.exit_code == 2
    assert "invalid queue name '../escape'" in bad.stderr
    assert not (tmp_path / "root" / "ok").exists()  # all or nothing
    assert run("queues", "--root", root, "remove", "orders").exit_code == 2  # no --yes
    assert run("queues", "--root", root, "remove", "nope", "--yes").exit_code == 1
    assert run("queues", "--root", root, "remove", ".vsqs", "--yes").exit_code == 2
    assert run("queues", "--root", root, "remove", "orders", "--yes").exit_code == 0
    assert run("queues", "--root", root, "list").stdout == "orders.dlq\n"
    assert run("queues", "list").exit_code == 2  # no root given


def test_pump_and_sink(tmp_path: Path) -> None:
    pumped = run("pump", str(tmp_path / "q"), "-n", "250", "--size", "20", "--no-durable")
    assert re.fullmatch(
        r"published 250 messages in [\d.]+ s: [\d,]+ messages/s \([\d.,]+ MB/s\)\n",
        pumped.stdout,
    )
    assert vsqs.Queue(tmp_path / "q").counts().ready == 250
    assert run("sink", str(tmp_path / "q"), "-n", "100").stdout.startswith("consumed 100 messages")
    assert run("sink", str(tmp_path / "q"), "--wait", "0").stdout.startswith("consumed 150 ")
    assert run("sink", str(tmp_path / "q"), "--wait", "0").exit_code == 3
    run("shutdown", str(tmp_path / "q"))
    assert run("sink", str(tmp_path / "q"), "--wait", "5").exit_code == 3  # drained: at once


# -- the real console script -----------------------------------------------------------


def test_import_vsqs_never_imports_click_or_rich() -> None:
    code = "import sys, vsqs, vsqs.testing; print(sorted({'click', 'rich'} & set(sys.modules)))"
    assert shell([sys.executable, "-c", code]).stdout == "[]\n"


def test_console_script_and_python_m(tmp_path: Path) -> None:
    done = shell([VSQS, "publish", str(tmp_path), "hello"])
    assert (done.returncode, done.stderr) == (0, "")
    module = shell([sys.executable, "-m", "vsqs", "receive", str(tmp_path)])
    assert (module.returncode, module.stdout) == (0, "hello\n")
    usage = shell([sys.executable, "-m", "vsqs", "--help"])
    assert usage.stdout.startswith("Usage: python -m vsqs")
    missing = shell([VSQS, "stats", str(tmp_path / "nope")])
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == f"vsqs: no queue at {tmp_path / 'nope'}\n"


def test_without_the_cli_extra_the_script_says_how_to_install_it(tmp_path: Path) -> None:
    """The real console script, with click hidden from the interpreter: one line naming
    the ``cli`` extra and exit status 1, not a ``ModuleNotFoundError`` traceback."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['click'] = None\n")
    env = {**ENV, "PYTHONPATH": str(tmp_path)}
    for args in ([VSQS, "--help"], [sys.executable, "-m", "vsqs", "--help"]):
        done = subprocess.run(
            args, capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert done.stderr == MISSING_EXTRA + "\n"
    assert "pip install '.[cli]'" in MISSING_EXTRA
    assert "0.3" in MISSING_EXTRA


def test_a_broken_install_of_vsqs_itself_still_shows_its_traceback(tmp_path: Path) -> None:
    """Only a missing click or rich means the extra is missing; any other missing module
    is a real error and keeps its traceback."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['vsqs.cli._admin'] = None\n"
    )
    done = subprocess.run(
        [VSQS, "--help"],
        capture_output=True,
        text=True,
        env={**ENV, "PYTHONPATH": str(tmp_path)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "ModuleNotFoundError" in done.stderr


def test_receive_into_a_pipe_closed_early_exits_quietly(tmp_path: Path) -> None:
    run("pump", str(tmp_path), "-n", "3000", "--size", "2000", "--no-durable")
    done = shell(["bash", "-c", f"set -o pipefail; {VSQS} receive {tmp_path} | head -1"])
    assert done.stderr == ""
    assert (done.returncode, done.stdout) == (0, "000000000000" + "." * 1988 + "\n")
    counts = vsqs.Queue(tmp_path).counts()
    assert counts.held == 0  # the unwritten message was released, not left held
    assert 0 < counts.ready < 3000


def test_publish_from_stdin_closed_early(tmp_path: Path) -> None:
    # A producer that dies mid-stream: what was read is published, nothing is half-done.
    done = shell(["bash", "-c", f"printf 'a\\nb\\npartial' | {VSQS} publish {tmp_path} - -q"])
    assert (done.returncode, done.stderr) == (0, "")
    assert bodies(tmp_path) == [b"a", b"b", b"partial"]


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path)
    child = subprocess.Popen(
        [VSQS, "receive", str(tmp_path), "--wait", "inf"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    wait_blocked(child.pid)
    child.send_signal(signal.SIGINT)
    out, err = finish(child)
    assert (child.returncode, out, err) == (130, "", "vsqs: interrupted\n")


def test_exec_in_a_real_process_inherits_stdout(tmp_path: Path) -> None:
    shell([VSQS, "publish", str(tmp_path), "a", "b"])
    done = shell([VSQS, "receive", str(tmp_path), "--exec", 'echo "got $(cat)"; echo err >&2'])
    assert (done.returncode, done.stdout, done.stderr) == (0, "got a\ngot b\n", "err\nerr\n")
    missing = shell([VSQS, "receive", str(tmp_path), "--exec", "true"])
    assert missing.returncode == 3


def test_demo_runs(tmp_path: Path) -> None:
    done = shell([VSQS, "demo", "--producers", "1", "--consumers", "2", "--messages", "300"])
    assert done.returncode == 0, done.stderr
    assert "result       OK: 0 missing, 0 duplicated" in done.stdout


def _on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run the command with stdout on a pseudo-terminal; its exit status and output."""
    controller, terminal = pty.openpty()
    child = subprocess.Popen(args, stdout=terminal, stderr=terminal, env={**ENV, "TERM": "xterm"})
    os.close(terminal)
    output = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    return child.wait(timeout=60), output.decode(errors="replace")


def test_progress_bars_and_live_stats_on_a_terminal(tmp_path: Path) -> None:
    code, out = _on_a_terminal(
        [VSQS, "pump", str(tmp_path / "q"), "-n", "3000", "--batch", "10", "--no-durable"]
    )
    assert code == 0
    assert "published 3,000 messages" in out
    lines = tmp_path / "lines"
    lines.write_text("".join(f"{n}\n" for n in range(500)))
    code, out = _on_a_terminal([VSQS, "publish", str(tmp_path / "q"), "--file", str(lines)])
    assert code == 0
    assert "published 500 messages to" in out
    assert not re.search(r"^\d{16}\r?$", out, re.MULTILINE)  # a bar instead of ids
    code, out = _on_a_terminal(
        [VSQS, "stats", str(tmp_path / "q"), "--watch", "--interval", "0.1", "--count", "2"]
    )
    assert (code, "3,500" in out) == (0, True)
    code, out = _on_a_terminal([VSQS, "sink", str(tmp_path / "q"), "--wait", "0"])
    assert (code, "consumed 3,500 messages" in out) == (0, True)


def test_shell_completion() -> None:
    source = subprocess.run(
        [VSQS], env={**ENV, "_VSQS_COMPLETE": "bash_source"}, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    assert "complete " in source.stdout
    words = subprocess.run(
        [VSQS],
        env={**ENV, "_VSQS_COMPLETE": "bash_complete", "COMP_WORDS": "vsqs pu", "COMP_CWORD": "1"},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert words.stdout.split() == ["plain,publish", "plain,pump", "plain,purge"]


# -- the documented session ------------------------------------------------------------


def _session(text: str) -> list[tuple[str, list[str]]]:
    """The commands and expected outputs of the console block starting ``$ cd "$(mktemp``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == '$ cd "$(mktemp -d)"')
    indent = lines[start].index("$")
    steps: list[tuple[str, list[str]]] = []
    for line in lines[start:]:
        if line.strip() and not line.startswith(" " * indent):
            break
        if not line.strip():
            continue
        if line[indent:].startswith("$ "):
            steps.append((line[indent + 2 :], []))
        else:
            steps[-1][1].append(line[indent:].rstrip())
    return steps


def _normal(line: str) -> str:
    line = re.sub(r"\b\d{16}\b", "<id>", line)  # ids are the time of publishing
    return re.sub(r"\b\d\.\d s\b", "<age>", line)


def _check_session(text: str, tmp_path: Path) -> None:
    steps = _session(text)
    assert [command.split()[:2] for command, _ in steps][1:] == [
        ["vsqs", "publish"], ["vsqs", "stats"], ["vsqs", "receive"], ["vsqs", "stats"],
    ]  # fmt: skip
    script = "set -e\nexec 2>&1\n" + "".join(
        f"echo '@@@ step'\n{command}\n" for command, _ in steps
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False,
        env={**ENV, "TMPDIR": str(tmp_path)}, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    outputs = done.stdout.split("@@@ step\n")[1:]
    assert len(outputs) == len(steps)
    for (command, expected), output in zip(steps, outputs, strict=True):
        got = [_normal(line.rstrip()) for line in output.splitlines()]
        assert got == [_normal(line) for line in expected], command


def test_the_cli_guide_session_works_as_shown(tmp_path: Path) -> None:
    _check_session((REPO / "docs" / "guides" / "cli.rst").read_text(), tmp_path)


def test_the_readme_session_works_as_shown(tmp_path: Path) -> None:
    readme = (REPO / "README.rst").read_text()
    guide = (REPO / "docs" / "guides" / "cli.rst").read_text()
    assert _session(readme) == _session(guide)
    _check_session(readme, tmp_path)


def test_exec_renews_the_lease_while_a_slow_command_runs(tmp_path: Path) -> None:
    """A command that outlives the visibility timeout keeps its message: another consumer
    trying after the timeout (here, the command itself) does not get it."""
    path = tmp_path / "q"
    queue = vsqs.Queue(path)
    queue.publish(b"slow job")
    steal = f'sleep 1; {VSQS} receive "$VSQS_QUEUE" --keep; echo "steal exit $?"'
    done = subprocess.run(
        [VSQS, "receive", str(path), "--visibility-timeout", "0.3", "--exec", steal],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "slow job" not in done.stdout  # the competing receive found nothing...
    assert "steal exit 3" in done.stdout  # ...and said so (3: nothing received)
    assert queue.counts().total == 0  # deleted by the run, never delivered twice


def test_publish_respects_a_capacity_and_times_out_when_full(tmp_path: Path) -> None:
    path = tmp_path / "bounded"
    runner = CliRunner()
    ok = runner.invoke(cli, ["publish", str(path), "a", "b", "--capacity", "2", "--timeout", "0"])
    assert ok.exit_code == 0, ok.output
    full = runner.invoke(cli, ["publish", str(path), "c", "--capacity", "2", "--timeout", "0"])
    assert full.exit_code == 3, full.output
    assert "full" in full.output
    assert vsqs.Queue(path).size() == 2
    usage = runner.invoke(cli, ["publish", str(path), "c", "--timeout", "1"])
    assert usage.exit_code == 2


def test_root_may_follow_the_queues_subcommand(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    created = run("queues", "create", "orders", "--root", root)
    assert (created.exit_code, created.stdout) == (0, f"{root}/orders\n"), created.output
    assert run("queues", "list", "--root", root).stdout == "orders\n"
    assert run("queues", "--root", str(tmp_path), "list", "--root", root).stdout == "orders\n"
    assert run("queues", "remove", "orders", "--yes", "--root", root).exit_code == 0
    assert run("queues", "list", "--root", root).stdout == ""
    missing = run("queues", "list")
    assert missing.exit_code == 2 and "--root" in missing.output


def test_usage_mistakes_are_usage_errors_not_crashes_or_silence(tmp_path: Path) -> None:
    """An empty QUEUE, two output formats, and `-n 0` (which once meant "no limit" and
    received and deleted every message) are refused with exit status 2, changing
    nothing; "every message" is said with --all."""
    empty = run("publish", "", "x")
    assert empty.exit_code == 2 and "ValueError" not in empty.output, empty.output
    vsqs.Queue(tmp_path).publish_batch([b"a", b"b", b"c"])
    both = run("stats", str(tmp_path), "--json", "--format", "prometheus")
    assert both.exit_code == 2 and "--json conflicts with --format prometheus" in both.output
    assert run("stats", str(tmp_path), "--json", "--format", "json").exit_code == 0
    zero = run("receive", str(tmp_path), "-n", "0")
    assert zero.exit_code == 2 and "--all" in zero.output
    conflict = run("receive", str(tmp_path), "-n", "1", "--all")
    assert conflict.exit_code == 2
    assert vsqs.Queue(tmp_path).size() == 3  # nothing received or deleted
    one = run("receive", str(tmp_path), "-n", "1")
    assert (one.exit_code, one.stdout) == (0, "a\n")
    every = run("receive", str(tmp_path), "--all")
    assert (every.exit_code, every.stdout) == (0, "b\nc\n")


def test_errors_name_a_file_under_dot_vsqs_by_its_full_path(tmp_path: Path) -> None:
    (tmp_path / ".vsqs" / "settings.lock").mkdir(parents=True)  # planted: not a lock file
    result = run("config", str(tmp_path), "--capacity", "3")
    assert result.exit_code == 1
    assert f": {tmp_path}/.vsqs/settings.lock" in result.output, result.output


def test_publish_obeys_a_stored_capacity_with_timeout_and_batch(tmp_path: Path) -> None:
    """A capacity stored with the queue binds the CLI as any producer: --timeout applies
    (exit 3 when still full, not a usage error asking for --capacity) and --batch is cut
    to what can fit (not refused as a batch that can never fit)."""
    path = tmp_path / "bounded"
    vsqs.Queue(path).configure(capacity=2)
    full = run("publish", str(path), "a", "b", "c", "--batch", "3", "--timeout", "0.2")
    assert full.exit_code == 3, full.output
    assert "full" in full.output
    assert bodies(path) == [b"a", b"b"]
    again = run("publish", str(path), "x", "y", "z", "--batch", "5", "--timeout", "0")
    assert (again.exit_code, again.stdout.count("\n")) == (3, 2), again.output


def test_pump_cuts_its_batches_to_a_stored_capacity(tmp_path: Path) -> None:
    """A batch larger than the bound can never fit: pump publishes batches that do,
    waiting for room while a consumer drains (it once exited 1 with a ValueError)."""
    queue = vsqs.Queue(tmp_path, visibility_timeout=60)
    queue.configure(capacity=5)
    child = subprocess.Popen(
        [VSQS, "pump", str(tmp_path), "-n", "20", "--batch", "100", "--size", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline and child.poll() in (None, 0):
        for message in queue.receive_batch(5, timeout=0.1):
            got.append(message.body)
            queue.delete(message)
    out, err = finish(child)
    assert (child.returncode, err) == (0, ""), err
    assert "published 20 messages" in out
    assert got == [str(n).zfill(12).encode()[:3] for n in range(20)]


def test_ctrl_c_during_pump_never_leaves_an_unfinished_publish(fast_tmp_path: Path) -> None:
    """SIGINT (or SIGTERM) at random moments of a real `vsqs pump`: it exits 130 (143)
    with one line, and no `<id>.new` is ever left behind (one was, in 3 tries out of 4,
    when the signal's exception landed between the open that created a `.new` and the
    code that removes it)."""
    rng = random.Random(26_13)
    stops = {signal.SIGINT: "vsqs: interrupted\n", signal.SIGTERM: "vsqs: stopped by SIGTERM\n"}
    for attempt in range(24):
        signum = (signal.SIGINT, signal.SIGTERM)[attempt % 2]
        path = fast_tmp_path / str(attempt)
        path.mkdir()
        child = subprocess.Popen(
            [VSQS, "pump", str(path), "-n", "100000000", "--size", "10"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not any(name.isdigit() for name in os.listdir(path)):  # publishing now
                assert child.poll() is None, child.communicate()
                assert time.monotonic() < deadline, "pump never published"
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.05))
            child.send_signal(signum)
            _, err = finish(child)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        assert (child.returncode, err) == (128 + signum, stops[signum])
        assert not [name for name in os.listdir(path) if name.endswith(".new")], attempt


# -- stop signals during receive (systemd, docker stop, Ctrl-C) -------------------------


def _wait_for(path: Path, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize(("cmd_status", "left"), [(0, 0), (3, 1)])
def test_a_stop_signal_is_passed_to_cmd_and_its_message_settled_after_it_exits(
    tmp_path: Path, signum: signal.Signals, cmd_status: int, left: int
) -> None:
    """The signal goes to vsqs alone (as docker stop sends it). CMD gets it, finishes its
    work (meanwhile another consumer cannot take the message: it is not released early),
    and exits; only then is the message deleted (CMD exited 0) or released at once (any
    other status), and vsqs exits 128 + signum with one line."""
    path, started, log = tmp_path / "q", tmp_path / "started", tmp_path / "log"
    queue = vsqs.Queue(path, visibility_timeout=600)  # a late release would show for 10 min
    queue.publish(b"job")
    on_signal = (
        f'sleep 0.3; {VSQS} receive "$VSQS_QUEUE" --keep >/dev/null 2>&1; '
        f'echo "steal $?" >> {log}; exit {cmd_status}'
    )
    # (stderr silenced: the shell reports its sleep that the forwarded signal ended)
    loop = "while :; do sleep 0.05; done"
    cmd = f"exec 2>/dev/null; trap '{on_signal}' {signum.name[3:]}; touch {started}; {loop}"
    child = subprocess.Popen(
        [VSQS, "receive", str(path), "--exec", cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    _wait_for(started, child)
    child.send_signal(signum)
    out, err = finish(child)
    assert (child.returncode, out) == (128 + signum, "")
    expected = "vsqs: interrupted" if signum == signal.SIGINT else f"vsqs: stopped by {signum.name}"
    assert err == expected + "\n"
    assert log.read_text() == "steal 3\n"  # nothing to take while CMD still worked on it
    counts = queue.counts()
    assert (counts.ready, counts.held) == (left, 0)  # released at once, not held for 600 s


def test_sigterm_kills_a_cmd_that_does_not_trap_it_and_releases_its_message(
    tmp_path: Path,
) -> None:
    """A CMD (and the processes it started) that does not handle SIGTERM dies of it; the
    message is back in the queue at once, and no process of CMD is left running."""
    path, started = tmp_path / "q", tmp_path / "started"
    queue = vsqs.Queue(path, visibility_timeout=600)
    queue.publish(b"job")
    cmd = f"sleep 300 & echo $! > {tmp_path / 'pid'}; touch {started}; wait"
    child = subprocess.Popen(
        [VSQS, "receive", str(path), "--exec", cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    _wait_for(started, child)
    child.send_signal(signal.SIGTERM)
    out, err = finish(child)
    assert (child.returncode, out, err) == (143, "", "vsqs: stopped by SIGTERM\n")
    assert (queue.counts().ready, queue.counts().held) == (1, 0)
    sleeper = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{sleeper}").exists() and b"Z" not in _proc_state(sleeper):
        assert time.monotonic() < deadline, "CMD's own child outlived the stop"
        time.sleep(0.02)


def _proc_state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1][:3]
    except FileNotFoundError:
        return b" Z "  # gone between the two looks


def test_sigterm_while_waiting_for_a_message_exits_143_with_a_line(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path)
    child = subprocess.Popen(
        [VSQS, "receive", str(tmp_path), "--wait", "inf", "--exec", "cat"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    wait_blocked(child.pid)
    child.send_signal(signal.SIGTERM)
    out, err = finish(child)
    assert (child.returncode, out, err) == (143, "", "vsqs: stopped by SIGTERM\n")
