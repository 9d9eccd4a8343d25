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
    (contract,) = config["tool"]["importlinter"]["contracts"]
    return [re.split(r"\s*[|:]\s*", layer) for layer in contract["layers"]]


def test_every_module_has_a_layer() -> None:
    """A new module must be placed in the import contract, or lint-imports ignores it."""
    placed = {name for layer in _layers() for name in layer}
    modules = {f"vsqs.{path.stem}" for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    # An integration with several files is a subpackage, placed as a whole.
    modules |= {f"vsqs.{path.parent.name}" for path in PACKAGE.glob("*/__init__.py")}
    assert modules - placed == set(), "add to [tool.importlinter] in pyproject.toml"
    assert placed - modules == set(), "remove from [tool.importlinter]: no such module"


def test_only_fs_and_its_peers_make_syscalls_that_change_a_queue() -> None:
    """Mechanism apart from policy: the state machine and its helpers rename, link and
    unlink only through ``_fs`` (so the kill-point tests can stop them between calls)."""
    changing = {"rename", "replace", "link", "unlink", "remove", "open", "mkdir", "rmdir"}
    offenders: list[str] = []
    for path in (p for p in PACKAGE.rglob("_*.py") if p.name != "__init__.py"):
        # _null removes only the caller's own file (publish_file into nothing).
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ("_fs.py", "_waiters.py", "_null.py", "cli/_common.py", "_demo.py") or (
            rel.startswith("spark/")
        ):
            continue
        offenders.extend(
            f"{path.name}:{node.lineno} os.{node.func.attr}"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "os"
            and node.func.attr in changing
        )
    assert offenders == []


def test_only_ids_takes_a_name_apart() -> None:
    """The name grammar is read in ``_ids`` alone (``parse_name``, ``sort_names``,
    ``ready_code``, ``id_of``...): no other module splits a string at a dot or asks
    whether it is digits, the two steps of every hand-written reader of names."""
    splitting = {"partition", "rpartition", "split", "rsplit"}
    digits = {"isdigit", "isdecimal", "isnumeric"}
    offenders: list[str] = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "_ids.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method, args = node.func.attr, node.args
            at_a_dot = bool(args) and isinstance(args[0], ast.Constant) and args[0].value == "."
            if (method in splitting and at_a_dot) or method in digits:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{method}()")
    assert offenders == [], "ask vsqs._ids instead"


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
