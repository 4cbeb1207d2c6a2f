"""Every config key can be set from the environment (`RESURGO_<SECTION>__<KEY>`, pydantic-
settings), secrets from files (`*_FILE`), over the TOML file and its defaults; `resurgo` commands
see the result (a bad value is a usage error, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from resurgo.cli.exits import ExitCode
from resurgo.cli.main import app
from resurgo.config import ConfigError, load_config


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESURGO_CONFIG", raising=False)


def test_every_section_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESURGO_TEMPORAL__ADDRESS", "temporal.prod:7233")
    monkeypatch.setenv("RESURGO_TEMPORAL__NAMESPACE", "resurgo")
    monkeypatch.setenv("RESURGO_API__PORT", "9090")
    monkeypatch.setenv("RESURGO_API__CORS_ORIGINS", '["https://console.example"]')
    monkeypatch.setenv("RESURGO_WORKER__MAX_CACHED_WORKFLOWS", "123")
    monkeypatch.setenv("RESURGO_CLUSTERS__GPU__MODE", "ssh")
    monkeypatch.setenv("RESURGO_CLUSTERS__GPU__SSH__HOST", "slurmctld")
    monkeypatch.setenv("RESURGO_CLUSTERS__GPU__PARTITIONS", '["a100", "h100"]')
    monkeypatch.setenv("RESURGO_CLUSTERS__GPU__ALLOW_DRAIN", "true")
    cfg = load_config()
    assert (cfg.temporal.address, cfg.temporal.namespace) == ("temporal.prod:7233", "resurgo")
    assert cfg.api.port == 9090 and cfg.api.cors_origins == ["https://console.example"]
    assert cfg.worker.max_cached_workflows == 123
    gpu = cfg.cluster("gpu")
    assert gpu.mode == "ssh" and gpu.ssh is not None and gpu.ssh.host == "slurmctld"
    assert gpu.partitions == ["a100", "h100"] and gpu.allow_drain


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "resurgo.toml"
    file.write_text('[temporal]\naddress = "file:7233"\nnamespace = "from-file"\n')
    monkeypatch.setenv("RESURGO_TEMPORAL__ADDRESS", "env:7233")
    cfg = load_config(file)
    assert cfg.temporal.address == "env:7233" and cfg.temporal.namespace == "from-file"


def test_secrets_come_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "audit-url"
    secret.write_text("mysql+pymysql://resurgo:s3cret@db:3306/resurgo\n")
    monkeypatch.setenv("RESURGO_AUDIT__URL_FILE", str(secret))
    # A real key that happens to end in _file stays itself.
    monkeypatch.setenv("RESURGO_API__TOKEN_FILE", "/etc/resurgo/token")
    cfg = load_config()
    assert cfg.audit.url == "mysql+pymysql://resurgo:s3cret@db:3306/resurgo"
    assert cfg.api.token_file == "/etc/resurgo/token"
    monkeypatch.setenv("RESURGO_AUDIT__URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"audit\.url_file: cannot read"):
        load_config()


def test_a_bad_value_from_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESURGO_API__PORT", "eighty")
    with pytest.raises(ConfigError, match=r"api\.port"):
        load_config()
    result = CliRunner().invoke(app, ["audit"])
    assert result.exit_code == ExitCode.USAGE and "api.port" in result.stderr


def test_file_values_are_never_read_as_json(tmp_path: Path) -> None:
    file = tmp_path / "resurgo.toml"
    file.write_text('[clusters.a.signals]\nlogs = "file:///x/slurm-%j.out"\nselector = "[1]"\n')
    signals = load_config(file).cluster("a").signals
    assert signals is not None and signals.selector == "[1]"
