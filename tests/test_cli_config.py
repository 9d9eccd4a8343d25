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
