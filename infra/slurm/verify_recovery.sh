#!/usr/bin/env bash
# Exercise the recovery sequence Resurgo uses on a live cluster and print a transcript with
# timings:  requeuehold -> update ExcNodeList -> release -> update StartTime=now
#
# Usage: infra/slurm/verify_recovery.sh [--cluster NAME] [--state-dir DIR] [--workdir DIR]
#                                       [failed|running|both]   (default: both)
#   Submits small batch jobs to the cluster (SLURM_CONF of CLUSTER), prints
#   `scontrol show job -o` key fields after every step, cancels what it started.
#   Exit 0 when every job ran again on a different node with Restarts incremented by one.
set -euo pipefail
SLURM_SCRIPT_NAME=verify_recovery.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

slurm_parse_args "$@"
WORKDIR=/tmp/resurgo-slurm-verify
CASES=both
set -- "${SLURM_EXTRA_ARGS[@]}"
while (($#)); do
    case $1 in
        --workdir) WORKDIR=$2; shift 2 ;;
        failed | running | both) CASES=$1; shift ;;
        -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) slurm_die "unknown argument: $1" ;;
    esac
done
slurm_settings
mkdir -p "$WORKDIR"
cd "$WORKDIR"

FIELDS='JobState|Reason|Priority|Restarts|BatchFlag|Requeue|ExitCode|SubmitTime|EligibleTime|StartTime|ExcNodeList|NodeList|AdminComment'
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
fields() {
    scontrol show job -o "$1" | grep -oE "(^| )($FIELDS)=[^ ]*" | sed 's/^ //' | tr '\n' ' '
    echo
}
field() { scontrol show job -o "$1" | grep -oE "(^| )$2=[^ ]*" | head -n1 | cut -d= -f2-; }
wait_state() { # wait_state JOB REGEX TIMEOUT
    local end=$((SECONDS + $3))
    until [[ $(field "$1" JobState) =~ ^($2)$ ]]; do
        ((SECONDS < end)) || return 1
        sleep 0.1
    done
}
step() { # step LABEL CMD...
    local label=$1 rc=0 out
    shift
    out=$("$@" 2>&1) || rc=$?
    printf '  %-34s rc=%d %s\n' "$label" "$rc" "${out:+[$out]}"
}

cat >"$WORKDIR/job.sh" <<'EOF'
#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
echo "attempt restarts=${SLURM_RESTART_COUNT:-0} node=$SLURMD_NODENAME at $(date +%T)"
if [ "$1" = fail ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then exit 1; fi
sleep 300
EOF

failures=0
run_case() { # run_case failed|running
    local kind=$1 arg job node t0 t_rel restarts0
    [[ $kind == failed ]] && arg=fail || arg=run
    job=$(sbatch --parsable --job-name="verify-$kind" --comment='{"resurgo":{"mode":"action"}}' \
        --output="$WORKDIR/verify-%j.out" "$WORKDIR/job.sh" "$arg")
    if [[ $kind == failed ]]; then
        wait_state "$job" FAILED 30 || slurm_die "job $job did not fail"
    else
        wait_state "$job" RUNNING 30 || slurm_die "job $job did not start"
    fi
    node=$(field "$job" NodeList)
    restarts0=$(field "$job" Restarts)
    echo "== $kind job $job on $node"
    printf '  %-34s %s\n' "initial:" "$(fields "$job")"
    t0=$(now)
    step "scontrol requeuehold $job" scontrol requeuehold "$job"
    printf '  %-34s %s\n' "" "$(fields "$job")"
    wait_state "$job" PENDING 30 || slurm_die "job $job not PENDING after requeuehold"
    printf '  %-34s %s\n' "pending after $(elapsed "$t0")s:" "$(fields "$job")"
    step "requeuehold again (already held)" scontrol requeuehold "$job"
    step "update ExcNodeList=$node" scontrol update JobId="$job" ExcNodeList="$node"
    step "update AdminComment" scontrol update JobId="$job" AdminComment="resurgo:requeue_excluding=$node"
    printf '  %-34s %s\n' "" "$(fields "$job")"
    step "scontrol release $job" scontrol release "$job"
    printf '  %-34s %s\n' "" "$(fields "$job")"
    t_rel=$(now)
    step "update StartTime=now" scontrol update JobId="$job" StartTime=now
    wait_state "$job" RUNNING 30 || { echo "  NOT RUNNING after 30s: $(fields "$job")"; failures=$((failures + 1)); return; }
    printf '  %-34s %s\n' "running $(elapsed "$t_rel")s after release ($(elapsed "$t0")s total):" "$(fields "$job")"
    if [[ $(field "$job" NodeList) == "$node" ]]; then echo "  FAIL: ran on excluded node"; failures=$((failures + 1)); fi
    if [[ $(field "$job" Restarts) != $((restarts0 + 1)) ]]; then echo "  FAIL: Restarts not +1"; failures=$((failures + 1)); fi
    sleep 1
    sed 's/^/  out| /' "$WORKDIR/verify-$job.out"
    scancel "$job"
}

[[ $CASES == failed || $CASES == both ]] && run_case failed
[[ $CASES == running || $CASES == both ]] && run_case running
((failures == 0)) || slurm_die "$failures check(s) failed"
echo "ok"
