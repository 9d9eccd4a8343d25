"""The layering rules of docs/concepts.rst "Architecture", checked from the code."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vsqs"


def _layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [re.split(r"\s*[|:]\s*", layer) for layer in contract["layers"]]


def test_every_module_has_a_layer() -> None:
    """A new module must be placed in the import contract, or lint-imports ignores it."""
    placed = {name for layer in _layers() for name in layer}
    modules = {f"vsqs.{path.stem}" for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    # An integration with several files is a subpackage, placed as a whole.
    modules |= {f"vsqs.{path.parent.name}" for path in PACKAGE.glob("*/__init__.py")}
    assert modules - placed == set(), "add to [tool.importlinter] in pyproject.toml"
    assert placed - modules == set(), "remove from [tool.importlinter]: no such module"


def _forbidden(name: str) -> tuple[set[str], set[str]]:
    """The source and forbidden modules of the import contract called *name*."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == name]
    return set(contract["source_modules"]), set(contract["forbidden_modules"])


def test_every_private_module_is_the_cores_or_there_for_the_integrations() -> None:
    """Each private module is the core's (no integration imports it: vsqs can change it
    freely) or exists for the integrations alone (the core never imports it), never
    neither and never both: a new private module must be placed in one contract."""
    _, core = _forbidden(
        "integrations import only vsqs's public names, never the core's private modules"
    )
    sources, support = _forbidden("the core never imports what exists for the integrations alone")
    private = {f"vsqs.{p.stem}" for p in PACKAGE.glob("_*.py") if not p.stem.startswith("__")}
    private |= {f"vsqs.{p.parent.name}" for p in PACKAGE.glob("_*/__init__.py")}
    assert core & support == set(), "a module is either the core's or the integrations'"
    assert private - core - support == set(), "add it to one forbidden contract"
    assert (core | support) - private == set(), "no such module"
    assert sources == core, "the core (every module of it) never imports the integrations'"


def _idea(source: str) -> str:
    """The first line of a module's docstring (``""`` if it has none, or starts blank)."""
    doc = ast.get_docstring(ast.parse(source), clean=False)
    return doc.split("\n", 1)[0].strip() if doc else ""


def test_every_module_names_its_one_idea_in_its_first_docstring_line() -> None:
    """A module holds one idea, named in the first line of its docstring; where ideas
    split, the module splits (not at a line count: ``../shared/tools/layers.py`` only
    warns of a module grown past 450 lines)."""
    unnamed = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _idea(path.read_text(encoding="utf-8"))
    ]
    assert unnamed == [], "give each a docstring whose first line names its one idea"


def test_the_idea_check_sees_a_missing_docstring_and_a_blank_first_line() -> None:
    assert _idea('"""The queue: the state machine.\n\nMore."""\nx = 1\n')
    assert not _idea("x = 1\n")
    assert not _idea('"""\nThe queue, one line down."""\n')
    assert not _idea('""""""\n')


# The system calls on files and descriptors that vsqs makes, by the module that offers
# them: each may be called in the mechanism modules alone.
SYSCALLS = {
    "os": {"rename", "renames", "replace", "link", "symlink", "unlink", "remove", "rmdir",
           "removedirs", "mkdir", "makedirs", "mkfifo", "mknod", "open", "close", "closerange",
           "read", "write", "pread", "pwrite", "sendfile", "copy_file_range", "dup", "dup2",
           "scandir", "listdir", "walk", "fwalk", "stat", "lstat", "fstat", "statvfs",
           "access", "readlink", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown",
           "utime", "truncate", "ftruncate", "fsync", "fdatasync", "sync", "pipe"},
    "os.path": {"exists", "lexists", "isdir", "isfile", "islink", "ismount", "getsize",
                "getmtime", "getatime", "getctime", "realpath", "samefile"},
    "select": {"poll", "select", "epoll", "kqueue", "devpoll"},
    "fcntl": {"fcntl", "flock", "lockf", "ioctl"},
    "shutil": {"rmtree", "copy", "copy2", "copyfile", "copytree", "move", "chown"},
    "tempfile": {"mkdtemp", "mkstemp", "TemporaryFile", "NamedTemporaryFile",
                 "TemporaryDirectory", "SpooledTemporaryFile"},
    "io": {"open", "open_code", "FileIO"},
    "pathlib": {"Path"},
}  # fmt: skip
# The mechanism: _fs makes every system call on a queue's files (it is where the crash
# tests stop a process between two calls), _host the core's on other files
# (/proc/self/mountinfo, a queue path as named), _userfiles the integrations' on files a
# person names to them (the CLI's input, a credentials file), _inotify the waiting layer's
# inotify(7) and poll(2) calls. No other module, integrations included, is exempt.
MECHANISM = {"_fs.py", "_flush.py", "_host.py", "_inotify.py", "_userfiles.py"}


