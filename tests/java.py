"""The Java runtime of the Spark tests: found, or one clear line saying how to get one.

PySpark starts a JVM: ``$JAVA_HOME/bin/java``, else ``java`` on the ``PATH``.
``make test`` installs one when the machine has none (``tests/setup-java.sh``: Debian's
``openjdk-17-jre-headless``, as root). Where that was not possible, the test run stops
with :data:`NO_JAVA` instead of a wall of ``JAVA_GATEWAY_EXITED`` errors.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

NO_JAVA = (
    "no Java runtime for the Spark tests (no JAVA_HOME, no java on PATH): as root, "
    "sh tests/setup-java.sh (make test runs it) installs openjdk-17-jre-headless; "
    "or install Java 17 or 21 and set JAVA_HOME; or leave them out with -m 'not spark'"
)


def find_java(environ: Mapping[str, str]) -> str:
    """The java that PySpark will start under *environ*.

    :raises RuntimeError: with :data:`NO_JAVA` when there is none.
    """
    home = environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.access(java, os.X_OK):
            return java
        raise RuntimeError(f"JAVA_HOME={home} has no bin/java; " + NO_JAVA)
    found = shutil.which("java", path=environ.get("PATH", ""))
    if found is None:
        raise RuntimeError(NO_JAVA)
    return found
