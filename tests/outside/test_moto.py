"""moto's own SQS tests, in server mode, against a real ``vsqs serve``.

``tests/outside/setup-moto.sh`` (run by ``make test``) lays out ``tests/test_sqs`` of
moto's source distribution in ``.venv-moto``; this test starts ``vsqs serve`` on an
empty root and runs that suite against it, in ``.venv-moto``'s pytest with the rules of
:mod:`tests.outside.moto_rules` (tests that are not portable left out, known
differences expected to fail). The suite must pass as a whole, and at least
:data:`LEAST_PASSED` portable tests must pass.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Final

import pytest

from tests.serve.clients import Served, client_env

HERE: Final = Path(__file__).resolve().parent
VENV: Final = HERE.parents[1] / ".venv-moto"
SUITE: Final = VENV / "suite"
LEAST_PASSED: Final = 124
ACCOUNT: Final = "000000000000"  # the account in vsqs serve's queue URLs and ARNs


def test_motos_sqs_suite_in_server_mode(tmp_path: Path) -> None:
    python = VENV / "bin" / "python"
    if not (python.exists() and (SUITE / "tests" / "test_sqs" / "test_sqs.py").exists()):
        pytest.fail(
            f"moto's SQS suite is not laid out in {SUITE}: sh tests/outside/setup-moto.sh "
            "(make test runs it)",
            pytrace=False,
        )
    root = tmp_path / "root"
    root.mkdir()
    served = Served(root)
    summary = tmp_path / "summary.json"
    env = client_env(tmp_path)
    env.update(
        TEST_SERVER_MODE="true",
        TEST_SERVER_MODE_ENDPOINT=served.url,
        MOTO_CALL_RESET_API="false",
        VSQS_MOTO_ACCOUNT=ACCOUNT,
        VSQS_MOTO_SUMMARY=str(summary),
        PYTHONPATH=str(HERE),
    )
    env.pop("COVERAGE_PROCESS_START", None)  # the suite's process is moto's, not ours
    try:
        run = subprocess.run(
            [str(python), "-m", "pytest", "-p", "moto_rules", "-p", "no:cacheprovider",
             "-q", "-rfE", "--timeout", "120", "tests/test_sqs"],
            cwd=SUITE,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )  # fmt: skip
    finally:
        served.stop()
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert summary.exists(), report
    outcomes: dict[str, str] = json.loads(summary.read_text())["outcomes"]
    passed = sorted(t for t, o in outcomes.items() if o == "passed")
    others = {t: o for t, o in outcomes.items() if o not in ("passed", "xfailed")}
    assert run.returncode == 0 and not others, f"{others}\n{report}"
    assert len(passed) >= LEAST_PASSED, report
