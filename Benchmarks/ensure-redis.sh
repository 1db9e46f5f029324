# Sourced by the benchmark scripts that compare against Redis: installs redis-server when it is
# missing (as root), or stops with what to do.
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "redis-server is missing: apt-get install -y redis-server, or run as root" >&2
        exit 1
    fi
    echo "installing redis-server" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
