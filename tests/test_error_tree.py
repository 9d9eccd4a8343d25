"""The tree in :mod:`vsqs._errors`'s docstring names every error vsqs raises, as it is.

Every module of the package is imported (the integrations' extras are installed by
``make check``) and every exception class it defines is found: each must derive from
``VsqsError`` and from a builtin, be drawn in the tree under its vsqs parent with its
builtin base(s) in parentheses, and survive a pickle round trip with its attributes.
The few exception classes that never reach a caller are named below the tree instead.
"""

from __future__ import annotations

import errno
import importlib
import inspect
import pickle
import pkgutil
import re
from typing import Any

import pytest

import vsqs
from vsqs import _errors

# A value for each constructor parameter of the errors (by name), to build a sample.
_ARGUMENTS: dict[str, Any] = {
    "path": "/q",
    "capacity": 7,
    "value": "../x",
    "reason": "a reason",
    "name": "a/b",
    "value_type": "str",
    "key": "capacity",
    "receipt": "1.2",
    "root": "/root",
    "ids": ["1732257000123456"],
    "code": errno.ELOOP,
    "filename": "/q/.vsqs/meta",
    "host": "0.0.0.0",  # noqa: S104 - a value in a message, nothing listens
    "problem": "not JSON",
    "queue": "/q",
    "message_id": "1732257000123456",
    "message": "a message",
    "timeout": 2.5,
}


def _modules() -> list[str]:
    found = pkgutil.walk_packages(vsqs.__path__, "vsqs.")
    return ["vsqs", *(info.name for info in found if info.name != "vsqs.__main__")]


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class a module of vsqs defines whose name is not private."""
    modules = [importlib.import_module(name) for name in _modules()]
    return {
        name: value
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }


def _tree() -> dict[str, tuple[str, frozenset[str]]]:
    """The tree drawn in the docstring: each name's parent and its builtin bases."""
    doc = _errors.__doc__ or ""
    drawn: dict[str, tuple[str, frozenset[str]]] = {}
    parents: list[tuple[int, str]] = []  # (column of the name, name), outermost first
    for line in doc.splitlines():
        found = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z]\w+)(?:\s+\(([\w, ]+)\))?(?:\s|$)", line)
        if found is None or (line.strip() != "VsqsError" and "── " not in line):
            continue
        column = line.index(found[2])
        while parents and parents[-1][0] >= column:
            parents.pop()
        bases = frozenset(b.strip() for b in (found[3] or "").split(",") if b.strip())
        drawn[found[2]] = (parents[-1][1] if parents else "", bases)
        parents.append((column, found[2]))
    return drawn


def _not_in_tree() -> str:
    """The docstring's paragraph naming the exception classes that reach no caller."""
    doc = _errors.__doc__ or ""
    return doc[doc.index("Not errors a caller sees") :]


CLASSES = _exception_classes()
TREE = _tree()
INTERNAL = {name for name in CLASSES if f"``{name}``" in _not_in_tree()}
PUBLIC = {name: klass for name, klass in CLASSES.items() if name not in INTERNAL}


def _sample(klass: type[BaseException]) -> BaseException:
    """An instance of *klass*, its required parameters given from :data:`_ARGUMENTS`
    (a message for an error that takes only one)."""
    parameters = inspect.signature(klass).parameters.values()
    required = [
        _ARGUMENTS[p.name]
        for p in parameters
        if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    return klass(*(required or ["a message"]))


def test_the_tree_and_the_search_see_the_errors_expected() -> None:
    """The parser and the search find what is known to be there (they can fail)."""
    assert TREE["QueueDrained"] == ("QueueClosed", frozenset({"EOFError"}))
    assert TREE["UnsafeEntry"] == ("VsqsError", frozenset({"OSError"}))
    assert {"SqsError", "StateMismatch", "MessageGone", "UnsafeEntry", "Stopped"} <= set(CLASSES)
    assert {"Stopped", "CliError", "Refused", "NotKombu", "Parked", "Offload"} == INTERNAL


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_error_is_drawn_under_its_parent_with_its_builtin_bases(name: str) -> None:
    klass = PUBLIC[name]
    assert issubclass(klass, vsqs.VsqsError), f"{name} does not derive from VsqsError"
    assert name in TREE, f"{name} is not drawn in vsqs._errors's tree"
    parent, builtins = TREE[name]
    vsqs_bases = [b for b in klass.__bases__ if issubclass(b, vsqs.VsqsError)]
    other_bases = {b.__name__ for b in klass.__bases__ if not issubclass(b, vsqs.VsqsError)}
    assert [b.__name__ for b in vsqs_bases] == ([parent] if parent else [])
    if klass is vsqs.VsqsError:
        assert (other_bases, builtins) == ({"Exception"}, frozenset())
        return
    assert other_bases == builtins
    assert all(b.__module__ == "builtins" for b in klass.__mro__[1:] if b.__name__ in builtins)


def test_the_tree_draws_nothing_that_does_not_exist() -> None:
    assert set(TREE) <= set(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_error_pickles_with_its_attributes(name: str) -> None:
    error = _sample(PUBLIC[name])
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes, just made
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)
    if isinstance(error, OSError):
        assert isinstance(copy, OSError)
        fields = ("errno", "strerror", "filename")
        assert [getattr(copy, f) for f in fields] == [getattr(error, f) for f in fields]
