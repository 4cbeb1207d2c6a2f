# shellcheck shell=bash
# Shared helpers for infra/slurm/*.sh. Sourced, never executed.
#
# Settings (environment or the matching --flag of each script):
#   CLUSTER    cluster name                  (default: local)
#   NODES      number of slurmd nodes        (default: 4)
#   CPUS       CPUs declared per node        (default: 4; config_overrides lets this exceed the host)
#   BASE_PORT  slurmd port of node1; nodeK uses BASE_PORT+K-1   (default: 17001)
#   CTLD_PORT  slurmctld port                (default: 6817)
#   STATE_DIR  all config/state/logs/pids    (default: /var/lib/resurgo-slurm/$CLUSTER)
#   START_TIMEOUT  seconds start.sh waits for the nodes   (default: 60)

SLURM_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SLURM_LIB_DIR

slurm_log() { printf '%s: %s\n' "${SLURM_SCRIPT_NAME:-slurm}" "$*" >&2; }
slurm_die() { slurm_log "ERROR: $*"; exit 1; }

# Parse the common flags; anything unknown is left in SLURM_EXTRA_ARGS.
slurm_parse_args() {
    SLURM_EXTRA_ARGS=()
    while (($#)); do
        case $1 in
            --cluster) CLUSTER=$2; shift 2 ;;
            --cluster=*) CLUSTER=${1#*=}; shift ;;
            --nodes) NODES=$2; shift 2 ;;
            --nodes=*) NODES=${1#*=}; shift ;;
            --cpus) CPUS=$2; shift 2 ;;
            --cpus=*) CPUS=${1#*=}; shift ;;
            --base-port) BASE_PORT=$2; shift 2 ;;
            --base-port=*) BASE_PORT=${1#*=}; shift ;;
            --ctld-port) CTLD_PORT=$2; shift 2 ;;
            --ctld-port=*) CTLD_PORT=${1#*=}; shift ;;
            --state-dir) STATE_DIR=$2; shift 2 ;;
            --state-dir=*) STATE_DIR=${1#*=}; shift ;;
            --timeout) START_TIMEOUT=$2; shift 2 ;;
            --timeout=*) START_TIMEOUT=${1#*=}; shift ;;
            *) SLURM_EXTRA_ARGS+=("$1"); shift ;;
        esac
    done
}

# Fill defaults and derived paths. Call after slurm_parse_args.
slurm_settings() {
    CLUSTER=${CLUSTER:-local}
    NODES=${NODES:-4}
    CPUS=${CPUS:-4}
    BASE_PORT=${BASE_PORT:-17001}
    CTLD_PORT=${CTLD_PORT:-6817}
    STATE_DIR=${STATE_DIR:-/var/lib/resurgo-slurm/$CLUSTER}
    START_TIMEOUT=${START_TIMEOUT:-60}
    [[ $CLUSTER =~ ^[a-z][a-z0-9_]{0,39}$ ]] || slurm_die "CLUSTER must match ^[a-z][a-z0-9_]*$ (Slurm ClusterName), got '$CLUSTER'"
    local v
    for v in NODES CPUS BASE_PORT CTLD_PORT START_TIMEOUT; do
        [[ ${!v} =~ ^[0-9]+$ ]] || slurm_die "$v must be a number, got '${!v}'"
    done
    ((NODES >= 1)) || slurm_die "NODES must be >= 1"
    ETC_DIR=$STATE_DIR/etc
    RUN_DIR=$STATE_DIR/run
    LOG_DIR=$STATE_DIR/log
    SPOOL_DIR=$STATE_DIR/spool
    SLURM_CONF=$ETC_DIR/slurm.conf
    export SLURM_CONF CLUSTER STATE_DIR ETC_DIR RUN_DIR LOG_DIR SPOOL_DIR
}

# The node names and pids declared in an existing slurm.conf (so stop/status work even
# when NODES in the environment differs from what start.sh used).
slurm_conf_nodes() {
    [[ -f $SLURM_CONF ]] || return 0
    sed -n 's/^NodeName=\(node[0-9]*\) .*/\1/p' "$SLURM_CONF"
}

# pid_of_daemon <pidfile> <comm>: print the pid if the pid file names a live <comm>
# process that was started with this cluster's slurm.conf; fail otherwise.
slurm_pid_of() {
    local pidfile=$1 comm=$2 pid
    [[ -r $pidfile ]] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [[ -n $pid && -r /proc/$pid/comm ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-f $SLURM_CONF " || return 1
    printf '%s\n' "$pid"
}

slurm_ctld_pid() { slurm_pid_of "$RUN_DIR/slurmctld.pid" slurmctld; }
slurm_slurmd_pid() { slurm_pid_of "$RUN_DIR/slurmd.$1.pid" slurmd; }

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# Node lines "name state" from sinfo; state keeps Slurm's suffixes (* = not responding,
# ~ = powered off, # = powering up, ! / % = powering down, $ = maintenance, @ = reboot).
slurm_node_states() {
    sinfo -h -N -p debug -o '%N %t' 2>/dev/null | sort -V -u
}

# True when every configured node is registered and responding (idle/alloc/mix/comp or
# drained variants), i.e. usable or deliberately drained.
slurm_nodes_ready() {
    local want=$1 lines n=0 name state
    lines=$(slurm_node_states) || return 1
    while read -r name state; do
        [[ -n $name ]] || continue
        case $state in
            *'*'* | down* | unk* | fail* | no_resp* | inval*) return 1 ;;
        esac
        n=$((n + 1))
    done <<<"$lines"
    ((n == want))
}
