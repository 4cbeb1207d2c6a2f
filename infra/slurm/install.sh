#!/usr/bin/env bash
# Install Slurm (slurmctld + slurmd + clients) and MUNGE on Debian/Ubuntu, idempotently.
#
# Usage: infra/slurm/install.sh
#   Needs root. Runs `apt-get update` only when a package is missing.
#   Creates /etc/munge/munge.key (owner munge, mode 0400) when it is missing or empty.
#   Safe to re-run; does not start any daemon (start.sh does).
set -euo pipefail

PACKAGES=(slurm-wlm slurm-client munge)
MUNGE_KEY=/etc/munge/munge.key

log() { printf 'install.sh: %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
    log "must run as root"
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "packages already installed: ${PACKAGES[*]}"
fi

# MUNGE key: one key per host, shared by every local cluster.
install -d -o munge -g munge -m 0700 /etc/munge
if [[ ! -s $MUNGE_KEY ]]; then
    log "creating $MUNGE_KEY"
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --force --keyfile="$MUNGE_KEY"
    elif command -v create-munge-key >/dev/null 2>&1; then
        create-munge-key -f
    else
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
    fi
fi
chown munge:munge "$MUNGE_KEY"
chmod 0400 "$MUNGE_KEY"

# Runtime/log dirs munged expects (normally created by systemd/tmpfiles).
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge

log "ok ($(slurmctld -V 2>/dev/null || echo 'slurmctld ?'), $(munged --version 2>/dev/null | head -n1 || echo 'munged ?'))"
