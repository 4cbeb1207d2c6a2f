#!/usr/bin/env bash
# The two entry points the README promises (run as root on Debian):
#   bash infra/run.sh demo   # set up, then a real recovery on embedded defaults
#   bash infra/run.sh test   # set up, then lint, type-check and every test (real services)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

case "${1:-}" in
demo)
    shift
    bash infra/setup.sh
    exec .venv/bin/resurgo demo "$@"
    ;;
test)
    shift
    bash infra/setup.sh
    bash infra/slurm/start.sh --resume-nodes >/dev/null
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    .venv/bin/mypy
    set +e
    .venv/bin/python -m pytest -p no:cacheprovider -ra "$@"
    rc=$?
    set -e
    # pytest exits 5 when it collected nothing: that is a failure here, not a pass.
    exit "$rc"
    ;;
*)
    echo "usage: bash infra/run.sh demo|test [args]" >&2
    exit 2
    ;;
esac
