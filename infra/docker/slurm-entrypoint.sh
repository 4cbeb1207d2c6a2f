#!/usr/bin/env bash
# Entrypoint of the Slurm image (infra/docker/slurm.Dockerfile): a whole Slurm cluster in one
# container -- munged, one slurmctld and NODES slurmd's -- started by the SAME scripts as the
# native demo (infra/slurm/install.sh, start.sh, status.sh, stop.sh), then supervised.
#
# Usage: slurm-entrypoint.sh [--dry-run] [--once] [--nodes N --cpus C ...]
#   Settings as for infra/slurm/*.sh, from the environment (CLUSTER NODES CPUS BASE_PORT
#   CTLD_PORT STATE_DIR) or their common flags, which go to start.sh, status.sh and stop.sh.
#   Every CHECK_INTERVAL seconds (default 10) status.sh checks the cluster; a daemon that died
#   is started again by start.sh (idempotent). SIGTERM/SIGINT stop the daemons with stop.sh
#   (job state in STATE_DIR survives; the next start resumes it).
#   --once      start, report, exit (no supervision)
#   --dry-run   print the commands it would run, run nothing
#   -h, --help  this text
# Runs as root: slurmctld/slurmd here use SlurmUser=root and munged must own its key.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SLURM_DIR=${SLURM_SCRIPTS:-$(cd "$here/../slurm" && pwd)}
log() { printf 'slurm-entrypoint: %s\n' "$*" >&2; }

DRY_RUN=0
ONCE=0
START_ARGS=()
while (($#)); do
    case $1 in
        --dry-run) DRY_RUN=1; shift ;;
        --once) ONCE=1; shift ;;
        -h | --help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) START_ARGS+=("$1"); shift ;;
    esac
done
export CLUSTER=${CLUSTER:-local}
STATE_DIR=${STATE_DIR:-/var/lib/resurgo-slurm/$CLUSTER}
export STATE_DIR
CHECK_INTERVAL=${CHECK_INTERVAL:-10}

install_cmd=(bash "$SLURM_DIR/install.sh")
start_cmd=(bash "$SLURM_DIR/start.sh" --resume-nodes "${START_ARGS[@]}")
status_cmd=(bash "$SLURM_DIR/status.sh" "${START_ARGS[@]}")
stop_cmd=(bash "$SLURM_DIR/stop.sh" "${START_ARGS[@]}")

if ((DRY_RUN)); then
    printf 'install: %s\n' "${install_cmd[*]}"
    printf 'start: %s\n' "${start_cmd[*]}"
    printf 'check every %ss: %s --quiet\n' "$CHECK_INTERVAL" "${status_cmd[*]}"
    printf 'on SIGTERM: %s\n' "${stop_cmd[*]}"
    printf 'cluster: %s state: %s nodes: %s\n' "$CLUSTER" "$STATE_DIR" "${NODES:-4}"
    exit 0
fi

[[ $(id -u) -eq 0 ]] || { log "must run as root (slurmctld/slurmd/munged)"; exit 1; }

# Idempotent: packages are baked into the image, so this only creates the munge key (in the
# munge key volume) on the first start.
"${install_cmd[@]}"

stopping=0
shutdown() {
    stopping=1
    log "stopping cluster '$CLUSTER'"
    "${stop_cmd[@]}" || true
    exit 0
}
trap shutdown TERM INT

out=$("${start_cmd[@]}")
printf '%s\n' "$out"
log "cluster '$CLUSTER' ready ($(tail -n1 <<<"$out"))"
((ONCE)) && exit 0

# Supervise: sleep in the background and `wait`, so a signal is handled at once.
while ((!stopping)); do
    sleep "$CHECK_INTERVAL" &
    wait $! || true
    ((stopping)) && break
    if ! "${status_cmd[@]}" --quiet >/dev/null 2>&1; then
        log "cluster unhealthy; running start.sh again"
        "${status_cmd[@]}" >&2 || true
        "${start_cmd[@]}" >/dev/null || log "start.sh failed; will retry"
    fi
done
