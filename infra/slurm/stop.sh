#!/usr/bin/env bash
# Stop one local Slurm cluster's daemons (found through its pid files only).
#
# Usage: infra/slurm/stop.sh [--cluster NAME] [--state-dir DIR] [--purge]
#   Env: CLUSTER (default local), STATE_DIR (default /var/lib/resurgo-slurm/$CLUSTER).
#   Without --purge: stops slurmctld and the slurmd's; running job steps are left alone and
#   jobs/state survive the next start.sh.
#   --purge: first cancels all of the cluster's jobs, kills its leftover slurmstepd's, then
#   removes STATE_DIR. munged is shared by all clusters and is never stopped.
set -euo pipefail
SLURM_SCRIPT_NAME=stop.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

slurm_parse_args "$@"
PURGE=0
LOCK=1
for a in "${SLURM_EXTRA_ARGS[@]}"; do
    case $a in
        --purge) PURGE=1 ;;
        --no-lock) LOCK=0 ;; # internal: called by start.sh, which holds the lock
        -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) slurm_die "unknown argument: $a" ;;
    esac
done
slurm_settings

if [[ ! -d $STATE_DIR ]]; then
    slurm_log "nothing to stop: $STATE_DIR does not exist"
    exit 0
fi

if ((LOCK)); then
    exec 9>"$STATE_DIR/.lock"
    flock -w 120 9 || slurm_die "could not lock $STATE_DIR/.lock"
fi

# term_and_wait <label> <pid>...: SIGTERM, wait up to 15 s, then SIGKILL.
term_and_wait() {
    local label=$1 i p alive
    shift
    (($#)) || return 0
    slurm_log "stopping $label (pid $*)"
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        alive=()
        for p in "$@"; do
            [[ -d /proc/$p ]] && alive+=("$p")
        done
        ((${#alive[@]})) || return 0
        sleep 0.1
    done
    slurm_log "$label still alive after 15s; SIGKILL ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null || true
}

# Job steps of this cluster: slurmstepd processes whose environment names our slurm.conf.
cluster_stepd_pids() {
    local p
    for p in $(pgrep -x slurmstepd || true); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF"; then
            echo "$p"
        fi
    done
}

if ((PURGE)) && slurm_ctld_pid >/dev/null && scontrol ping >/dev/null 2>&1; then
    mapfile -t jobs < <(squeue -h -o %i 2>/dev/null)
    if ((${#jobs[@]})); then
        slurm_log "cancelling all jobs of cluster '$CLUSTER'"
        scancel --full --quiet "${jobs[@]}" 2>/dev/null || true
        for ((i = 0; i < 20; i++)); do
            [[ -z $(squeue -h -t R,CG -o %i 2>/dev/null) ]] && break
            sleep 0.5
        done
    fi
fi

slurmd_pids=()
for n in $(slurm_conf_nodes); do
    if p=$(slurm_slurmd_pid "$n"); then slurmd_pids+=("$p"); fi
done
# Pid files written by a slurmd whose node is no longer in slurm.conf.
for f in "$RUN_DIR"/slurmd.*.pid; do
    [[ -e $f ]] || continue
    if p=$(slurm_pid_of "$f" slurmd) && [[ ! " ${slurmd_pids[*]} " =~ \ $p\  ]]; then
        slurmd_pids+=("$p")
    fi
done
term_and_wait "slurmd" "${slurmd_pids[@]}"

if p=$(slurm_ctld_pid); then
    term_and_wait "slurmctld" "$p"
fi

if ((PURGE)); then
    # shellcheck disable=SC2046
    term_and_wait "leftover slurmstepd" $(cluster_stepd_pids)
    case $STATE_DIR in
        / | /var | /var/lib | /etc | /usr | /root | /home | /tmp) slurm_die "refusing to remove $STATE_DIR" ;;
    esac
    slurm_log "removing $STATE_DIR"
    rm -rf -- "$STATE_DIR"
else
    rm -f "$RUN_DIR"/slurmctld.pid "$RUN_DIR"/slurmd.*.pid
fi
slurm_log "cluster '$CLUSTER' stopped"
