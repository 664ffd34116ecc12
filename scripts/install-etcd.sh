#!/usr/bin/env bash
# Installs what the master's etcd leadership needs: Debian's `etcd-server` (/usr/bin/etcd, the
# real server lb-master's and lb-launcher's HA tests start on loopback ports with a temp data
# dir) and `protobuf-compiler` (/usr/bin/protoc, which the etcd-client crate's build script runs
# on its vendored .proto files). Idempotent: when both run it only prints the versions. The
# package's service is not started (there is no init system here; tests run their own server).
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"

ETCD=/usr/bin/etcd
PROTOC=/usr/bin/protoc

log() { echo "install-etcd: $*" >&2; }

etcd_works() { "$ETCD" --version >/dev/null 2>&1; }
WELL_KNOWN=/usr/include/google/protobuf/descriptor.proto
protoc_works() { "$PROTOC" --version >/dev/null 2>&1 && [ -f "$WELL_KNOWN" ]; }

if ! etcd_works; then
    log "etcd missing: installing Debian's etcd-server with apt-get"
    apt_install etcd-server
    if ! etcd_works; then
        log "$ETCD still does not run after installing etcd-server"
        exit 1
    fi
fi
if ! protoc_works; then
    log "protoc or its well-known types missing: installing Debian's protobuf-compiler and libprotobuf-dev"
    apt_install protobuf-compiler
    apt_install libprotobuf-dev
    if ! protoc_works; then
        log "$PROTOC or $WELL_KNOWN still missing after installing protobuf-compiler and libprotobuf-dev"
        exit 1
    fi
fi

echo "etcd: $ETCD ($("$ETCD" --version 2>&1 | head -n 1))"
echo "protoc: $PROTOC ($("$PROTOC" --version 2>&1 | head -n 1))"
