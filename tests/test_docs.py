"""Every code example in README.rst and docs/ runs, so the documentation cannot rot.

The convention for authors (also stated in ``docs/conf.py``):

* A ``.. code-block:: python`` (or ``.. code:: python``) block is executed, on its own,
  as a reader who copies just that block runs it: imports included. A block that needs
  what the block before it defined says so on its first line, ``# Continues the example
  above.``, and runs after it (and after whatever that one continues), as one script.
  Each such run happens in a fresh temporary directory, twice in a row, as a reader may
  run it: queues go in directories made with :mod:`tempfile` (``TMPDIR`` points into the
  test's directory), never at a fixed path such as ``"/tmp/orders"``, which a second run
  would find full.
* The python blocks of a page, as one script, pass ``mypy --strict``.
* A block that must not run (it needs a cluster, it is a fragment) is preceded by the
  comment ``.. skip-test: <reason>``. It is still compiled, so it cannot hold a syntax
  error, and the reason is mandatory, so a skip is never silent.
* ``console``, ``text``, ``shell``, ``ini``... blocks are not executed. ``>>>`` examples
  in ``.. doctest::`` directives, in plain doctest blocks and in the docstrings pulled in
  by autodoc run under the Sphinx doctest builder (the last test here).

Each page runs in its own interpreter, as a user's script would, with a time limit.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGE_TIMEOUT = 240.0  # generous: a page may start processes; this is not a speed check

_DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. (?:code-block|code|sourcecode)::[ \t]*(?P<lang>\S*)"
)
_SKIP = re.compile(r"^[ \t]*\.\. skip-test:(?P<reason>.*)$")
_CONTINUES = "# Continues the example above."
_FIXED_TMP = re.compile(r"""["']/tmp/""")
_PYTHON = frozenset({"python"})
# Aliases that Pygments accepts but this test would not run: refused, so that nothing
# meant to run is silently left out. Use "python" (runs) or "text" (does not).
_REFUSED = frozenset({"py", "python3", "py3", "pycon", "ipython", "ipython3"})


@dataclass(frozen=True)
class Block:
    """One python code block: its first line number (1-based) in the page and its code."""

    line: int
    code: str
    skip_reason: str | None

    @property
    def continues(self) -> bool:
        """Whether the block says it needs the one before it (its first line)."""
        return self.code.startswith(_CONTINUES)


def pages() -> list[Path]:
    """README.rst and every reStructuredText page of the docs (guides included)."""
    found = [ROOT / "README.rst"]
    for path in sorted(DOCS.rglob("*.rst")):
        relative = path.relative_to(DOCS).parts
        if relative[0] in ("_build", "dev"):
            continue
        found.append(path)
    return found


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _dedent(lines: list[str]) -> list[str]:
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths, default=0)
    return [line[cut:] if line.strip() else "" for line in lines]


