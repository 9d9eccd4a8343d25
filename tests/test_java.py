"""The Spark tests get a Java runtime from ``make test`` (tests/setup-java.sh), or the run
stops with one clear line (tests/java.py) instead of a wall of Spark errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.java import NO_JAVA, find_java

ROOT = Path(__file__).resolve().parent.parent
SETUP_JAVA = ROOT / "tests" / "setup-java.sh"


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_java_home_or_the_path_is_the_java_spark_starts(tmp_path: Path) -> None:
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    java = _executable(tmp_path / "jdk" / "bin" / "java", "#!/bin/sh\n")
    assert find_java({"JAVA_HOME": str(tmp_path / "jdk"), "PATH": ""}) == str(java)
    assert find_java({"PATH": f"{tmp_path / 'empty'}:{java.parent}"}) == str(java)
    with pytest.raises(RuntimeError, match="has no bin/java"):
        find_java({"JAVA_HOME": str(tmp_path), "PATH": str(java.parent)})


def test_no_java_at_all_stops_the_run_with_one_line(tmp_path: Path) -> None:
    """Collecting the Spark tests without Java: one line and a usage error (exit 4)."""
    with pytest.raises(RuntimeError) as error:
        find_java({"PATH": str(tmp_path)})
    assert str(error.value) == NO_JAVA
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it, java least of all
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/test_spark.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert done.stderr.strip() == f"ERROR: {NO_JAVA}"
    assert "JAVA_GATEWAY_EXITED" not in done.stdout + done.stderr


def _setup_java(tmp_path: Path, *, uid: int, java: bool = False) -> tuple[int, str, str]:
    """Run tests/setup-java.sh on a PATH without java, with ``id`` and ``apt-get`` faked:
    its exit status, its standard error and what it asked apt-get to do."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("mktemp", "cat", "rm"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    _executable(bin_dir / "id", f"#!/bin/sh\necho {uid}\n")
    log = tmp_path / "apt.log"
    _executable(bin_dir / "apt-get", f'#!/bin/sh\necho "$*" >> {log}\n')
    if java:
        _executable(bin_dir / "java", "#!/bin/sh\n")
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    done = subprocess.run(
        ["/bin/sh", str(SETUP_JAVA)], env=env, capture_output=True, text=True, check=False
    )
    return done.returncode, done.stderr, log.read_text() if log.exists() else ""


def test_setup_java_installs_openjdk_as_root_when_java_is_missing(tmp_path: Path) -> None:
    status, err, apt = _setup_java(tmp_path, uid=0)
    assert (status, err) == (0, "")
    assert apt == "update -qq\ninstall -y -qq --no-install-recommends openjdk-17-jre-headless\n"


def test_setup_java_does_nothing_when_java_is_there(tmp_path: Path) -> None:
    assert _setup_java(tmp_path, uid=0, java=True) == (0, "", "")


def test_setup_java_without_root_says_so_in_one_line(tmp_path: Path) -> None:
    status, err, apt = _setup_java(tmp_path, uid=1000)
    assert (status, apt) == (0, "")
    assert err.count("\n") == 1
    assert "not root" in err
    assert "openjdk-17-jre-headless" in err