def _dotted(node: ast.expr) -> str:
    """``os.path.isdir`` for the expression ``os.path.isdir``; ``""`` if not a plain name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _syscalls(tree: ast.AST) -> list[tuple[int, str]]:
    """The system calls a module makes: ``os.x(...)``, ``open(...)``, a name imported
    from one of :data:`SYSCALLS`' modules (``from os import unlink``), and so on."""
    found: list[tuple[int, str]] = []
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in SYSCALLS:
            for alias in node.names:
                if alias.name in SYSCALLS[node.module]:
                    imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, f"import {alias.name} as {alias.asname}")
                for alias in node.names
                if alias.name in SYSCALLS and alias.asname
            )
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        module, _, function = name.rpartition(".")
        if function in SYSCALLS.get(module, ()):
            found.append((node.lineno, name))
        elif name == "open" or name in imported:
            found.append((node.lineno, imported.get(name, name)))
    return found


def test_only_the_mechanism_makes_system_calls() -> None:
    """Mechanism apart from policy: every module of the package (subpackages and their
    ``__init__`` included, no exemption) reaches files only through ``_fs`` and
    ``_host`` (so the kill-point tests can stop it between any two calls, and no symlink
    is followed by accident), and waits on descriptors only through ``_inotify``."""
    offenders: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in MECHANISM:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders.extend(f"{rel}:{line} {call}" for line, call in _syscalls(tree))
    assert offenders == []


def test_the_system_call_check_sees_every_form() -> None:
    """The check above finds each way of writing a call (it must be able to fail)."""
    source = """
import os, select
import shutil as sh
from os import unlink as rm
from os.path import isdir
os.rename("a", "b"); os.path.exists("a"); open("a"); rm("a"); isdir("a")
select.poll(); sh.rmtree("a"); os.getpid(); os.path.join("a", "b")
"""
    found = [call for _, call in _syscalls(ast.parse(source))]
    assert sorted(found) == sorted([
        "import shutil as sh", "os.rename", "os.path.exists", "open", "os.unlink",
        "os.path.isdir", "select.poll",
    ])  # fmt: skip


