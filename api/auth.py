"""Bearer tokens with roles: `viewer` reads, `operator` also approves and switches modes, `admin`
can do everything an operator can.

Only SHA-256 digests of the tokens are configured (tokens are long random strings, so a plain
digest is enough); a presented token is hashed and compared against every configured digest with
`hmac.compare_digest`, so neither a match nor a miss returns early.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import tomllib
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from resurgo.config import ApiSettings, ApiToken, ConfigError

__all__ = [
    "INSECURE_PRINCIPAL",
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


INSECURE_PRINCIPAL = Principal(name="insecure-local", role=Role.ADMIN)


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: dict[str, ApiToken] = Field(default_factory=dict)


class TokenRegistry:
    """The configured tokens (`[api.tokens]` plus an optional tokens file)."""

    def __init__(self, tokens: dict[str, ApiToken]) -> None:
        self._entries = [
            (name, bytes.fromhex(tok.sha256), Role.parse(tok.role))
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
        material = b"".join(digest for _, digest, _ in self._entries)
        return hashlib.sha256(purpose.encode() + b"\0" + material).digest()

    def authenticate(self, token: str) -> Principal | None:
        """The principal whose digest matches `token`, or None. Constant time in the match."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Principal | None = None
        for name, expected, role in self._entries:
            if hmac.compare_digest(digest, expected) and found is None:
                found = Principal(name=name, role=role)
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
