"""The public surface: one complete, sorted ``__all__``, and a light ``import vsqs``."""

from __future__ import annotations

import ast
import json
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

import vsqs

OPTIONAL = ("click", "rich", "pyspark", "pyarrow")


def _public_names(module: types.ModuleType) -> set[str]:
    """Names a user could reach as ``vsqs.X``: not private, not a submodule, not a
    ``__future__`` feature."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and type(value).__name__ != "_Feature"
    }


def test_all_is_complete() -> None:
    assert _public_names(vsqs) <= set(vsqs.__all__)
    assert "__version__" in vsqs.__all__


def test_all_is_sorted_and_unique() -> None:
    assert vsqs.__all__ == sorted(vsqs.__all__)
    assert len(set(vsqs.__all__)) == len(vsqs.__all__)


def test_everything_in_all_exists() -> None:
    missing = [name for name in vsqs.__all__ if not hasattr(vsqs, name)]
    assert not missing


def test_public_objects_say_they_belong_to_vsqs() -> None:
    """Classes and functions are importable from the package (their home is private)."""
    for name in vsqs.__all__:
        value = getattr(vsqs, name)
        if isinstance(value, (type, types.FunctionType)):
            assert value.__module__.startswith("vsqs"), name


def test_import_vsqs_does_not_import_the_optional_extras() -> None:
    """The CLI and Spark extras are imported lazily: a core user need not install them."""
    code = (
        "import json, sys, vsqs, vsqs.testing\n"
        "q = vsqs.Queue(__import__('tempfile').mkdtemp())\n"
        f"print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout) == []


# What `import vsqs` must leave for later: every integration, the extras' packages, and
# the standard library's heavy modules that only some calls need (issue 40: a Spark
# executor, a Celery worker or a shell loop pays the import each time).
NOT_ON_IMPORT = (
    *("vsqs.aio", "vsqs.cli", "vsqs.dashboard", "vsqs.kombu", "vsqs.metrics", "vsqs.serve"),
    *("vsqs.spark", "vsqs.testing", "vsqs.pytest_plugin", "vsqs._demo"),
    *("click", "rich", "pyspark", "pyarrow", "kombu", "celery", "prometheus_client"),
    *("opentelemetry", "asyncio", "http", "ctypes", "logging", "concurrent.futures"),
    *("hashlib", "subprocess", "socket", "json", "shutil", "tempfile"),
)


def imported_by(code: str, *args: str) -> list[str]:
    """The modules of :data:`NOT_ON_IMPORT` (or their submodules) that *code*, run with
    arguments *args* in a fresh interpreter, imports: not those there before it runs (a
    coverage run's start-up imports some of them before any of ours)."""
    script = (
        "import sys\nbefore = set(sys.modules)\ntry:\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + "except SystemExit:\n    pass\nprint(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    new: list[str] = ast.literal_eval(done.stdout.splitlines()[-1])
    return [m for m in new if any(m == n or m.startswith(f"{n}.") for n in NOT_ON_IMPORT)]


def test_import_vsqs_imports_no_integration_and_nothing_heavy() -> None:
    """``import vsqs`` loads none of :data:`NOT_ON_IMPORT`: each is imported where it is
    used, so that a process that only publishes never pays for it."""
    assert imported_by("import vsqs") == []


def test_import_vsqs_makes_no_dataclass_but_the_values_it_hands_out() -> None:
    """A dataclass compiles its methods (``exec``) when its class is made: ``import vsqs``
    makes only :class:`~vsqs.Message` and :class:`~vsqs.Counts`. Internal records are
    plain classes or named tuples; :class:`~vsqs.Stats` and :class:`~vsqs.History` come
    with their module on first use, dataclasses still (``from vsqs import Stats``, ``dir``)."""
    code = (
        "import dataclasses, sys, vsqs\n"
        "made = sorted(c.__qualname__ for n, m in list(sys.modules.items())"
        " if n.startswith('vsqs') for c in vars(m).values()"
        " if dataclasses.is_dataclass(c) and c.__module__ == n)\n"
        "print(made, 'vsqs._reports' in sys.modules)\n"
        "from vsqs import History, Stats\n"
        "print(dataclasses.is_dataclass(Stats) and dataclasses.is_dataclass(History),"
        " Stats is vsqs.Stats, {'History', 'QueueRoot', 'Stats'} <= set(dir(vsqs)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines() == ["['Counts', 'Message'] False", "True True True"]


def test_vsqs_publish_imports_only_its_command(tmp_path: Path) -> None:
    """``vsqs publish`` loads click and its own command's module, never the server, the
    dashboard, the metrics extra or rich: each command's module is loaded when it runs."""
    code = "from vsqs.__main__ import main\nmain(prog_name='vsqs')"
    loaded = imported_by(code, "publish", str(tmp_path / "q"), "x")
    assert [m for m in loaded if m.startswith("vsqs.")] == [
        "vsqs.cli",
        "vsqs.cli._common",
        "vsqs.cli._messages",
    ]
    assert not [m for m in loaded if m.startswith(("rich", "http", "asyncio", "logging"))]
    assert vsqs.Queue(tmp_path / "q").counts().ready == 1


def test_the_testing_module_has_its_own_sorted_all() -> None:
    import vsqs.testing

    assert vsqs.testing.__all__ == sorted(vsqs.testing.__all__)
    assert all(hasattr(vsqs.testing, name) for name in vsqs.testing.__all__)


def test_queue_like_classes_offer_their_protocols() -> None:
    """mypy checks these assignments: a signature that drifts from the protocol fails it.

    At run time, every protocol member exists on every class that offers the protocol.
    """
    import tempfile

    queue = vsqs.Queue(tempfile.mkdtemp())
    full: list[vsqs.QueueLike] = [queue, vsqs.NullQueue()]
    receivers: list[vsqs.Receiver] = [*full, vsqs.QueueSet(queue)]
    for protocol, objects in ((vsqs.QueueLike, full), (vsqs.Receiver, receivers)):
        members = {
            name
            for klass in protocol.__mro__
            if klass.__module__ == "vsqs._protocol"
            for name in vars(klass)
            if not name.startswith("_") or name == "__len__"
        }
        for obj in objects:
            assert members <= set(dir(obj)), (type(obj).__name__, members - set(dir(obj)))


def test_the_receive_paths_constructor_makes_the_same_message() -> None:
    """``_message.received`` sets the slots itself (a cheaper constructor for the receive
    path): every field of :class:`vsqs.Message` must come out as the class's own
    constructor makes it, so a field added to the class cannot be left unset there."""
    import dataclasses

    from vsqs._message import received

    values = ("1", b"body", "1.2", 2.5, 3, {"k": "v"}, 1.5, "/q", "group-7")
    fields = [field.name for field in dataclasses.fields(vsqs.Message)]
    assert len(fields) == len(values)
    made, fast = vsqs.Message(*values), received(*values)
    assert [getattr(fast, name) for name in fields] == [getattr(made, name) for name in fields]
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    # Made as an unfrozen twin and then given the class: a Message in every respect.
    assert type(fast) is vsqs.Message and isinstance(fast, vsqs.Message)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.id = "2"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fast)) == made  # noqa: S301 - our own bytes


@pytest.mark.parametrize(
    ("part", "blocked", "extra"),
    [
        ("vsqs.kombu", "kombu", "celery"),
        ("vsqs.spark", "pyspark", "spark"),
        ("vsqs.spark", "pyarrow", "spark"),
        ("vsqs.metrics", "prometheus_client", "metrics"),
    ],
)
def test_an_optional_part_without_its_extra_says_which_extra_to_install(
    part: str, blocked: str, extra: str
) -> None:
    """As the ``vsqs`` command does for the ``cli`` extra: not a bare ``No module named``."""
    code = (
        f"import json, sys\nsys.modules[{blocked!r}] = None  # as if not installed\n"
        f"try:\n    import {part}\n"
        "except ModuleNotFoundError as error:\n    print(json.dumps([str(error), error.name]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    text, name = json.loads(result.stdout)
    assert name.partition(".")[0] == blocked
    assert f"{part} needs the {extra!r} extra" in text
    assert f"pip install '.[{extra}]'" in text
