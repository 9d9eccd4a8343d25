"""Installing vsqs as the documentation says: from the clone, on a fresh machine.

The ``vsqs`` on the package index is the unrelated 2014 release 0.3, so every documented
install command must name this project (``.``, ``'.[cli]'``), never ``vsqs[...]``; and
the documented command, run in a fresh virtual environment, gives a working
``import vsqs`` and ``vsqs`` command.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vsqs.__main__ import MISSING_EXTRA

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.rst"
_PIP_INSTALL = re.compile(r"pip install (?:-e )?(?P<target>'[^']*'|[^\s`']+)")


def _documents() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.rst") if "_build" not in p.parts]
    return [README, *sorted(docs), *sorted((ROOT / "examples").glob("*.py"))]


def _setup_section() -> str:
    text = README.read_text()
    return text[text.index("\nSet up\n") : text.index("\nQuickstart\n")]


def test_every_documented_install_command_installs_this_project() -> None:
    found = []
    for path in _documents():
        for match in _PIP_INSTALL.finditer(path.read_text()):
            target = match["target"].strip("'")
            found.append(target)
            assert target.startswith("."), f"{path.relative_to(ROOT)}: {match[0]}"
    assert {".", ".[cli]", ".[spark]"} <= set(found)


def test_the_readme_says_the_index_has_the_unrelated_0_3() -> None:
    setup = " ".join(_setup_section().split())
    assert "the ``vsqs`` there is the unrelated 2014 release 0.3" in setup
    assert "pip install '.[cli]'" in setup


def test_the_readme_keeps_two_setup_commands_and_says_what_make_test_installs() -> None:
    setup = _setup_section()
    commands = [line.split("#")[0].strip() for line in setup.splitlines() if "   $ " in line]
    assert commands == ["$ make demo", "$ make test"]
    scripts = (ROOT / "tests" / "reliability" / "setup-filesystems.sh").read_text()
    packages = re.findall(r'missing="\$missing (\S+)"', scripts)
    packages += re.findall(r"^package=(\S+)$", (ROOT / "tests" / "setup-java.sh").read_text(), re.M)
    assert len(packages) == 7  # xfsprogs btrfs-progs e2fsprogs mount fuse3 strace, Java
    for package in packages:
        assert f"``{package}``" in setup, package
    makefile = (ROOT / "Makefile").read_text()
    for script in (
        "tests/reliability/setup-filesystems.sh",
        "tests/setup-java.sh",
        "tests/setup-sqs-clients.sh",
        "tests/multihost/setup-juicefs.sh",
    ):
        assert f"sh {script}" in makefile
        assert f"``{script}``" in setup
    extras = re.search(r"pip install --quiet -e '\.\[([\w,]+)\]'", makefile)
    assert extras is not None
    for extra in extras[1].split(","):
        assert f"``{extra}``" in setup, extra
    for word in ("root", "loop-mounted", "tmpfs", "Java"):
        assert word in setup


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_the_documented_install_works_in_a_fresh_venv(tmp_path: Path) -> None:
    """``pip install .`` then ``pip install '.[cli]'`` in the clone, into a new venv (from
    the package index pip is configured with): ``import vsqs`` works with the core alone,
    ``vsqs`` says how to get the ``cli`` extra, and works once it is installed."""
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python, script = str(venv / "bin" / "python"), str(venv / "bin" / "vsqs")
    core = _run([python, "-m", "pip", "install", "-q", "."], ROOT)
    assert core.returncode == 0, core.stderr
    use = "import tempfile, vsqs; q = vsqs.Queue(tempfile.mkdtemp()); q.publish(b'x');"
    use += "print(q.receive(timeout=0).body.decode(), vsqs.__file__)"
    imported = _run([python, "-c", use], tmp_path)
    assert imported.returncode == 0, imported.stderr
    body, where = imported.stdout.split()
    assert body == "x"
    assert where.startswith(str(venv))  # this venv's copy, not the clone's or .venv's
    no_cli = _run([script, "--help"], tmp_path)
    assert (no_cli.returncode, no_cli.stdout, no_cli.stderr) == (1, "", MISSING_EXTRA + "\n")
    cli = _run([python, "-m", "pip", "install", "-q", ".[cli]"], ROOT)
    assert cli.returncode == 0, cli.stderr
    helped = _run([script, "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: vsqs")
