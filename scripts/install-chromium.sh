#!/usr/bin/env bash
# Installs the headless Chromium the web console's browser tests (lb-launcher's `console` test
# target) drive over the DevTools protocol: Debian's `chromium` package, /usr/bin/chromium.
# Idempotent: when /usr/bin/chromium already runs it only prints its version. (The tests' own
# $CHROMIUM override points at a browser installed some other way; this script does not look at it.)
set -euo pipefail

# Where Debian's package puts the binary.
CHROMIUM=/usr/bin/chromium

log() { echo "install-chromium: $*" >&2; }

works() { [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; }

if ! works; then
    log "$CHROMIUM missing: installing Debian's chromium with apt-get"
    sudo_cmd=()
    if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
    export DEBIAN_FRONTEND=noninteractive
    # Only refresh the package lists when apt does not know the package (a fresh image): an
    # update costs tens of seconds and the lists are usually there.
    # (Read into a variable first: `grep -q` in a pipe under pipefail fails on apt's SIGPIPE.)
    policy="$(apt-cache policy chromium 2>/dev/null || true)"
    if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
        log "apt does not know chromium: apt-get update"
        "${sudo_cmd[@]}" apt-get update -qq
    fi
    "${sudo_cmd[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends chromium >/dev/null
    if ! works; then
        log "$CHROMIUM still does not run after installing chromium"
        exit 1
    fi
fi

echo "chromium: $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null))"
