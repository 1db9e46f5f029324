#!/usr/bin/env bash
# Installs what building, running and testing fleet-tokend needs, when it is missing.
# Sourced by scripts/test and scripts/serve-demo; safe to run again, and safe to run twice at once
# (the README runs those two side by side): the installs take a lock, and whoever gets it second
# looks again and finds nothing missing.
set -euo pipefail

if ! command -v swift >/dev/null 2>&1 && [ -x /opt/swift/usr/bin/swift ]; then
    export PATH="/opt/swift/usr/bin:$PATH"
fi
command -v swift >/dev/null 2>&1 || { echo "swift toolchain not found on PATH" >&2; exit 1; }

ensure_tools_missing() {
    missing=()
    command -v socat >/dev/null 2>&1 || missing+=(socat)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    command -v jq >/dev/null 2>&1 || missing+=(jq)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    [ -f /usr/include/systemd/sd-daemon.h ] || missing+=(libsystemd-dev)
    command -v systemd-socket-activate >/dev/null 2>&1 || missing+=(systemd)
    # The METRICS tests parse the agent's exposition with Prometheus' own Python parser.
    needs_prometheus_client=0
    if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import prometheus_client' >/dev/null 2>&1; then
        needs_prometheus_client=1
    fi
}

ensure_tools_missing
if [ ${#missing[@]} -gt 0 ] || [ "$needs_prometheus_client" -eq 1 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        # One installer at a time; the second looks again once the first is done.
        exec 9>/run/lock/fleet-tokend-ensure-tools.lock
        flock 9
        ensure_tools_missing
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "missing: ${missing[*]}; install them (apt-get install -y ${missing[*]}) or run as root" >&2
            exit 1
        fi
        echo "installing: ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if [ "$needs_prometheus_client" -eq 1 ]; then
        echo "installing: prometheus_client (PyPI)" >&2
        python3 -m pip install --quiet 'prometheus_client>=0.17' >&2 \
            || python3 -m pip install --quiet --break-system-packages 'prometheus_client>=0.17' >&2 \
            || echo "could not install prometheus_client; the METRICS parser test will fail" >&2
    fi
    if [ "$(id -u)" -eq 0 ]; then
        flock -u 9
        exec 9>&-
    fi
fi

# SwiftPM leaves empty TemporaryDirectory.* folders in $TMPDIR at every build and keeps its lock on
# a build folder there: the builds these scripts run keep both in the checkout's .build-tmp
# (ignored by git), so nothing is left in /tmp, and every script of this checkout finds the same
# lock. Every `swift` command but `swift test` is moved (`swift --version` leaves one too);
# scripts/test gives `swift test` a directory of its run's.
fleet_tokend_build_tmp="$(pwd)/.build-tmp"
mkdir -p "$fleet_tokend_build_tmp"
find "$fleet_tokend_build_tmp" -mindepth 1 -maxdepth 1 -name 'TemporaryDirectory.*' -mmin +240 \
    -exec rm -rf {} + 2>/dev/null || true
swift() {
    case "${1:-}" in
        test) command swift "$@" ;;
        *) TMPDIR="$fleet_tokend_build_tmp" command swift "$@" ;;
    esac
}