def extract_blocks(text: str, where: str = "<page>") -> list[Block]:
    """The python code blocks of a page, with their line numbers and skip markers."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        match = _DIRECTIVE.match(lines[index])
        if match is None:
            index += 1
            continue
        lang = match["lang"].lower()
        if lang in _REFUSED:
            raise ValueError(
                f"{where}:{index + 1}: code-block language {lang!r} is not run by the doc "
                "tests; write 'python' (executed) or 'text' (not executed)"
            )
        indent = len(match["indent"])
        skip_reason = _skip_marker(lines, index, where)
        index += 1
        # Directive options (":caption: ...") come first, then the indented body.
        while index < len(lines) and lines[index].strip().startswith(":"):
            index += 1
        body_start = index
        while index < len(lines) and (
            not lines[index].strip() or len(lines[index]) - len(lines[index].lstrip()) > indent
        ):
            index += 1
        if lang not in _PYTHON:
            continue
        body = lines[body_start:index]
        while body and not body[-1].strip():
            body.pop()
        first = 0
        while first < len(body) and not body[first].strip():
            first += 1
        code = "\n".join(_dedent(body[first:])) + "\n"
        blocks.append(Block(body_start + first + 1, code, skip_reason))
    return blocks


def _skip_marker(lines: list[str], directive: int, where: str) -> str | None:
    """The reason of a ``.. skip-test:`` comment just before the directive, if any."""
    previous = directive - 1
    while previous >= 0 and not lines[previous].strip():
        previous -= 1
    if previous < 0:
        return None
    match = _SKIP.match(lines[previous])
    if match is None:
        return None
    reason = match["reason"].strip()
    if not reason:
        raise ValueError(f"{where}:{previous + 1}: '.. skip-test:' needs a reason")
    return reason


def build_script(blocks: list[Block]) -> str:
    """One script whose line N is line N of the page, so tracebacks point into the page."""
    out: list[str] = []
    for block in blocks:
        if block.skip_reason is not None:
            continue
        out.extend([""] * (block.line - 1 - len(out)))
        out.extend(block.code.splitlines())
    return "\n".join(out) + "\n"


def runs(blocks: list[Block], where: str = "<page>") -> list[list[Block]]:
    """The scripts a reader can run: each block that stands alone, with the blocks that
    continue it (skipped blocks left out)."""
    groups: list[list[Block]] = []
    for block in blocks:
        if block.skip_reason is not None:
            continue
        if block.continues:
            if not groups:
                raise ValueError(f"{where}:{block.line}: continues no example above")
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


PAGES = pages()


@pytest.mark.parametrize("page", PAGES, ids=[_page_id(p) for p in PAGES])
def test_python_examples_run(page: Path, tmp_path: Path) -> None:
    """Each python block of the page runs on its own, or after the blocks it says it
    continues, in a fresh directory, twice (skipped ones compile)."""
    text = page.read_text(encoding="utf-8")
    blocks = extract_blocks(text, _page_id(page))
    for block in blocks:
        if block.skip_reason is not None:
            # Still compiled, so a skipped example cannot rot into a syntax error.
            compile("\n" * (block.line - 1) + block.code, str(page), "exec")
    runnable = [b for b in blocks if b.skip_reason is None]
    for block in runnable:
        fixed = _FIXED_TMP.search(block.code)
        assert fixed is None, f"{_page_id(page)}:{block.line}: use tempfile, not a /tmp/ path"
    for group in runs(blocks, _page_id(page)):
        _run_alone(page, group, tmp_path / f"line{group[0].line}")
    if page.name == "README.rst":
        # The front page is not part of the Sphinx build: run any >>> examples here.
        failures, _ = doctest.testfile(str(page), module_relative=False, verbose=False)
        assert failures == 0


def test_the_tutorial_pipeline_leaves_no_temporary_directory(tmp_path: Path) -> None:
    """``python pipeline.py``, run again and again, must not fill the disk with queues."""
    page = DOCS / "tutorial.rst"
    (pipeline,) = [
        group for group in runs(extract_blocks(page.read_text(encoding="utf-8")))
        if "def produce(" in group[0].code
    ]  # fmt: skip
    _run_alone(page, pipeline, tmp_path)
    assert list((tmp_path / "work").iterdir()) == []


def test_the_tutorial_calls_shutdown_a_shutdown_not_a_close() -> None:
    """``close()`` releases one handle; ending the stream is ``shutdown()``."""
    text = " ".join((DOCS / "tutorial.rst").read_text(encoding="utf-8").split())
    assert "jobs.shutdown()" in text
    for wrong in ("*closes* the queue", "Closing the queue", "a bound, a close"):
        assert wrong not in text


def _run_alone(page: Path, group: list[Block], where: Path) -> None:
    """Run one block (with the blocks it continues) as a reader would, twice."""
    work = where / "work"
    work.mkdir(parents=True)
    script = where / (page.stem + "_example.py")
    script.write_text(build_script(group), encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(work)}
    for attempt in ("first", "second"):
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, (
            f"the example at {_page_id(page)}:{group[0].line} failed on the {attempt} run"
            " (line numbers are the page's):\n" + result.stderr.replace(str(script), str(page))
        )


def test_python_examples_pass_mypy_strict(tmp_path: Path) -> None:
    """Every page's python blocks, as the script a reader would paste them into, are
    ``mypy --strict`` clean: copied code type-checks in a strict project (``receive``
    returns ``Message | None``, and the examples say what to do with ``None``)."""
    scripts = []
    for page in PAGES:
        blocks = [
            b for b in extract_blocks(page.read_text(encoding="utf-8")) if b.skip_reason is None
        ]
        if blocks:
            name = "_".join(page.relative_to(ROOT).with_suffix("").parts).replace("-", "_")
            script = tmp_path / f"{name}.py"
            script.write_text(build_script(blocks), encoding="utf-8")
            scripts.append(script)
    assert len(scripts) >= 8  # the README, the tutorial and the guides at least
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *map(str, scripts)],
        cwd=ROOT,  # the project's mypy settings (python_version) and cache
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
        check=False,
    )
    report = result.stdout.replace(str(tmp_path) + os.sep, "")
    assert result.returncode == 0, "mypy --strict on the docs' examples:\n" + report


def test_no_page_names_a_private_class() -> None:
    """The docs never send a reader to a private class, such as a base class the public
    classes are built from (``Consuming``, when there was one)."""
    import vsqs

    public = {getattr(vsqs, name) for name in vsqs.__all__}
    private = {"Consuming"} | {
        base.__name__
        for cls in public
        if isinstance(cls, type)
        for base in cls.__mro__
        if base not in public and base.__module__.startswith("vsqs")
    }
    names = "|".join(sorted(private))
    # As code: in ``literals`` or a role, or followed by an attribute or a call ("Publishing
    # from executors" is a heading in English, not a reference to the class).
    pattern = re.compile(rf"(?:`|\.|\")(?:{names})\b|\b(?:{names})(?:\.\w|\()")
    for page in [*PAGES, *sorted((ROOT / "examples").glob("*.py"))]:
        found = pattern.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(ROOT)} names {found[0] if found else ''}"


def test_sphinx_doctests(tmp_path: Path) -> None:
    """``.. doctest::`` blocks, doctest blocks and autodoc'ed docstring examples pass."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "sphinx", "-b", "doctest", "-W", "--keep-going", "-q"),
            *("-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "out")),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning", "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- the extractor itself -------------------------------------------------------------


def test_extractor_finds_blocks_lines_and_skips() -> None:
    """The extractor keeps line numbers, honours skip markers and ignores other languages."""
    text = "\n".join(
        [
            "Title",  # 1
            "",  # 2
            ".. code-block:: python",  # 3
            "   :caption: one",  # 4
            "",  # 5
            "   x = 1",  # 6
            "   if x:",  # 7
            "       y = 2",  # 8
            "",  # 9
            ".. code-block:: console",  # 10
            "",  # 11
            "   $ vsqs ls",  # 12
            "",  # 13
            ".. skip-test: needs a cluster",  # 14
            "",  # 15
            ".. code:: python",  # 16
            "",  # 17
            "   spark.stop()",  # 18
        ]
    )
    blocks = extract_blocks(text)
    assert [(b.line, b.skip_reason) for b in blocks] == [(6, None), (18, "needs a cluster")]
    assert blocks[0].code == "x = 1\nif x:\n    y = 2\n"
    script = build_script(blocks)
    assert script.splitlines()[5:8] == ["x = 1", "if x:", "    y = 2"]
    assert "spark" not in script


def test_a_block_runs_alone_or_with_the_blocks_it_continues() -> None:
    """Grouping: a block stands alone unless its first line says it continues the one
    above; a continuation with nothing above is refused."""
    text = "\n\n".join(
        [
            ".. code-block:: python\n\n   import vsqs",
            ".. code-block:: python\n\n   # Continues the example above.\n   q = 1",
            ".. skip-test: a fragment\n\n.. code-block:: python\n\n   spark.stop()",
            ".. code-block:: python\n\n   # Continues the example above.\n   r = q",
            ".. code-block:: python\n\n   import os",
        ]
    )
    groups = runs(extract_blocks(text))
    assert [[b.code.splitlines()[-1] for b in group] for group in groups] == [
        ["import vsqs", "q = 1", "r = q"],
        ["import os"],
    ]
    with pytest.raises(ValueError, match="continues no example above"):
        runs(extract_blocks(".. code-block:: python\n\n   # Continues the example above.\n"))


def test_a_fixed_tmp_path_is_found() -> None:
    """What the page test refuses: a queue at a fixed path, which a second run finds full."""
    blocks = extract_blocks('.. code-block:: python\n\n   q = Queue("/tmp/orders")\n')
    assert _FIXED_TMP.search(blocks[0].code)
    assert not _FIXED_TMP.search("q = Queue(tempfile.mkdtemp())")


@pytest.mark.parametrize("lang", sorted(_REFUSED))
def test_extractor_refuses_aliases_it_would_not_run(lang: str) -> None:
    """A python-looking block that would silently not run is an error, not a pass."""
    with pytest.raises(ValueError, match="not run by the doc tests"):
        extract_blocks(f".. code-block:: {lang}\n\n   x = 1\n")


def test_extractor_requires_a_skip_reason() -> None:
    """``.. skip-test:`` without a reason is refused: a skip is never silent."""
    with pytest.raises(ValueError, match="needs a reason"):
        extract_blocks(".. skip-test:\n\n.. code-block:: python\n\n   x = 1\n")


def test_api_reference_lists_every_public_name() -> None:
    """Every name in ``vsqs.__all__`` has an entry in docs/api.rst."""
    import vsqs

    api = (DOCS / "api.rst").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\.\. auto\w+:: vsqs\.(\w+)", api, re.MULTILINE))
    missing = sorted(set(vsqs.__all__) - documented - {"__version__"})
    assert not missing, f"add to docs/api.rst: {missing}"


def test_the_docstring_and_the_guides_agree_on_max_receives() -> None:
    """One rule, said the same way everywhere: dead-lettered after exactly N receives."""
    import vsqs

    phrase = "after exactly ``max_receives`` receives"
    docstring = " ".join((vsqs.PlainQueue.__doc__ or "").split())
    guide = " ".join((DOCS / "guides" / "lifecycle.rst").read_text(encoding="utf-8").split())
    concepts = " ".join((DOCS / "concepts.rst").read_text(encoding="utf-8").split())
    for where, text in (("Queue", docstring), ("lifecycle", guide), ("concepts", concepts)):
        assert phrase in text, where
        assert "more than ``max_receives``" not in text, where
