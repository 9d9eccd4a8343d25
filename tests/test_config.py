"""Every option is checked once, when the queue is made, and the error names it."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs._options import Config

BAD_OPTIONS = [
    ("visibility_timeout", -1, ValueError),
    ("visibility_timeout", "30", TypeError),
    ("visibility_timeout", True, TypeError),
    ("durable", 1, TypeError),
    ("durable", "yes", TypeError),
    ("precision", "ns", ValueError),
    ("capacity", 0, ValueError),
    ("capacity", True, TypeError),
    ("capacity", 2.5, TypeError),
    ("max_receives", True, TypeError),
    ("retention", float("nan"), ValueError),
    ("dedup_window", float("inf"), ValueError),
    ("wait", "bogus", ValueError),
    ("poll_interval", -5, ValueError),
    ("poll_interval", 0, ValueError),
    ("refresh_interval", None, TypeError),
    ("umask", 0o1000, ValueError),
    ("umask", False, TypeError),
    ("clock", object(), TypeError),
]


@pytest.mark.parametrize(("option", "value", "error"), BAD_OPTIONS)
def test_a_bad_option_is_refused_at_once_naming_it(
    tmp_path: Path, option: str, value: object, error: type[Exception]
) -> None:
    options: dict[str, Any] = {option: value}
    if option == "max_receives":
        options["dead_letter"] = tmp_path / "dlq"
    with pytest.raises(error, match=option):
        vsqs.Queue(tmp_path / "q", **options)
    assert not (tmp_path / "q").exists()  # refused before anything was created


def test_max_receives_needs_a_dead_letter_queue(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dead_letter"):
        vsqs.Queue(tmp_path / "q", max_receives=3)


def test_a_queue_root_checks_its_default_options_when_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="poll_interval"):
        vsqs.QueueRoot(tmp_path, poll_interval=-1)


def test_the_configuration_is_frozen_and_carried_by_pickling(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=7, capacity=3, dead_letter=tmp_path / "d")
    with pytest.raises(AttributeError):
        q.config.capacity = 4  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(q))  # noqa: S301 - our own bytes
    assert copy.config == q.config
    assert copy.dead_letter is not None and copy.dead_letter.path == str(tmp_path / "d")
    assert copy.clock is vsqs.Queue(tmp_path / "other").clock  # the process's system clock


def test_build_gives_the_defaults() -> None:
    assert Config.build() == Config()


def test_mypy_refuses_a_misspelt_option(tmp_path: Path) -> None:
    """``QueueRoot(**options)`` and the pytest factory are typed: a typo fails mypy."""
    source = tmp_path / "typo.py"
    source.write_text(
        textwrap.dedent(
            """
            import vsqs
            from vsqs.pytest_plugin import QueueFactory

            def use(factory: QueueFactory) -> None:
                vsqs.QueueRoot("/tmp/r", visibilty_timeout=3)
                vsqs.QueueRoot("/tmp/r").create("a", capacity="3")
                factory("name", durabel=False)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stdout
    assert "visibilty_timeout" in result.stdout
    assert '"capacity"' in result.stdout
    assert "durabel" in result.stdout
