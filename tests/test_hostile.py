"""What a hostile or careless hand does to a queue directory (issue 26, items 2-7): user
files beside the pokes, planted non-files under message names, huge files under
``.vsqs/``, durations past what a name holds, a dead-letter queue swapped for a link.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import vsqs
from vsqs.cli import cli
from vsqs.testing import ManualClock

MAX = 10**12  # vsqs._ids.MAX_DURATION, what a name holds


# -- item 6: every duration fits the name grammar -----------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.receive(visibility_timeout=1e13),
        lambda q: q.publish(b"x", delay=2e13),
        lambda q: q.change_visibility(q.receive() or "1", 1e13),
        lambda q: vsqs.Queue(q.path, visibility_timeout=1e13),
        lambda q: vsqs.Queue(q.path, delay=1e13),
        lambda q: vsqs.Queue(q.path, retention=1e13),
        lambda q: q.configure(visibility_timeout=1e13),
        lambda q: q.lease(q.receive(), visibility_timeout=1e13),
        lambda q: q.lease(q.receive(), max_duration=1e13),
    ],
    ids=[
        "receive",
        "publish",
        "change_visibility",
        "vt",
        "delay",
        "retention",
        "configure",
        "lease",
        "max_duration",
    ],
)
def test_a_duration_past_the_grammar_is_refused_naming_the_maximum(
    q: vsqs.Queue, call: object
) -> None:
    q.publish(b"m")
    with pytest.raises(ValueError, match=r"at most 1e\+12 seconds"):
        call(q)  # type: ignore[operator]
    assert q.counts().ready + q.counts().held == 1
    assert all(len(name.rpartition(".")[2]) <= 19 for name in _names(q))


def test_the_longest_duration_still_makes_a_name_the_queue_reads(q: vsqs.Queue) -> None:
    q.publish(b"late", delay=MAX)
    q.publish(b"m")
    message = q.receive(visibility_timeout=MAX)
    assert message is not None
    counts = q.counts()
    assert (counts.held, counts.delayed) == (1, 1)  # both still in the accounting
    assert q.change_visibility(message, 0).id == message.id
    assert q.purge() == 2


def test_the_cli_refuses_a_duration_past_the_grammar(qdir: Path) -> None:
    vsqs.Queue(qdir).close()
    runner = CliRunner()
    for args in (
        ["config", str(qdir), "--visibility-timeout", "1e13"],
        ["publish", str(qdir), "x", "--delay", "2e13"],
        ["receive", str(qdir), "--visibility-timeout", "1e13"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert "1000000000000" in result.output
    assert vsqs.Queue(qdir).settings().get("visibility_timeout") is None


def test_a_stored_duration_past_the_grammar_is_refused(qdir: Path) -> None:
    vsqs.Queue(qdir).close()
    (qdir / ".vsqs").mkdir(exist_ok=True)
    (qdir / ".vsqs" / "settings.json").write_text('{"visibility_timeout": 1e13}')
    with pytest.raises(vsqs.InvalidSettings, match=r"at most 1e\+12"):
        vsqs.Queue(qdir)


def test_spark_and_kombu_options_are_bounded_too(qdir: Path, tmp_path: Path) -> None:
    from vsqs.spark._options import SourceOptions

    with pytest.raises(ValueError, match=r"at most 1e\+12"):
        SourceOptions.parse({"path": str(qdir), "visibilityTimeout": "1e13"})
    kombu = pytest.importorskip("kombu")
    import vsqs.kombu  # noqa: F401  # registers the transport

    with (
        kombu.Connection(
            f"vsqs://{tmp_path / 'root'}", transport_options={"visibility_timeout": 1e13}
        ) as conn,
        pytest.raises(ValueError, match=r"at most 1e\+12"),
    ):
        conn.channel()
    assert math.isfinite(MAX)


def _names(q: vsqs.Queue) -> list[str]:
    return [p.name for p in Path(q.path).iterdir() if p.name != ".vsqs"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000.0)
