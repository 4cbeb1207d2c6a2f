"""API authentication setup: token registry, tokens file, and the guards around `resurgo api`
(no tokens refused, `--insecure` only on loopback and loudly announced)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from resurgo.api.auth import Role, TokenRegistry, load_tokens_file
from resurgo.api.server import build, free_port, is_loopback
from resurgo.config import ApiSettings, ApiToken, ConfigError, ResurgoConfig, load_config
from resurgo.devstack.localstack import REPO, wait_for
from resurgo.tokens import hash_token, new_token


def test_registry_matches_only_the_exact_token() -> None:
    alice, bob = new_token(), new_token()
    registry = TokenRegistry({
        "alice": ApiToken(role="operator", sha256=hash_token(alice)),
        "bob": ApiToken(role="viewer", sha256=hash_token(bob)),
    })  # fmt: skip
    found = registry.authenticate(alice)
    assert found is not None and found.name == "alice" and found.role == Role.OPERATOR
    assert registry.authenticate(bob).role == Role.VIEWER  # type: ignore[union-attr]
    for wrong in ["", alice[:-1], alice + "x", alice.upper(), hash_token(alice), "\udcff"]:
        assert registry.authenticate(wrong) is None
    assert Role.ADMIN > Role.OPERATOR > Role.VIEWER


def test_tokens_file_and_config(tmp_path: Path) -> None:
    tok = new_token()
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[tokens.carol]\nrole = "admin"\nsha256 = "{hash_token(tok)}"\n')
    config = tmp_path / "resurgo.toml"
    config.write_text(
        f'[api]\nport = 9999\ntokens_file = "{tokens}"\n'
        f'[api.tokens.dave]\nrole = "viewer"\nsha256 = "{hash_token("d")}"\n'
    )
    cfg = load_config(config)
    registry = TokenRegistry.from_settings(cfg.api)
    assert len(registry) == 2 and registry.authenticate(tok).name == "carol"  # type: ignore[union-attr]
    assert cfg.api.client_url() == "http://127.0.0.1:9999"
    dup = tmp_path / "dup.toml"
    dup.write_text(f'[tokens.dave]\nrole = "viewer"\nsha256 = "{hash_token("x")}"\n')
    with pytest.raises(ConfigError, match="defined twice"):
        TokenRegistry.from_settings(cfg.api, str(dup))
    bad = tmp_path / "bad.toml"
    bad.write_text('[tokens.eve]\nrole = "root"\nsha256 = "abc"\n')
    with pytest.raises(ConfigError, match="invalid"):
        load_tokens_file(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_tokens_file(tmp_path / "missing.toml")
    plain = tmp_path / "plain.toml"
    plain.write_text('[api.tokens.frank]\nrole = "operator"\nsha256 = "not-a-digest"\n')
    with pytest.raises(ConfigError, match="sha256"):
        load_config(plain)


def test_server_refuses_unsafe_setups() -> None:
    with pytest.raises(ConfigError, match="no API tokens configured"):
        build(ResurgoConfig(), host="127.0.0.1", insecure=False, tokens_file=None)
    with pytest.raises(ConfigError, match="only binds to loopback"):
        build(ResurgoConfig(), host="0.0.0.0", insecure=True, tokens_file=None)
    build(ResurgoConfig(), host="127.0.0.1", insecure=True, tokens_file=None)
    with_tokens = ResurgoConfig(
        api=ApiSettings(tokens={"a": ApiToken(role="viewer", sha256=hash_token("a"))})
    )
    build(with_tokens, host="0.0.0.0", insecure=False, tokens_file=None)
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("10.0.0.1")


def test_insecure_demo_mode_warns_loudly(tmp_path: Path) -> None:
    """`resurgo api --insecure` really serves without tokens (as the insecure principal) and says
    so in its log; without tokens and without the flag it refuses to start."""
    port = free_port()
    config = tmp_path / "resurgo.toml"
    config.write_text(
        f'[temporal]\naddress = "127.0.0.1:9"\n[audit]\nurl = "sqlite:///{tmp_path / "audit.db"}"\n'
    )
    base = [
        sys.executable,
        "-m",
        "resurgo.cli.main",
        "api",
        "--config",
        str(config),
        "--port",
        str(port),
    ]
    refused = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "no API tokens configured" in refused.stderr
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*base, "--insecure"], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(url + "/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 30, what="resurgo api --insecure")
        audit = httpx.get(url + "/v1/audit", timeout=10)  # no token at all
        assert audit.status_code == 200 and audit.json()["events"] == []
        ready = httpx.get(url + "/readyz", timeout=15)
        assert ready.status_code == 200 and not ready.json()["checks"]["temporal"]["ok"]
        assert ready.json()["degraded"]
        assert "NO AUTHENTICATION" in log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
