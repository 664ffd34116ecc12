#!/usr/bin/env bash
# Installs the headless Chromium the web console's browser tests (lb-launcher's `console` test
# target) drive over the DevTools protocol: Debian's `chromium` package, /usr/bin/chromium.
# Idempotent: when /usr/bin/chromium already runs it only prints its version. (The tests' own
# $CHROMIUM override points at a browser installed some other way; this script does not look at it.)
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"

# Where Debian's package puts the binary.
CHROMIUM=/usr/bin/chromium

log() { echo "install-chromium: $*" >&2; }

works() { [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; }

if ! works; then
    log "$CHROMIUM missing: installing Debian's chromium with apt-get"
    apt_install chromium
    if ! works; then
        log "$CHROMIUM still does not run after installing chromium"
        exit 1
    fi
fi

echo "chromium: $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null))"
