# shellcheck shell=bash
# Source me: exports SLURM_CONF (and CLUSTER) for one local cluster.
#
# Usage:  . infra/slurm/env.sh [CLUSTER]        # default: $CLUSTER or "local"
#         STATE_DIR=/elsewhere . infra/slurm/env.sh
#   Then sinfo/squeue/sbatch/scontrol talk to that cluster. Does not start anything.
CLUSTER=${1:-${CLUSTER:-local}}
SLURM_CONF=${STATE_DIR:-/var/lib/resurgo-slurm/$CLUSTER}/etc/slurm.conf
export CLUSTER SLURM_CONF
if [[ ! -f $SLURM_CONF ]]; then
    echo "env.sh: warning: $SLURM_CONF does not exist yet (run infra/slurm/start.sh)" >&2
fi
