"""What a new user ran into with the ``vsqs`` command (issue 37): a directory that is
not a queue, reST markup in errors, ``--debug`` only before the command, "1 messages",
and a repeated ``--attr`` that kept its last value."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import vsqs
from vsqs.cli import cli


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An ordinary directory: a user's notes and a file whose name is an id."""
    where = tmp_path / "home"
    where.mkdir()
    (where / "notes.txt").write_bytes(b"my notes")
    (where / "123").write_bytes(b"my file called 123")
    return where


CHANGING = [
    ["receive", "{q}", "--keep"],
    ["receive", "{q}", "--wait", "0"],
    ["delete", "{q}", "123.1795844296463226"],
    ["purge", "{q}", "--yes"],
    ["clean", "{q}"],
    ["requeue", "{q}"],
    ["redrive", "{q}"],
    ["shutdown", "{q}"],
    ["config", "{q}", "--visibility-timeout", "5"],
    ["publish", "{q}", "hello"],
    ["create", "{q}"],
    ["sink", "{q}", "--wait", "0"],
    ["stats", "{q}"],
    ["peek", "{q}"],
]


@pytest.mark.parametrize("args", CHANGING, ids=[" ".join(a[:1] + a[2:]) for a in CHANGING])
def test_a_directory_that_is_not_a_queue_is_refused_and_left_alone(
    home: Path, args: list[str]
) -> None:
    """No ``.vsqs/``, and a file that is not a message: every command that opens it
    says it is not a queue (exit 1) and changes nothing (``vsqs receive . --keep`` once
    renamed the user's ``123`` to ``123.<expiry>``; ``vsqs stats`` called it a message
    20,785 days old)."""
    before = _tree(home)
    result = run(*(arg.format(q=home) for arg in args))
    assert result.exit_code == 1, result.output
    assert f"vsqs: {home} is not a queue" in result.output
    assert "'notes.txt', which is not a message; pass --force" in result.output
    assert _tree(home) == before


def test_force_uses_it_as_a_queue_and_the_library_opens_any_directory(home: Path) -> None:
    """``--force`` is the user saying so; the library, as VSQS, never asks."""
    result = run("receive", str(home), "--keep", "--force", "--wait", "0")
    assert result.exit_code == 0 and result.output == "my file called 123\n"
    queue = vsqs.Queue(home)
    assert queue.counts().held == 1


def test_a_queue_without_vsqs_is_still_a_queue(tmp_path: Path) -> None:
    """A queue of vsqs 0.3, or one made by hand (message names only, no ``.vsqs/``),
    and an empty directory, are used without ``--force``."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "1732257000123456").write_bytes(b"a")
    (old / "1732257000123457.1732257030123456").write_bytes(b"b")
    assert run("stats", str(old), "--json").exit_code == 0
    result = run("receive", str(old), "--wait", "0", "-n", "1")
    assert result.exit_code == 0 and result.output == "a\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("publish", str(empty), "x").exit_code == 0


def test_errors_show_no_rest_markup(tmp_path: Path) -> None:
    """A library error is written for the docs (````vsqs redrive````); the terminal
    shows `vsqs redrive`."""
    queue = str(tmp_path / "q")
    assert run("publish", queue, "x").exit_code == 0
    result = run("config", queue, "--partitions", "4")
    assert result.exit_code == 2
    assert "`vsqs redrive OLD --to NEW`" in result.output
    assert "``" not in result.output


def test_debug_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    queue = tmp_path / "q"
    assert run("publish", str(queue), "x").exit_code == 0
    (queue / ".vsqs" / "settings.json").write_bytes(b"{not json")
    path = str(queue)
    for args in (["stats", path], ["stats", path, "--debug"], ["--debug", "stats", path]):
        result = run(*args)
        assert result.exit_code == 1
        if "--debug" in args:
            assert isinstance(result.exception, vsqs.InvalidSettings), args
        else:
            assert result.output.startswith("vsqs: ") and "Traceback" not in result.output


def test_counts_are_singular_or_plural(tmp_path: Path) -> None:
    """ "redrove 1 message", never "1 messages", in every count the commands print."""
    queue, dlq = str(tmp_path / "q"), str(tmp_path / "dlq")
    assert run("publish", queue, "a", "b").exit_code == 0
    assert run("purge", queue, "--yes").output == "purged 2 messages\n"
    assert run("requeue", queue).output == "requeued 0 messages\n"
    assert run("clean", queue).output == "removed 0 entries\n"
    vsqs.Queue(dlq).publish(b"dead")
    assert run("redrive", dlq, "--to", queue).output == "redrove 1 message\n"
    assert run("purge", queue, "--yes").output == "purged 1 message\n"
    assert run("pump", queue, "-n", "1").output.startswith("published 1 message in ")
    assert run("sink", queue, "--wait", "0").output.startswith("consumed 1 message in ")


def test_a_repeated_attribute_is_an_error_naming_it(tmp_path: Path) -> None:
    """``--attr k=1 --attr k=2`` once published k=2 without a word."""
    queue = tmp_path / "q"
    result = run("publish", str(queue), "x", "--attr", "k=1", "--attr", "k=2")
    assert result.exit_code == 2
    assert "attribute 'k' is given twice" in result.output
    assert not queue.exists() or vsqs.Queue(queue).counts().total == 0
    result = run("publish", str(queue), "x", "--attr", "k=1", "--attr", "j=2")
    assert result.exit_code == 0, result.output
    got = vsqs.Queue(queue).receive(timeout=0)
    assert got is not None and dict(got.attributes) == {"k": "1", "j": "2"}
