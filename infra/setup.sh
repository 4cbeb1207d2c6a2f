#!/usr/bin/env bash
# Install everything Resurgo needs on a Debian machine (as root), idempotently:
# Slurm + munge (Debian packages), a Python >= 3.11 virtualenv in .venv with Resurgo, its dev
# tools and CPU PyTorch for the demo trainer. Safe to re-run; does nothing that is already done.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

log() { printf '[setup] %s\n' "$*" >&2; }

apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        log "apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

pick_python() {
    for cand in "${RESURGO_PYTHON_BIN:-}" python3.11 python3.12 python3.13 python3; do
        [[ -n $cand ]] || continue
        if command -v "$cand" >/dev/null 2>&1 &&
            "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$cand"
            return 0
        fi
    done
    return 1
}

bash infra/slurm/install.sh
# The tests scrape a real Prometheus (Debian's package, run directly; no systemd needed).
bash infra/prometheus/install.sh

py=$(pick_python) || { apt_install python3 python3-venv; py=$(pick_python); }
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv
fi

if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv with $py"
    "$py" -m venv .venv
fi
stamp=.venv/.resurgo-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp || infra/constraints.txt -nt $stamp ]]; then
    log "installing resurgo and its dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip >/dev/null
    # Constrained to the versions CI last passed with: a release made overnight (stamina 26.2
    # changed its types and failed mypy) must not turn a clean clone red.
    .venv/bin/pip install -q -c infra/constraints.txt -e '.[dev]'
    touch "$stamp"
fi
if ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
    log "installing CPU PyTorch 2.13.0 for the demo trainer"
    .venv/bin/pip install -q 'torch==2.13.0'
fi
log "ready: $(.venv/bin/python --version), $(.venv/bin/resurgo --help >/dev/null && echo resurgo CLI ok)"
