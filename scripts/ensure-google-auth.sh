#!/usr/bin/env bash
# Installs Google's Python auth library (google-auth, with requests) from PyPI into a venv of its
# own, for the tests that run it against the agent's GCE metadata endpoint (IntegrationTests'
# MetadataServerTests) and for the README's offline tour. Prints the venv's python on its last
# line. Safe to run again, and twice at once: an existing venv that imports both is kept.
#   FLEET_TOKEND_GOOGLE_AUTH_VENV  where the venv goes (default .build/google-auth-venv)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${FLEET_TOKEND_GOOGLE_AUTH_VENV:-$root/.build/google-auth-venv}"
python="${PYTHON:-python3}"
ready() { "$venv/bin/python" -c 'import google.auth, google.auth.transport.requests, requests' >/dev/null 2>&1; }
if ready; then
    echo "$venv/bin/python"
    exit 0
fi
# One installer at a time (tests run this side by side); the second looks again once the first is
# done, and finds the venv made.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ready; then
    echo "$venv/bin/python"
    exit 0
fi
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's pip apart (python3-venv).
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing: python3-venv" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq python3-venv >/dev/null
    else
        echo "$python has no venv module; install python3-venv" >&2
        exit 1
    fi
fi
rm -rf "$venv"
"$python" -m venv "$venv" >&2
echo "installing: google-auth, requests (PyPI) into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'google-auth>=2.40' 'requests>=2.31' >&2
"$venv/bin/python" -c 'import google.auth; print("google-auth", google.auth.__version__)' >&2
echo "$venv/bin/python"