def _name_readers(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls that take a name apart by hand: a split at a dot, a test for digits."""
    splitting = {"partition", "rpartition", "split", "rsplit"}
    digits = {"isdigit", "isdecimal", "isnumeric"}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, args = node.func.attr, node.args
        at_a_dot = bool(args) and isinstance(args[0], ast.Constant) and args[0].value == "."
        if (method in splitting and at_a_dot) or method in digits:
            found.append((node.lineno, f".{method}()"))
    return found


def test_only_ids_takes_a_name_apart() -> None:
    """The name grammar is read in ``_ids`` alone (``parse_name``, ``sort_names``,
    ``ready_code``, ``id_of``...): no other module splits a string at a dot or asks
    whether it is digits, the two steps of every hand-written reader of names."""
    offenders: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "_ids.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(PACKAGE).as_posix()
        offenders.extend(f"{rel}:{line} {call}" for line, call in _name_readers(tree))
    assert offenders == [], "ask vsqs._ids instead"


def test_the_name_reader_check_sees_every_form() -> None:
    source = """
a, _, b = name.partition("."); name.rsplit(".", 1); name.split("."); name.isdigit()
raw.strip().isdecimal(); path.split("/"); name.partition("-"); name.startswith(".")
"""
    found = [call for _, call in _name_readers(ast.parse(source))]
    assert found == [".partition()", ".rsplit()", ".split()", ".isdigit()", ".isdecimal()"]


def test_every_vsqs_path_is_built_by_the_layout() -> None:
    """``.vsqs`` appears in one module's code: the layout owns every path under it."""
    owners: list[str] = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        owners.extend(
            path.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and ".vsqs" in node.value
            and id(node) not in docstrings
        )
    assert set(owners) == {"_layout.py"}, owners


def test_the_architecture_picture_is_drawn_from_the_contract() -> None:
    """docs/_static/architecture.svg is what docs/architecture.py draws today."""
    import subprocess

    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "architecture.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout


# -- one method per arrow (the table at the top of vsqs/_queue.py) ---------------------

# The _fs calls that move a message from one state to another: making, renaming and
# removing names in a queue directory (writing a body or flushing is part of an arrow).
_TRANSITIONS = {
    "create": {"create_exclusive", "create_at", "link_noreplace"},
    "rename": {"rename_noreplace", "rename_noreplace_at"},
    "unlink": {"unlink", "unlink_at"},
}
# Each public method of Queue and the arrows it exists to perform; each must be at most
# three calls away: the public method, at most one method of policy, the arrow's method,
# _fs. (A receive also returns ended leases and dead-letters on its way: that is one call
# further, through the requeue policy, _return.)
_PUBLIC_ARROWS = {
    "publish": ("create", "commit", "discard"),
    "publish_batch": ("create", "commit", "discard"),
    "publish_file": ("create", "commit"),
    "publish_stream": ("create", "commit"),
    "receive": ("claim",),
    "receive_batch": ("claim",),
    "delete": ("delete",),
    "change_visibility": ("extend", "ready"),
    "requeue_expired": ("extend", "ready", "move"),
    "purge": ("delete",),
    "clean": ("discard", "commit"),
    "redrive": ("claim", "move", "ready"),
}


def _queue_module() -> tuple[str, ast.Module]:
    source = (PACKAGE / "_queue.py").read_text(encoding="utf-8")
    return source, ast.parse(source)


def _arrow_table() -> dict[str, tuple[str, str]]:
    """arrow -> (method, syscall kind), from the module docstring of vsqs/_queue.py."""
    _, tree = _queue_module()
    doc = ast.get_docstring(tree) or ""
    rows = re.findall(r"^    (\w+)\s.*?\sQueue\.(\w+)\s+(\S+)$", doc, re.M)
    return {arrow: (method, syscall) for arrow, method, syscall in rows}


def _methods() -> dict[str, ast.FunctionDef]:
    _, tree = _queue_module()
    (queue,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Queue")
    return {n.name: n for n in queue.body if isinstance(n, ast.FunctionDef)}


def _fs_calls(node: ast.AST) -> set[str]:
    return {
        call.func.attr
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "_fs"
    }


def _calls(node: ast.AST) -> set[str]:
    """Names of the Queue methods *node* calls (on self, or on another queue)."""
    methods = set(_methods())
    return {
        call.func.attr
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in methods
    }


def test_the_arrow_table_names_every_arrow_once() -> None:
    table = _arrow_table()
    assert set(table) == {
        "create", "discard", "commit", "claim", "extend", "ready", "delete", "move", "copy"
    }  # fmt: skip
    methods = [method for method, _ in table.values()]
    assert len(set(methods)) == len(methods), "one method per arrow"
    assert set(methods) <= set(_methods()), "a method named in the table is missing"


def test_each_arrow_method_is_the_only_maker_of_its_transition() -> None:
    """A transition (create, rename, unlink of a name in the queue) is made in
    vsqs/_queue.py only by the method of its arrow: fast paths call it, never copy it."""
    table = _arrow_table()
    arrow_methods = dict(table.values())
    transitions = set().union(*_TRANSITIONS.values())
    _, tree = _queue_module()
    offenders = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)) and not isinstance(node, ast.Lambda):
            made = _fs_calls(node) & transitions
            # A nested function counts for its enclosing one (ast.walk visits both).
            if made and node.name not in arrow_methods and not _inside_arrow(tree, node):
                offenders.append(f"{node.name}: {sorted(made)}")
    assert offenders == []
    methods = _methods()
    for method, kind in arrow_methods.items():
        if kind in _TRANSITIONS:
            assert _fs_calls(methods[method]) & _TRANSITIONS[kind], (method, kind)


