"""Bearer tokens with roles: `viewer` reads, `operator` also approves and switches modes, `admin`
can do everything an operator can.

Only SHA-256 digests of the tokens are configured (tokens are long random strings, so a plain
digest is enough); a presented token is hashed and compared against every configured digest with
`hmac.compare_digest`, so neither a match nor a miss returns early.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from resurgo.api.errors import error_body
from resurgo.config import ApiSettings, ApiToken, ConfigError

__all__ = [
    "INSECURE_PRINCIPAL",
    "MAX_BODY_BYTES",
    "BodyGate",
    "Principal",
    "Role",
    "TokenRegistry",
]


class Role(IntEnum):
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str) -> Role:
        return cls[name.upper()]


@dataclass(frozen=True)
class Principal:
    """Who made a request: the token's configured name (the audit trail's actor) and role."""

    name: str
    role: Role
    # Slurm users whose jobs' output lines a viewer may read ("*": all); see api/visibility.
    users: frozenset[str] = frozenset()


INSECURE_PRINCIPAL = Principal(name="insecure-local", role=Role.ADMIN)


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: dict[str, ApiToken] = Field(default_factory=dict)


class TokenRegistry:
    """The configured tokens (`[api.tokens]` plus an optional tokens file)."""

    def __init__(self, tokens: dict[str, ApiToken]) -> None:
        self._entries = [
            (name, bytes.fromhex(tok.sha256), Role.parse(tok.role), frozenset(tok.users))
            for name, tok in sorted(tokens.items())
        ]

    @classmethod
    def from_settings(cls, settings: ApiSettings, tokens_file: str | None = None) -> TokenRegistry:
        tokens = dict(settings.tokens)
        path = tokens_file or settings.tokens_file
        if path:
            for name, tok in load_tokens_file(Path(path)).items():
                if name in tokens:
                    raise ConfigError(f"API token {name!r} is defined twice (config and {path})")
                tokens[name] = tok
        return cls(tokens)

    def __len__(self) -> int:
        return len(self._entries)

    def derived_key(self, purpose: str) -> bytes:
        """A key that every replica with the same tokens shares and nobody without them knows
        (random when there are no tokens)."""
        if not self._entries:
            return secrets.token_bytes(32)
        material = b"".join(digest for _, digest, _, _ in self._entries)
        return hashlib.sha256(purpose.encode() + b"\0" + material).digest()

    def authenticate(self, token: str) -> Principal | None:
        """The principal whose digest matches `token`, or None. Constant time in the match."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Principal | None = None
        for name, expected, role, users in self._entries:
            if hmac.compare_digest(digest, expected) and found is None:
                found = Principal(name=name, role=role, users=users)
        return found


def load_tokens_file(path: Path) -> dict[str, ApiToken]:
    """A TOML file of `[tokens.NAME]` tables with `role` and `sha256`."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read API tokens file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"API tokens file {path} is not valid TOML: {exc}") from exc
    try:
        return _TokensFile.model_validate(raw).tokens
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"API tokens file {path} is invalid: {problems}") from exc


# Largest request body the API accepts: approvals and mode changes are a few hundred bytes.
MAX_BODY_BYTES = 64 * 1024


def bearer_principal(
    registry: TokenRegistry, headers: list[tuple[bytes, bytes]]
) -> Principal | None:
    """The principal of an `Authorization: Bearer <token>` header among raw ASGI headers."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return registry.authenticate(token.strip())
    return None


class _TooLarge(Exception):
    pass


class BodyGate:
    """ASGI middleware in front of everything else: a request that carries a body is refused
    (401) unless its bearer token is valid, before a byte of the body is read or parsed (except
    under `session_prefix`: the console's forms, which check their session cookie themselves
    before reading a body); a body
    over `limit` bytes is refused (413), by its Content-Length or while it streams in."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: TokenRegistry,
        insecure: bool = False,
        limit: int = MAX_BODY_BYTES,
        on_refusal: Callable[[int], None] | None = None,
        session_prefix: str | None = None,
    ) -> None:
        self.app, self.registry, self.insecure, self.limit = app, registry, insecure, limit
        self.on_refusal = on_refusal
        self.session_prefix = session_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        fields = {name.lower(): value for name, value in headers}
        length = fields.get(b"content-length")
        has_body = b"transfer-encoding" in fields or (length is not None and length != b"0")
        by_session = self.session_prefix is not None and str(scope.get("path", "")).startswith(
            self.session_prefix
        )
        if (
            has_body
            and not self.insecure
            and not by_session
            and bearer_principal(self.registry, headers) is None
        ):
            await self._refuse(send, 401, "a valid bearer token is required to send a body")
            return
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await self._refuse(send, 413, self._too_large())
            return
        received = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit and not refused:
                    # Answer now: the app may catch what is raised here (FastAPI turns it into
                    # a 400), and whatever it sends after this is dropped.
                    refused = True
                    if not started:
                        await self._refuse(send, 413, self._too_large())
                    raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, counted, tracked)

    def _too_large(self) -> str:
        return f"request bodies are limited to {self.limit} bytes"

    async def _refuse(self, send: Send, status: int, detail: str) -> None:
        if self.on_refusal is not None:
            self.on_refusal(status)
        body = json.dumps(error_body(status, detail)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="resurgo"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
