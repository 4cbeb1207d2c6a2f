#!/usr/bin/env bash
# A throwaway OpenSSH "login node" on 127.0.0.1 for trying SSH mode (what tests/sshd.py does).
#
#   bash infra/ssh/start.sh [DIR] [PORT]     # default /var/tmp/resurgo-ssh, port 2222
#   bash infra/ssh/start.sh --stop [DIR]
#
# Generates a host key and a client key in DIR, authorizes the client key for root (key only,
# PermitRootLogin prohibit-password), writes known_hosts, starts sshd, and prints the
# [clusters.NAME] / [clusters.NAME.ssh] TOML to paste into the Resurgo config.
set -euo pipefail

if [[ "${1:-}" == "--stop" ]]; then
  dir="${2:-/var/tmp/resurgo-ssh}"
  [[ -f "$dir/sshd.pid" ]] && kill "$(cat "$dir/sshd.pid")" 2>/dev/null && echo "stopped sshd ($dir)"
  exit 0
fi

dir="${1:-/var/tmp/resurgo-ssh}"
port="${2:-2222}"
slurm_conf="${SLURM_CONF:-/var/lib/resurgo-slurm/local/etc/slurm.conf}"

if [[ ! -x /usr/sbin/sshd ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends openssh-server >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends openssh-server >/dev/null; }
fi

mkdir -p "$dir" /run/sshd
chmod 700 "$dir"
[[ -f "$dir/ssh_host_ed25519_key" ]] || ssh-keygen -q -t ed25519 -N "" -C resurgo-demo-host -f "$dir/ssh_host_ed25519_key"
[[ -f "$dir/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N "" -C resurgo-demo -f "$dir/id_ed25519"
cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/ssh_host_ed25519_key.pub")" >"$dir/known_hosts"

cat >"$dir/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PrintMotd no
EOF

if [[ -f "$dir/sshd.pid" ]] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then
  echo "sshd already running (pid $(cat "$dir/sshd.pid"))" >&2
else
  /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
fi

cat <<EOF
# sshd on 127.0.0.1:$port (logs: $dir/sshd.log; stop: bash infra/ssh/start.sh --stop $dir)
[clusters.local]
mode = "ssh"
slurm_conf = "$slurm_conf"

[clusters.local.ssh]
host = "127.0.0.1"
port = $port
username = "root"
client_keys = ["$dir/id_ed25519"]
known_hosts = "$dir/known_hosts"
EOF
