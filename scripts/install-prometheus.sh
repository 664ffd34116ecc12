#!/usr/bin/env bash
# Installs the Prometheus that lb-launcher's `dashboards` test runs (a real server scraping a
# running lb, evaluating every dashboard query and alert rule) and `promtool` (rule and
# exposition checks): Debian's `prometheus` package, /usr/bin/prometheus and /usr/bin/promtool.
# Idempotent: when both run it only prints the version. The package's service is not started
# (there is no init system here; the test runs its own server on a loopback port).
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"

PROMETHEUS=/usr/bin/prometheus
PROMTOOL=/usr/bin/promtool

log() { echo "install-prometheus: $*" >&2; }

works() { "$PROMETHEUS" --version >/dev/null 2>&1 && "$PROMTOOL" --version >/dev/null 2>&1; }

if ! works; then
    log "prometheus or promtool missing: installing Debian's prometheus with apt-get"
    apt_install prometheus
    if ! works; then
        log "$PROMETHEUS or $PROMTOOL still does not run after installing prometheus"
        exit 1
    fi
fi

echo "prometheus: $PROMETHEUS ($("$PROMETHEUS" --version 2>&1 | head -n 1))"
