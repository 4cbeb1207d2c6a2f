#!/usr/bin/env bash
# Install Debian's Prometheus server if it is missing (idempotent; needs root). The package's
# systemd unit is irrelevant: tests run /usr/bin/prometheus themselves on a loopback port.
set -euo pipefail
if [[ -x /usr/bin/prometheus ]]; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "prometheus is not installed and installing it needs root (apt-get install prometheus)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
test -x /usr/bin/prometheus
