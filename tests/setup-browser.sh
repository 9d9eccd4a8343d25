#!/bin/sh
# Install headless Chromium and its WebDriver for the dashboard's browser tests
# (tests/test_dashboard_browser.py, driven by Selenium) when the machine has none: make
# test runs this as root, like tests/setup-java.sh. Debian's chromium and
# chromium-driver (one version, from one archive: the driver always matches the
# browser; Selenium never downloads one). Idempotent and quiet: nothing happens when
# chromedriver is already on the PATH. Without root or apt-get it prints one line; the
# browser tests then stop with one line too (tests/browser.py).
set -eu

packages="chromium chromium-driver"
if command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup-browser: no chromedriver and not root; the dashboard's browser tests need: apt-get install $packages" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-browser: no chromedriver and no apt-get; the dashboard's browser tests need Chromium and its driver" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
# Quiet unless it fails: then the whole apt output explains why.
# shellcheck disable=SC2086 # two package names
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $packages; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "setup-browser: could not install $packages; the dashboard's browser tests need them" >&2
    exit 0
fi
rm -f "$log"