def _inside_arrow(tree: ast.Module, node: ast.FunctionDef) -> bool:
    """Whether *node* is nested in an arrow method."""
    arrow_methods = {method for method, _ in _arrow_table().values()}
    return any(
        node in ast.walk(method) and method is not node
        for name, method in _methods().items()
        if name in arrow_methods
    )


def test_no_public_call_is_more_than_three_calls_from_its_syscall() -> None:
    methods = _methods()
    graph = {name: _calls(node) for name, node in methods.items()}
    table = _arrow_table()

    def hops(start: str, goal: str) -> int:
        seen, frontier, depth = {start}, {start}, 0
        while frontier:
            if goal in frontier:
                return depth + 1  # the arrow's own call into _fs
            frontier = {n for f in frontier for n in graph[f]} - seen
            seen |= frontier
            depth += 1
        return 99

    too_deep = {
        (public, arrow, hops(public, table[arrow][0]))
        for public, arrows in _PUBLIC_ARROWS.items()
        for arrow in arrows
        if hops(public, table[arrow][0]) > 3
    }
    assert too_deep == set()


# How a docstring or the concepts page names an arrow: "*commit* arrow", "arrows *extend*
# then *ready*", "Arrow *claim*"; the old style "Arrow ``publish``" is matched so that it
# fails.
_NAMED_ARROW = re.compile(
    r"\*(\w+)\*(?:\s+then\s+\*(\w+)\*)?\s+arrows?\b"
    r"|\b[Aa]rrows?\s+(?:\*(\w+)\*|``(\w+)``)(?:\s+then\s+\*(\w+)\*)?"
)


def _arrows_named(text: str) -> set[str]:
    return {
        name for found in _NAMED_ARROW.findall(" ".join(text.split())) for name in found if name
    }


def test_tests_and_the_concepts_page_name_arrows_as_the_table_does() -> None:
    """One vocabulary: every arrow a test's docstring names, and every arrow of the
    concepts page's transition table, is an arrow of ``_queue.py``'s table (create,
    commit, claim, extend, ready...), not an operation (publish, receive, heartbeat)."""
    arrows = set(_arrow_table())
    named: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
                found = _arrows_named(ast.get_docstring(node) or "") - arrows
                if found:
                    named[f"{path.relative_to(ROOT)}:{getattr(node, 'name', '')}"] = found
    concepts = (ROOT / "docs" / "concepts.rst").read_text(encoding="utf-8")
    table = concepts[concepts.index("   * - Arrow\n") : concepts.index(".. _no-overwrite:")]
    rows = {
        name
        for row in re.findall(r"^   \* - (.*)$", table, re.M)
        for name in re.findall(r"\*\*([\w-]+)\*\*", row)
    }
    assert rows and rows - arrows == set(), "docs/concepts.rst's transitions"
    assert named == {}


def test_the_arrow_vocabulary_check_sees_each_way_of_naming_one() -> None:
    assert _arrows_named("Arrow ``publish``: x") == {"publish"}
    assert _arrows_named("Arrows *extend* then *ready* (a requeue)") == {"extend", "ready"}
    assert _arrows_named("The *extend*\n    then *ready* arrows") == {"extend", "ready"}
    assert _arrows_named("*heartbeat* arrow on a timer") == {"heartbeat"}
    assert _arrows_named("pyarrow batches, an Arrow record batch") == set()
