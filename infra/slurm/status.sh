#!/usr/bin/env bash
# Health of one local Slurm cluster.
#
# Usage: infra/slurm/status.sh [--cluster NAME] [--state-dir DIR] [--quiet]
#   Env: CLUSTER (default local), STATE_DIR (default /var/lib/resurgo-slurm/$CLUSTER).
#   Prints daemon pids, `scontrol ping`, and every node's state and reason.
#   Exit 0 when munge works, slurmctld answers and every configured node responds
#   (DRAIN/DRAINED nodes count as responding but are listed); exit 1 otherwise.
set -uo pipefail
SLURM_SCRIPT_NAME=status.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

slurm_parse_args "$@"
QUIET=0
for a in "${SLURM_EXTRA_ARGS[@]}"; do
    case $a in
        -q | --quiet) QUIET=1 ;;
        -h | --help) sed -n '2,9p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) slurm_die "unknown argument: $a" ;;
    esac
done
slurm_settings

out() { ((QUIET)) || printf '%s\n' "$*"; }
problems=()

out "cluster:    $CLUSTER"
out "SLURM_CONF=$SLURM_CONF"
if [[ ! -f $SLURM_CONF ]]; then
    out "unhealthy:  no slurm.conf (cluster never started?)"
    exit 1
fi

if munge_ok; then out "munge:      ok"; else out "munge:      FAILED"; problems+=(munge); fi

if p=$(slurm_ctld_pid); then out "slurmctld:  pid $p"; else out "slurmctld:  NOT RUNNING"; problems+=(slurmctld); fi
nodes=$(slurm_conf_nodes)
want=0
for n in $nodes; do
    want=$((want + 1))
    if p=$(slurm_slurmd_pid "$n"); then out "slurmd:     $n pid $p"; else out "slurmd:     $n NOT RUNNING"; problems+=("slurmd:$n"); fi
done

if ping=$(scontrol ping 2>&1); then
    out "controller: $(tr '\n' ' ' <<<"$ping")"
    ((QUIET)) || sinfo -N -p debug -o '%N %t %c %E' 2>&1
    if ! slurm_nodes_ready "$want"; then problems+=(nodes); fi
    drained=$(sinfo -h -N -p debug -t drain,drained,draining -o '%N' 2>/dev/null | sort -u | paste -sd, -)
    [[ -n $drained ]] && out "drained:    $drained"
else
    out "controller: UNREACHABLE: $(tr '\n' ' ' <<<"$ping")"
    problems+=(controller)
fi

if ((${#problems[@]})); then
    out "unhealthy:  ${problems[*]}"
    exit 1
fi
out "healthy"
