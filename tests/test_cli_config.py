"""``vsqs config``: print, change, ``--json``, ``--unset``, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

import vsqs
from vsqs.cli import cli


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_config_prints_defaults_then_stores_and_prints_settings(tmp_path: Path) -> None:
    queue = str(tmp_path / "orders")
    vsqs.Queue(queue)
    shown = run("config", queue)
    assert shown.exit_code == 0
    assert "visibility_timeout  30 s  (default)" in shown.stdout
    changed = run(
        "config", queue, "--visibility-timeout", "60", "--dead-letter", "orders.dlq",
        "--max-receives", "3", "--capacity", "100",
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    assert "visibility_timeout  60 s\n" in changed.stdout
    assert "dead_letter         orders.dlq\n" in changed.stdout
    q = vsqs.Queue(queue)
    assert (q.visibility_timeout, q.max_receives, q.config.capacity) == (60.0, 3, 100)
    assert q.dead_letter is not None and q.dead_letter.path == str(tmp_path / "orders.dlq")
    as_json = run("config", queue, "--json")
    assert json.loads(as_json.stdout) == {
        "capacity": 100, "dead_letter": "orders.dlq", "max_receives": 3,
        "visibility_timeout": 60.0,
    }  # fmt: skip


def test_config_unset_removes_settings(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path).configure(capacity=5, delay=2)
    result = run("config", str(tmp_path), "--unset", "capacity", "--json")
    assert json.loads(result.stdout) == {"delay": 2.0}


def test_config_errors_are_one_line_with_usage_or_error_status(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path)
    bad = run("config", str(tmp_path), "--max-receives", "3")
    assert bad.exit_code == 2 and "max_receives needs a dead_letter" in bad.output
    both = run("config", str(tmp_path), "--delay", "1", "--unset", "delay")
    assert both.exit_code == 2 and "conflicts" in both.output
    missing = run("config", str(tmp_path / "nope"))
    assert missing.exit_code != 0 and "no queue at" in missing.output
    (tmp_path / ".vsqs").mkdir(exist_ok=True)
    (tmp_path / ".vsqs" / "settings.json").write_text('{"capacity": "x"}')
    hostile = run("config", str(tmp_path), "--delay", "1")
    assert hostile.exit_code != 0
    assert "'capacity'" in hostile.output and "settings.json" in hostile.output
    assert (tmp_path / ".vsqs" / "settings.json").read_text() == '{"capacity": "x"}'


def test_a_corrupt_settings_file_says_how_to_repair_it_and_reset_repairs_it(
    tmp_path: Path,
) -> None:
    """Every command refuses a queue whose settings file cannot be read, with exit status
    1 (the queue is at fault, not the command line) and the command that repairs it;
    ``config --reset`` works on such a file, keeping it aside rather than deleting it."""
    queue = tmp_path / "orders"
    vsqs.Queue(queue).publish(b"kept")
    settings = queue / ".vsqs" / "settings.json"
    settings.write_text("{not json")
    hint = f"vsqs config {queue} --reset"
    for command in (["stats", str(queue)], ["config", str(queue), "--unset", "capacity"]):
        refused = CliRunner().invoke(cli, command)
        assert refused.exit_code == 1, refused.output
        assert str(settings) in refused.output and hint in refused.output
        assert refused.output.count("\n") == 1
    reset = CliRunner().invoke(cli, ["config", str(queue), "--reset", "--json"])
    assert reset.exit_code == 0, reset.output
    assert json.loads(reset.stdout) == {}
    (aside,) = (queue / ".vsqs").glob("settings.json.bad-*")
    assert aside.read_text() == "{not json"
    assert f"moved the settings file aside to {aside}" in reset.stderr
    assert not settings.exists()
    assert run("stats", str(queue), "--json").exit_code == 0
    assert [m.body for m in vsqs.Queue(queue).browse()] == [b"kept"]


def test_reset_moves_a_planted_directory_and_applies_new_settings(tmp_path: Path) -> None:
    queue = tmp_path / "orders"
    vsqs.Queue(queue)
    (queue / ".vsqs" / "settings.json").mkdir(parents=True)
    result = run("config", str(queue), "--reset", "--capacity", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"capacity": 3}
    assert len(list((queue / ".vsqs").glob("settings.json.bad-*"))) == 1
    again = run("config", str(queue), "--reset", "--json")  # a readable file goes aside too
    assert (again.exit_code, json.loads(again.stdout)) == (0, {})
    assert len(list((queue / ".vsqs").glob("settings.json.bad-*"))) == 2
    nothing = run("config", str(queue), "--reset")
    assert nothing.exit_code == 0 and "moved" not in nothing.output
