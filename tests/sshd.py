"""A real OpenSSH server on 127.0.0.1 for tests (and the SSH-mode demo).

Everything lives in one temporary directory: host key, client key, authorized_keys,
known_hosts, sshd_config, pid file and log. The server is Debian's `/usr/sbin/sshd` (installed
from `openssh-server` when missing), started in the foreground with `-D` so the test owns it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


def ensure_openssh_server() -> None:
    """Install Debian's openssh-server when sshd is missing (the tests run as root)."""
    if SSHD.exists() and shutil.which("ssh-keygen"):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "openssh-server"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=True)
        subprocess.run(install, env=env, capture_output=True, check=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> str:
    """A fresh ed25519 key pair at `path` (+ .pub); returns the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "resurgo-test", "-f", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip
    return path.with_name(path.name + ".pub").read_text().strip()


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc, no psutil)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: ppid follows the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


@dataclass
class SshServer:
    """One sshd (`-D`, foreground) with its own keys; restartable on the same port."""

    root: Path
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    username: str = "root"
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.host_key = self.root / "ssh_host_ed25519_key"
        self.client_key = self.root / "id_ed25519"
        self.authorized_keys = self.root / "authorized_keys"
        self.known_hosts = self.root / "known_hosts"
        self.config = self.root / "sshd_config"
        self.log = self.root / "sshd.log"
        host_pub = keygen(self.host_key)
        self.authorized_keys.write_text(keygen(self.client_key) + "\n")
        self.known_hosts.write_text(f"{self.known_hosts_host} {_key_body(host_pub)}\n")
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {self.host}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "StrictModes no",
                    "UsePAM no",
                    "PrintMotd no",
                    "LogLevel VERBOSE",
                ]
            )
            + "\n"
        )

    @property
    def known_hosts_host(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def other_known_hosts(self) -> Path:
        """A known_hosts naming this address with a different key (an impostor's view)."""
        path = self.root / "known_hosts.other"
        if not path.exists():
            pub = keygen(self.root / "other_host_key")
            path.write_text(f"{self.known_hosts_host} {_key_body(pub)}\n")
        return path

    def start(self, timeout: float = 20.0) -> None:
        ensure_openssh_server()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-f", str(self.config), "-E", str(self.log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {err}{self.log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as sock:
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on {self.port}: {self.log_text()}")
            time.sleep(0.1)

    def kill_sessions(self) -> int:
        """SIGKILL every per-connection sshd child (and what it runs): clients see the link drop."""
        if self.proc is None:
            return 0
        victims = _descendants(self.proc.pid)
        for pid in victims:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(victims)

    def stop(self) -> None:
        """Stop the listener and drop every open connection."""
        if self.proc is None:
            return
        self.kill_sessions()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def toml(self, known_hosts: Path | None = None) -> str:
        """The `[clusters.X.ssh]` body (without the table header) for this server."""
        return (
            f'host = "{self.host}"\nport = {self.port}\nusername = "{self.username}"\n'
            f'client_keys = ["{self.client_key}"]\n'
            f'known_hosts = "{known_hosts or self.known_hosts}"\n'
        )


def _key_body(pub_line: str) -> str:
    """`ssh-ed25519 AAAA...` without the trailing comment."""
    return " ".join(pub_line.split()[:2])


@contextmanager
def running_sshd(root: Path) -> Iterator[SshServer]:
    server = SshServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
